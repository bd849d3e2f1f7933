"""Replaying dead letters: which can be applied now without harm, and applying those.

A dead letter is a message the job could not decode and went past. Its row
changes were never applied, while later changes were: the same key may have
changed again since, the table's structure may have changed, or the table
may not yet have reached the dead letter's commitTs. Applying it blindly can
put an old row image over a newer one. So a replay re-reads everything the
job read from just before the dead letters on (`jobs.replay`), decodes it all
under the fixed configuration, and decides each dead letter's row changes
one key at a time:

- The key's latest change (by commitTs; at one commitTs an upsert beats a
  delete, as the job's collapse does; then offset within a partition) is the
  dead letter's: its row image is what the table must hold, and it is applied.
- A later change of the key exists: that one decides the row (applied by the
  job, or the job will apply it). Nothing to do: *superseded*.
- The table was truncated, dropped or re-created after it: *superseded*.
- Refused, with the reason, when it cannot be decided safely: the table's
  structure changed after it (an older row image cannot be fitted in
  without guessing); the table has not been applied through its commitTs yet
  (run the job first: older changes still to come would overwrite it);
  the job still holds the table back for rows that waited for their structure
  (moving its applied point would make the job skip them);
  it arrived after its partition's watermark had passed it (a resend: which
  copy counts cannot be told); it is a schema change; it still does not
  decode; or a message read with it does not decode under the new
  configuration (what that one changed cannot be seen).

A replay commit keeps the table's applied point (or moves it to the replayed
commitTs when every partition's watermark has passed it) and carries no
idempotent-write pair; replaying twice writes the same images again.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from ticdc_delta.apply.changes.collapse import NetChange
from ticdc_delta.apply.changes.merge_source import SourceRows
from ticdc_delta.apply.tables.points import AppliedPoint, TableProgress
from ticdc_delta.schema_cache.events import (
    Event,
    Op,
    Ordering,
    Position,
    RowChange,
    SchemaChange,
    SchemaChangeKind,
    TableName,
    TableSchema,
    TopicPartition,
    Watermark,
)

log = logging.getLogger(__name__)

APPLIED = "applied"
SUPERSEDED = "superseded"
NO_CHANGE = "no-change"
REFUSED = "refused"

_REMOVING = {SchemaChangeKind.TRUNCATE: "truncated", SchemaChangeKind.DROP: "dropped", SchemaChangeKind.CREATE: "re-created"}


class TableState(Protocol):
    """What deciding needs to know of a Delta table (`apply.writers.delta_writer.DeltaWriter` provides it)."""

    def progress(self, table: TableName) -> TableProgress: ...

    def columns(self, table: TableName) -> list[tuple[str, str]]: ...


@dataclass(frozen=True, slots=True)
class Decision:
    """What replaying one dead letter does (`outcome`) and why (`detail`)."""

    position: Position
    outcome: str
    detail: str


@dataclass
class TableReplay:
    """The row images to write into one table: one MERGE (one row structure)."""

    table: TableName
    schema: TableSchema
    point: AppliedPoint | None  # the table's applied point the decision was made against
    changes: dict[tuple, NetChange] = field(default_factory=dict)  # key -> final image
    through_ts: int = 0
    positions: set[Position] = field(default_factory=set)


@dataclass
class ReplayPlan:
    decisions: list[Decision]
    tables: list[TableReplay]


@dataclass(frozen=True, slots=True)
class Scan:
    """What re-reading the dead letters' topics found, decoded under the fixed configuration.

    `events`: in decoding order, from the checkpoint before the first dead letter to
    the end. `read`: positions of every message read. `failures`: dead letters that
    still do not decode (reason). `blockers`: messages that are no dead letter yet do
    not decode now (so what they changed cannot be seen). `waiting`: tables with
    messages still waiting for their schema at the end. `start_watermarks`: the
    checkpoint's watermarks where reading began.
    """

    events: Sequence[Event]
    read: frozenset[Position]
    failures: Mapping[Position, str] = field(default_factory=dict)
    blockers: Sequence[str] = ()
    waiting: Mapping[TableName, str] = field(default_factory=dict)
    start_watermarks: Mapping[TopicPartition, int] = field(default_factory=dict)


class _Effect(NamedTuple):
    """What one row change does to one key."""

    seq: int  # decoding order
    table: TableName
    key: tuple
    commit_ts: int
    upsert: bool
    image: tuple
    schema: TableSchema
    position: Position
    dead: bool


class _Refused(Exception):
    pass


class _Superseded(Exception):
    pass


def _effects(row: RowChange, seq: int, dead: bool) -> list[_Effect]:
    indexes = row.schema.key_indexes()

    def key(image: tuple) -> tuple:
        return tuple(image[i] for i in indexes)

    def effect(image: tuple, upsert: bool) -> _Effect:
        return _Effect(seq, row.table, key(image), row.commit_ts, upsert, image, row.schema, row.position, dead)

    if row.op is Op.DELETE:
        return [effect(row.before, False)]
    if row.op is Op.UPDATE and row.before is not None and key(row.before) != key(row.after):
        return [effect(row.before, False), effect(row.after, True)]  # the row moved to another key
    return [effect(row.after, True)]


class _Decider:
    def __init__(
        self,
        dead: Iterable[Position],
        scan: Scan,
        ordering: Ordering,
        tables: TableState,
        complete_through: Mapping[str, int],
    ) -> None:
        self._dead = frozenset(dead)
        self._scan = scan
        self._ordering = ordering
        self._tables = tables
        self._complete_through = complete_through
        self._by_key: dict[tuple[TableName, tuple], list[_Effect]] = defaultdict(list)
        # The effects of each dead letter's row changes, by the change's identity: one message
        # (open protocol) may change one key several times, so position and key do not tell them apart.
        self._of_row: dict[int, list[_Effect]] = {}
        self._ddl: dict[TableName, list[SchemaChange]] = defaultdict(list)
        self._watermarks: dict[TopicPartition, list[tuple[int, int]]] = defaultdict(list)
        self._of_message: dict[Position, list[Event]] = defaultdict(list)
        self._progress: dict[TableName, TableProgress] = {}
        self._columns: dict[TableName, set[str]] = {}
        seq = 0
        for event in scan.events:
            if event.position in self._dead:
                self._of_message[event.position].append(event)
            if isinstance(event, Watermark):
                self._watermarks[event.position.topic_partition].append((event.position.offset, event.commit_ts))
            elif isinstance(event, SchemaChange):
                self._ddl[event.table].append(event)
                if event.previous_name is not None and event.previous_name != event.table:
                    self._ddl[event.previous_name].append(event)
            elif isinstance(event, RowChange):
                seq += 1
                effects = _effects(event, seq, event.position in self._dead)
                for effect in effects:
                    self._by_key[effect.table, effect.key].append(effect)
                if event.position in self._dead:
                    self._of_row[id(event)] = effects

    # --- one dead letter ----------------------------------------------------------

    def decide(self, position: Position) -> tuple[Decision, list[_Effect]]:
        scan = self._scan
        if position in scan.failures:
            return Decision(position, REFUSED, f"still cannot be decoded: {scan.failures[position]}"), []
        if scan.blockers:
            return Decision(position, REFUSED, "; ".join(scan.blockers)), []
        if position not in scan.read:
            return Decision(position, REFUSED, "not found when re-reading the topic"), []
        events = self._of_message.get(position, [])
        ddl = [e for e in events if isinstance(e, SchemaChange)]
        if ddl:
            change = ddl[0]
            return Decision(
                position,
                REFUSED,
                f"a schema change ({change.kind.value} of {change.table} at commitTs {change.commit_ts}): a DDL is "
                "not replayed on its own, since rows after it were applied to the structure before it; re-create "
                "the table (see Dead letters and replay in docs/operations.md)",
            ), []
        rows = [e for e in events if isinstance(e, RowChange)]
        if not rows:
            what = "a watermark; later ones took its place" if events else "it carried no row change"
            return Decision(position, NO_CHANGE, what), []
        applied, superseded, refused = [], [], []
        for row in rows:
            for effect in self._of_row[id(row)]:
                try:
                    self._check(effect)
                    applied.append(effect)
                except _Superseded as why:
                    superseded.append(f"key {_key_text(effect)}: {why}")
                except _Refused as why:
                    refused.append(f"key {_key_text(effect)}: {why}")
        if refused:
            return Decision(position, REFUSED, "; ".join(refused)), []
        if applied:
            keys = ", ".join(_key_text(e) for e in applied)
            extra = f" ({'; '.join(superseded)})" if superseded else ""
            return Decision(position, APPLIED, f"{rows[0].table}: wrote key {keys}{extra}"), applied
        return Decision(position, SUPERSEDED, "; ".join(superseded)), []

    # --- one key of a dead letter ---------------------------------------------------

    def _check(self, effect: _Effect) -> None:
        table = effect.table
        if table in self._scan.waiting:
            raise _Refused(self._scan.waiting[table])
        if self._ordering is Ordering.COMMIT_TS:
            passed = self._watermark_before(effect.position)
            if passed >= effect.commit_ts:
                raise _Refused(
                    f"a resend: its partition had passed watermark {passed} >= its commitTs {effect.commit_ts} before "
                    "it; which copy of the change counts cannot be told"
                )
        latest = self._latest(self._by_key[table, effect.key])
        if latest.seq != effect.seq:
            if latest.dead:
                raise _Superseded(f"a later dead letter at {latest.position} decides it")
            raise _Superseded(f"the later change at {latest.position} (commitTs {latest.commit_ts}) decides it")
        later = [d for d in self._ddl.get(table, []) if self._after(d, effect)]
        if later:
            ddl = later[0]
            if ddl.kind in _REMOVING and ddl.table == table:
                raise _Superseded(f"the table was {_REMOVING[ddl.kind]} at commitTs {ddl.commit_ts}, after it")
            raise _Refused(
                f"the table's structure changed after it ({ddl.kind.value} at commitTs {ddl.commit_ts}); an older "
                "row image cannot be fitted into it without guessing"
            )
        self._check_table(effect)

    def _watermark_before(self, position: Position) -> int:
        tp = position.topic_partition
        seen = [ts for offset, ts in self._watermarks.get(tp, []) if offset < position.offset]
        return max([self._scan.start_watermarks.get(tp, 0), *seen])

    def _after(self, ddl: SchemaChange, effect: _Effect) -> bool:
        if self._ordering is Ordering.COMMIT_TS:
            return ddl.commit_ts > effect.commit_ts
        return ddl.position.topic_partition == effect.position.topic_partition and ddl.position.offset > effect.position.offset

    def _latest(self, effects: list[_Effect]) -> _Effect:
        """The change that decides the key's row, in the job's order."""
        if self._ordering is Ordering.OFFSET:
            if len({e.position.topic_partition for e in effects}) > 1:
                raise _Refused("changes of this key arrived on more than one partition; their order cannot be told")
            return max(effects, key=lambda e: (e.position.offset, e.seq))
        top = max((e.commit_ts, e.upsert) for e in effects)
        tied = [e for e in effects if (e.commit_ts, e.upsert) == top]
        if len({e.position.topic_partition for e in tied}) == 1:
            return max(tied, key=lambda e: (e.position.offset, e.seq))
        # One commitTs, several partitions: TiDB makes one final change per key per
        # transaction, so these are copies of it; one the job applied stands.
        applied = [e for e in tied if not e.dead]
        if applied:
            return applied[-1]
        if len({(e.upsert, e.image) for e in tied}) == 1:
            return tied[-1]
        raise _Refused(f"different changes of this key at one commitTs {top[0]} on several partitions")

    def _check_table(self, effect: _Effect) -> None:
        table = effect.table
        progress = self._progress.get(table)
        if progress is None:
            progress = self._progress[table] = self._tables.progress(table)
        if not progress.exists:
            raise _Refused(f"the table {table} does not exist")
        if progress.pending is not None:
            raise _Refused("the table is half-way through a schema change; run the job first")
        point = progress.point
        if self._ordering is Ordering.COMMIT_TS:
            applied_ts = point.ts if point is not None and point.ts is not None else 0
            complete = self._complete_through.get(effect.position.topic, 0)
            if max(applied_ts, complete) < effect.commit_ts:
                raise _Refused(
                    f"the table is applied only through commitTs {applied_ts} and the job's watermark is {complete}, "
                    f"below its commitTs {effect.commit_ts}: older changes may still come; run the job first"
                )
        else:
            reached = point.offset_map().get(effect.position.topic_partition, 0) if point is not None else 0
            if reached <= effect.position.offset:
                raise _Refused(f"the table is applied only up to offset {reached} of its partition; run the job first")
        columns = self._columns.get(table)
        if columns is None:
            columns = self._columns[table] = {name.lower() for name, _ in self._tables.columns(table)}
        mine = {c.name.lower() for c in effect.schema.columns}
        if mine != columns:
            raise _Refused(
                f"its columns ({', '.join(sorted(mine))}) are not the table's ({', '.join(sorted(columns))})"
            )


def _key_text(effect: _Effect) -> str:
    return "(" + ", ".join(str(v) for v in effect.key) + ")" if len(effect.key) > 1 else str(effect.key[0])


def still_held(parked: Mapping[Position, TableName], committed: Mapping[TopicPartition, int] | None) -> dict[TableName, str]:
    """Tables the job was still holding back at its latest checkpoint, from the messages the re-read parked.

    A message that waited for its schema holds its table's applied point
    below its commitTs until the job applies it, and the checkpoint's offset
    of its partition stays at or before it (`committed`: the latest
    checkpoint's offsets, None when there is none). Replaying into such a
    table would move its applied point past rows the job has still to apply,
    which it would then skip as replays.
    """
    held: dict[TableName, str] = {}
    for position, table in sorted(parked.items(), key=lambda item: (item[0].topic, item[0].partition, item[0].offset)):
        if table in held:
            continue
        if committed is None or committed.get(position.topic_partition, 0) <= position.offset:
            held[table] = (
                f"message {position} of {table} waited for its structure and the job had not applied it at its "
                "latest checkpoint; run the job until it has, then replay"
            )
    return held


def plan_replay(
    dead: Sequence[Position],
    scan: Scan,
    *,
    ordering: Ordering,
    tables: TableState,
    complete_through: Mapping[str, int],
) -> ReplayPlan:
    """Decide every dead letter at `dead` from what `scan` found; the rows to write.

    `complete_through`: per topic, the watermark every partition had passed at
    the job's latest checkpoint (everything at or below it has been applied).
    """
    decider = _Decider(dead, scan, ordering, tables, complete_through)
    decisions: list[Decision] = []
    groups: dict[tuple[TableName, tuple], TableReplay] = {}
    for position in dead:
        decision, effects = decider.decide(position)
        decisions.append(decision)
        for effect in effects:
            structure = (effect.table, effect.schema.columns)
            group = groups.get(structure)
            if group is None:
                point = decider._progress[effect.table].point
                group = groups[structure] = TableReplay(effect.table, effect.schema, point)
            group.changes[effect.key] = NetChange(not effect.upsert, effect.image)
            group.through_ts = max(group.through_ts, effect.commit_ts)
            group.positions.add(effect.position)
    return ReplayPlan(decisions, list(groups.values()))


def apply_replay(writer, plan: ReplayPlan, ordering: Ordering) -> list[Decision]:
    """Write the plan's rows with `writer` (a DeltaWriter); the decisions, with refusals for tables that moved.

    A table whose applied point changed since the decision (the job ran in
    between) is not written: its dead letters are refused, to be replayed again.
    """
    moved: dict[Position, str] = {}
    expected = {group.table: group.point for group in plan.tables}
    for group in plan.tables:
        if writer.progress(group.table).point != expected[group.table]:
            for position in group.positions:
                moved[position] = (
                    f"{group.table} moved on while replaying (the job running?); stop the job and replay again"
                )
            continue
        point = expected[group.table]
        if ordering is Ordering.COMMIT_TS:
            point = AppliedPoint(ts=max(point.ts if point is not None and point.ts is not None else 0, group.through_ts))
        writer.merge(
            group.table,
            group.schema,
            SourceRows.of(group.changes.values()),
            point,
            idempotent=False,
            note={"replayedDeadLetters": sorted(str(p) for p in group.positions)},
        )
        expected[group.table] = point
        log.info("%s: replayed %d keys from %d dead letters", group.table, len(group.changes), len(group.positions))
    return [Decision(d.position, REFUSED, moved[d.position]) if d.position in moved else d for d in plan.decisions]
