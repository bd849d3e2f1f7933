"""How far each Delta table has been applied, recorded atomically with its data.

Every commit the applier makes carries its applied point in the commit's
`userMetadata`, so the record can never disagree with the data it describes:
a commitTs for commitTs-ordered protocols, or the next offset per partition
for offset-ordered ones (TiCDC Avro). commitTs-ordered MERGE commits also
carry Delta's idempotent-write pair (txnAppId, txnVersion = commitTs): a
MERGE replayed after a crash, or one that would move a table backwards, is
skipped by Delta itself.

On first touch of a table, its applied point is read back from
`DESCRIBE HISTORY`; events it covers are already in the table.

A DDL that adds columns with defaults takes two commits (add, then write the
default into existing rows); the first records the pending backfill, so a
crash between them is finished when the DDL is redone.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.errors import AnalysisException

from apply.spark_errors import error_condition
from apply.sql_session import CommitTags, SqlSession
from schema_cache.events import TopicPartition

log = logging.getLogger(__name__)

APP_ID = "ticdc-delta"
_MARKER = "ticdc_delta"

# Errors that mean "there is no Delta table here (yet)".
_MISSING_TABLE_ERRORS = {
    "DELTA_TABLE_ONLY_OPERATION",
    "DELTA_MISSING_DELTA_TABLE",
    "DELTA_TABLE_NOT_FOUND",
    "TABLE_OR_VIEW_NOT_FOUND",
    "PATH_NOT_FOUND",
    "SCHEMA_NOT_FOUND",
}
_HISTORY_DEPTH = 200


def is_missing_table(err: AnalysisException) -> bool:
    return error_condition(err) in _MISSING_TABLE_ERRORS


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


def commit_tags(
    point: AppliedPoint | None,
    *,
    txn: tuple[str, int] | None = None,
    pending: PendingBackfill | None = None,
) -> CommitTags:
    """The tags of a commit that applies through `point`.

    `point` None (and no `pending`) leaves the commit unmarked: schema
    alignment that does not itself apply anything. `txn` (application id,
    version) makes the write idempotent: Delta skips it if that application
    already committed this or a higher version to the table.
    """
    metadata = None
    if point is not None or pending is not None:
        marker: dict = point.to_json() if point is not None else {"appliedTs": None}
        if pending is not None:
            marker["pendingBackfill"] = {"ddl": pending.ddl, "columns": list(pending.columns)}
        metadata = {_MARKER: marker}
    return CommitTags(metadata, txn)


def _marker_of(user_metadata: str | None) -> dict | None:
    if not user_metadata:
        return None
    try:
        marker = json.loads(user_metadata)[_MARKER]
    except (ValueError, KeyError, TypeError):
        return None  # someone else's metadata
    return marker if isinstance(marker, dict) else None


def _progress_of(marker: dict) -> TableProgress:
    if "appliedOffsets" in marker:
        ddl_ts = marker.get("ddlTs")
        offsets = {TopicPartition.parse(k): int(v) for k, v in marker["appliedOffsets"].items()}
        point = AppliedPoint.at_offsets(offsets, None if ddl_ts is None else int(ddl_ts))
    elif marker.get("appliedTs") is not None:
        point = AppliedPoint(ts=int(marker["appliedTs"]))
    else:
        point = None
    pending = marker.get("pendingBackfill")
    return TableProgress(
        exists=True,
        point=point,
        pending=None if pending is None else PendingBackfill(str(pending["ddl"]), tuple(pending["columns"])),
    )


def read_progress(sql: SqlSession, sql_name: str) -> TableProgress:
    """Whether the table exists, and the progress its newest marked commit records."""
    try:
        rows = sql.sql(f"DESCRIBE HISTORY {sql_name} LIMIT {_HISTORY_DEPTH}").select("userMetadata").collect()
    except AnalysisException as err:
        if is_missing_table(err):
            return TableProgress(exists=False)
        raise
    for row in rows:
        marker = _marker_of(row["userMetadata"])
        if marker is not None:
            return _progress_of(marker)
    if len(rows) == _HISTORY_DEPTH:
        log.warning("%s: no applied marker in its last %d commits; replaying from scratch", sql_name, _HISTORY_DEPTH)
    return TableProgress(exists=True)
