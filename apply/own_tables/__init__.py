"""The product's own tables (`_ticdc/` of a path target, or `<catalog>.<meta_schema>`): how they are made, appended
to and read, by Spark or by delta-rs (`base`, `delta_rs`), and each of them: the consumer's checkpoints
(`checkpoint`), its lease (`lease`, `lease_store`, `process_identity`), dead letters and their replays
(`dead_letters`), batch metrics (`metrics`), tombstones of dropped and renamed tables (`tombstones`).

Imports `apply.tables` and `apply.base` only: where these tables are is given as `base.OwnTablePlaces`, which
`apply.places` implements.
"""
