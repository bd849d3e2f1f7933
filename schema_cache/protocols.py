"""The one place a protocol name selects a decoder: name -> its options type -> its decoder.

Options modules are light (no decoder, no client library) and know nothing of their decoder: each is
imported only when its protocol is named, and its decoder module only when one is built. A decoder module
provides `decoder_for(options, types)`, and where the protocol needs them `worker_decoder_for` (the Spark
engine's executors), `worker_payload` (what they need from the driver's decoder) and `check_credentials`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from ticdc_delta.exceptions import ConfigError
from ticdc_delta.schema_cache.decoder import Decoder
from ticdc_delta.schema_cache.options import ProtocolOptions, option_key
from ticdc_delta.schema_cache.types import DEFAULT_OPTIONS, TypeOptions

# protocol name -> "module:OptionsClass"
_OPTIONS = {
    "simple": "ticdc_delta.schema_cache.simple.options:SimpleOptions",
    "avro": "ticdc_delta.schema_cache.ticdc_avro.options:AvroOptions",
    "debezium": "ticdc_delta.schema_cache.debezium.options:DebeziumOptions",
    "canal-json": "ticdc_delta.schema_cache.canal.options:CanalJsonOptions",
    "open-protocol": "ticdc_delta.schema_cache.open_protocol.options:OpenProtocolOptions",
}
NAMES = tuple(sorted(_OPTIONS))
# protocol name -> the module of its decoder and its factories
_DECODERS = {
    "simple": "ticdc_delta.schema_cache.simple.decoder",
    "avro": "ticdc_delta.schema_cache.ticdc_avro.decoder",
    "debezium": "ticdc_delta.schema_cache.debezium.decoder",
    "canal-json": "ticdc_delta.schema_cache.canal.decoder",
    "open-protocol": "ticdc_delta.schema_cache.open_protocol.decoder",
}


def options_type(name: str) -> type[ProtocolOptions]:
    try:
        module, cls = _OPTIONS[name].split(":")
    except KeyError:
        raise ConfigError(f"{option_key('name')}: {name!r} is not allowed; allowed: {', '.join(NAMES)}") from None
    return getattr(importlib.import_module(module), cls)


def _owners(key: str) -> list[str]:
    return [name for name in NAMES if key in options_type(name).keys()]


def protocol_options(name: str, values: Mapping[str, Any] | None = None, **extra: Any) -> ProtocolOptions:
    """The options of protocol `name` from the `[protocol]` keys `values` (without `name`).

    Keys of another protocol are refused naming the protocols they belong
    to; `extra` passes settings from other sections (avro's `registry`).
    """
    cls = options_type(name)
    values = dict(values or {})
    allowed = cls.keys()
    for key in sorted(values):
        if key not in allowed or key in extra:
            owners = _owners(key)
            where = f"an option of {', '.join(owners)}, not of {name}" if owners else "unknown key"
            raise ConfigError(f"{option_key(key)}: {where}; allowed for {name}: {', '.join(k for k in allowed if k not in extra) or '(none)'}")
    try:
        return cls(**values, **extra)
    except TypeError as err:
        raise ConfigError(f"protocol: {err}") from err


def create_decoder(options: ProtocolOptions | str, types: TypeOptions = DEFAULT_OPTIONS) -> Decoder:
    """The decoder for `options` (or for a protocol name with its default options)."""
    if isinstance(options, str):
        options = protocol_options(options)
    return _decoders(options).decoder_for(options, types)


def create_worker_decoder(options: ProtocolOptions, types: TypeOptions, state: bytes, shipped: bytes) -> Decoder:
    """A decoder for an executor of the Spark engine: the driver's `state`, and what it `shipped`
    (`worker_payload`). It calls no service: what it lacks, it raises SchemaNotShipped for."""
    module = _decoders(options)
    if hasattr(module, "worker_decoder_for"):
        return module.worker_decoder_for(options, types, state, shipped)
    decoder = module.decoder_for(options, types)
    decoder.restore(state)
    return decoder


def worker_payload(options: ProtocolOptions, decoder: Decoder) -> bytes:
    """What executors need from the driver's decoder besides its state (avro: the schemas it fetched)."""
    module = _decoders(options)
    return module.worker_payload(decoder) if hasattr(module, "worker_payload") else b""


def check_credentials(options: ProtocolOptions) -> None:
    """Raise AuthenticationError if a service the decoder will call refuses the configured credentials.

    Asked once before the job starts Spark, so wrong credentials stop it in seconds; a service that does not
    answer is not an error here (the decoder waits for it as configured). Most protocols call none."""
    module = _decoders(options)
    if hasattr(module, "check_credentials"):
        module.check_credentials(options)


def _decoders(options: ProtocolOptions):
    return importlib.import_module(_DECODERS[options.name])
