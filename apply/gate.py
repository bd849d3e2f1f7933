"""The ordering gate: per-partition watermarks decide which events are complete.

TiCDC spreads a table's rows over the partitions of its topic and sends a
watermark to every partition: once a partition carries watermark W, every
event with commitTs <= W for that partition has been sent before it. So an
event is complete (nothing it must follow can still arrive) once *every*
partition of its topic has passed its commitTs. A table lives in exactly one
topic, so each topic is gated by its own minimum; topics do not wait for each
other.

DDL is sent to every partition; the copies are collapsed into one event, which
is released like a row change, after every partition passed its commitTs:
by then every earlier row of the table is in the same release, ahead of it.
"""

from __future__ import annotations

import itertools
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from schema_cache.events import Event, Ordering, SchemaChange, TableName, TopicPartition, Watermark

log = logging.getLogger(__name__)


class Gate(ABC):
    """Holds decoded events until they are complete; releases them in their protocol's order.

    `pending_offsets` and `safe_watermarks` tell the checkpoint how far each
    partition may be committed and what a restart from there may assume.
    """

    def __init__(self) -> None:
        self._ddl_seen: set[tuple[TableName, int, str]] = set()

    def _first_copy(self, change: SchemaChange) -> bool:
        """False for a copy of a DDL already taken (DDL is sent to every partition)."""
        identity = (change.table, change.commit_ts, change.kind.value)
        if identity in self._ddl_seen:
            return False
        self._ddl_seen.add(identity)
        return True

    @abstractmethod
    def add(self, event: Event) -> None: ...

    @abstractmethod
    def release(self, holds: Mapping[TableName, int] | None = None) -> list[Event]:
        """Remove and return the complete events, in order.

        `holds` maps a table to the commitTs of its oldest event still waiting
        elsewhere (a parked message): that table's events from there on stay.
        """

    @abstractmethod
    def watermarks(self) -> dict[str, int]:
        """Per topic, the commitTs through which everything has arrived."""

    @abstractmethod
    def pending_offsets(self) -> dict[TopicPartition, int]:
        """The lowest offset of a held event, per partition."""

    @abstractmethod
    def safe_watermarks(self, committed: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Per partition, the watermark a restart from `committed` may begin with."""

    @abstractmethod
    def restore(self, watermarks: Mapping[TopicPartition, int]) -> None:
        """Start from watermarks saved by `safe_watermarks`."""

    @abstractmethod
    def __len__(self) -> int: ...


def gate_for(ordering: Ordering, partitions: Mapping[str, Iterable[int]]) -> Gate:
    """The gate of a protocol's ordering, over every partition of its topics."""
    return WatermarkGate(partitions) if ordering is Ordering.COMMIT_TS else ArrivalGate(partitions)


@dataclass(slots=True)
class _PartitionProgress:
    watermark: int = 0
    # (offset, watermark) of watermark messages not yet behind the committed
    # offset: what a restart from a given offset may safely assume.
    observations: list[tuple[int, int]] = field(default_factory=list)


class WatermarkGate(Gate):
    def __init__(self, partitions: Mapping[str, Iterable[int]]) -> None:
        super().__init__()
        self._progress = {
            TopicPartition(topic, p): _PartitionProgress() for topic, ids in partitions.items() for p in ids
        }
        self._buffer: list[tuple[int, int, Event]] = []
        self._arrival = itertools.count()

    # --- input ----------------------------------------------------------------

    def add(self, event: Event) -> None:
        if isinstance(event, Watermark):
            self._observe(event)
            return
        if isinstance(event, SchemaChange) and not self._first_copy(event):
            return
        self._buffer.append((event.commit_ts, next(self._arrival), event))

    def _observe(self, mark: Watermark) -> None:
        tp = mark.position.topic_partition
        progress = self._progress.get(tp)
        if progress is None:
            log.warning("watermark from unassigned partition %s ignored", mark.position)
            return
        if mark.commit_ts < progress.watermark:
            # A replay (TiCDC or consumer restart): watermarks never move back.
            log.info(
                "ignoring watermark %d at %s below current %d (replay)",
                mark.commit_ts,
                mark.position,
                progress.watermark,
            )
            return
        progress.watermark = mark.commit_ts
        progress.observations.append((mark.position.offset, mark.commit_ts))

    # --- output ---------------------------------------------------------------

    def topic_watermark(self, topic: str) -> int:
        return min(p.watermark for tp, p in self._progress.items() if tp.topic == topic)

    def watermarks(self) -> dict[str, int]:
        topics = {tp.topic for tp in self._progress}
        return {t: self.topic_watermark(t) for t in sorted(topics)}

    def release(self, holds: Mapping[TableName, int] | None = None) -> list[Event]:
        """The complete events, ordered by (commitTs, arrival)."""
        holds = holds or {}
        limits = self.watermarks()
        ready, waiting = [], []
        for item in self._buffer:
            commit_ts, _, event = item
            table = event.table  # type: ignore[union-attr]
            complete = commit_ts <= limits[event.position.topic] and commit_ts < holds.get(table, 1 << 64)
            (ready if complete else waiting).append(item)
        self._buffer = waiting
        ready.sort(key=lambda item: item[:2])
        lowest = min(limits.values(), default=0)
        self._ddl_seen = {d for d in self._ddl_seen if d[1] > lowest}
        return [event for _, _, event in ready]

    def pending_offsets(self) -> dict[TopicPartition, int]:
        lowest: dict[TopicPartition, int] = {}
        for _, _, event in self._buffer:
            pos = event.position
            tp = pos.topic_partition
            lowest[tp] = min(lowest.get(tp, pos.offset), pos.offset)
        return lowest

    def __len__(self) -> int:
        return len(self._buffer)

    # --- restart state ----------------------------------------------------------

    def safe_watermarks(self, committed: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Per partition, the highest watermark read before its committed offset.

        Every event a restart from `committed` will not re-read lies before
        that offset and has been applied, so a restart may begin with these
        watermarks instead of waiting for fresh ones.
        """
        safe = {}
        for tp, progress in self._progress.items():
            start = committed.get(tp, 0)
            # Observations are in offset order, so those behind `start` are a prefix.
            behind = sum(1 for offset, _ in progress.observations if offset < start)
            if behind:
                # Keep the newest one behind the offset: the next save needs it too.
                del progress.observations[: behind - 1]
                safe[tp] = progress.observations[0][1]
        return safe

    def restore(self, watermarks: Mapping[TopicPartition, int]) -> None:
        """Start from watermarks saved by `safe_watermarks` (before any offset)."""
        for tp, ts in watermarks.items():
            progress = self._progress.get(tp)
            if progress is not None and ts > progress.watermark:
                progress.watermark = ts
                progress.observations.insert(0, (-1, ts))


class ArrivalGate(Gate):
    """The gate for offset-ordered protocols (TiCDC Avro): everything is complete on arrival.

    Such protocols send no watermarks; TiCDC writes each partition in commit
    order and all changes of a key go to one partition, so a key's changes are
    in order within it. Events are released as they came. A DDL broadcast to
    every partition is taken from its first copy (commitTs 0: unknown, so
    every copy is kept).
    """

    def __init__(self, partitions: Mapping[str, Iterable[int]]) -> None:
        super().__init__()
        self._buffer: list[Event] = []

    def add(self, event: Event) -> None:
        if isinstance(event, Watermark):
            return
        if isinstance(event, SchemaChange) and event.commit_ts > 0 and not self._first_copy(event):
            return
        self._buffer.append(event)

    def release(self, holds: Mapping[TableName, int] | None = None) -> list[Event]:
        released, self._buffer = self._buffer, []
        return released

    def watermarks(self) -> dict[str, int]:
        return {}

    def pending_offsets(self) -> dict[TopicPartition, int]:
        return {}

    def safe_watermarks(self, committed: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        return {}

    def restore(self, watermarks: Mapping[TopicPartition, int]) -> None:
        pass

    def __len__(self) -> int:
        return len(self._buffer)
