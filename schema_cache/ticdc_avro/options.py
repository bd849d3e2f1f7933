"""Options of TiCDC's avro protocol (`protocol.name = "avro"`) and of the schema registry it reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar
from urllib.parse import urlparse

from ticdc_delta.exceptions import ConfigError
from ticdc_delta.schema_cache.events import Ordering
from ticdc_delta.schema_cache.options import (
    ProtocolOptions,
    option_key,
    require_bool,
    require_choice,
    require_positive,
    require_zone,
)

if TYPE_CHECKING:
    pass

DECIMAL_MODES = ("precise", "string")
BIGINT_UNSIGNED_MODES = ("long", "string")


@dataclass(frozen=True)
class RegistryOptions:
    """Config section [registry]. `url` may carry URL-encoded user:password (as in TiCDC's docs)."""

    # (out of repr(): secrets, and a URL that may carry one)
    url: str = field(default="", repr=False)
    basic_auth_user_info: str = field(default="", repr=False)
    ssl_ca_location: str = ""
    ssl_certificate_location: str = ""
    ssl_key_location: str = ""
    ssl_key_password: str = field(default="", repr=False)
    request_timeout_seconds: float = 10.0
    max_wait_seconds: float = 300.0

    def __post_init__(self) -> None:
        if self.url and urlparse(self.url).scheme not in ("http", "https"):
            raise ConfigError(f"registry.url: {urlparse(self.url).scheme!r} URLs are not served; give an http:// or "
                              "https:// URL")
        for key in ("request_timeout_seconds", "max_wait_seconds"):
            require_positive(f"registry.{key}", getattr(self, key))

    def client_config(self) -> dict:
        """The configuration of confluent-kafka's SchemaRegistryClient."""
        conf = {"url": self.url, "timeout": self.request_timeout_seconds, "max.retries": 1}
        optional = {
            "basic.auth.user.info": self.basic_auth_user_info,
            "ssl.ca.location": self.ssl_ca_location,
            "ssl.certificate.location": self.ssl_certificate_location,
            "ssl.key.location": self.ssl_key_location,
            "ssl.key.password": self.ssl_key_password,
        }
        conf.update({k: v for k, v in optional.items() if v})
        return conf


@dataclass(frozen=True)
class AvroOptions(ProtocolOptions):
    """How the changefeed was configured (its sink-uri options) and how to read it."""

    name: ClassVar[str] = "avro"

    # avro-decimal-handling-mode
    avro_decimal_handling_mode: str = "precise"
    # avro-bigint-unsigned-handling-mode
    avro_bigint_unsigned_handling_mode: str = "long"
    # enable-tidb-extension: must match the messages (checked against each value schema)
    enable_tidb_extension: bool = False
    # also write _tidb_op / _tidb_commit_ts / ... as columns
    keep_extension_columns: bool = False
    # the TiCDC server's time zone (TIMESTAMP strings carry none)
    timestamp_zone: str = "UTC"
    # config section [registry], not a [protocol] key
    registry: RegistryOptions = field(default_factory=RegistryOptions)

    def __post_init__(self) -> None:
        require_choice(option_key("avro_decimal_handling_mode"), self.avro_decimal_handling_mode, DECIMAL_MODES)
        require_choice(
            option_key("avro_bigint_unsigned_handling_mode"), self.avro_bigint_unsigned_handling_mode, BIGINT_UNSIGNED_MODES
        )
        require_bool(option_key("enable_tidb_extension"), self.enable_tidb_extension)
        require_bool(option_key("keep_extension_columns"), self.keep_extension_columns)
        require_zone(option_key("timestamp_zone"), self.timestamp_zone)
        if not isinstance(self.registry, RegistryOptions):
            raise ConfigError("registry: must be a table of registry settings")
        if not self.registry.url:
            raise ConfigError("registry.url: required for protocol 'avro'")

    @property
    def ordering(self) -> Ordering:
        # No watermarks: one topic per table, each partition in commit order.
        return Ordering.OFFSET

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(k for k in super().keys() if k != "registry")
