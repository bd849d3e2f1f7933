"""Applies released events to Delta tables, in order, exactly once.

Input: events the gate released, in (commitTs, arrival) order. Row changes of
a table accumulate into a segment; a DDL of that table (or a change of its
row structure) closes the segment first, so a table's rows before a DDL are
merged before it and rows after it are merged after. At the end every open
segment is merged up to its topic's watermark: one MERGE per table per batch
unless DDL splits it.

Replays are harmless: a table's applied commitTs (recorded on its Delta
commits, see `apply.progress`) is read once, and events at or below it are
skipped.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from apply.collapse import collapse
from apply.delta_writer import DeltaWriter
from apply.locator import TableLocator
from apply.progress import PendingBackfill, read_progress
from apply.tombstones import Tombstones
from schema_cache.events import Event, RowChange, SchemaChange, SchemaChangeKind, TableName, TableSchema, Watermark

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _TableState:
    exists: bool
    applied_ts: int | None
    aligned_to: TableSchema | None = None
    pending: PendingBackfill | None = None

    def has_applied(self, commit_ts: int) -> bool:
        return self.applied_ts is not None and commit_ts <= self.applied_ts


@dataclass(slots=True)
class ApplySummary:
    merged_rows: dict[TableName, int] = field(default_factory=lambda: defaultdict(int))
    skipped_replays: int = 0
    schema_changes: int = 0
    merges: int = 0

    def __bool__(self) -> bool:
        return bool(self.merges or self.schema_changes or self.skipped_replays)


class Applier:
    def __init__(self, spark, locator: TableLocator) -> None:
        self._spark = spark
        self._locator = locator
        self._writer = DeltaWriter(spark, locator)
        self._tombstones = Tombstones(spark, locator)
        self._tables: dict[TableName, _TableState] = {}
        self._pending: dict[TableName, list[RowChange]] = {}
        self._summary = ApplySummary()

    def applied_ts(self) -> dict[TableName, int]:
        """Applied commitTs of every table touched so far."""
        return {t: s.applied_ts for t, s in self._tables.items() if s.applied_ts is not None}

    def apply(self, events: Sequence[Event], watermarks: Mapping[str, int]) -> ApplySummary:
        """Apply `events` (complete, ordered); `watermarks` are per topic."""
        self._summary = ApplySummary()
        topic_of: dict[TableName, str] = {}
        for event in events:
            if isinstance(event, RowChange):
                topic_of[event.table] = event.position.topic
                self._add_row(event)
            elif isinstance(event, SchemaChange):
                self._apply_schema_change(event)
            elif not isinstance(event, Watermark):
                raise TypeError(f"unexpected event {event!r}")
        for table in list(self._pending):
            self._flush(table, watermarks[topic_of[table]])
        return self._summary

    # --- table state ------------------------------------------------------------

    def _state(self, table: TableName) -> _TableState:
        state = self._tables.get(table)
        if state is None:
            progress = read_progress(self._spark, self._locator.sql_name(table))
            applied = progress.applied_ts if progress.exists else self._tombstones.removed_at(table)
            state = _TableState(progress.exists, applied, pending=progress.pending)
            self._tables[table] = state
            if progress.applied_ts is not None:
                log.info("%s: applied through commitTs %d", table, progress.applied_ts)
        return state

    # --- rows -------------------------------------------------------------------

    def _add_row(self, row: RowChange) -> None:
        if self._state(row.table).has_applied(row.commit_ts):
            self._summary.skipped_replays += 1
            return
        segment = self._pending.setdefault(row.table, [])
        if segment and not segment[-1].schema.same_structure(row.schema):
            # A new structure without a DDL in between (e.g. the consumer began
            # mid-stream): merge what came before under the old structure.
            self._flush(row.table, row.commit_ts - 1)
            segment = self._pending.setdefault(row.table, [])
        segment.append(row)

    def _flush(self, table: TableName, through_ts: int) -> None:
        """Merge the table's pending rows; afterwards it is applied through `through_ts`."""
        rows = self._pending.pop(table, None)
        if not rows:
            return
        schema = rows[-1].schema
        self._ensure_structure(table, schema)
        changes = collapse(rows)
        self._writer.merge(table, schema, changes, through_ts)
        state = self._state(table)
        state.applied_ts = through_ts
        self._summary.merges += 1
        self._summary.merged_rows[table] += len(rows)
        log.debug("%s: merged %d changes (%d keys) through %d", table, len(rows), len(changes), through_ts)

    def _ensure_structure(self, table: TableName, schema: TableSchema) -> None:
        state = self._state(table)
        if state.aligned_to is not None and state.aligned_to.same_structure(schema):
            return
        if not state.exists:
            self._writer.create(table, schema, None, replace=False)
            state.exists = True
        else:
            self._writer.evolve(table, schema, None)
        state.aligned_to = schema

    # --- DDL --------------------------------------------------------------------

    def _apply_schema_change(self, change: SchemaChange) -> None:
        table = change.table
        state = self._state(table)
        if state.has_applied(change.commit_ts):
            self._summary.skipped_replays += 1
            return
        self._flush(table, change.commit_ts - 1)
        if change.previous_name is not None:
            self._flush(change.previous_name, change.commit_ts - 1)
        log.info("%s: applying %s at commitTs %d (%s)", table, change.kind.value, change.commit_ts, change.statement)
        handler = _HANDLERS[change.kind]
        handler(self, change, state)
        state.applied_ts = change.commit_ts
        self._summary.schema_changes += 1

    def _create(self, change: SchemaChange, state: _TableState) -> None:
        # A CREATE newer than the table's applied point means upstream dropped
        # and re-created it: the old contents are stale.
        self._writer.create(change.table, change.schema, change.commit_ts, replace=state.exists)
        state.exists = True
        state.aligned_to = change.schema

    def _alter(self, change: SchemaChange, state: _TableState) -> None:
        if change.schema is None:
            return
        if not state.exists:
            self._create(change, state)
            return
        self._writer.evolve(
            change.table,
            change.schema,
            change.commit_ts,
            statement=change.statement,
            prior_ts=state.applied_ts,
            pending=state.pending,
        )
        state.aligned_to = change.schema
        state.pending = None

    def _truncate(self, change: SchemaChange, state: _TableState) -> None:
        if state.exists:
            self._writer.truncate(change.table, change.commit_ts)
        self._alter(change, state)

    def _drop(self, change: SchemaChange, state: _TableState) -> None:
        self._tombstones.record(change.table, change.commit_ts, "dropped")
        if state.exists:
            self._writer.drop(change.table)
        state.exists = False
        state.aligned_to = None

    def _rename(self, change: SchemaChange, state: _TableState) -> None:
        old = change.previous_name
        if old is not None and old != change.table and not state.exists and self._state(old).exists:
            self._tombstones.record(old, change.commit_ts, f"renamed to {change.table}")
            self._writer.rename(old, change.table)
            moved = self._tables.pop(old)
            state.exists, state.aligned_to = True, moved.aligned_to
        self._alter(change, state)


_HANDLERS = {
    SchemaChangeKind.CREATE: Applier._create,
    SchemaChangeKind.ALTER: Applier._alter,
    SchemaChangeKind.INDEX: Applier._alter,
    SchemaChangeKind.OTHER: Applier._alter,
    SchemaChangeKind.TRUNCATE: Applier._truncate,
    SchemaChangeKind.DROP: Applier._drop,
    SchemaChangeKind.RENAME: Applier._rename,
}
