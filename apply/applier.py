"""Applies released events to Delta tables, in order, exactly once.

Input: events the gate released, in their protocol's order. Row changes of a
table accumulate into a segment; a schema change of that table closes the
segment first, so a table's rows before a DDL are merged before it and rows
after it are merged after. At the end every open segment is merged: one
MERGE per table per batch unless DDL splits it.

Structure: schema changes evolve a table fully (rename, drop, add, retype).
Rows only ever grow it (a newer row structure seen without a DDL, e.g. when
the consumer began mid-stream, adds or widens columns); rows of an older
structure are merged into the columns the table has.

Replays are harmless: a table's applied point (commitTs or per-partition
offsets, recorded on its own Delta commits, see `apply.progress`) is read
once, and events it covers are skipped.

With a table registry, the tables a batch may create are registered before
anything of the batch is written (`apply.places.registry`).

Tables chosen for history also feed their history table (`apply.changes.history`),
which records its own applied point: an event is skipped as a replay only
when both hold it, and each gets the events it lacks.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from ticdc_delta.apply.base.identifiers import quote
from ticdc_delta.apply.base.phases import PhaseTimes
from ticdc_delta.apply.changes.history import IS_CURRENT, HistoryChoice, history_schema
from ticdc_delta.apply.changes.merge_source import MergeSource, SourceRows
from ticdc_delta.apply.changes.table_changes import (
    RowChanges,
    TableChanges,
    as_delete_of,
    covers,
    key_signature,
    point_after,
)
from ticdc_delta.apply.own_tables.tombstones import Removal, Tombstones
from ticdc_delta.apply.places.registry import TableRegistry
from ticdc_delta.apply.places.routing import Routes
from ticdc_delta.apply.tables.points import AppliedPoint, PendingBackfill
from ticdc_delta.apply.writers.delta_writer import ADDITIVE_ONLY, DeltaWriter, Evolution
from ticdc_delta.apply.writers.table_pool import TablePool
from ticdc_delta.exceptions import ApplyError
from ticdc_delta.schema_cache.events import (
    Event,
    Ordering,
    RowChange,
    SchemaChange,
    SchemaChangeKind,
    TableName,
    TableSchema,
    Watermark,
)

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(slots=True)
class _TableState:
    exists: bool
    point: AppliedPoint | None
    aligned_to: TableSchema | None = None
    columns: set[str] | None = None  # lower-case names of the Delta table's columns, when known
    pending: PendingBackfill | None = None
    # A DDL without structure was applied (canal-json, open protocol): the next
    # rows show the new structure in full. Holds the DDL text (rename hints).
    structure_open: str | None = None
    # Known to hold no rows: this job created, replaced or truncated it and has
    # written nothing since. Its next batch is appended instead of merged.
    empty: bool = False
    # A history table created to begin from its table's rows, which it has not got yet.
    seeding: bool = False
    # Missing: the DROP or RENAME that removed it (its tombstone), when known.
    removal: Removal | None = None


@dataclass(slots=True)
class ApplySummary:
    merged_rows: dict[TableName, int] = field(default_factory=lambda: defaultdict(int))
    # Row events merged, per (table, op name), before collapsing to net changes.
    row_events: dict[tuple[TableName, str], int] = field(default_factory=lambda: defaultdict(int))
    # Tables a row or a DDL was applied to.
    tables: set[TableName] = field(default_factory=set)
    skipped_replays: int = 0
    schema_changes: int = 0
    merges: int = 0
    # Of those, the ones appended: every key new to the table (`_appendable`).
    appends: int = 0
    # Wall seconds of each table's work (its first reads, DDL, MERGEs; its history's MERGEs with it), on
    # whichever thread of the table pool did it: where a batch's time went, table by table.
    table_seconds: dict[TableName, float] = field(default_factory=lambda: defaultdict(float))

    def __bool__(self) -> bool:
        return bool(self.merges or self.schema_changes or self.skipped_replays)

    def add(self, other: ApplySummary) -> None:
        for table, rows in other.merged_rows.items():
            self.merged_rows[table] += rows
        for key, count in other.row_events.items():
            self.row_events[key] += count
        self.tables |= other.tables
        self.skipped_replays += other.skipped_replays
        self.schema_changes += other.schema_changes
        self.merges += other.merges
        self.appends += other.appends
        for table, seconds in other.table_seconds.items():
            self.table_seconds[table] = self.table_seconds.get(table, 0.0) + seconds


class Applier:
    def __init__(
        self,
        writer: DeltaWriter,
        tombstones: Tombstones,
        ordering: Ordering = Ordering.COMMIT_TS,
        times: PhaseTimes | None = None,
        registry: TableRegistry | None = None,
        history: HistoryChoice | None = None,
        concurrency: int = 1,
        inserts_are_new: bool = False,
        routes: Routes | None = None,
    ) -> None:
        """`concurrency`: how many tables' changes are merged at once (`apply.writers.table_pool`). `inserts_are_new`:
        the protocol's INSERT is always of a key upstream lacked (`Decoder.inserts_are_new`). `routes`: which
        tables are materialized and under which names (`apply.places.routing`; none: all, under their own)."""
        self.routes = routes or Routes()
        self._ordering = ordering
        self._inserts_are_new = inserts_are_new and ordering is Ordering.COMMIT_TS
        self._history = history or HistoryChoice()
        self._history_names: dict[TableName, TableName | None] = {}  # per table, its history's (None: none)
        if self._history and ordering is not Ordering.COMMIT_TS:
            raise ApplyError("history tables need a commitTs-ordered protocol (not avro, which is applied in offset order)")
        self._times = times or PhaseTimes()
        self._pool = TablePool(writer, concurrency)
        self._tombstones = tombstones
        self._registry = registry
        self._registry_checked: set[TableName] = set()  # existing tables known to be registered
        self._tables: dict[TableName, _TableState] = {}
        self._pending: dict[TableName, TableChanges] = {}
        self._summary = ApplySummary()
        self._summary_lock = threading.Lock()

    @property
    def _writer(self) -> DeltaWriter:
        return self._pool.writer()

    def materialized(self) -> list[TableName]:
        """The tables this consumer's registry holds, history tables left out (`Routes.restore`)."""
        names = set(self._registry.tables()) if self._registry is not None else set()
        suffix = self._history.database_suffix
        return [t for t in names
                if not (t.database.endswith(suffix) and TableName(t.database[:-len(suffix)], t.table) in names)]

    def close(self) -> None:
        """Stop the threads of the table pool (the applier takes no more batches)."""
        self._pool.close()

    def clean_up(self) -> None:
        """Delete the folders of tables dropped (or not taken back) in applied batches: call once a
        checkpoint covers them, so no replay reads them."""
        self._writer.clean_up()

    def apply(
        self, events: Sequence[Event | TableChanges], watermarks: Mapping[str, int],
        holds: Mapping[TableName, int] | None = None,
    ) -> ApplySummary:
        """Apply `events` (complete, in order): row and schema changes, and changes grouped where they are
        (`apply.changes.table_changes`, the Spark engine's staged runs); `watermarks` are per topic (commitTs ordering).

        `holds`: per table, the commitTs of its oldest event still waiting
        elsewhere (parked for its schema): the table is applied only up to just
        before it, whatever the watermark, or that event would later look like
        a replay and be skipped.
        """
        self._summary = ApplySummary()
        if self.routes:
            # From here on every name is the target's.
            events = self.routes.routed(events)
            holds = self.routes.held(holds or {})
        self._read_states(events)
        if self._registry is not None:
            self._register_new_tables(events)
        topic_of: dict[TableName, str] = {}
        for event in events:
            if isinstance(event, RowChange):
                topic_of[event.table] = event.position.topic
                self._add_row(event)
            elif isinstance(event, SchemaChange):
                self._timed(event.table, self._apply_schema_change, event)
            elif isinstance(event, Watermark):
                continue
            elif isinstance(event, TableChanges):  # (a protocol's check: after the plain types)
                topic_of[event.table] = event.topic
                self._add_changes(event)
            else:
                raise TypeError(f"unexpected event {event!r}")
        flushes = []
        for table in self._pending:
            through = watermarks.get(topic_of[table])
            hold = (holds or {}).get(table)
            if through is not None and hold is not None:
                through = min(through, hold - 1)
            flushes.append((table, through))
        self._times.working_on(f"{len(flushes)} tables" if len(flushes) > 1 else "")
        self._pool.run_each(flushes, lambda flush: self._timed(flush[0], self._flush, *flush))
        self._times.working_on("")
        return self._summary

    def _timed(self, table: TableName, work: Callable[..., T], *args) -> T:
        """`work(*args)`, its wall time added to `table`'s in the batch's summary. (A rename's merge of the
        old name's rows before it is part of the rename: the new name's time.)"""
        started = time.monotonic()
        try:
            return work(*args)
        finally:
            with self._summary_lock:
                self._summary.table_seconds[table] += time.monotonic() - started

    def _read_states(self, events: Sequence[Event | TableChanges]) -> None:
        """The applied points of the tables `events` touch that are not known yet (and of their histories), read
        all at once: each is a read of its table's Delta log, mostly waiting."""
        names: set[TableName] = set()
        for event in events:
            if type(event) is not Watermark:
                names.add(event.table)
                if type(event) is SchemaChange and event.previous_name is not None:
                    names.add(event.previous_name)
        for table in list(names):
            history = self._history_of(table)
            if history is not None:
                names.add(history)
        self._pool.run_each(sorted(names - self._tables.keys(), key=str),
                            lambda table: self._timed(table, self._state, table))

    def _register_new_tables(self, events: Sequence[Event | TableChanges]) -> None:
        """Register the tables of `events` that do not exist yet (this batch may create them) before it is
        applied; those that exist, if the registry lacks them (made by a release before it)."""
        names = {event.table for event in events if type(event) is not Watermark}
        unseen = names - self._registry_checked
        if unseen:
            new = [table for table in unseen if not self._state(table).exists]
            with self._times.phase("registry"):
                self._registry.register(new, existing=unseen.difference(new))
            self._registry_checked.update(unseen.difference(new))

    # --- table state and applied points ----------------------------------------------

    def _state(self, table: TableName) -> _TableState:
        state = self._tables.get(table)
        if state is None:
            progress = self._writer.progress(table)
            if progress.snapshot_loading is not None:
                # Replaced by a snapshot load that did not write its rows: empty, not applied through anything.
                raise ApplyError(
                    f"{table}: the snapshot load at TSO {progress.snapshot_loading} replaced it and did not finish; "
                    "run `ticdc-delta snapshot` again before the job"
                )
            point, removal = progress.point, None
            if not progress.exists:
                removal = self._tombstones.removal(table)
                point = AppliedPoint(ts=removal.ts) if removal is not None else None
            state = _TableState(
                progress.exists, point, pending=progress.pending, seeding=progress.history_seeding, removal=removal
            )
            self._tables[table] = state
            if point is not None:
                log.info("%s: applied through %s", table, point.to_json())
        return state

    def _history_of(self, table: TableName) -> TableName | None:
        try:
            return self._history_names[table]
        except KeyError:
            name = self._history.history_of(table) if self._history.wants(table) else None
            return self._history_names.setdefault(table, name)

    def _begins_from_table(self, table: TableName, history: TableName) -> bool:
        """Whether the history is still to begin from the table: the table holds applied rows and has
        no history yet (history just chosen for it, or a snapshot load). Not done on first touch: a
        renamed table's history is renamed with it, not begun again."""
        state, kept = self._state(table), self._state(history)
        return (not kept.exists or kept.seeding) and state.exists and state.point is not None

    def _begin_history(self, table: TableName, history: TableName) -> None:
        """The history made of the table's rows, as current states from its applied point."""
        if self._begins_from_table(table, history):
            point, kept = self._state(table).point, self._state(history)
            self._writer.create_history_from(history, table, point, exists=kept.exists)
            kept.exists, kept.seeding, kept.point, kept.columns = True, False, point, None

    def _held_by_all(self, event: RowChange | SchemaChange) -> bool:
        """Whether the table, and its history if it keeps one, already hold this event (a replay)."""
        if not self._holds(event.table, event):
            return False
        history = self._history_of(event.table)
        if history is None:
            return True
        if self._renames_history(event, history):
            return False  # the table was renamed, its history not yet
        if self._begins_from_table(event.table, history):
            return True  # a history still to begin will be made of the table, which holds the event
        return self._holds(history, event)

    def _holds(self, name: TableName, event: RowChange | SchemaChange) -> bool:
        """Whether the table (or history) `name` already holds this event."""
        state = self._state(name)
        if not self._covered(state, event):
            return False
        # A missing name's point is its tombstone's commitTs; a rename into it at that commitTs (the
        # second half of a swap) may still be due.
        return not (_renamed_from(event) is not None and not state.exists and state.removal is not None
                    and state.removal.freed_for_later_rename(event.commit_ts))

    def _renames_history(self, event: RowChange | SchemaChange, history: TableName) -> bool:
        """Whether `event` renames a table whose history is still under the old name."""
        old = _renamed_from(event)
        old_history = self._history_of(old) if old is not None else None
        return old_history is not None and not self._state(history).exists and self._state(old_history).exists

    def _covered(self, state: _TableState, event: RowChange | SchemaChange) -> bool:
        """Whether the table already holds this event (a replay)."""
        return covers(state.point, event, self._ordering)

    # --- rows -------------------------------------------------------------------

    def _add_row(self, row: RowChange) -> None:
        if self._held_by_all(row):
            self._summary.skipped_replays += 1
            return
        pending = self._pending.get(row.table)
        if pending is not None and pending.schema is not row.schema and not pending.schema.same_structure(row.schema):
            fitted = _fit_deletes(pending.events, row)
            if fitted is None:
                # One MERGE has one row structure: merge what came before first.
                self._timed(row.table, self._flush, row.table, row.commit_ts - 1)
            else:
                pending.events[:], row = fitted
        self._pending.setdefault(row.table, RowChanges(row.table, self._ordering)).events.append(row)

    def _add_changes(self, changes: TableChanges) -> None:
        """Changes grouped where they are (the Spark engine's staged runs): skipped if the table, and its history
        if it keeps one, hold all of them; else pending, after the table's pending changes of another structure
        are merged."""
        table = changes.table
        lacking = changes.lacked_by(self._state(table).point)
        history = self._history_of(table)
        if history is not None and lacking is None and not self._begins_from_table(table, history):
            lacking = changes.lacked_by(self._state(history).point)
        if lacking is None:
            self._summary.skipped_replays += changes.count
            return
        pending = self._pending.get(table)
        if pending is None:
            self._pending[table] = changes
        elif pending.schema.same_structure(changes.schema):
            pending.absorb(changes)
        else:
            self._timed(table, self._flush, table, changes.min_commit_ts - 1)
            self._pending[table] = changes

    def _flush(self, table: TableName, through_ts: int | None) -> None:
        """Merge the table's pending changes (and its history's); commitTs ordering: applied through `through_ts`."""
        changes = self._pending.pop(table, None)
        if changes is None:
            return
        state = self._state(table)
        history = self._history_of(table)
        if history is not None:
            self._begin_history(table, history)
            self._flush_history(history, changes.lacked_by(self._state(history).point), through_ts,
                                state.structure_open if state.exists else None)
            changes = changes.lacked_by(state.point)
            if changes is None:
                return
        if not state.exists and not changes.has_upserts:
            # Deletes of a table this job never created: nothing to delete.
            log.info("%s: %d deletes for a table that does not exist; nothing to do", table, changes.count)
            return
        merges = changes.merges(through_ts)
        self._require_advance(table, state, merges)  # before anything of them is written
        if changes.has_upserts:
            # Deletes never add columns; their schema may be a key-only one.
            if state.structure_open is not None and state.exists:
                self._take_structure(table, state, changes.schema)
            else:
                self._grow_structure(table, state, changes.schema)
                state.structure_open = None  # a table the rows just created has their structure
        appends = 0
        for part, through in merges:
            keep = self._kept_columns(state, table, part.schema)
            point = part.point_after(state.point, through)
            with self._times.phase("collapse"):
                source = part.net_changes(keep, state.point)
            # Not past `through` (a flush before a structure change): a point short of the rows would let a
            # replay append them again.
            appended = self._appendable(state, source) and (through is None or part.max_commit_ts <= through)
            self._writer.merge(table, _projected(part.schema, keep), source, point, into_empty=state.empty or appended,
                               note=self._first_ts(part.min_commit_ts))
            appends += int(appended)
            state.empty = state.empty and not part.has_upserts
            state.point = point
        with self._summary_lock:  # (tables are merged at once: `apply.writers.table_pool`)
            self._summary.merges += len(merges)
            self._summary.appends += appends
            self._summary.merged_rows[table] += changes.count
            self._summary.tables.add(table)
            for op, count in changes.ops.items():
                if count:
                    self._summary.row_events[table, op] += count
        log.debug("%s: merged %d changes in %d MERGEs, applied through %s", table, changes.count, len(merges), state.point)

    def _flush_history(self, history: TableName, changes: TableChanges | None, through_ts: int | None,
                       structure_open: str | None) -> None:
        """Into the table's history, per MERGE every state the changes give their keys."""
        state = self._state(history)
        if changes is None or (not state.exists and not changes.has_upserts):
            return
        merges = changes.merges(through_ts)
        self._require_advance(history, state, merges)
        if changes.has_upserts:
            self._grow_history(history, state, changes.schema, structure_open)
        for part, through in merges:
            keep = self._kept_columns(state, history, part.schema)
            point = part.point_after(state.point, through)
            with self._times.phase("collapse"):
                source = part.history_rows(keep, state.point)
            self._writer.merge_history(history, _projected(part.schema, keep), source, point,
                                       note=self._first_ts(part.min_commit_ts))
            state.point = point
        with self._summary_lock:
            self._summary.merges += len(merges)
        log.debug("%s: merged %d changes as history, applied through %s", history, changes.count, state.point)

    def _grow_history(self, history: TableName, state: _TableState, schema: TableSchema,
                      structure_open: str | None = None) -> None:
        """Rows newer than the history's structure add or widen its columns, as they do the table's; the first
        rows after a DDL without structure (`structure_open`: its text) give it theirs, dropped columns kept."""
        if _holds_structure(state, schema):
            return
        if not state.exists:
            self._writer.create(history, history_schema(schema), None, replace=False)
            state.exists = True
        elif structure_open is not None:
            self._writer.evolve(history, history_schema(schema), None,
                                Evolution(statement=structure_open, keep_dropped=True, defaults_where=_CURRENT_STATES))
        else:
            self._writer.evolve(history, history_schema(schema), None, ADDITIVE_ONLY)
        state.aligned_to = schema
        state.columns = None

    def _require_advance(self, table: TableName, state: _TableState, merges: list[tuple[TableChanges, int | None]]) -> None:
        """Refuse MERGEs of changes the table lacks that would not move its applied point forward, before any is
        written: Delta skips a commit whose transaction version (the point's commitTs) is not above its last
        one's, so those changes would be dropped without a word; and no MERGE after the first may begin at or
        before the point the one before it leaves: its rows there would be taken for applied. Only rows of one
        commitTs and table in two structures lead here (each part is merged on its own); the decoders give a
        commitTs one."""
        if self._ordering is not Ordering.COMMIT_TS:
            return
        held = state.point.ts if state.point is not None else None
        for i, (part, through) in enumerate(merges):
            if held is not None and ((i > 0 and part.min_commit_ts <= held) or (through is not None and through <= held)):
                raise _split_commit_ts(table, through, held)
            held = through if through is not None else held

    def _appendable(self, state: _TableState, source: MergeSource) -> bool:
        """Whether `source` can be appended to the table instead of merged (`run.append_new_keys`): an INSERT of
        this protocol means its key was not upstream, every key of `source` came by one (`SourceRows.keys_new`),
        and the table is upstream's as of a recorded commitTs (a table without one may hold rows of its own).
        Rows only, with no join: a fraction of a small MERGE's CPU (docs/performance.md), the rows a MERGE
        leaves, as long as the table holds no key upstream removed (docs/guarantees.md)."""
        return (self._inserts_are_new and state.point is not None and state.point.through_ts is not None
                and isinstance(source, SourceRows) and source.keys_new)

    def _first_ts(self, commit_ts: int) -> dict | None:
        """The note saying the commit holds no change before `commit_ts` (commitTs ordering): the version before
        it is then also the table as upstream had it up to there (`apply.as_of`)."""
        return {"firstTs": commit_ts} if self._ordering is Ordering.COMMIT_TS and commit_ts > 0 else None

    def _kept_columns(self, state: _TableState, table: TableName, schema: TableSchema) -> list[int]:
        """Positions of `schema`'s columns the Delta table has (rows older than its structure have fewer)."""
        if state.columns is None:
            state.columns = {name.lower() for name, _ in self._writer.columns(table)}
        return [i for i, c in enumerate(schema.columns) if c.name.lower() in state.columns]

    def _grow_structure(self, table: TableName, state: _TableState, schema: TableSchema) -> None:
        if _holds_structure(state, schema):
            return
        if not state.exists:
            self._writer.create(table, schema, None, replace=False)
            state.exists = state.empty = True
        else:
            self._writer.evolve(table, schema, None, ADDITIVE_ONLY)
        state.aligned_to = schema
        state.columns = None

    def _take_structure(self, table: TableName, state: _TableState, schema: TableSchema) -> None:
        """The first rows after a DDL that carried no structure: theirs is the table's now."""
        self._writer.evolve(table, schema, None, Evolution(statement=state.structure_open or ""))
        state.structure_open = None
        state.aligned_to = schema
        state.columns = None

    # --- DDL --------------------------------------------------------------------

    def _apply_schema_change(self, change: SchemaChange) -> None:
        table = change.table
        state = self._state(table)
        if self._held_by_all(change):
            self._summary.skipped_replays += 1
            return
        self._flush(table, change.commit_ts - 1)
        if change.previous_name is not None:
            self._flush(change.previous_name, change.commit_ts - 1)
        history = self._history_of(table)
        if history is not None and change.kind is not SchemaChangeKind.RENAME:
            # Before the table's DDL: a history chosen now begins with the rows the DDL may remove.
            self._begin_history(table, history)
        if not self._holds(table, change):
            log.info("%s: applying %s at commitTs %d (%s)", table, change.kind.value, change.commit_ts, change.statement)
            point = point_after(state.point, [change], change.commit_ts, self._ordering)
            _HANDLERS[change.kind](self, change, state, point)
            state.point = point
            state.columns = None
        if history is not None and not self._holds(history, change):
            self._history_schema_change(change, history)
        self._summary.schema_changes += 1
        self._summary.tables.add(table)

    def _history_schema_change(self, change: SchemaChange, history: TableName) -> None:
        """The DDL in the history: states end where the table loses its rows (TRUNCATE, DROP, a CREATE
        replacing it), the structure follows the table's but keeps dropped columns, a renamed table's
        history is renamed with it."""
        state = self._state(history)
        point = point_after(state.point, [change], change.commit_ts, self._ordering)
        old = _renamed_from(change)
        if old is not None and not state.exists:
            old_history = self._history_of(old)
            if old_history is not None and self._state(old_history).exists:
                # Replays of the old name's rows are then known to be in it (as the table's tombstone says).
                self._record_removal(old_history, change.commit_ts, f"renamed to {history}")
                self._writer.rename(old_history, history)
                moved = self._tables.pop(old_history)
                state.exists, state.aligned_to, state.point, state.pending = True, moved.aligned_to, moved.point, moved.pending
            else:
                self._begin_history(change.table, history)  # at the table's point, which holds this DDL
                if state.exists:
                    return
        evolves = change.schema is not None and change.kind is not SchemaChangeKind.DROP
        if state.exists and change.kind in (SchemaChangeKind.TRUNCATE, SchemaChangeKind.DROP, SchemaChangeKind.CREATE):
            self._writer.close_history(history, change.commit_ts, None if evolves else point)
        if evolves and not state.exists:
            self._writer.create(history, history_schema(change.schema), point, replace=False)
            state.exists = True
        elif evolves:
            how = Evolution(statement=change.statement, ddl=self._ddl_id(change), prior=state.point,
                            pending=state.pending, keep_dropped=True, defaults_where=_CURRENT_STATES)
            self._writer.evolve(history, history_schema(change.schema), point, how)
            state.pending = None
        if evolves:
            state.aligned_to = change.schema
        state.point = point
        state.columns = None

    def _ddl_id(self, change: SchemaChange) -> str:
        if self._ordering is Ordering.OFFSET:
            return f"{change.position.topic_partition}@{change.position.offset}"
        return f"ts:{change.commit_ts}"

    def _create(self, change: SchemaChange, state: _TableState, point: AppliedPoint) -> None:
        # A CREATE newer than the table's applied point means upstream dropped
        # and re-created it: the old contents are stale.
        if change.schema is None:
            # No structure in the message: the first rows create the table.
            if state.exists:
                self._writer.truncate(change.table, point)
                state.empty = True
            state.structure_open = ""
            return
        self._writer.create(change.table, change.schema, point, replace=state.exists)
        state.exists = state.empty = True
        state.aligned_to = change.schema

    def _alter(self, change: SchemaChange, state: _TableState, point: AppliedPoint) -> None:
        if change.schema is None:
            # The protocol carries no structure (canal-json, open protocol): the
            # table's next rows show it, and may drop columns. Statements of
            # several such DDLs in a row are all kept (rename hints).
            state.structure_open = "; ".join(filter(None, (state.structure_open, change.statement)))
            return
        if not state.exists:
            self._create(change, state, point)
            return
        how = Evolution(statement=change.statement, ddl=self._ddl_id(change), prior=state.point, pending=state.pending)
        self._writer.evolve(change.table, change.schema, point, how)
        state.aligned_to = change.schema
        state.pending = None

    def _truncate(self, change: SchemaChange, state: _TableState, point: AppliedPoint) -> None:
        if state.exists:
            self._writer.truncate(change.table, point)
            state.empty = True
        if change.schema is not None:
            self._alter(change, state, point)

    def _drop(self, change: SchemaChange, state: _TableState, point: AppliedPoint) -> None:
        self._record_removal(change.table, change.commit_ts, "dropped")
        if state.exists:
            self._writer.drop(change.table)
        state.exists = False
        state.aligned_to = None

    def _record_removal(self, table: TableName, commit_ts: int, reason: str) -> None:
        """The tombstone of `table`, with the commitTs it was applied through (a rename into its name
        later at the same commitTs is told from a replay by it)."""
        state = self._state(table)
        held_through = None if state.point is None else state.point.ts
        self._tombstones.record(table, commit_ts, reason, held_through=held_through)
        state.removal = Removal(commit_ts, held_through)

    def _rename(self, change: SchemaChange, state: _TableState, point: AppliedPoint) -> None:
        old = _renamed_from(change)
        if old is not None and not state.exists and self._state(old).exists:
            self._record_removal(old, change.commit_ts, f"renamed to {change.table}")
            self._writer.rename(old, change.table)
            moved = self._tables.pop(old)
            state.exists, state.aligned_to, state.empty = True, moved.aligned_to, moved.empty
        self._alter(change, state, point)


def _renamed_from(event: RowChange | SchemaChange) -> TableName | None:
    """The name a RENAME moves its table from (None: not a RENAME, or one that names no other table)."""
    if isinstance(event, SchemaChange) and event.kind is SchemaChangeKind.RENAME and event.previous_name != event.table:
        return event.previous_name
    return None


def _projected(schema: TableSchema, keep: Sequence[int]) -> TableSchema:
    """`schema` with only its columns at `keep`."""
    if len(keep) == len(schema.columns):
        return schema
    return TableSchema(schema.name, tuple(schema.columns[i] for i in keep), schema.key, schema.table_id, schema.version)


def _holds_structure(state: _TableState, schema: TableSchema) -> bool:
    """Whether rows of `schema` need nothing added: the structure the table was aligned to, or an older one."""
    aligned = state.aligned_to
    return aligned is not None and (
        aligned.same_structure(schema) or (schema.version or 0) < (aligned.version or 0)
    )


def _split_commit_ts(table: TableName, point: int | None, held: int) -> ApplyError:
    return ApplyError(
        f"{table}: changes would be merged at applied point {point}, with the table already at {held}, and Delta "
        "would skip them or take some for applied: rows of one commitTs came in two structures; those changes "
        "were not written"
    )


def _fit_deletes(segment: list[RowChange], row: RowChange) -> tuple[list[RowChange], RowChange] | None:
    """The segment and the row in one structure, where the structures differ only because deletes carry
    their key alone (open-protocol's delete-only-output-handle-key-columns): a delete needs only its key.

    Splitting the segment there instead would give two MERGEs of one commitTs the same applied point, and
    Delta skips the second (its transaction version is not above the first's)."""
    structure = segment[-1].schema
    if key_signature(structure) != key_signature(row.schema):
        return None
    if row.after is None:
        return segment, as_delete_of(row, structure)
    if all(r.after is None for r in segment):
        return [as_delete_of(r, row.schema) for r in segment], row
    return None


# The rows of a history table an added column's default is written into: closed states predate it.
_CURRENT_STATES = f"t.{quote(IS_CURRENT)}"

_HANDLERS = {
    SchemaChangeKind.CREATE: Applier._create,
    SchemaChangeKind.ALTER: Applier._alter,
    SchemaChangeKind.INDEX: Applier._alter,
    SchemaChangeKind.OTHER: Applier._alter,
    SchemaChangeKind.TRUNCATE: Applier._truncate,
    SchemaChangeKind.DROP: Applier._drop,
    SchemaChangeKind.RENAME: Applier._rename,
}
