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

import dataclasses
import datetime as dt
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pyspark.errors import AnalysisException

from ticdc_delta.apply.points import AppliedPoint, PendingBackfill, TableProgress
from ticdc_delta.apply.spark_errors import error_condition
from ticdc_delta.apply.sql_session import CommitTags, SqlSession
from ticdc_delta.exceptions import ApplyError
from ticdc_delta.schema_cache.events import TopicPartition

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
# Commits that change neither rows nor structure: a version before them holds on across them (`version_as_of`,
# `apply.as_of.exact_spans`).
MAINTENANCE = frozenset({"OPTIMIZE", "VACUUM START", "VACUUM END", "SET TBLPROPERTIES"})


def is_missing_table(err: AnalysisException) -> bool:
    return error_condition(err) in _MISSING_TABLE_ERRORS


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
            marker = _marker_of(user_metadata)
            if marker is not None:
                return _progress_of(marker)
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


# --- a table's history, and the table as of an upstream commitTs -------------------------


@dataclass(frozen=True, slots=True)
class AppliedVersion:
    """One Delta version of a table, and the upstream progress its commit records.

    `point` is None for commits that apply nothing by themselves (a structure
    aligned to rows, the first steps of a DDL); `pending` is set on the step
    of a DDL that added columns whose defaults are not yet written.
    """

    version: int
    timestamp: dt.datetime
    operation: str
    point: AppliedPoint | None
    pending: PendingBackfill | None = None
    note: Mapping[str, object] | None = None

    @property
    def applied_ts(self) -> int | None:
        """The upstream commitTs through which this version holds everything (commitTs ordering)."""
        return None if self.point is None else self.point.through_ts

    @property
    def complete(self) -> bool:
        """Whether this version is a state upstream had: marked, and not half-way through a DDL."""
        return self.point is not None and self.pending is None


def upstream_time(commit_ts: int) -> dt.datetime:
    """The wall-clock time (UTC) of a TiDB commitTs: a TSO's upper bits are milliseconds since the epoch."""
    return dt.datetime.fromtimestamp((commit_ts >> 18) / 1000, tz=dt.timezone.utc)


def applied_history(sql, sql_name: str, limit: int | None = None) -> list[AppliedVersion]:
    """The table's Delta versions, newest first, each with the applied point its commit records.

    `sql` is a SparkSession or the job's SqlSession. Only versions Delta still
    keeps in its log are listed (`delta.logRetentionDuration`, 30 days by default).
    """
    statement = f"DESCRIBE HISTORY {sql_name}" + (f" LIMIT {int(limit)}" if limit is not None else "")
    rows = sql.sql(statement).select("version", "timestamp", "operation", "userMetadata").collect()
    history = []
    for row in rows:
        marker = _marker_of(row["userMetadata"])
        progress = _progress_of(marker) if marker is not None else TableProgress(exists=True)
        known = {"appliedTs", "appliedOffsets", "ddlTs", "pendingBackfill", "snapshotLoading", "historySeeding"}
        note = {k: v for k, v in (marker or {}).items() if k not in known} or None
        history.append(
            AppliedVersion(row["version"], row["timestamp"], row["operation"], progress.point, progress.pending, note)
        )
    return history


def version_as_of(sql, sql_name: str, commit_ts: int) -> AppliedVersion | None:
    """The newest complete version that applied nothing after upstream commitTs `commit_ts`.

    It holds the table exactly as upstream had it at its `applied_ts` (<=
    `commit_ts`): a later version applies a later batch, which may hold changes
    from before `commit_ts` together with newer ones. Where maintenance commits
    (OPTIMIZE, VACUUM) follow it, the last of them is given (`version`): the same
    rows, in the files the table still has, where the marked version's own may
    have been vacuumed away. None when every version Delta keeps is newer. Tables
    of offset-ordered protocols (TiCDC avro) record Kafka offsets, not commitTs,
    and are refused.
    """
    same_rows: int | None = None  # the newest version of the maintenance commits right after the entry
    for entry in applied_history(sql, sql_name):
        if entry.point is not None and entry.point.offsets:
            raise ApplyError(
                f"{sql_name} is applied in Kafka offset order (avro protocol): its versions record offsets, not commitTs"
            )
        maintenance = entry.operation in MAINTENANCE
        if entry.complete and entry.applied_ts is not None and entry.applied_ts <= commit_ts:
            return entry if same_rows is None or maintenance else dataclasses.replace(entry, version=same_rows)
        same_rows = (same_rows if same_rows is not None else entry.version) if maintenance else None
    return None


def read_as_of(spark, sql_name: str, commit_ts: int):
    """The table as upstream had it at commitTs `commit_ts` (see `version_as_of`), as a DataFrame."""
    entry = version_as_of(spark, sql_name, commit_ts)
    if entry is None:
        raise ApplyError(
            f"{sql_name}: no version Delta still keeps was applied only through commitTs {commit_ts} or earlier"
        )
    return spark.sql(f"SELECT * FROM {sql_name} VERSION AS OF {int(entry.version)}")
