"""Typed events in, Delta commits out: the applier and what it stands on. Knows typed events only: no bytes, no
protocol names.

Rooms, each importing only those below it (tests/unit/test_layers.py; docs/architecture.md draws them):

- top: the applier (`applier`: events in order into tables, exactly once) and the features on it: reads as of
  a commitTs (`as_of`, `progress`), history tables, dead-letter replays (`replay`), maintenance;
- `writers`: Spark's MERGE and DDL, delta-rs's small MERGEs;
- `places`: where each table is, and under which name (routing);
- `own_tables`: checkpoints, the lease, dead letters, metrics, tombstones, the registry's storage;
- `changes`: a table's changes between two applied points, as one MERGE takes them;
- `tables`: applied points and markers, table layouts, delta-rs as every writer uses it;
- `ordering`: the gate and how far each partition is complete (beside the others, pure);
- `base`: the job's Spark session, Spark's errors, identifiers, phase times.
"""
