"""The configuration reference: every key the configuration code accepts, its default and what it means.

The keys and defaults are read from the configuration's own types (`ticdc_delta.jobs.config`, each
protocol's options, the registry's and the types' options), so the reference cannot drift from them;
the meanings are kept here, one per key, and a test fails when a key has none or a meaning names no key.
docs/configuration.md holds `table()`, written by scripts/reference.py and checked by a test.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ticdc_delta.apply.places.routing import TableRule
from ticdc_delta.jobs import config
from ticdc_delta.schema_cache import protocols
from ticdc_delta.schema_cache.options import ProtocolOptions
from ticdc_delta.schema_cache.ticdc_avro.options import RegistryOptions
from ticdc_delta.schema_cache.types import TYPE_CHOICES, TypeOptions

# The sections in the order the reference lists them, with the type that holds each one's keys.
_SECTIONS = (
    ("kafka", config.KafkaConfig),
    ("protocol", None),  # the union of the protocols' options, and `name`
    ("registry", RegistryOptions),
    ("target", config.TargetConfig),
    ("run", config.RunConfig),
    ("policy", config.PolicyConfig),
    ("metrics", config.MetricsConfig),
    ("checkpoint", config.CheckpointConfig),
    ("spark", config.SparkConfig),
    ("types", TypeOptions),
    ("history", config.HistoryConfig),
    ("maintenance", config.MaintenanceConfig),
    ("tables", TableRule),  # [[tables]]: each rule's keys
)
# Shown instead of a default that is no value a user would write.
_REQUIRED = {"kafka.topics": "(required)", "kafka.topic_pattern": "(or this)", "tables.match": "(required)"}
_UNSET = "–"

MEANINGS: dict[str, str] = {
    "kafka.bootstrap_servers": "Kafka bootstrap servers",
    "kafka.topics": "list of topics (flag: comma-separated); or `kafka.topic_pattern`",
    "kafka.topic_pattern": "instead of `kafka.topics`: a regular expression; every topic whose whole name matches it is read (Kafka's internal `__` topics never), e.g. `tidb_shop_.*` for TiCDC's `topic = \"tidb_{schema}_{table}\"` dispatcher. A topic found after the job's first run is read from its earliest offset (its first table's CREATE or BOOTSTRAP is there), whatever `kafka.start_from` says; a topic deleted upstream is no longer read. See \"Topics by pattern\" in Operations",
    "kafka.topic_refresh_seconds": "`kafka.topic_pattern` in continuous mode: how often the job looks for topics created or deleted (and partitions added); on a change it ends the batch at a checkpoint and starts reading again with them, in the same process. Each run (and `status`) looks at its start",
    "kafka.group_id": "consumer group: committed offsets, and the checkpoint's name",
    "kafka.start_from": "where to start with no checkpoint and no committed offset: `earliest`, `latest`",
    "kafka.unreachable_timeout_seconds": "how long the job waits for Kafka when no broker answers (polls, offset commits), then exits 6; while it waits, empty polls do not count as idle. A broker refusing the SASL login is not waited for: exit 7 at once. An offset commit waits for the group coordinator up to librdkafka's `session.timeout.ms`, which the job sets to 6 s unless `kafka.properties` does (it never joins the group, so the setting does nothing else): a commit in an outage fails in seconds and its wait counts toward this limit",
    "kafka.properties": "librdkafka properties passed through (TLS, SASL, ...); the four the product sets itself are refused",
    "kafka.java_properties": "`run.engine = \"spark\"`: Kafka Java client settings for Spark's Kafka source, over those translated from `kafka.properties` (see The Spark engine)",
    "protocol.name": "`simple`, `avro` (TiCDC's avro protocol, Confluent wire format), `debezium`, `canal-json` or `open-protocol`",
    "protocol.encoding": "`json` or `avro` (Simple's own Avro schema; no registry involved)",
    "protocol.schema_wait_seconds": "how long a row may wait for its structure (BOOTSTRAP/DDL) before it is bad input",
    "protocol.avro_decimal_handling_mode": "as the changefeed's sink-uri: `precise` or `string`; a message encoded otherwise is bad input",
    "protocol.avro_bigint_unsigned_handling_mode": "as the sink-uri: `long` or `string`",
    "protocol.enable_tidb_extension": "as the sink-uri; avro: must match the messages; debezium, canal-json: watermarks (and canal's commitTs) exist only with it, so one of it or `allow_offset_ordering` is required",
    "protocol.allow_offset_ordering": "accept ordering by partition offset (weaker; see Protocols); otherwise the job refuses to start",
    "protocol.keep_extension_columns": "also write `_tidb_op`, `_tidb_commit_ts`, `_tidb_commit_physical_time` as columns",
    "protocol.timestamp_zone": "the TiCDC server's time zone (`tz`); their TIMESTAMP strings carry none",
    "protocol.large_message_compression": "as the changefeed's `large-message-handle-compression`: `none`, `lz4` or `snappy` (TiCDC compresses every value, and nothing in a message says so)",
    "protocol.claim_check_root": "where claim-checked messages are read (a local path or any fsspec URL, e.g. `s3://bucket/prefix` with s3fs installed); only `<root>/<file name>` is ever read",
    "protocol.claim_check_raw_value": "as the changefeed's `claim-check-raw-value`",
    "registry.url": "Schema Registry URL; `https://user:password@host` with URL-encoded parts works",
    "registry.basic_auth_user_info": "`user:password` (instead of in the URL)",
    "registry.ssl_ca_location": "the CA that signed the registry's certificate (else the system's); passed to confluent-kafka's client",
    "registry.ssl_certificate_location": "the client certificate, for a registry that asks for one",
    "registry.ssl_key_location": "the client certificate's private key",
    "registry.ssl_key_password": "the private key's password (redacted in the logged configuration)",
    "registry.request_timeout_seconds": "per request",
    "registry.max_wait_seconds": "how long to keep retrying an unavailable registry before the job stops (nothing is skipped); a 401 (wrong or missing credentials) is not retried: exit 7 at once",
    "target.path": "root of path tables: a folder or an object store URL (`s3a://`, `abfss://`, `gs://`); a table is at `<path>/<database>/<table>` unless renamed (`ticdc-delta tables` lists where each is). A path without a scheme is where the session's Hadoop configuration puts it (`fs.defaultFS`: the local disk for the product's own Spark, HDFS on YARN, DBFS on Databricks), for every writer and reader; the job logs the qualified place once",
    "target.require_safe_commits": "on S3 (`s3a://`, `s3://`) the job refuses to start unless Spark's Delta log store makes commits put-if-absent (`spark.delta.logStore.s3a.impl = io.delta.storage.S3DynamoDBLogStore`) or it runs on Databricks; `false` accepts Delta's single-driver store, safe only while nothing else ever writes under the target. See \"Object storage\"",
    "target.catalog": "catalog for catalog tables: `<catalog>.<database>.<table>` (set exactly one of path/catalog)",
    "target.meta_schema": "catalog mode: schema of the product's own tables",
    "target.table_features": "Delta features of the tables the job creates: `compatible` (every Delta reader opens them: delta-rs, Polars, pandas; renames, drops and type changes rewrite the table) or `full` (column mapping, deletion vectors, type widening on Spark 4; Spark/Databricks readers only). See \"Who can read the tables\"",
    "target.small_merge_writer": "who commits a batch's small MERGEs (at most 10,000 rows held in memory): `auto` (the default: delta-rs, the `deltalake` package, wherever it writes what Spark would, decided table by table and MERGE by MERGE; Spark's MERGE elsewhere, and everywhere, with one info line, on object stores, a path the session's default file system puts elsewhere than the local disk, under Spark Connect, on catalog tables, the `full` layout or without the package), `spark` (always Spark's MERGE), or `delta-rs` (as `auto`, but the job refuses to start where delta-rs cannot be used). delta-rs costs about 1/45 of the CPU of Spark's MERGE a commit; Spark keeps DDL, large MERGEs and history tables; the product's own checkpoints, metrics, table registry and lease are read and written by delta-rs in the same places. See \"Small MERGEs by delta-rs\"",
    "run.mode": "`until-idle` or `continuous`",
    "run.engine": "`driver` (the job's Python process reads and decodes) or `spark` (Spark's Kafka source, decoding on the executors, waiting events staged in Delta; see The Spark engine)",
    "run.driver_decode_max_messages": "the Spark engine: a batch of at most this many messages is read and decoded by the job's Python process (Spark's Kafka source and decoding on the executors cost seconds a batch, however small) and staged in one write, or, while the staging table is empty, kept in memory and applied as the driver engine's (what waits holds its offsets back, until a large batch stages it); larger batches are decoded on the executors. 0: every batch on the executors (see \"The Spark engine\")",
    "run.batch_max_messages": "a batch closes at this many messages ...",
    "run.batch_max_seconds": "... or after this long",
    "run.idle_timeout_seconds": "until-idle: stop if no message arrives for this long before the end offsets are reached",
    "run.max_pending_events": "events waiting for a watermark kept in memory; the newest of any more wait on local disk (a lagging partition costs disk, not memory). The Spark engine, which keeps waiting events in its staging table, merges a release of at most this many row events (and 64 MiB of staged images) from rows read into the driver, as the driver engine does, and a larger one from DataFrames Spark builds (see \"The Spark engine\")",
    "run.lease_seconds": "one job per consumer: the running job renews its lease in `_ticdc/leases` every quarter of this; a job killed without releasing it delays the next run on another machine by at most this long (on the same machine, not at all); at least 2",
    "run.append_new_keys": "true: a table's changes in a batch whose every key is new to it (each key's first change an INSERT, with Simple, Canal-JSON or Debezium ordered by commitTs, into a table with a recorded applied point) are appended instead of merged, without MERGE's join. For append-only changefeeds whose every change reaches the job: a table still holding a key upstream removed (partition DDL, an event filter dropping deletes, a hand edit) would hold it twice; not with policy.on_bad_message = \"dead-letter\" (see Guarantees)",
    "run.apply_concurrency": "how many tables' changes are merged at once, each on a Spark session of its own (Delta commits of different tables are independent; a table's own changes stay in order); 1: one table after another",
    "run.skip_when_caught_up": "until-idle: when the offsets the consumer's last run committed to its Kafka group (for this target) are the end of every partition, the run has nothing to read and ends at once, before starting Spark or taking the lease; `false`: every run starts Spark",
    "run.wait_warning_seconds": "a change waiting longer than this (its commitTs this many seconds older than the newest watermark read) is logged once per table and run, at WARNING, naming what holds it: a partition's watermark (which topic) or its schema; `status` shows what waits at every checkpoint",
    "run.silent_topic_rounds": "a topic that carried a table and has had no watermark in this many rounds in which the newest watermark moved on is logged once, at WARNING: TiCDC stopped sending it watermarks (its table dropped or renamed upstream without a DDL this job read, or taken out of the changefeed); 0: never",
    "run.spill_dir": "where waiting events beyond `max_pending_events` are kept (a private subdirectory, removed at the end of the run; nothing in it needs to survive a crash)",
    "policy.on_bad_message": "`fail` (stop, exit 3) or `dead-letter` (record it and go on)",
    "metrics.table": "append each batch's record to the `metrics` table among the product's own tables (the JSON log line is written either way)",
    "metrics.flush_seconds": "records wait in memory until the oldest has waited this long, then all are appended in one commit; the rest when the run ends (a crash loses at most this much)",
    "checkpoint.keep": "newest checkpoints kept per consumer (besides the one `replay-dead-letters` starts from while a dead letter waits)",
    "maintenance.every_batches": "every this many batches (continuous rounds) the job compacts and vacuums its data tables (see \"Maintenance\" in Operations); 0: never in the job, `ticdc-delta maintain` does it on demand",
    "maintenance.min_files": "a table is compacted (OPTIMIZE) once its current snapshot has at least this many files",
    "maintenance.budget_seconds": "the job's pass stops starting tables after this long (the next pass goes on from there), so that freshness holds; `maintain` has none",
    "maintenance.vacuum_retain_hours": "VACUUM keeps the files snapshots of the last this many hours use: reads as of an older commitTs (`as-of`, time travel) fail. Below 168 (Delta's default) the job turns Delta's retention check off for its VACUUM",
    "tables.match": "`[[tables]]` rules, matched in order, the first match deciding: a `database.table` name or shell pattern (`shop.*`), or a list of them. A table no rule matches is materialized under its own name. See \"Choosing and naming tables\" in Operations",
    "tables.target": "the matched table's name: a template of `{database}` and `{table}` with one `.` between the database (schema) part and the table part, e.g. `raw_{database}.{table}`; one upstream table per target (two routed to one name: exit 2)",
    "tables.skip": "`true`: the matched tables are not materialized (their changes are read and passed over)",
    "tables.properties": "Delta table properties of the tables the job creates for this rule (e.g. `delta.enableChangeDataFeed`, `delta.checkpointInterval`, `delta.logRetentionDuration`, `delta.dataSkippingStatsColumns`); those `target.table_features` sets are refused. Set at CREATE only; see \"Created tables' layout\" in Operations for which ones change who can read the table or send it to Spark's MERGE",
    "tables.partition_by": "partition columns (upstream names) of the tables created for this rule; a partitioned table's MERGEs are Spark's, not delta-rs's",
    "tables.cluster_by": "instead of `partition_by`: liquid clustering columns (`CLUSTER BY`; Delta 3.1 and later); a clustered table's MERGEs are Spark's",
    "tables.comment": "the created table's comment, a template of `{database}` and `{table}` (the upstream table's names)",
    "checkpoint.cleanup_every": "every this many batches the job deletes older checkpoints, compacts the table (OPTIMIZE) and vacuums it (VACUUM LITE; files it stopped using are kept an hour)",
    "spark.master": "only when the job creates the Spark session itself",
    "spark.conf": "extra Spark settings, only when the job creates the session; `spark.driver.extraJavaOptions` is added after the product's own JVM options (a garbage collector named there replaces the product's)",
    "spark.quick_compiler_max_backlog": "a run --until-idle (either engine) with at most this many messages to read (from this target's commits to the group, or the first offset without commits, to the end offsets, asked before Spark starts) starts its local JVM with the quick compiler only (`-XX:TieredStopAtLevel=1`) and a session that interprets Spark's expressions instead of compiling them (`spark.sql.codegen.factoryMode` and `spark.sql.codegen.wholeStage`, each unless `spark.conf` sets it): a short run's JVM spends most of its CPU compiling (4-27 s less a run here, up to 200,000 row events; interpreting: 5-8 s less); 0: never (then not for `status` and `tables` either, which otherwise start theirs so: a few small reads). Continuous runs and larger or unknown backlogs keep the full compiler. See \"Performance\"",
    "spark.extra_packages": "Maven coordinates (`group:artifact:version`) added to the product's own packages (Delta's, and the S3 connector or Spark's Kafka source where needed) for a session the product starts itself: a log store's jar such as `io.delta:delta-storage-s3-dynamodb` of your Delta release. A `spark.jars.packages` in `spark.conf` is added the same way (it no longer replaces the product's list). Resolved once from Maven Central (Ivy's default) and cached; ignored, with a warning, where the session exists already (spark-submit, Databricks: give it `--packages` there)",
    "spark.class_data_sharing": "a local JVM maps an archive of the classes Spark, Delta and Hadoop load (class-data sharing, `-XX:SharedArchiveFile`), written by the first run of each set of jars as its JVM exits (about 200 MB each, under the cache folder's `class-archives/`): 4-6 s less a run's first Delta statement here; false: never. Only for the product's commands (`run`, `status`, `tables`) on a local session. See \"Performance\"",
    "types.bigint_unsigned": "BIGINT UNSIGNED: an exact DECIMAL(20,0), or its decimal text",
    "types.wide_decimal": "DECIMAL wider than Spark's 38 digits: its exact text, or a (lossy, opt-in) double",
    "types.datetime": "DATETIME: a zone-less timestamp, an instant taking the wall clock as UTC, or text",
    "types.time": "TIME: its text as TiDB shows it, or signed microseconds",
    "types.bit": "BIT(n): the unsigned number, or ceil(n/8) big-endian bytes",
    "types.json": "JSON: its text, or Spark's VARIANT (Spark 4 and `target.table_features = \"full\"`)",
    "types.zero_date": "zero dates (`0000-00-00`, `2020-00-15`): NULL, or bad input",
    "history.tables": "tables that keep SCD type 2 history: `database.table` names or shell patterns (`shop.*`); commitTs-ordered protocols, not avro (see \"History tables\")",
    "history.database_suffix": "each history table is `<database><suffix>.<table>` (path or catalog); no upstream database name may end with it",
}


@dataclass(frozen=True)
class Key:
    """One configuration key: `section.name`, its default as TOML spells it, the protocols that take it."""

    name: str
    default: str
    protocols: tuple[str, ...] = ()


def keys() -> list[Key]:
    """Every key the configuration accepts, section by section in the reference's order."""
    found: list[Key] = []
    for section, holder in _SECTIONS:
        if holder is None:
            found += _protocol_keys()
            continue
        for field in dataclasses.fields(holder):
            if field.metadata.get("internal"):
                continue
            found.append(Key(f"{section}.{field.name}", _shown(f"{section}.{field.name}", _default(field))))
    return found


def _protocol_keys() -> list[Key]:
    owners: dict[str, list[str]] = {}
    defaults: dict[str, object] = {}
    for name in protocols.NAMES:
        options: type[ProtocolOptions] = protocols.options_type(name)
        for field in dataclasses.fields(options):  # type: ignore[arg-type]
            if field.name == "registry":  # the [registry] section's own keys
                continue
            owners.setdefault(field.name, []).append(name)
            defaults.setdefault(field.name, _default(field))
    default_protocol = {f.name: f for f in dataclasses.fields(config.Config)}["protocol"].default_factory().name
    first = [Key("protocol.name", _shown("protocol.name", default_protocol))]
    return first + [Key(f"protocol.{k}", _shown(f"protocol.{k}", defaults[k]), tuple(owners[k])) for k in owners]


def _default(field: dataclasses.Field) -> object:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def _shown(key: str, value: object) -> str:
    if key in _REQUIRED:
        return _REQUIRED[key]
    if value is None or value == "":
        return _UNSET
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    if isinstance(value, (tuple, list)):
        return "`[]`" if not value else f"`{list(value)}`"
    if isinstance(value, dict):
        return "`{}`" if not value else f"`{value}`"
    return f"`{value}`"


def table() -> str:
    """The reference as a Markdown table."""
    lines = ["| key | default | meaning |", "|---|---|---|"]
    for key in keys():
        meaning = MEANINGS[key.name]
        if key.protocols and len(key.protocols) < len(protocols.NAMES):
            meaning = f"{', '.join(key.protocols)}: {meaning}"
        if key.name.startswith("registry."):
            meaning = f"avro: {meaning}"
        if key.name.startswith("types."):
            choices = TYPE_CHOICES[key.name.split(".", 1)[1]]
            meaning = f"{meaning} (`{'`, `'.join(choices)}`)"
        lines.append(f"| `{key.name}` | {key.default} | {meaning} |")
    return "\n".join(lines) + "\n"
