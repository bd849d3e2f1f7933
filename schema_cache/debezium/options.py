"""Options of TiCDC's debezium protocol (`protocol.name = "debezium"`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ticdc_delta.schema_cache.events import Ordering
from ticdc_delta.schema_cache.options import (
    ProtocolOptions,
    option_key,
    require_extension_or_offset_order,
    require_positive,
)

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class DebeziumOptions(ProtocolOptions):
    name: ClassVar[str] = "debezium"

    # as the changefeed's enable-tidb-extension: watermarks exist only with it
    enable_tidb_extension: bool = False
    # without the extension: accept ordering by partition offset (weaker; see docs/protocols.md)
    allow_offset_ordering: bool = False
    # debezium-disable-schema: how long a row may wait for its table's DDL description
    schema_wait_seconds: float = 600.0

    def __post_init__(self) -> None:
        require_extension_or_offset_order(self.name, self.enable_tidb_extension, self.allow_offset_ordering)
        require_positive(option_key("schema_wait_seconds"), self.schema_wait_seconds)

    @property
    def ordering(self) -> Ordering:
        return Ordering.COMMIT_TS if self.enable_tidb_extension else Ordering.OFFSET

