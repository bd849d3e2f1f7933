"""The one place a protocol name selects a decoder: name -> its options type -> its decoder.

Options modules are light (no decoder, no client library); each is imported
only when its protocol is named, and the options type imports its decoder
only when asked to build one.
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
    return options.create_decoder(types)
