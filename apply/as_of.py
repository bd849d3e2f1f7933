"""Reading tables as upstream had them at one commitTs, one table or several consistently.

A table's version records the upstream point it is applied through (`appliedTs`: every change at
or below it is in, none above it), so it is upstream's table at that point exactly. The job's MERGE
commits also record the oldest change they hold (`firstTs`), so a version is also upstream's table
at every point up to the next version's oldest change: the table did not change in between.

A consistent read of several tables at T picks the newest point T* <= T (and no newer than any
table's newest applied point) at which every table has such a version, and reads each at it. Where
a commit does not say its oldest change (DDL, structure alignments, snapshot loads, commits of
earlier releases), its predecessor counts only at its own applied point: T* may then be older than
it could be. "Exactly" assumes the job applied every change: a dead-lettered one is missing from
the versions until it is replayed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ticdc_delta.apply.progress import AppliedVersion, applied_history
from ticdc_delta.apply.tables.markers import MAINTENANCE
from ticdc_delta.exceptions import ApplyError

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_MAINTENANCE = MAINTENANCE


def commit_ts_at(moment: dt.datetime) -> int:
    """The newest TSO of upstream wall-clock time `moment` (aware; naive means UTC): a read "as of"
    a time includes every commit made in its millisecond."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    milliseconds = (moment - _EPOCH) // dt.timedelta(milliseconds=1)  # exact: no float on the way
    return ((milliseconds + 1) << 18) - 1


@dataclass(frozen=True)
class ExactSpan:
    """Upstream points [low, high] at which Delta version `version` is the table exactly."""

    version: int
    low: int
    high: int


def exact_spans(history: Sequence[AppliedVersion]) -> list[ExactSpan]:
    """The spans of a table's history (newest first, as `applied_history` gives it), oldest first.

    Each span's version is the newest that shows its rows: a marked version followed by maintenance commits
    (OPTIMIZE, VACUUM: the same rows) is read at the last of them, whose files are the table's current ones, where
    the marked version's own may since have been vacuumed away."""
    spans: list[ExactSpan] = []
    following: AppliedVersion | None = None  # the next newer version that changed the data
    same_rows: int | None = None  # the newest version of the maintenance commits right after this one
    for entry in history:
        if entry.point is not None and entry.point.offsets:
            raise ApplyError("the table is applied in Kafka offset order (avro protocol): its versions record offsets")
        maintenance = entry.operation in _MAINTENANCE
        if entry.complete and entry.applied_ts is not None:
            high = entry.applied_ts
            first = following.note.get("firstTs") if following is not None and following.note else None
            if isinstance(first, int) and first > entry.applied_ts:
                high = first - 1
            spans.append(ExactSpan(same_rows if same_rows is not None and not maintenance else entry.version,
                                   entry.applied_ts, high))
        if maintenance:
            same_rows = entry.version if same_rows is None else same_rows
        else:
            # Any other commit may change what a read sees, marked or not (a structure aligned to rows
            # before a MERGE, a held DDL's evolution): without a firstTs, the version before it ends at its point.
            following = entry
            same_rows = None
    spans.reverse()
    return spans


@dataclass(frozen=True)
class ConsistentRead:
    """Where a consistent read of several tables lands: one upstream point and each table's version."""

    commit_ts: int
    versions: Mapping[str, int]

    def frames(self, spark) -> dict[str, object]:
        """Each table (by SQL name) at its version, as a DataFrame."""
        return {name: spark.sql(f"SELECT * FROM {name} VERSION AS OF {int(v)}") for name, v in self.versions.items()}


def consistent_read(sql, names: Sequence[str], commit_ts: int) -> ConsistentRead:
    """The newest point no newer than `commit_ts` and every table's applied point at which all of
    `names` (SQL names) are known exactly, and each one's version there. `sql` is a SparkSession (or
    the job's SqlSession)."""
    return consistent_point({name: exact_spans(applied_history(sql, name)) for name in names}, commit_ts)


def consistent_point(spans: Mapping[str, Sequence[ExactSpan]], commit_ts: int) -> ConsistentRead:
    """`consistent_read` on the tables' spans (oldest first)."""
    empty = [name for name, table_spans in spans.items() if not table_spans]
    if empty:
        raise ApplyError(f"{', '.join(empty)}: no version Delta still keeps records an applied commitTs")
    limit = min([commit_ts, *(table_spans[-1].high for table_spans in spans.values())])
    # The newest point in every table's spans is the lowest `high` of the spans holding it.
    candidates = sorted({limit, *(s.high for table_spans in spans.values() for s in table_spans if s.high <= limit)},
                        reverse=True)
    for point in candidates:
        versions = {}
        for name, table_spans in spans.items():
            # The newest version holding the point (a dead-letter replay adds one at the same applied point).
            found = next((s for s in reversed(table_spans) if s.low <= point <= s.high), None)
            if found is None:
                break
            versions[name] = found.version
        else:
            return ConsistentRead(point, versions)
    raise ApplyError(
        f"no commitTs at or before {commit_ts} at which every table's kept versions hold upstream exactly "
        "(their oldest kept versions are newer, or the tables were applied at points that never meet)"
    )
