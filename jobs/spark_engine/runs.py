"""The Spark engine's runs: stretches of one table's released rows, each one MERGE, and how they are formed.

`jobs.spark_engine.staging` groups released rows into runs of one structure reference. Two kinds of neighbours
would split a commitTs over several runs, whose MERGEs would then carry one applied point, and Delta
would skip all but the first (its transaction version is not above the first's), losing changes:
deletes whose structure differs only in carrying fewer columns (TiCDC's
`delete-only-output-handle-key-columns`, canal-json and open-protocol: a DELETE names its key columns
alone, and nothing says so), and rows whose structure is the same under another reference (another
schema version with the same columns). `fold_key_deletes` puts both in the run of their neighbours: a
delete needs its key alone. The driver engine does the same row by row (`apply.applier`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from ticdc_delta.apply.changes.merge_source import MergeSource, SourceFrame, SourceRows
from ticdc_delta.apply.changes.table_changes import UPSERTS, RowChanges, key_signature, offsets_advanced
from ticdc_delta.apply.tables.points import AppliedPoint
from ticdc_delta.schema_cache.events import Ordering, RowChange, SchemaChange, TableName, TableSchema, TopicPartition


class StagedRows(Protocol):
    """Where a run's rows are (`jobs.spark_engine.staging.StagingTable`): named by what a run asks of it, so that
    this module does not import the one that forms its runs."""

    def held_changes(self, run: StagedRun) -> list[RowChange] | None: ...

    def net_changes(self, run: StagedRun, schema: TableSchema, keep: Sequence[int], after: Mapping | None) -> Any: ...

    def history_source(self, run: StagedRun, keep: Sequence[int], after: Mapping | None) -> Any: ...


@dataclass(frozen=True)
class StagedRun:
    """A stretch of one table's released row changes with one structure: one MERGE.

    `first`/`last` bound it in the protocol's order (`jobs.spark_engine.staging` order columns); `offsets` is the next
    offset after its newest row per partition; `commit_ts` its newest commitTs. `other_refs`: rows of other
    structure references in the same stretch, merged with its rows (`fold_key_deletes`): of the same
    structure with all their values, or deletes carrying its key with their key alone.
    """

    table: TableName
    topic: str
    schema: TableSchema
    ref: str
    first: tuple
    last: tuple
    commit_ts: int
    min_commit_ts: int
    rows: int
    ops: Mapping[str, int]
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    staging: StagedRows | None = field(default=None, compare=False, repr=False)
    other_refs: tuple[tuple[str, TableSchema], ...] = ()

    @property
    def has_upserts(self) -> bool:
        return any(self.ops.get(op) for op in UPSERTS)

    def covered_by(self, point: AppliedPoint | None, ordering: Ordering) -> bool:
        """Whether a table applied through `point` holds all of this run."""
        if point is None:
            return False
        if ordering is Ordering.OFFSET:
            applied = point.offset_map()
            return all(end <= applied.get(tp, 0) for tp, end in self.offsets.items())
        return point.ts is not None and self.commit_ts <= point.ts


@dataclass(slots=True)
class StagedChanges:
    """Runs of one table's staged rows, of one structure (`apply.changes.table_changes.TableChanges`): one MERGE per run, its
    source built by Spark where the rows are, or from the rows of a small release read into the driver
    (`StagingTable.held_changes`); a run's rows a table already holds are left out by its point."""

    table: TableName
    ordering: Ordering
    runs: list[StagedRun] = field(default_factory=list)

    @property
    def schema(self) -> TableSchema:
        return self.runs[-1].schema

    @property
    def topic(self) -> str:
        return self.runs[-1].topic

    @property
    def count(self) -> int:
        return sum(run.rows for run in self.runs)

    @property
    def ops(self) -> Mapping[str, int]:
        total: Counter[str] = Counter()
        for run in self.runs:
            total.update(run.ops)
        return total

    @property
    def has_upserts(self) -> bool:
        return any(run.has_upserts for run in self.runs)

    @property
    def min_commit_ts(self) -> int:
        return min(run.min_commit_ts for run in self.runs)

    @property
    def max_commit_ts(self) -> int:
        return max(run.commit_ts for run in self.runs)

    def lacked_by(self, point: AppliedPoint | None) -> StagedChanges | None:
        # Runs are in the protocol's order: those a point holds are a prefix.
        lacking = [run for run in self.runs if not run.covered_by(point, self.ordering)]
        return StagedChanges(self.table, self.ordering, lacking) if lacking else None

    def absorb(self, later: StagedChanges) -> None:
        self.runs.extend(later.runs)

    def merges(self, through_ts: int | None) -> list[tuple[StagedChanges, int | None]]:
        last = len(self.runs) - 1
        return [(StagedChanges(self.table, self.ordering, [run]), through_ts if i == last else run.commit_ts)
                for i, run in enumerate(self.runs)]

    def point_after(self, prior: AppliedPoint | None, through_ts: int | None) -> AppliedPoint:
        if self.ordering is not Ordering.OFFSET:
            return AppliedPoint(ts=through_ts)
        return offsets_advanced(prior, (end for run in self.runs for end in run.offsets.items()))

    def net_changes(self, keep: Sequence[int], prior: AppliedPoint | None) -> MergeSource:
        (run,) = self.runs  # one MERGE per run (`merges`)
        held = self._held(run)
        if held is None:
            return SourceFrame(run.staging.net_changes(run, run.schema, keep, self._after(prior)))
        lacking = held.lacked_by(prior)
        return lacking.net_changes(keep, prior) if lacking is not None else SourceRows([])

    def history_rows(self, keep: Sequence[int], prior: AppliedPoint | None) -> MergeSource:
        (run,) = self.runs
        held = self._held(run)
        if held is None:
            return SourceFrame(run.staging.history_source(run, keep, self._after(prior)))
        lacking = held.lacked_by(prior)
        return lacking.history_rows(keep, prior) if lacking is not None else SourceRows([])

    def _held(self, run: StagedRun) -> RowChanges | None:
        """The run's rows as the driver engine holds them, where its release was read into the driver (a small
        one: `jobs.spark_engine.staging.StagingTable.held_changes`); None where it was not."""
        held = run.staging.held_changes(run)
        return None if held is None else RowChanges(self.table, self.ordering, held)

    def _after(self, prior: AppliedPoint | None) -> dict | None:
        """Which staged rows a table at `prior` lacks, as `jobs.spark_engine.staging` selects them."""
        if prior is None:
            return None
        if self.ordering is Ordering.OFFSET:
            return prior.offset_map() or None
        return {"ts": prior.ts} if prior.ts is not None else None


@dataclass(frozen=True)
class Release:
    """The events of a release in order: StagedRun and SchemaChange; and how many rows stay staged."""

    events: list
    waiting: int
    # Per partition, what the release left waiting (`apply.ordering.gate.Waiting`).
    waiting_by_partition: dict = field(default_factory=dict)

    def for_applier(self, ordering: Ordering) -> list[StagedChanges | SchemaChange]:
        """The events as the applier takes them: each run its own changes."""
        return [StagedChanges(e.table, ordering, [e]) if isinstance(e, StagedRun) else e for e in self.events]


def _joins(group: list[StagedRun], run: StagedRun) -> bool:
    """Whether `run` can share the MERGE of `group` (runs of its table next to each other)."""
    if not run.schema.key or key_signature(run.schema) != key_signature(group[0].schema):
        return False
    upserting = next((r for r in group if r.has_upserts), None)
    # Deletes need their key alone; rows with values need the one structure the group's upserts have.
    return not run.has_upserts or upserting is None or upserting.schema.same_structure(run.schema)


def _combined(group: list[StagedRun]) -> StagedRun:
    if len(group) == 1:
        return group[0]
    main = next((r for r in group if r.has_upserts), group[0])
    others: dict[str, TableSchema] = {}
    for run in group:
        for ref, schema in ((run.ref, run.schema), *run.other_refs):
            if ref != main.ref:
                others.setdefault(ref, schema)
    offsets: dict[TopicPartition, int] = {}
    ops: dict[str, int] = {}
    for run in group:
        for tp, end in run.offsets.items():
            offsets[tp] = max(offsets.get(tp, 0), end)
        for op, count in run.ops.items():
            ops[op] = ops.get(op, 0) + count
    return replace(
        main, first=group[0].first, last=group[-1].last, commit_ts=max(r.commit_ts for r in group),
        min_commit_ts=min(r.min_commit_ts for r in group), rows=sum(r.rows for r in group), ops=ops,
        offsets=offsets, other_refs=tuple(others.items()),
    )


def fold_key_deletes(events: Sequence[StagedRun | SchemaChange]) -> list[StagedRun | SchemaChange]:
    """`events` (in order) with each table's neighbouring runs of one structure, and deletes of another
    carrying the same key (names and types), made one run; a schema change of a table (or renaming it)
    ends its stretch. Runs of two structures with values stay apart."""
    out: list[StagedRun | SchemaChange | list[StagedRun]] = []
    open_groups: dict[TableName, list[StagedRun]] = {}
    for event in events:
        if isinstance(event, SchemaChange):
            open_groups.pop(event.table, None)
            if event.previous_name is not None:
                open_groups.pop(event.previous_name, None)
            out.append(event)
            continue
        group = open_groups.get(event.table)
        if group is not None and _joins(group, event):
            group.append(event)
            continue
        group = open_groups[event.table] = [event]
        out.append(group)
    return [_combined(item) if isinstance(item, list) else item for item in out]
