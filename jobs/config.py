"""Typed configuration: TOML file, then command-line overrides.

Every section is a frozen dataclass that validates in its constructor;
unknown keys and bad values raise ConfigError naming the key and what is
allowed.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from ticdc_delta.apply.changes.history import HistoryChoice
from ticdc_delta.apply.places.routing import TableRule, rules_of
from ticdc_delta.apply.tables.delta_rs_base import local_path
from ticdc_delta.apply.tables.delta_rs_base import unavailable as delta_rs_unavailable
from ticdc_delta.apply.tables.features import COMPATIBLE
from ticdc_delta.apply.tables.features import SETTINGS as TABLE_FEATURE_SETTINGS
from ticdc_delta.exceptions import ConfigError
from ticdc_delta.jobs import config_references
from ticdc_delta.schema_cache.options import ProtocolOptions, require_bool, require_choice, require_positive
from ticdc_delta.schema_cache.protocols import protocol_options
from ticdc_delta.schema_cache.simple.options import SimpleOptions
from ticdc_delta.schema_cache.ticdc_avro.options import AvroOptions, RegistryOptions
from ticdc_delta.schema_cache.types import TypeOptions

AUTO_WRITER, SPARK_WRITER, DELTA_RS_WRITER = "auto", "spark", "delta-rs"
SMALL_MERGE_WRITERS = (AUTO_WRITER, SPARK_WRITER, DELTA_RS_WRITER)

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, published before it joined the standard library
    import tomli as tomllib

RUN_MODES = ("until-idle", "continuous")
# driver: one Python process reads and decodes (small and medium streams); spark: Spark's Kafka source,
# decoding on the executors, pending events staged in Delta (jobs/spark_engine/intake.py).
ENGINES = ("driver", "spark")
BAD_MESSAGE_POLICIES = ("fail", "dead-letter")
START_POSITIONS = ("earliest", "latest")
MIN_LEASE_SECONDS = 2.0

# librdkafka properties the product sets itself; users may not override them.
_MANAGED_KAFKA_PROPERTIES = {"bootstrap.servers", "group.id", "enable.auto.commit", "auto.offset.reset"}
_SECRET_MARKERS = ("password", "secret", "jaas", "token", "key.pem", "private")


# (above the dataclasses: a class's signature shows its defaults' reprs, which use them)
def _repr_of(instance: Any, **shown: Any) -> str:
    """The dataclass's repr with the fields in `shown` given those values."""
    values = (f"{f.name}={shown.get(f.name, getattr(instance, f.name))!r}" for f in dataclasses.fields(instance) if f.repr)
    return f"{type(instance).__name__}({', '.join(values)})"


def _redacted(values: Mapping[str, str]) -> dict[str, str]:
    return {k: ("***" if any(marker in k.lower() for marker in _SECRET_MARKERS) else v) for k, v in values.items()}


@dataclass(frozen=True)
class KafkaConfig:
    bootstrap_servers: str = "127.0.0.1:9092"
    topics: tuple[str, ...] = ()
    # Instead of `topics`: every topic whose whole name matches this regular expression (as Kafka's Java
    # clients subscribe by pattern), Kafka's internal `__` topics aside; looked up at each run's start and, in
    # continuous mode, every `topic_refresh_seconds`.
    topic_pattern: str = ""
    topic_refresh_seconds: float = 60.0
    group_id: str = "ticdc-delta"
    start_from: str = "earliest"
    # How long the job waits for an unreachable Kafka before it stops with an error (exit status 6).
    unreachable_timeout_seconds: float = 300.0
    # librdkafka passthrough (security.protocol, sasl.*, ssl.*, ...)
    properties: Mapping[str, str] = field(default_factory=dict)
    # Kafka Java client settings for Spark's Kafka source (run.engine = "spark"), beyond those translated
    # from `properties` (jobs/spark_engine/kafka_frame.py)
    java_properties: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "properties", settings_table("kafka.properties", self.properties))
        object.__setattr__(self, "java_properties", settings_table("kafka.java_properties", self.java_properties))
        if isinstance(self.topics, str):
            object.__setattr__(self, "topics", tuple(t for t in self.topics.split(",") if t))
        object.__setattr__(self, "topics", tuple(self.topics))
        if self.topics and self.topic_pattern:
            raise ConfigError("kafka.topics and kafka.topic_pattern are both set: keep one (a list of topics, or a pattern)")
        if not self.topics and not self.topic_pattern:
            raise ConfigError("kafka.topics or kafka.topic_pattern: one is required (a list of topics, or a pattern)")
        if self.topic_pattern:
            try:
                re.compile(self.topic_pattern)
            except (re.error, TypeError) as err:
                raise ConfigError(f"kafka.topic_pattern: {self.topic_pattern!r} is not a regular expression: {err}") from None
        require_positive("kafka.topic_refresh_seconds", self.topic_refresh_seconds)
        if not self.bootstrap_servers:
            raise ConfigError("kafka.bootstrap_servers: required")
        if not self.group_id:
            raise ConfigError("kafka.group_id: required")
        require_choice("kafka.start_from", self.start_from, START_POSITIONS)
        require_positive("kafka.unreachable_timeout_seconds", self.unreachable_timeout_seconds)
        managed = sorted(_MANAGED_KAFKA_PROPERTIES & set(self.properties))
        if managed:
            raise ConfigError(
                f"kafka.properties: {', '.join(managed)} is set by the product; "
                "use kafka.bootstrap_servers / kafka.group_id / kafka.start_from"
            )

    def __repr__(self) -> str:  # (secrets in properties redacted: a repr ends up in tracebacks and notebooks)
        return _repr_of(self, properties=self.redacted_properties(), java_properties=self.redacted_java_properties())

    def redacted_properties(self) -> dict[str, str]:
        return _redacted(self.properties)

    def reads(self, topic: str) -> bool:
        """Whether `topic` is one this job reads: listed in `topics`, or matching `topic_pattern` whole."""
        if self.topic_pattern:
            return not topic.startswith("__") and re.fullmatch(self.topic_pattern, topic) is not None
        return topic in self.topics

    def topics_described(self) -> str:
        """The topics read, for a message: `kafka.topics` or the pattern."""
        return f"the topics matching {self.topic_pattern!r}" if self.topic_pattern else ", ".join(self.topics)

    def redacted_java_properties(self) -> dict[str, str]:
        return _redacted(self.java_properties)


@dataclass(frozen=True)
class TargetConfig:
    # Exactly one of: a directory root for path tables, or a catalog name.
    path: str | None = None
    catalog: str | None = None
    # Catalog mode: the schema holding the product's own tables.
    meta_schema: str = "_ticdc"
    # Delta table features of the tables the job creates (apply.tables.features):
    # "compatible" tables every Delta reader opens (delta-rs, Polars, ...);
    # "full" adds column mapping, deletion vectors and type widening.
    table_features: str = COMPATIBLE
    # On S3 the lease and exactly-once need a Delta log store whose commits are put-if-absent
    # (jobs/runtime.py); false only where nothing but this job ever writes under the target.
    require_safe_commits: bool = True
    # Who commits a batch's small MERGEs of rows held in memory: "auto" (delta-rs, the `deltalake` package, about
    # 45x less CPU a commit, wherever it writes what Spark would: path tables on the local file system, the
    # installed package; Spark elsewhere), "spark", or "delta-rs" (as auto, but refusing to start where it
    # cannot be used). apply.writers.delta_rs decides per table and MERGE; Spark keeps DDL, large MERGEs and the rest.
    small_merge_writer: str = AUTO_WRITER

    def __post_init__(self) -> None:
        if bool(self.path) == bool(self.catalog):
            raise ConfigError("target: set exactly one of target.path (path tables) or target.catalog (catalog tables)")
        require_choice("target.table_features", self.table_features, TABLE_FEATURE_SETTINGS)
        require_choice("target.small_merge_writer", self.small_merge_writer, SMALL_MERGE_WRITERS)
        if self.small_merge_writer == DELTA_RS_WRITER:
            self._check_delta_rs()
        if not isinstance(self.require_safe_commits, bool):
            raise ConfigError(f"target.require_safe_commits: true or false, got {self.require_safe_commits!r}")

    def _check_delta_rs(self) -> None:
        why = self.why_not_delta_rs()
        if why:
            raise ConfigError(f"target.small_merge_writer = \"delta-rs\": {why}; or set it to \"auto\" or \"spark\"")

    def why_not_delta_rs(self) -> str | None:
        """Why delta-rs commits none of this target's MERGEs (None: it may, table by table)."""
        if not self.path or local_path(self.path) is None:
            return "it writes path tables on the local file system only (target.path = a folder or a file: URL)"
        if self.table_features != COMPATIBLE:
            return "it writes tables of the compatible layout only (target.table_features = \"compatible\")"
        return delta_rs_unavailable()


@dataclass(frozen=True)
class RunConfig:
    mode: str = "until-idle"
    # A batch closes at whichever comes first.
    batch_max_messages: int = 100_000
    batch_max_seconds: float = 5.0
    # until-idle: give up waiting for the captured end offsets after this long
    # without any message.
    idle_timeout_seconds: float = 30.0
    # Events waiting for a watermark kept in memory; more wait on local disk
    # (under spill_dir, default the system's temporary directory).
    max_pending_events: int = 50_000
    spill_dir: str = ""
    # One job per consumer (apply.own_tables.lease): the lease a running job renews every quarter of
    # this; a job killed without releasing it blocks the next run for at most this long.
    lease_seconds: float = 60.0
    # Where messages are read and decoded (ENGINES); the guarantees are the same.
    engine: str = "driver"
    # The Spark engine: a batch of at most this many messages is read and decoded on the driver (as the
    # driver engine's), without Spark's Kafka source and the executors' round trip, seconds a batch, and
    # staged in one write or, with nothing staged, applied from memory (jobs.spark_engine.intake); larger
    # batches are decoded on the executors. 0: all are.
    driver_decode_max_messages: int = 10_000
    # How many tables' changes are merged at once (apply.writers.table_pool): their Delta commits are independent
    # and mostly waiting, so many tables a batch cost little more than one.
    apply_concurrency: int = 8
    # until-idle: a run whose consumer's last commits (this target's) are the end of every partition has
    # nothing to read, and ends before starting Spark (jobs.caught_up).
    skip_when_caught_up: bool = True
    # A table's run whose every key is new to it (the protocol's INSERT says so, and the table is upstream's as
    # of a recorded point) is appended instead of merged: no join, a fraction of a MERGE's cost. Off by default:
    # a table still holding a key upstream removed (partition DDL, an event filter dropping deletes, a hand
    # edit) would then hold it twice, where a MERGE overwrites it.
    append_new_keys: bool = False
    # A change waiting longer than this (its commitTs this many seconds older than the newest watermark read) is
    # logged once, at WARNING, naming its table and what holds it (a partition's watermark, its schema).
    wait_warning_seconds: float = 300.0
    # A topic that carried a table and has had no watermark for this many rounds in which the newest watermark
    # moved on is logged once, at WARNING (its table dropped or renamed upstream without a DDL this consumer
    # read, or taken out of the changefeed). 0: never.
    silent_topic_rounds: int = 20

    def __post_init__(self) -> None:
        require_choice("run.mode", self.mode, RUN_MODES)
        require_choice("run.engine", self.engine, ENGINES)
        require_positive("run.batch_max_messages", self.batch_max_messages)
        require_positive("run.batch_max_seconds", self.batch_max_seconds)
        require_positive("run.idle_timeout_seconds", self.idle_timeout_seconds)
        require_positive("run.max_pending_events", self.max_pending_events)
        require_positive("run.lease_seconds", self.lease_seconds)
        require_bool("run.skip_when_caught_up", self.skip_when_caught_up)
        if not isinstance(self.driver_decode_max_messages, int) or isinstance(self.driver_decode_max_messages, bool) \
                or self.driver_decode_max_messages < 0:
            raise ConfigError("run.driver_decode_max_messages: must be a whole number of at least 0, got "
                              f"{self.driver_decode_max_messages!r}")
        require_bool("run.append_new_keys", self.append_new_keys)
        require_positive("run.wait_warning_seconds", self.wait_warning_seconds)
        if not isinstance(self.silent_topic_rounds, int) or isinstance(self.silent_topic_rounds, bool) \
                or self.silent_topic_rounds < 0:
            raise ConfigError(f"run.silent_topic_rounds: must be a whole number of at least 0, got {self.silent_topic_rounds!r}")
        if not isinstance(self.apply_concurrency, int) or isinstance(self.apply_concurrency, bool) or self.apply_concurrency < 1:
            raise ConfigError(f"run.apply_concurrency: must be a whole number of at least 1, got {self.apply_concurrency!r}")
        if self.lease_seconds < MIN_LEASE_SECONDS:
            raise ConfigError(
                f"run.lease_seconds: {self.lease_seconds!r} is too short (at least {MIN_LEASE_SECONDS:g}: the lease "
                "is renewed every quarter of it)"
            )
        if not isinstance(self.spill_dir, str):
            raise ConfigError(f"run.spill_dir: must be a directory path, got {self.spill_dir!r}")


@dataclass(frozen=True)
class PolicyConfig:
    on_bad_message: str = "fail"

    def __post_init__(self) -> None:
        require_choice("policy.on_bad_message", self.on_bad_message, BAD_MESSAGE_POLICIES)


@dataclass(frozen=True)
class MetricsConfig:
    # Append each batch's record to the `metrics` table among the product's own
    # tables (the JSON log line is written either way).
    table: bool = True
    # Records wait in memory at most this long before they are appended (one
    # commit for all of them); whatever waits is appended when the run stops.
    flush_seconds: float = 60.0

    def __post_init__(self) -> None:
        require_bool("metrics.table", self.table)
        require_positive("metrics.flush_seconds", self.flush_seconds)


@dataclass(frozen=True)
class CheckpointConfig:
    # Newest checkpoints kept per consumer in `_ticdc/checkpoints` (besides the one
    # `replay-dead-letters` starts from, while a dead letter waits for its replay).
    keep: int = 100
    # Every this many batches (the consumer's checkpoint number a multiple of it) older
    # checkpoints are deleted and the table compacted and vacuumed: a few Delta commits,
    # so not every batch; up to this many more than `keep` accumulate in between.
    cleanup_every: int = 100

    def __post_init__(self) -> None:
        _require_count("checkpoint.keep", self.keep)
        _require_count("checkpoint.cleanup_every", self.cleanup_every)


@dataclass(frozen=True)
class MaintenanceConfig:
    # Every this many batches (continuous rounds) the job compacts (OPTIMIZE) the data tables with at least
    # `min_files` files and vacuums them (VACUUM), within `budget_seconds` a pass, going on from where the last
    # pass stopped; 0: never in the job (`ticdc-delta maintain` does it on demand).
    every_batches: int = 0
    min_files: int = 32
    budget_seconds: float = 60.0
    # VACUUM keeps files a snapshot newer than this still uses: reads as of an older commitTs fail.
    vacuum_retain_hours: float = 168.0

    def __post_init__(self) -> None:
        if not isinstance(self.every_batches, int) or isinstance(self.every_batches, bool) or self.every_batches < 0:
            raise ConfigError(f"maintenance.every_batches: must be a whole number of at least 0, got {self.every_batches!r}")
        _require_count("maintenance.min_files", self.min_files)
        require_positive("maintenance.budget_seconds", self.budget_seconds)
        if isinstance(self.vacuum_retain_hours, bool) or not isinstance(self.vacuum_retain_hours, (int, float)) \
                or self.vacuum_retain_hours < 0:
            raise ConfigError(f"maintenance.vacuum_retain_hours: must be a number of at least 0, got {self.vacuum_retain_hours!r}")


@dataclass(frozen=True)
class HistoryConfig:
    # Tables that keep SCD type 2 history (apply.changes.history): `database.table` names or shell
    # patterns (`shop.*`). Needs a commitTs-ordered protocol (not avro).
    tables: tuple[str, ...] = ()
    # Each history table lives in its table's database name with this suffix: no upstream
    # database name may end with it.
    database_suffix: str = "_history"

    def __post_init__(self) -> None:
        if isinstance(self.tables, str) or not all(isinstance(t, str) and "." in t for t in self.tables):
            raise ConfigError(f"history.tables: must be a list of database.table names or patterns, got {self.tables!r}")
        object.__setattr__(self, "tables", tuple(self.tables))
        if not isinstance(self.database_suffix, str) or not self.database_suffix.strip():
            raise ConfigError(f"history.database_suffix: must be a non-empty name suffix, got {self.database_suffix!r}")

    def choice(self) -> HistoryChoice:
        return HistoryChoice(self.tables, self.database_suffix)


_PACKAGES = "spark.jars.packages"


def settings_table(key: str, value: object) -> dict[str, str]:
    """A passthrough table of settings (librdkafka's, Spark's) as the strings their clients take: TOML's
    numbers and booleans written as those clients spell them; a nested table or a list is refused."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}: must be a table of settings (name = value), got {type(value).__name__}")
    settings = {}
    for name, setting in value.items():
        if isinstance(setting, bool):
            settings[name] = "true" if setting else "false"
        elif isinstance(setting, float) and setting.is_integer():
            settings[name] = str(int(setting))  # TOML's 1e6: a count to librdkafka, not "1000000.0"
        elif isinstance(setting, (str, int, float)):
            settings[name] = str(setting)
        else:
            raise ConfigError(f"{key}.{name}: must be a string, number or boolean, got {type(setting).__name__}")
    return settings


def _require_count(key: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{key}: must be a whole number of at least 1, got {value!r}")


@dataclass(frozen=True)
class SparkConfig:
    # Used only when the product creates the session itself (local runs); a
    # session from Databricks or spark-submit is used as it is.
    master: str = "local[*]"
    conf: Mapping[str, str] = field(default_factory=dict)
    # A run --until-idle with at most this many messages to read (known before Spark starts) starts the
    # local JVM with the quick compiler only (jobs.session.QUICK_COMPILER), as `status` and `tables` do; 0: never.
    quick_compiler_max_backlog: int = 200_000
    # The local JVM maps an archive of the classes an earlier run loaded (jobs.class_archive), made at
    # the exit of the first run of each class path.
    class_data_sharing: bool = True
    # Maven coordinates added to the product's own (Delta's, the S3 connector's, Spark's Kafka source) for a
    # session the product starts: a log store's jar, say. A `spark.jars.packages` in `conf` is added the same
    # way (it no longer replaces the product's own list).
    extra_packages: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        conf = dict(settings_table("spark.conf", self.conf))
        extra = self.extra_packages.split(",") if isinstance(self.extra_packages, str) else self.extra_packages
        if not isinstance(extra, (list, tuple)) or not all(isinstance(p, str) for p in extra):
            raise ConfigError(f"spark.extra_packages: must be a list of Maven coordinates, got {self.extra_packages!r}")
        listed = [p.strip() for p in (*extra, *conf.pop(_PACKAGES, "").split(",")) if p.strip()]
        bad = [p for p in listed if len(p.split(":")) != 3]
        if bad:
            raise ConfigError(f"spark.extra_packages: {bad[0]!r} is not group:artifact:version")
        object.__setattr__(self, "conf", conf)
        object.__setattr__(self, "extra_packages", tuple(dict.fromkeys(listed)))
        value = self.quick_compiler_max_backlog
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"spark.quick_compiler_max_backlog: must be a whole number of at least 0, got {value!r}")
        require_bool("spark.class_data_sharing", self.class_data_sharing)

    def __repr__(self) -> str:
        return _repr_of(self, conf=_redacted(self.conf))


@dataclass(frozen=True)
class Config:
    kafka: KafkaConfig
    target: TargetConfig
    # [protocol]: `name` picks the protocol, the other keys are its options
    # (schema_cache/<protocol>/options.py); avro's include the [registry] section.
    protocol: ProtocolOptions = field(default_factory=SimpleOptions)
    run: RunConfig = RunConfig()
    policy: PolicyConfig = PolicyConfig()
    metrics: MetricsConfig = MetricsConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    spark: SparkConfig = SparkConfig()
    # How TiDB types without one obvious Spark type land (schema_cache.types).
    types: TypeOptions = TypeOptions()
    history: HistoryConfig = HistoryConfig()
    maintenance: MaintenanceConfig = MaintenanceConfig()
    # [[tables]]: which upstream tables are materialized, and under which names (apply.places.routing)
    tables: tuple[TableRule, ...] = ()
    # {key path: environment variable} of each value the file gave as `{ env = "NAME" }` (jobs.config_references)
    references: Mapping[tuple[str, ...], str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.types.json == "variant" and self.target.table_features == COMPATIBLE:
            # delta-rs and Polars read a VARIANT column as its binary encoding, not as JSON.
            raise ConfigError(
                "types.json: 'variant' needs target.table_features = 'full' (non-Spark readers cannot read "
                "VARIANT columns); with 'compatible' tables use 'string'"
            )
        if self.run.append_new_keys and self.policy.on_bad_message == "dead-letter":
            raise ConfigError(
                "run.append_new_keys: a dead-lettered DELETE leaves a row upstream removed, which an append of its key "
                "would hold twice; use policy.on_bad_message = 'fail' with it, or turn run.append_new_keys off"
            )
        if self.history.tables and isinstance(self.protocol, AvroOptions):
            raise ConfigError(
                "history.tables: the avro protocol is applied in Kafka offset order, and history tables need "
                "commitTs order (every other protocol)"
            )

    @property
    def registry(self) -> RegistryOptions | None:
        return self.protocol.registry if isinstance(self.protocol, AvroOptions) else None

    def describe(self) -> dict[str, Any]:
        """The effective configuration with secrets redacted, for the start-up log."""
        described = {
            "kafka": {**dataclasses.asdict(self.kafka), "properties": self.kafka.redacted_properties(),
                      "java_properties": self.kafka.redacted_java_properties()},
            "target": dataclasses.asdict(self.target),
            "protocol": self.protocol.settings(),
            "run": dataclasses.asdict(self.run),
            "policy": dataclasses.asdict(self.policy),
            "metrics": dataclasses.asdict(self.metrics),
            "checkpoint": dataclasses.asdict(self.checkpoint),
            "spark": {"master": self.spark.master, "conf": _redacted(self.spark.conf),
                      "quick_compiler_max_backlog": self.spark.quick_compiler_max_backlog,
                      "class_data_sharing": self.spark.class_data_sharing,
                      "extra_packages": list(self.spark.extra_packages)},
            "types": dataclasses.asdict(self.types),
            "history": dataclasses.asdict(self.history),
            "tables": [{"match": list(r.match), "target": r.target, "skip": r.skip, "properties": dict(r.properties),
                        "partition_by": list(r.partition_by), "cluster_by": list(r.cluster_by), "comment": r.comment}
                       for r in self.tables],
        }
        if self.registry is not None:
            registry = dataclasses.asdict(self.registry)
            registry["url"] = _redact_url(registry["url"])
            for key in ("basic_auth_user_info", "ssl_key_password"):
                registry[key] = "***" if registry[key] else ""
            described["registry"] = registry
        return config_references.shown(described, self.references)


def _redact_url(url: str) -> str:
    """The URL with any password replaced by ***; each of a comma-separated list (confluent-kafka's failover form)."""
    return ",".join(_redact_one_url(part) for part in url.split(","))


def _redact_one_url(url: str) -> str:
    parsed = urlparse(url.strip())
    if "@" not in parsed.netloc:
        return url
    user, host = parsed.netloc.rsplit("@", 1)
    return parsed._replace(netloc=f"{user.split(':', 1)[0]}:***@{host}").geturl()


_SECTIONS = {
    "kafka": KafkaConfig,
    "target": TargetConfig,
    "protocol": None,  # built by schema_cache.protocols from its `name`
    "run": RunConfig,
    "policy": PolicyConfig,
    "metrics": MetricsConfig,
    "spark": SparkConfig,
    "types": TypeOptions,
    "registry": RegistryOptions,
    "checkpoint": CheckpointConfig,
    "history": HistoryConfig,
    "maintenance": MaintenanceConfig,
    # The newest section: listed last where sections are listed (error messages).
    "tables": None,  # [[tables]]: an array of rules (apply.places.routing.rules_of)
}
_REQUIRED_SECTIONS = ("kafka", "target")


def _section(name: str, values: Mapping[str, Any]):
    cls = _SECTIONS[name]
    if not isinstance(values, Mapping):
        raise ConfigError(f"{name}: must be a table, got {type(values).__name__}")
    allowed = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(values) - set(allowed))
    if unknown:
        raise ConfigError(f"{name}.{unknown[0]}: unknown key; allowed: {', '.join(allowed)}")
    try:
        return cls(**values)
    except TypeError as err:
        raise ConfigError(f"{name}: {err}") from err


def _protocol(values: Mapping[str, Any]) -> ProtocolOptions:
    if not isinstance(values.get("protocol", {}), Mapping):
        raise ConfigError(f"protocol: must be a table, got {type(values['protocol']).__name__}")
    protocol = dict(values.get("protocol") or {})
    name = protocol.pop("name", SimpleOptions.name)
    if not isinstance(name, str):
        raise ConfigError(f"protocol.name: must be a protocol name, got {name!r}")
    registry = _section("registry", values["registry"]) if "registry" in values else None
    if name == AvroOptions.name:
        return protocol_options(name, protocol, registry=registry or RegistryOptions())
    if registry is not None:
        raise ConfigError(f"registry: only protocol 'avro' reads a schema registry; protocol.name is {name!r}")
    return protocol_options(name, protocol)


def from_mapping(values: Mapping[str, Any]) -> Config:
    """Build a Config from nested mappings (a parsed TOML document); `{ env = "NAME" }` values are read from
    the environment here."""
    values, references = config_references.resolve(values)
    unknown = sorted(set(values) - set(_SECTIONS))
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown section; allowed: {', '.join(_SECTIONS)}")
    for name in _REQUIRED_SECTIONS:
        if name not in values:
            raise ConfigError(f"{name}: section is required")
    sections = {name: _section(name, section) for name, section in values.items() if _SECTIONS[name] is not None}
    sections.pop("registry", None)
    rules = rules_of(values["tables"]) if "tables" in values else ()
    return Config(**sections, protocol=_protocol(values), tables=rules, references=references)


def load(path: str | None, overrides: Mapping[str, Mapping[str, Any]] | None = None) -> Config:
    """Read a TOML file (optional), then apply `overrides` ({section: {key: value}})."""
    values: dict[str, dict[str, Any]] = {}
    if path:
        try:
            with open(path, "rb") as handle:
                values = tomllib.load(handle)
        except OSError as err:
            raise ConfigError(f"cannot read config file {path!r}: {err.strerror}") from err
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"config file {path!r} is not valid TOML: {err}") from err
    for section, section_values in (overrides or {}).items():
        values.setdefault(section, {}).update({k: v for k, v in section_values.items() if v is not None})
    return from_mapping(values)
