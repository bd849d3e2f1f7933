"""The one decoder interface, and the one place a protocol name picks a decoder."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from schema_cache.events import Event, Ordering, RawMessage
from schema_cache.exceptions import ConfigError, DecodeError
from schema_cache.large_messages import ClaimCheck
from schema_cache.parking import ParkedMessage
from schema_cache.ticdc_avro.registry import RegistryOptions
from schema_cache.ticdc_avro.table_schema import AvroOptions
from schema_cache.types import DEFAULT_OPTIONS, TypeOptions


class Decoder(Protocol):
    """Turns raw Kafka messages of one protocol into events.

    Implementations keep the protocol's schema cache. `decode` raises
    DecodeError for a message it cannot decode; it returns no events for a
    message it parks until its schema is known, and may return events of
    earlier parked messages when their schema arrives.
    """

    ordering: Ordering

    def decode(self, message: RawMessage) -> list[Event]: ...

    def parked(self) -> list[ParkedMessage]:
        """Messages held back waiting for their schema."""
        ...

    def take_errors(self) -> list[DecodeError]:
        """Errors of earlier parked messages (released and failed, or timed out)."""
        ...

    def state(self) -> bytes:
        """The schema cache, serialized, to be saved with a checkpoint."""
        ...

    def restore(self, state: bytes) -> None: ...


class Stateless:
    """For decoders whose messages carry their own structure: nothing parked, nothing to save."""

    def parked(self) -> list[ParkedMessage]:
        return []

    def take_errors(self) -> list[DecodeError]:
        return []

    def state(self) -> bytes:
        return b"{}"

    def restore(self, state: bytes) -> None:
        pass


@dataclass(frozen=True, slots=True)
class DecoderOptions:
    encoding: str = "json"
    schema_wait_seconds: float = 600.0
    types: TypeOptions = DEFAULT_OPTIONS
    avro: AvroOptions = AvroOptions()
    registry: RegistryOptions = RegistryOptions()
    enable_tidb_extension: bool = False
    # TiCDC large-message handling: the compression of every value, and where
    # claim-checked messages are read from (None: not configured).
    compression: str = "none"
    claim_check: ClaimCheck | None = None
    # The TiCDC server's time zone, for protocols whose TIMESTAMP text names none.
    timestamp_zone: str = "UTC"


def _simple(options: DecoderOptions) -> Decoder:
    from schema_cache.simple.decoder import ENCODINGS, SimpleDecoder

    if options.encoding not in ENCODINGS:
        raise ConfigError(
            f"protocol.encoding: {options.encoding!r} is not allowed for protocol 'simple'; "
            f"allowed: {', '.join(ENCODINGS)}"
        )
    return SimpleDecoder(
        encoding=options.encoding,
        types=options.types,
        schema_wait_seconds=options.schema_wait_seconds,
        compression=options.compression,
        claim_check=options.claim_check,
    )


def _ticdc_avro(options: DecoderOptions) -> Decoder:
    from schema_cache.ticdc_avro.decoder import TiCDCAvroDecoder
    from schema_cache.ticdc_avro.registry import SchemaRegistry

    return TiCDCAvroDecoder(SchemaRegistry(options.registry), options.avro, options.types)


def _debezium(options: DecoderOptions) -> Decoder:
    from schema_cache.debezium.decoder import DebeziumDecoder

    return DebeziumDecoder(
        enable_tidb_extension=options.enable_tidb_extension,
        types_options=options.types,
        schema_wait_seconds=options.schema_wait_seconds,
    )


def _canal_json(options: DecoderOptions) -> Decoder:
    from schema_cache.canal.decoder import CanalJsonDecoder

    return CanalJsonDecoder(
        enable_tidb_extension=options.enable_tidb_extension,
        types_options=options.types,
        timestamp_zone=options.timestamp_zone,
        compression=options.compression,
        claim_check=options.claim_check,
    )


def _open_protocol(options: DecoderOptions) -> Decoder:
    from schema_cache.open_protocol.decoder import OpenProtocolDecoder

    return OpenProtocolDecoder(
        types_options=options.types,
        timestamp_zone=options.timestamp_zone,
        compression=options.compression,
        claim_check=options.claim_check,
    )


DECODERS: dict[str, Callable[[DecoderOptions], Decoder]] = {
    "simple": _simple,
    "avro": _ticdc_avro,
    "debezium": _debezium,
    "canal-json": _canal_json,
    "open-protocol": _open_protocol,
}


def create_decoder(protocol: str, options: DecoderOptions = DecoderOptions()) -> Decoder:
    try:
        factory = DECODERS[protocol]
    except KeyError:
        allowed = ", ".join(sorted(DECODERS))
        raise ConfigError(f"protocol.name: unknown protocol {protocol!r}; allowed: {allowed}") from None
    return factory(options)
