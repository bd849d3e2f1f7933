"""Validation shared by the protocols' options types, and the option groups several protocols have.

Each protocol owns a small frozen options dataclass (`schema_cache/<protocol>/options.py`)
that validates itself in its constructor, naming the key as the configuration
file spells it (`protocol.<field>`), and builds its decoder.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ticdc_delta.exceptions import ConfigError
from ticdc_delta.schema_cache.events import Ordering

if TYPE_CHECKING:
    from ticdc_delta.schema_cache.large_messages import LargeMessages

SECTION = "protocol"


def require_choice(key: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}: {value!r} is not allowed; allowed: {', '.join(allowed)}")


def require_positive(key: str, value: object) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{key}: must be a positive number, got {value!r}")


def require_bool(key: str, value: object) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{key}: must be true or false, got {value!r}")


def require_zone(key: str, value: object) -> None:
    try:
        ZoneInfo(str(value))
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"{key}: unknown time zone {value!r}") from None


class ProtocolOptions:
    """Base of the protocols' options types: a name, an ordering, a decoder factory.

    Subclasses are frozen dataclasses whose fields are the protocol's keys in
    the `[protocol]` section.
    """

    name: ClassVar[str]

    @property
    def ordering(self) -> Ordering:
        return Ordering.COMMIT_TS

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    def settings(self) -> dict[str, object]:
        """The options as the configuration spells them (for the start-up log)."""
        return {"name": self.name, **{k: getattr(self, k) for k in self.keys()}}

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> ProtocolOptions:
        return cls(**values)  # type: ignore[call-arg]


def option_key(name: str) -> str:
    """How the configuration spells a protocol option, for error messages."""
    return f"{SECTION}.{name}"


@dataclass(frozen=True)
class LargeMessageOptions:
    """TiCDC's large-message handling, as the changefeed's `large-message-handle` settings say."""

    # the compression of every value: none, lz4 or snappy (TiCDC compresses all, and nothing says so)
    large_message_compression: str = "none"
    # where claim-checked messages are read (local path or fsspec URL); only files directly under it
    claim_check_root: str = ""
    claim_check_raw_value: bool = False

    def _check_large_messages(self) -> None:
        from ticdc_delta.schema_cache.large_messages import COMPRESSIONS

        require_choice(option_key("large_message_compression"), self.large_message_compression, COMPRESSIONS)
        require_bool(option_key("claim_check_raw_value"), self.claim_check_raw_value)
        if not isinstance(self.claim_check_root, str):
            raise ConfigError(f"{option_key('claim_check_root')}: must be a path or URL string, got {self.claim_check_root!r}")

    def large_messages(self) -> LargeMessages:
        from ticdc_delta.schema_cache.large_messages import ClaimCheck, LargeMessages

        claim_check = ClaimCheck(self.claim_check_root, self.claim_check_raw_value) if self.claim_check_root else None
        return LargeMessages(self.large_message_compression, claim_check)


def require_extension_or_offset_order(protocol: str, extension: bool, allow_offset_ordering: bool) -> None:
    """Protocols whose watermarks come only with TiCDC's enable-tidb-extension."""
    require_bool(option_key("enable_tidb_extension"), extension)
    require_bool(option_key("allow_offset_ordering"), allow_offset_ordering)
    if not (extension or allow_offset_ordering):
        raise ConfigError(
            f"protocol.enable_tidb_extension: {protocol} sends watermarks only with TiCDC's "
            "enable-tidb-extension=true; enable it in the changefeed and here, or set "
            "protocol.allow_offset_ordering = true to order by partition offset instead (see Protocols in docs/protocols.md)"
        )


