"""Typed configuration: TOML file, then command-line overrides.

Every section is a frozen dataclass that validates in its constructor;
unknown keys and bad values raise ConfigError naming the key and what is
allowed.
"""

from __future__ import annotations

import dataclasses
import tomllib
from urllib.parse import urlparse
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError
from dataclasses import dataclass, field
from typing import Any, Mapping

from schema_cache.decoder import DECODERS
from schema_cache.exceptions import ConfigError
from schema_cache.large_messages import COMPRESSIONS, ClaimCheck
from schema_cache.ticdc_avro.registry import RegistryOptions
from schema_cache.ticdc_avro.table_schema import AvroOptions
from schema_cache.types import TypeOptions

RUN_MODES = ("until-idle", "continuous")
# Protocols whose watermarks (commitTs ordering) depend on the TiDB extension.
WATERMARK_EXTENSION_PROTOCOLS = ("debezium", "canal-json")
AVRO_DECIMAL_MODES = ("precise", "string")
AVRO_BIGINT_UNSIGNED_MODES = ("long", "string")
BAD_MESSAGE_POLICIES = ("fail", "dead-letter")
START_POSITIONS = ("earliest", "latest")
ENCODINGS = ("json", "avro")

# librdkafka properties the product sets itself; users may not override them.
_MANAGED_KAFKA_PROPERTIES = {"bootstrap.servers", "group.id", "enable.auto.commit", "auto.offset.reset"}
_SECRET_MARKERS = ("password", "secret", "jaas", "token", "key.pem", "private")


def _require_choice(key: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}: {value!r} is not allowed; allowed: {', '.join(allowed)}")


def _require_positive(key: str, value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{key}: must be a positive number, got {value!r}")


@dataclass(frozen=True)
class KafkaConfig:
    bootstrap_servers: str = "127.0.0.1:9092"
    topics: tuple[str, ...] = ()
    group_id: str = "ticdc-delta"
    start_from: str = "earliest"
    # librdkafka passthrough (security.protocol, sasl.*, ssl.*, ...)
    properties: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.topics, str):
            object.__setattr__(self, "topics", tuple(t for t in self.topics.split(",") if t))
        object.__setattr__(self, "topics", tuple(self.topics))
        if not self.topics:
            raise ConfigError("kafka.topics: at least one topic is required")
        if not self.bootstrap_servers:
            raise ConfigError("kafka.bootstrap_servers: required")
        if not self.group_id:
            raise ConfigError("kafka.group_id: required")
        _require_choice("kafka.start_from", self.start_from, START_POSITIONS)
        managed = sorted(_MANAGED_KAFKA_PROPERTIES & set(self.properties))
        if managed:
            raise ConfigError(
                f"kafka.properties: {', '.join(managed)} is set by the product; "
                "use kafka.bootstrap_servers / kafka.group_id / kafka.start_from"
            )

    def redacted_properties(self) -> dict[str, str]:
        return {
            k: ("***" if any(marker in k.lower() for marker in _SECRET_MARKERS) else v)
            for k, v in self.properties.items()
        }


@dataclass(frozen=True)
class ProtocolConfig:
    name: str = "simple"
    # simple: json or avro (Simple's own Avro schema)
    encoding: str = "json"
    # simple, debezium without schemas: how long a row change may wait for its
    # structure (BOOTSTRAP / DDL) before it is bad input.
    schema_wait_seconds: float = 600.0
    # avro, debezium, canal-json: as the changefeed's sink-uri says. debezium
    # and canal-json send watermarks (and canal-json commitTs) only with it.
    enable_tidb_extension: bool = False
    # debezium, canal-json without the extension: accept ordering by partition
    # offset instead of commitTs behind watermarks (weaker; see the README)
    allow_offset_ordering: bool = False
    # avro: as the changefeed's sink-uri options say
    avro_decimal_handling_mode: str = "precise"
    avro_bigint_unsigned_handling_mode: str = "long"
    # avro: also write _tidb_op / _tidb_commit_ts / ... as columns
    keep_extension_columns: bool = False
    # avro, canal-json, open-protocol: the TiCDC server's time zone (their
    # TIMESTAMP strings carry none)
    timestamp_zone: str = "UTC"
    # TiCDC large-message handling, as the changefeed's [sink.kafka-config.large-message-handle]
    large_message_compression: str = "none"
    # where claim-checked messages are read from (fsspec URL or local path); only
    # files directly under it are ever read
    claim_check_root: str = ""
    claim_check_raw_value: bool = False

    def __post_init__(self) -> None:
        _require_choice("protocol.name", self.name, tuple(sorted(DECODERS)))
        _require_choice("protocol.encoding", self.encoding, ENCODINGS)
        _require_positive("protocol.schema_wait_seconds", self.schema_wait_seconds)
        _require_choice("protocol.avro_decimal_handling_mode", self.avro_decimal_handling_mode, AVRO_DECIMAL_MODES)
        _require_choice(
            "protocol.avro_bigint_unsigned_handling_mode",
            self.avro_bigint_unsigned_handling_mode,
            AVRO_BIGINT_UNSIGNED_MODES,
        )
        _require_choice("protocol.large_message_compression", self.large_message_compression, COMPRESSIONS)
        for key in ("enable_tidb_extension", "keep_extension_columns", "claim_check_raw_value", "allow_offset_ordering"):
            if not isinstance(getattr(self, key), bool):
                raise ConfigError(f"protocol.{key}: must be true or false, got {getattr(self, key)!r}")
        try:
            ZoneInfo(self.timestamp_zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ConfigError(f"protocol.timestamp_zone: unknown time zone {self.timestamp_zone!r}") from None

    def claim_check(self) -> ClaimCheck | None:
        return ClaimCheck(self.claim_check_root, self.claim_check_raw_value) if self.claim_check_root else None

    def avro_options(self) -> AvroOptions:
        return AvroOptions(
            decimal_handling_mode=self.avro_decimal_handling_mode,
            bigint_unsigned_handling_mode=self.avro_bigint_unsigned_handling_mode,
            enable_tidb_extension=self.enable_tidb_extension,
            keep_extension_columns=self.keep_extension_columns,
            timestamp_zone=self.timestamp_zone,
        )


@dataclass(frozen=True)
class TargetConfig:
    # Exactly one of: a directory root for path tables, or a catalog name.
    path: str | None = None
    catalog: str | None = None
    # Catalog mode: the schema holding the product's own tables.
    meta_schema: str = "_ticdc"

    def __post_init__(self) -> None:
        if bool(self.path) == bool(self.catalog):
            raise ConfigError("target: set exactly one of target.path (path tables) or target.catalog (catalog tables)")


@dataclass(frozen=True)
class RunConfig:
    mode: str = "until-idle"
    # A batch closes at whichever comes first.
    batch_max_messages: int = 100_000
    batch_max_seconds: float = 5.0
    # until-idle: give up waiting for the captured end offsets after this long
    # without any message.
    idle_timeout_seconds: float = 30.0

    def __post_init__(self) -> None:
        _require_choice("run.mode", self.mode, RUN_MODES)
        _require_positive("run.batch_max_messages", self.batch_max_messages)
        _require_positive("run.batch_max_seconds", self.batch_max_seconds)
        _require_positive("run.idle_timeout_seconds", self.idle_timeout_seconds)


@dataclass(frozen=True)
class PolicyConfig:
    on_bad_message: str = "fail"

    def __post_init__(self) -> None:
        _require_choice("policy.on_bad_message", self.on_bad_message, BAD_MESSAGE_POLICIES)


@dataclass(frozen=True)
class SparkConfig:
    # Used only when the product creates the session itself (local runs); a
    # session from Databricks or spark-submit is used as it is.
    master: str = "local[*]"
    conf: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Config:
    kafka: KafkaConfig
    target: TargetConfig
    protocol: ProtocolConfig = ProtocolConfig()
    run: RunConfig = RunConfig()
    policy: PolicyConfig = PolicyConfig()
    spark: SparkConfig = SparkConfig()
    # How TiDB types without one obvious Spark type land (schema_cache.types).
    types: TypeOptions = TypeOptions()
    # Confluent Schema Registry (protocol avro).
    registry: RegistryOptions = RegistryOptions()

    def __post_init__(self) -> None:
        protocol = self.protocol
        if protocol.name == "avro" and not self.registry.url:
            raise ConfigError("registry.url: required for protocol 'avro'")
        if protocol.name in WATERMARK_EXTENSION_PROTOCOLS and not (
            protocol.enable_tidb_extension or protocol.allow_offset_ordering
        ):
            raise ConfigError(
                f"protocol.enable_tidb_extension: {protocol.name} sends watermarks only with TiCDC's "
                "enable-tidb-extension=true; enable it in the changefeed and here, or set "
                "protocol.allow_offset_ordering = true to order by partition offset instead (see the README)"
            )

    def describe(self) -> dict[str, Any]:
        """The effective configuration with secrets redacted, for the start-up log."""
        described = dataclasses.asdict(self)
        described["kafka"]["properties"] = self.kafka.redacted_properties()
        described["spark"]["conf"] = {
            k: ("***" if any(m in k.lower() for m in _SECRET_MARKERS) else v) for k, v in self.spark.conf.items()
        }
        registry = described["registry"]
        registry["url"] = _redact_url(registry["url"])
        for key in ("basic_auth_user_info", "ssl_key_password"):
            registry[key] = "***" if registry[key] else ""
        return described


def _redact_url(url: str) -> str:
    parsed = urlparse(url)
    if parsed.password is None:
        return url
    host = parsed.netloc.rsplit("@", 1)[1]
    return parsed._replace(netloc=f"{parsed.username}:***@{host}").geturl()


_SECTIONS = {
    "kafka": KafkaConfig,
    "target": TargetConfig,
    "protocol": ProtocolConfig,
    "run": RunConfig,
    "policy": PolicyConfig,
    "spark": SparkConfig,
    "types": TypeOptions,
    "registry": RegistryOptions,
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


def from_mapping(values: Mapping[str, Any]) -> Config:
    """Build a Config from nested mappings (a parsed TOML document)."""
    unknown = sorted(set(values) - set(_SECTIONS))
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown section; allowed: {', '.join(_SECTIONS)}")
    for name in _REQUIRED_SECTIONS:
        if name not in values:
            raise ConfigError(f"{name}: section is required")
    return Config(**{name: _section(name, section) for name, section in values.items()})


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
