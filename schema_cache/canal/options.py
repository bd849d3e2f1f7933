"""Options of TiCDC's canal-json protocol (`protocol.name = "canal-json"`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ticdc_delta.schema_cache.events import Ordering
from ticdc_delta.schema_cache.options import (
    LargeMessageOptions,
    ProtocolOptions,
    option_key,
    require_extension_or_offset_order,
    require_zone,
)

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class CanalJsonOptions(LargeMessageOptions, ProtocolOptions):
    name: ClassVar[str] = "canal-json"

    # as the changefeed's enable-tidb-extension: commitTs and watermarks exist only with it
    enable_tidb_extension: bool = False
    # without the extension: accept ordering by partition offset (weaker; see docs/protocols.md)
    allow_offset_ordering: bool = False
    # the TiCDC server's time zone (TIMESTAMP text carries none)
    timestamp_zone: str = "UTC"

    def __post_init__(self) -> None:
        require_extension_or_offset_order(self.name, self.enable_tidb_extension, self.allow_offset_ordering)
        require_zone(option_key("timestamp_zone"), self.timestamp_zone)
        self._check_large_messages()

    @property
    def ordering(self) -> Ordering:
        return Ordering.COMMIT_TS if self.enable_tidb_extension else Ordering.OFFSET

