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
from collections.abc import Callable, Mapping, Sequence

from pyspark.errors import AnalysisException

from ticdc_delta.apply.base.errors import is_missing_table
from ticdc_delta.apply.base.session import CommitTags, SqlSession
from ticdc_delta.apply.tables.points import AppliedPoint, PendingBackfill, TableProgress
from ticdc_delta.schema_cache.events import TopicPartition

log = logging.getLogger(__name__)

APP_ID = "ticdc-delta"
_MARKER = "ticdc_delta"

_HISTORY_DEPTH = 200
# Commits that change neither rows nor structure: a version before them holds on across them
# (`apply.progress.version_as_of`, `apply.as_of.exact_spans`).
MAINTENANCE = frozenset({"OPTIMIZE", "VACUUM START", "VACUUM END", "SET TBLPROPERTIES"})


def commit_tags(
    point: AppliedPoint | None,
    *,
    txn: tuple[str, int] | None = None,
    pending: PendingBackfill | None = None,
    note: Mapping[str, object] | None = None,
) -> CommitTags:
    """The tags of a commit that applies through `point`.

    `point` None (and no `pending` or `note`) leaves the commit unmarked:
    schema alignment that does not itself apply anything. `txn` (application id,
    version) makes the write idempotent: Delta skips it if that application
    already committed this or a higher version to the table. `note` adds
    keys to the marker that say what the commit was (readers ignore them).
    """
    metadata = None
    if point is not None or pending is not None or note:
        marker: dict = point.to_json() if point is not None else {"appliedTs": None}
        if pending is not None:
            marker["pendingBackfill"] = {"ddl": pending.ddl, "columns": list(pending.columns)}
        marker.update(note or {})
        metadata = {_MARKER: marker}
    return CommitTags(metadata, txn)


def marker_of(user_metadata: str | None) -> dict | None:
    if not user_metadata:
        return None
    try:
        marker = json.loads(user_metadata)[_MARKER]
    except (ValueError, KeyError, TypeError):
        return None  # someone else's metadata
    return marker if isinstance(marker, dict) else None


def progress_of(marker: dict) -> TableProgress:
    if "appliedOffsets" in marker:
        ddl_ts = marker.get("ddlTs")
        offsets = {TopicPartition.parse(k): int(v) for k, v in marker["appliedOffsets"].items()}
        point = AppliedPoint.at_offsets(offsets, None if ddl_ts is None else int(ddl_ts))
    elif marker.get("appliedTs") is not None:
        point = AppliedPoint(ts=int(marker["appliedTs"]))
    else:
        point = None
    pending = marker.get("pendingBackfill")
    loading = marker.get("snapshotLoading")
    return TableProgress(
        exists=True,
        point=point,
        pending=None if pending is None else PendingBackfill(str(pending["ddl"]), tuple(pending["columns"])),
        snapshot_loading=None if loading is None else int(loading),
        history_seeding=bool(marker.get("historySeeding")),
    )


def read_progress(sql: SqlSession, sql_name: str,
                  commits: Callable[[int | None], Sequence[str | None] | None] | None = None) -> TableProgress:
    """Whether the table exists, and the progress its newest marked commit records.

    `commits(depth)`: the `userMetadata` of the table's newest `depth` commits (None: all), newest first, or None
    where the table does not exist, when read another way than DESCRIBE HISTORY on `sql` (delta-rs: `DeltaWriter`).
    """
    commits = commits or (lambda depth: described_history(sql, sql_name, depth))
    # The newest commit alone first: nearly always the job's own, marked. Each commit Delta lists for the
    # history is a file it reads (a GET on an object store), so the deeper reads are left to tables another
    # writer committed to last (an OPTIMIZE, a user's statement), and the whole history to a table whose
    # newest commits are all such (an idle table under many maintenance passes).
    depth: int | None
    for depth in (1, _HISTORY_DEPTH, None):
        metadata = commits(depth)
        if metadata is None:
            return TableProgress(exists=False)
        for user_metadata in metadata:
            marker = marker_of(user_metadata)
            if marker is not None:
                return progress_of(marker)
        if depth is not None and len(metadata) < depth:
            break  # (that was the whole history)
    if metadata:
        log.warning("%s: no applied marker in the %d commits Delta keeps of it; replaying from scratch",
                    sql_name, len(metadata))
    return TableProgress(exists=True)


def described_history(sql: SqlSession, sql_name: str, depth: int | None) -> list[str | None] | None:
    """The `userMetadata` of the table's newest `depth` commits (None: all Delta keeps), newest first, by Spark;
    None: no such table."""
    try:
        limit = "" if depth is None else f" LIMIT {depth}"
        rows = sql.sql(f"DESCRIBE HISTORY {sql_name}{limit}").select("userMetadata").collect()
    except AnalysisException as err:
        if is_missing_table(err):
            return None
        raise
    return [row["userMetadata"] for row in rows]
