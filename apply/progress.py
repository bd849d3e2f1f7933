"""A table's history and the table as of an upstream commitTs: the applied markers its commits carry
(`apply.tables.markers`), read back for readers (`ticdc-delta as-of`, `status`, the notebooks)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

from ticdc_delta.apply.tables.markers import MAINTENANCE, marker_of, progress_of
from ticdc_delta.apply.tables.points import AppliedPoint, PendingBackfill, TableProgress
from ticdc_delta.exceptions import ApplyError


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
        marker = marker_of(row["userMetadata"])
        progress = progress_of(marker) if marker is not None else TableProgress(exists=True)
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
