"""How far a table has been applied: the values the applier decides with, apart from the Delta I/O that
records and reads them (`apply.progress`), so the decisions (`apply.replay`, the gate) stay pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ticdc_delta.schema_cache.events import TopicPartition


@dataclass(frozen=True, slots=True)
class AppliedPoint:
    """Everything up to here is in the table.

    commitTs-ordered protocols: `ts`, all events at or below it. Offset-ordered
    ones: `offsets`, the next offset per partition, and `ts`, the newest DDL
    applied (DDL is broadcast to every partition, so its copies on other
    partitions are recognized by commitTs).
    """

    ts: int | None = None
    offsets: tuple[tuple[TopicPartition, int], ...] = ()  # (partition, next offset), sorted

    @staticmethod
    def at_offsets(offsets: Mapping[TopicPartition, int], ddl_ts: int | None = None) -> AppliedPoint:
        return AppliedPoint(ts=ddl_ts, offsets=tuple(sorted(offsets.items())))

    @property
    def through_ts(self) -> int | None:
        """The commitTs through which the table holds everything (None: an offsets point, whose `ts` is only its
        newest DDL's)."""
        return None if self.offsets else self.ts

    def offset_map(self) -> dict[TopicPartition, int]:
        return dict(self.offsets)

    def to_json(self) -> dict:
        if not self.offsets:
            return {"appliedTs": self.ts}
        return {"appliedOffsets": {str(tp): offset for tp, offset in self.offsets}, "ddlTs": self.ts}


@dataclass(frozen=True, slots=True)
class PendingBackfill:
    """Columns a DDL added whose default is not yet written into older rows.

    `ddl` identifies the DDL (see `apply.applier`), so only its redo finishes it.
    """

    ddl: str
    columns: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TableProgress:
    exists: bool
    point: AppliedPoint | None = None
    pending: PendingBackfill | None = None
    # The TSO of a snapshot load (`ticdc-delta snapshot`) that replaced the table and has not
    # written its rows yet: the table is empty, not applied through anything.
    snapshot_loading: int | None = None
    # A history table created to begin from its table's rows (`apply.changes.history`) that has not got them yet.
    history_seeding: bool = False
