"""The changes of one table between two applied points, of one structure: what the applier merges.

Two kinds, one interface (`TableChanges`), so the applier has one flush and the Delta writer one MERGE for
both engines, for a table and its history alike:

- `RowChanges`: row events held in memory (the driver engine); one MERGE, its source collapsed here.
- `jobs.spark_engine.runs.StagedChanges`: runs of rows staged in a Delta table (the Spark engine); one MERGE per
  run, its source a DataFrame built where the rows are, or, for a small release read into the driver,
  `RowChanges` of the run's rows.

Each says which of its changes a table at a given point lacks (replays are skipped), the point a MERGE of
them leaves, and its MERGE source (`apply.changes.merge_source`) restricted to the columns the table has.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ticdc_delta.apply.changes.collapse import collapse_run
from ticdc_delta.apply.changes.history import history_source
from ticdc_delta.apply.changes.merge_source import MergeSource, SourceRows
from ticdc_delta.apply.tables.points import AppliedPoint
from ticdc_delta.schema_cache.events import Ordering, RowChange, SchemaChange, TableName, TableSchema, TopicPartition

UPSERTS = ("INSERT", "UPDATE", "UPSERT")


@runtime_checkable
class TableChanges(Protocol):
    """Changes of one table in the protocol's order, all of one structure (`schema`, the table's columns)."""

    table: TableName

    @property
    def schema(self) -> TableSchema: ...

    @property
    def topic(self) -> str:
        """The topic they came from (its watermark bounds a commitTs-ordered MERGE)."""

    @property
    def count(self) -> int:
        """How many row events."""

    @property
    def ops(self) -> Mapping[str, int]:
        """Row events per op name (INSERT, UPDATE, DELETE, ...)."""

    @property
    def has_upserts(self) -> bool: ...

    @property
    def min_commit_ts(self) -> int: ...

    @property
    def max_commit_ts(self) -> int: ...

    def lacked_by(self, point: AppliedPoint | None) -> TableChanges | None:
        """Those a table applied through `point` does not hold (None: it holds all)."""

    def absorb(self, later: TableChanges) -> None:
        """Take `later` (of this kind, table and structure, after these in order) in with these."""

    def merges(self, through_ts: int | None) -> list[tuple[TableChanges, int | None]]:
        """The MERGEs they take, in order, each with the commitTs it applies through (commitTs ordering): the
        last through `through_ts`, any before it through its own newest commitTs."""

    def point_after(self, prior: AppliedPoint | None, through_ts: int | None) -> AppliedPoint:
        """The applied point of a table at `prior` once these are in (by commitTs: all through `through_ts`)."""

    def net_changes(self, keep: Sequence[int], prior: AppliedPoint | None) -> MergeSource:
        """The MERGE source: per key its net change since `prior`, values of `schema`'s columns at `keep`."""

    def history_rows(self, keep: Sequence[int], prior: AppliedPoint | None) -> MergeSource:
        """The history MERGE source (`apply.changes.history`) of those since `prior`, columns at `keep`."""


def key_signature(schema: TableSchema) -> tuple[tuple[str, str], ...]:
    """The key columns' names (case aside) and types: deletes of structures with one signature find their rows alike."""
    types = {c.name: c.spark_type for c in schema.columns}
    return tuple((k.lower(), types[k]) for k in schema.key)


def as_delete_of(row: RowChange, schema: TableSchema) -> RowChange:
    """A delete with its key values placed in `schema`'s columns (a delete of a structure carrying its key alone,
    merged with rows of `schema`: a delete needs only its key)."""
    if row.schema is schema:
        return row
    before = [None] * len(schema.columns)
    for position, value in zip(schema.key_indexes(), (row.before[i] for i in row.schema.key_indexes()), strict=True):
        before[position] = value
    return row._replace(before=tuple(before), schema=schema)


def covers(point: AppliedPoint | None, event: RowChange | SchemaChange, ordering: Ordering) -> bool:
    """Whether a table applied through `point` already holds `event` (a replay)."""
    if point is None:
        return False
    by_ts = point.ts is not None and event.commit_ts <= point.ts
    if ordering is Ordering.OFFSET:
        by_offset = event.position.offset < point.offset_map().get(event.position.topic_partition, 0)
        # DDL copies on other partitions are known by commitTs (0: unknown).
        return by_offset or (isinstance(event, SchemaChange) and event.commit_ts > 0 and by_ts)
    return by_ts


def point_after(prior: AppliedPoint | None, events: Sequence[RowChange | SchemaChange], through_ts: int | None,
                ordering: Ordering) -> AppliedPoint:
    """The applied point of a table at `prior` once `events` (and, by commitTs, all through `through_ts`) are in."""
    if ordering is not Ordering.OFFSET:
        return AppliedPoint(ts=through_ts)
    # A schema change comes before the row of the same message (a new
    # schema id): the point reaches that message, the row moves past it.
    ends = ((e.position.topic_partition, e.position.offset + (1 if isinstance(e, RowChange) else 0)) for e in events)
    ddl_ts = max((e.commit_ts for e in events if isinstance(e, SchemaChange) and e.commit_ts > 0), default=None)
    return offsets_advanced(prior, ends, ddl_ts)


def offsets_advanced(prior: AppliedPoint | None, ends: Iterable[tuple[TopicPartition, int]],
                     ddl_ts: int | None = None) -> AppliedPoint:
    """An offset-ordered point at `prior` moved to at least `ends` (next offset per partition); `ddl_ts`: the
    commitTs of a DDL applied with them (its copies on other partitions are known by it)."""
    offsets = prior.offset_map() if prior is not None else {}
    for tp, end in ends:
        offsets[tp] = max(offsets.get(tp, 0), end)
    held = prior.ts if prior is not None else None
    if ddl_ts is not None:
        held = max(held or 0, ddl_ts)
    return AppliedPoint.at_offsets(offsets, held)


@dataclass(slots=True)
class RowChanges:
    """Row events of one table held in memory (the driver engine): one MERGE of their net changes."""

    table: TableName
    ordering: Ordering
    events: list[RowChange] = field(default_factory=list)

    @property
    def schema(self) -> TableSchema:
        return self.events[-1].schema

    @property
    def topic(self) -> str:
        return self.events[-1].position.topic

    @property
    def count(self) -> int:
        return len(self.events)

    @property
    def ops(self) -> Mapping[str, int]:
        return Counter(row.op.value for row in self.events)

    @property
    def has_upserts(self) -> bool:
        return any(row.after is not None for row in self.events)

    @property
    def min_commit_ts(self) -> int:
        return min(row.commit_ts for row in self.events)

    @property
    def max_commit_ts(self) -> int:
        return max(row.commit_ts for row in self.events)

    def lacked_by(self, point: AppliedPoint | None) -> RowChanges | None:
        lacking = [row for row in self.events if not covers(point, row, self.ordering)]
        return RowChanges(self.table, self.ordering, lacking) if lacking else None

    def absorb(self, later: RowChanges) -> None:
        self.events.extend(later.events)

    def merges(self, through_ts: int | None) -> list[tuple[TableChanges, int | None]]:
        return [(self, through_ts)]

    def point_after(self, prior: AppliedPoint | None, through_ts: int | None) -> AppliedPoint:
        return point_after(prior, self.events, through_ts, self.ordering)

    def net_changes(self, keep: Sequence[int], prior: AppliedPoint | None) -> MergeSource:
        changes, keys_new = collapse_run(self.events, by_commit_ts=self.ordering is Ordering.COMMIT_TS)
        return SourceRows([(*_kept(change.values, keep), change.deleted) for change in changes], keys_new)

    def history_rows(self, keep: Sequence[int], prior: AppliedPoint | None) -> MergeSource:
        width = len(self.schema.columns)
        return SourceRows([(*_kept(row[:width], keep), *row[width:]) for row in history_source(self.events, self.schema)])


def _kept(values: tuple, keep: Sequence[int]) -> tuple:
    return values if len(keep) == len(values) else tuple(values[i] for i in keep)
