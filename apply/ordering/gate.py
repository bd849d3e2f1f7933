"""The ordering gate: events wait until nothing they must follow can still arrive.

TiCDC spreads a table's rows over the partitions of its topic and sends a
watermark to every partition: once a partition carries watermark W, every
event with commitTs <= W for that partition has been sent before it. With a
topic per table, a table's DDL goes to the topic of its old name and its later
rows to the new name's (a RENAME), so an event is complete only once *every*
partition read is complete through its commitTs (`apply.ordering.completeness`: by
watermarks, and looks at end offsets for topics that get no more watermarks). Complete events are released in
(commitTs, arrival) order across all topics: a DDL before every later change,
whichever topic carries it.

DDL is sent to every partition; the copies are collapsed into one event, which
is released like a row change: by then every earlier row of the table is in
the same release, ahead of it.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ticdc_delta.apply.ordering.completeness import Completeness
from ticdc_delta.apply.ordering.spill import SpillStore
from ticdc_delta.schema_cache.events import (
    Event,
    Ordering,
    RowChange,
    SchemaChange,
    TableName,
    TopicPartition,
    Watermark,
)

log = logging.getLogger(__name__)

_NEVER = 1 << 64
_LARGEST_STORED = (1 << 63) - 1  # the spill store's largest commitTs (SQLite's integers are 64-bit signed)


@dataclass(frozen=True, slots=True)
class Released:
    """Complete events, in order, and how far they reach.

    `through` maps a topic to the commitTs through which every event of it
    has now been released (what a table's applied point may say). `more`:
    complete events were held back to bound the batch; release again.
    """

    events: list[Event]
    through: dict[str, int]
    more: bool = False


@dataclass(frozen=True, slots=True)
class Waiting:
    """The events of one partition still waiting: how many, and the oldest (its commitTs, table and kind)."""

    events: int
    oldest_ts: int
    table: TableName
    kind: str  # "row", or the DDL's kind (`SchemaChangeKind.value`)

    @staticmethod
    def kind_of(event: Event) -> str:
        return event.kind.value if event.__class__ is SchemaChange else "row"


class DdlCopies:
    """DDL is sent to every partition: tells the first copy of each (by table, commitTs and kind) from the
    later ones. Without a commitTs (avro's new schema ids, offset ordering) each is its own."""

    def __init__(self) -> None:
        self._seen: set[tuple[TableName, int, str]] = set()

    def first(self, change: SchemaChange) -> bool:
        if change.commit_ts <= 0:
            return True
        identity = (change.table, change.commit_ts, change.kind.value)
        if identity in self._seen:
            return False
        self._seen.add(identity)
        return True

    def forget_through(self, commit_ts: int) -> None:
        """Every partition has sent everything through `commit_ts`: no copy at or below it is still to come."""
        self._seen = {seen for seen in self._seen if seen[1] > commit_ts}

    def clear(self) -> None:
        self._seen.clear()


class Gate(ABC):
    """Holds decoded events until they are complete; releases them in their protocol's order.

    `pending_offsets` and `safe_watermarks` tell the checkpoint how far each
    partition may be committed and what a restart from there may assume.
    """

    def __init__(self, completeness: Completeness) -> None:
        self._ddl = DdlCopies()
        self.completeness = completeness

    @abstractmethod
    def add(self, event: Event) -> None: ...

    def observe(self, event: Event) -> None:
        """An event that waits elsewhere (the Spark engine's staging table): only what it says of its
        partition's completeness and its topic's tables is taken (watermarks: `add`)."""
        if event.__class__ is SchemaChange:
            self.completeness.schema_change(event)
        elif event.__class__ is RowChange:
            self.completeness.table_seen(event.position.topic, event.table)

    def released(self, events: Iterable) -> None:
        """`events` were applied: a DDL that took its topic's table away lets that topic fall silent; runs of
        changes staged elsewhere (the Spark engine's) say which tables their topics carry."""
        for event in events:
            kind = event.__class__
            if kind is SchemaChange:
                self.completeness.removed(event)
            elif kind is not RowChange and kind is not Watermark:  # (`apply.changes.table_changes.TableChanges`)
                self.completeness.table_seen(event.topic, event.table)

    @abstractmethod
    def release(self, holds: Mapping[TableName, int] | None = None, max_events: int | None = None) -> Released:
        """Remove and return complete events, in order.

        `holds` maps a table to the commitTs of its oldest event still waiting
        elsewhere (a parked message): that table's events from there on stay.
        `max_events` bounds the release (it ends at a commitTs boundary, so a
        single commitTs may exceed it).
        """

    def limits(self) -> dict[str, int]:
        """Per topic, the commitTs through which its events may be released (commitTs ordering: one for all)."""
        limit = self.completeness.limit()
        return {topic: limit for topic in self.completeness.topic_limits()}

    def watermarks(self) -> dict[str, int]:
        """Per topic, the commitTs through which all its partitions are complete."""
        return self.completeness.topic_limits()

    @abstractmethod
    def pending_offsets(self) -> dict[TopicPartition, int]:
        """The lowest offset of a held event, per partition."""

    def safe_watermarks(self, committed: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Per partition, the watermark a restart from `committed` may begin with."""
        return self.completeness.safe(committed)

    def restore(self, watermarks: Mapping[TopicPartition, int]) -> None:
        """Start from watermarks saved by `safe_watermarks`."""
        self.completeness.restore(watermarks)

    @abstractmethod
    def take_waiting(self) -> list[Event]:
        """Every event still waiting, taken out in the order a release would give them (the Spark engine
        stages what a batch it kept in memory left waiting)."""

    def waiting_by_partition(self) -> dict[TopicPartition, Waiting]:
        """Per partition, the events waiting."""
        return {}

    @abstractmethod
    def __len__(self) -> int: ...

    def close(self) -> None:
        """Free what the gate holds (subclasses: also outside memory); it takes no more events."""
        self._ddl.clear()


def gate_for(
    ordering: Ordering,
    partitions: Mapping[str, Iterable[int]],
    *,
    max_in_memory: int = 50_000,
    spill_dir: str | None = None,
    silent_rounds: int = 0,
    topics_by_pattern: bool = False,
) -> Gate:
    """The gate of a protocol's ordering, over every partition of its topics (`topics_by_pattern`: more may
    appear, `Completeness.listed`)."""
    completeness = Completeness(partitions, silent_rounds=silent_rounds, capped=topics_by_pattern)
    if ordering is Ordering.COMMIT_TS:
        return WatermarkGate(partitions, max_in_memory=max_in_memory, spill_dir=spill_dir, completeness=completeness)
    return ArrivalGate(partitions, completeness=completeness)


class WatermarkGate(Gate):
    """Events wait until every partition read is complete through their commitTs (`apply.ordering.completeness`).

    At most `max_in_memory` wait in memory; the newest of the others wait on
    local disk (`apply.ordering.spill`), so a lagging partition costs disk, not memory.
    """

    def __init__(
        self,
        partitions: Mapping[str, Iterable[int]],
        *,
        max_in_memory: int = 50_000,
        spill_dir: str | None = None,
        completeness: Completeness | None = None,
    ) -> None:
        super().__init__(completeness or Completeness(partitions))
        self._buffer: list[tuple[int, int, Event]] = []
        self._arrival = itertools.count()
        self._max_in_memory = max_in_memory
        self._next_check = max_in_memory  # buffer length at which to look for events to spill
        self._spill_dir = spill_dir
        self._spill: SpillStore | None = None

    # --- input ----------------------------------------------------------------

    def add(self, event: Event) -> None:
        kind = event.__class__
        if kind is Watermark:
            self.completeness.watermark(event)
            return
        if kind is SchemaChange:
            self.completeness.schema_change(event)
            if not self._ddl.first(event):
                return
        else:
            self.completeness.table_seen(event.position.topic, event.table)
        self._buffer.append((event.commit_ts, next(self._arrival), event))
        if len(self._buffer) > self._next_check:
            self._spill_waiting()

    def _check_after(self) -> int:
        # The buffer length at which to look again: the budget, or half of it more than
        # what is there now (complete events of a large batch), so the look is rare.
        return max(self._max_in_memory, len(self._buffer) + self._max_in_memory // 2)

    def _spill_waiting(self) -> None:
        """Keep at most half the budget of waiting events in memory; the newest others go to disk.

        Complete events stay: they leave with this batch's release, and a
        batch is bounded by its own settings.
        """
        limit = self.completeness.limit()
        waiting = [item for item in self._buffer if item[0] > limit]
        keep = self._max_in_memory // 2
        if len(waiting) > keep:
            if self._spill is None:
                self._spill = SpillStore(self._spill_dir)
                log.warning(
                    "more than %d events wait for a watermark (a partition lags?); spilling the newest to %s",
                    self._max_in_memory,
                    self._spill_dir or "the temporary directory",
                )
            waiting.sort()  # the newest are released last: they go to disk
            spilled = waiting[keep:]
            self._spill.add(spilled)
            gone = {arrival for _, arrival, _ in spilled}
            self._buffer = [item for item in self._buffer if item[1] not in gone]
        self._next_check = self._check_after()

    # --- output ---------------------------------------------------------------

    def topic_watermark(self, topic: str) -> int:
        return self.completeness.topic_limits()[topic]

    def release(self, holds: Mapping[TableName, int] | None = None, max_events: int | None = None) -> Released:
        """Complete events, ordered by (commitTs, arrival), from memory and disk."""
        limit = self.completeness.limit()
        holds = holds or {}
        if not holds and self._buffer and max(i[0] for i in self._buffer) <= limit:
            ready, self._buffer = self._buffer, []  # everything in memory is complete (a drained backlog)
        else:
            ready, waiting = [], []
            for item in self._buffer:
                commit_ts, _, event = item
                complete = commit_ts <= limit and commit_ts < holds.get(event.table, _NEVER)
                (ready if complete else waiting).append(item)
            self._buffer = waiting
        # (commitTs, arrival) decide every comparison: arrival numbers are unique.
        ready.sort()
        if self._spill:
            ready, cut = self._with_spilled(ready, limit, holds, max_events)
        else:
            ready, cut = self._bounded(ready, max_events)
        self._next_check = self._check_after()
        through = min(limit, ready[-1][0]) if cut and ready else limit
        self._ddl.forget_through(limit)
        return Released([event for _, _, event in ready], {t: through for t in self.completeness.topic_limits()}, cut)

    def _bounded(self, ready: list, max_events: int | None) -> tuple[list, bool]:
        """`ready` cut after `max_events` at a commitTs boundary; the rest waits for the next release."""
        if max_events is None or len(ready) <= max_events:
            return ready, False
        end = max_events
        while end < len(ready) and ready[end][0] == ready[end - 1][0]:
            end += 1  # a commitTs is never split: its split updates must collapse together
        if end == len(ready):
            return ready, False
        self._buffer.extend(ready[end:])
        return ready[:end], True

    def _with_spilled(
        self, ready: list, limit: int, holds: Mapping[TableName, int], max_events: int | None
    ) -> tuple[list, bool]:
        """`ready` merged with the complete spilled events, cut like `_bounded`; what is taken leaves disk."""

        def complete_spilled():
            for item in self._spill.up_to(limit):
                commit_ts, _, event = item
                if commit_ts < holds.get(event.table, _NEVER):
                    yield item

        spilled = complete_spilled()
        in_memory = {arrival for _, arrival, _ in ready}
        taken: list = []
        from_disk: list[int] = []
        cut = False
        for item in heapq.merge(ready, spilled):
            if max_events is not None and len(taken) >= max_events and item[0] != taken[-1][0]:
                cut = True
                break
            taken.append(item)
            if item[1] not in in_memory:
                from_disk.append(item[1])
        spilled.close()
        self._spill.remove(from_disk)
        if cut:
            # What was complete in memory but not taken waits for the next release.
            taken_arrivals = {arrival for _, arrival, _ in taken}
            self._buffer.extend(item for item in ready if item[1] not in taken_arrivals)
        return taken, cut

    def pending_offsets(self) -> dict[TopicPartition, int]:
        lowest: dict[TopicPartition, int] = self._spill.lowest_offsets() if self._spill else {}
        for _, _, event in self._buffer:
            pos = event.position
            tp = pos.topic_partition
            lowest[tp] = min(lowest.get(tp, pos.offset), pos.offset)
        return lowest

    def waiting_by_partition(self) -> dict[TopicPartition, Waiting]:
        counts: dict[tuple[str, int], int] = {}
        oldest: dict[tuple[str, int], tuple[int, int, Event]] = {}
        for item in self._buffer:
            pos = item[2].position
            where = (pos.topic, pos.partition)
            counts[where] = counts.get(where, 0) + 1
            if where not in oldest or item < oldest[where]:
                oldest[where] = item
        waiting = {}
        if self._spill:
            for tp, (count, first) in self._spill.waiting_by_partition().items():
                waiting[tp] = Waiting(count, first.commit_ts, first.table, Waiting.kind_of(first))
        for where, count in counts.items():
            commit_ts, _, event = oldest[where]
            tp = TopicPartition(*where)
            spilled = waiting.get(tp)
            if spilled is None or commit_ts < spilled.oldest_ts:
                waiting[tp] = Waiting(count + (spilled.events if spilled else 0), commit_ts, event.table,
                                      Waiting.kind_of(event))
            else:
                waiting[tp] = Waiting(count + spilled.events, spilled.oldest_ts, spilled.table, spilled.kind)
        return waiting

    def take_waiting(self) -> list[Event]:
        items, self._buffer = self._buffer, []
        if self._spill:
            spilled = list(self._spill.up_to(_LARGEST_STORED))
            self._spill.remove([arrival for _, arrival, _ in spilled])
            items += spilled
        self._next_check = self._check_after()
        return [event for _, _, event in sorted(items)]

    def close(self) -> None:
        super().close()
        if self._spill is not None:
            self._spill.close()
            self._spill = None

    def __len__(self) -> int:
        return len(self._buffer) + (len(self._spill) if self._spill else 0)


class ArrivalGate(Gate):
    """The gate for offset-ordered protocols (TiCDC Avro): everything is complete on arrival.

    Such protocols send no watermarks (TiCDC's avro-enable-watermark testing mode does: they only tell a topic
    that falls silent, `Completeness.round_ended`); TiCDC writes each partition in commit order and all changes
    of a key go to one partition, so a key's changes are in order within it. Events are released as they came.
    A DDL broadcast to every partition is taken from its first copy (commitTs 0: unknown, so every copy is kept).
    """

    def __init__(self, partitions: Mapping[str, Iterable[int]], completeness: Completeness | None = None) -> None:
        super().__init__(completeness or Completeness(partitions))
        self._buffer: list[Event] = []

    def add(self, event: Event) -> None:
        if isinstance(event, Watermark):
            self.completeness.watermark(event)
            return
        if isinstance(event, SchemaChange) and not self._ddl.first(event):
            return
        if isinstance(event, RowChange):
            self.completeness.table_seen(event.position.topic, event.table)
        self._buffer.append(event)

    def observe(self, event: Event) -> None:
        if isinstance(event, RowChange):
            self.completeness.table_seen(event.position.topic, event.table)

    def release(self, holds: Mapping[TableName, int] | None = None, max_events: int | None = None) -> Released:
        released, self._buffer = self._buffer, []
        return Released(released, {})

    def limits(self) -> dict[str, int]:
        return {}

    def watermarks(self) -> dict[str, int]:
        return {}

    def take_waiting(self) -> list[Event]:
        events, self._buffer = self._buffer, []
        return events

    def pending_offsets(self) -> dict[TopicPartition, int]:
        return {}

    def safe_watermarks(self, committed: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        return {}

    def restore(self, watermarks: Mapping[TopicPartition, int]) -> None:
        pass

    def __len__(self) -> int:
        return len(self._buffer)
