"""Options of TiCDC's Open Protocol (`protocol.name = "open-protocol"`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ticdc_delta.schema_cache.options import LargeMessageOptions, ProtocolOptions, option_key, require_zone

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class OpenProtocolOptions(LargeMessageOptions, ProtocolOptions):
    name: ClassVar[str] = "open-protocol"

    # the TiCDC server's time zone (TIMESTAMP text carries none)
    timestamp_zone: str = "UTC"

    def __post_init__(self) -> None:
        require_zone(option_key("timestamp_zone"), self.timestamp_zone)
        self._check_large_messages()

