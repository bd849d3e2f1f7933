"""How far each Kafka partition is known complete: the commitTs through which every event it will ever carry
has been read. The gate (`apply.ordering.gate`) releases an event once every partition read is complete through its
commitTs, so a change on one topic never overtakes a DDL on another (a RENAME's rows on the new name's topic,
its DDL on the old name's).

What TiCDC sends where (pingcap/tiflow `cdc/sink/dmlsink/mq/dispatcher/event_router.go`,
`cdc/sink/ddlsink/mq/mq_ddl_sink.go`; pingcap/ticdc `downstreamadapter/sink/kafka/sink.go` does the same):
a row to its table's topic; a DDL to the topic of the table's old name (a CREATE: the new name's), to every
partition (canal and canal-json: partition 0 only); a checkpoint (the watermark) to every partition of the
topics of the tables replicated now and of the default topic, written only once every event at or below it
is in Kafka, on every topic, and any topic it needs created. So after a DROP TABLE or a RENAME away, the old
name's topic never gets another watermark, and a topic created for a new table has none before its first.

Two kinds of evidence, per partition:

- its watermarks: complete through the highest one read;
- a look at its end offset, for a topic that gets no watermarks (one where a DROP or a RENAME away was read,
  one with none read in this process, one whose newest lags the newest read anywhere by more than
  `SILENT_LAG_MS` of upstream time): every event at or below the newest watermark read anywhere (W) was in
  Kafka before TiCDC wrote W, so a partition read up to the end offset it had at a look made after W was read
  is complete through W. Such a topic then stops holding the others back once read to its end, and holds them
  again when something new comes. This needs the topics read to be one changefeed's (another changefeed's
  watermark says nothing of them) and TiCDC's default `required-acks=-1` (what it acknowledged is what a
  consumer can read). A topic whose watermarks come waits for them.

A DDL copy says nothing of other tables' earlier rows on its topic (TiCDC blocks only the DDL's tables while it
writes it), so it is no evidence: the next watermark, or a look, completes its partitions.

Topics found by pattern: a watermark may also cover events on a topic created since the topics were last
listed, so the release is capped at the newest watermark read before the last listing (`listed`); the job
lists them again whenever the release would pass it.

The watermarks read (not the looks) are what a restart may assume (`safe` / `restore`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ticdc_delta.schema_cache.events import SchemaChange, SchemaChangeKind, TableName, TopicPartition, Watermark

log = logging.getLogger(__name__)

# What a topic carries, as far as this consumer has seen: one table (its name), several, or none any more.
_SEVERAL = "several"
_RETIRED = "retired"  # its one table was dropped or renamed away (a DDL on it said so)
# A topic whose newest watermark is this far (upstream milliseconds) behind the newest read anywhere has stopped
# getting them (TiCDC sends one to every replicated table's topic each time its checkpoint moves, about every
# second): it is looked at.
SILENT_LAG_MS = 30_000
_LOGICAL_BITS = 18
_NO_CAP = 1 << 64


@dataclass(slots=True)
class PartitionProgress:
    watermark: int = 0  # the highest watermark message read (or restored)
    # (offset, watermark) of watermark messages not yet behind the committed offset: what a restart from a
    # given offset may safely assume.
    observations: list[tuple[int, int]] = field(default_factory=list)
    mark: int = 0  # complete through this by a look at its end offset
    looks: list[tuple[int, int]] = field(default_factory=list)  # (end offset, value): see `Completeness.looked`
    read_one: bool = False  # a watermark was read on it in this process (not only restored)

    @property
    def through(self) -> int:
        return self.watermark if self.watermark >= self.mark else self.mark


@dataclass(frozen=True, slots=True)
class Holder:
    """A partition the gate waits for: the lowest `through`, and its last watermark read."""

    partition: TopicPartition
    through: int
    watermark: int


class Completeness:
    """Per partition, the commitTs through which it is complete; the lowest is how far events may be released."""

    def __init__(self, partitions: Mapping[str, Iterable[int]], *, silent_rounds: int = 0, capped: bool = False) -> None:
        """`silent_rounds`: warn once of a topic of a known table that got no watermark in that many rounds while
        read to its end (0: never). `capped`: the topics are found by pattern (`listed`)."""
        self._progress = {TopicPartition(t, p): PartitionProgress() for t, ids in partitions.items() for p in ids}
        self._of_topic: dict[str, list[TopicPartition]] = {}
        for tp in self._progress:
            self._of_topic.setdefault(tp.topic, []).append(tp)
        self._newest = 0  # the newest watermark read on any partition
        self._carries: dict[str, object] = {}  # topic -> its one table, _SEVERAL or _RETIRED
        self._removal_read: set[str] = set()  # topics a DROP or a RENAME away was read on
        self._cap = 0 if capped else _NO_CAP
        self._silent_rounds = silent_rounds
        self._quiet: dict[str, int] = {}  # topic -> rounds without a watermark while read to its end
        self._warned: set[str] = set()

    # --- evidence -------------------------------------------------------------------------------------

    def watermark(self, mark: Watermark) -> None:
        tp = mark.position.topic_partition
        progress = self._progress.get(tp)
        if progress is None:
            log.warning("watermark from unassigned partition %s ignored", mark.position)
            return
        progress.read_one = True
        if mark.commit_ts < progress.watermark:
            # A replay (TiCDC or consumer restart): watermarks never move back.
            log.info("ignoring watermark %d at %s below current %d (replay)", mark.commit_ts, mark.position,
                     progress.watermark)
            return
        progress.watermark = mark.commit_ts
        progress.observations.append((mark.position.offset, mark.commit_ts))
        if mark.commit_ts > self._newest:
            self._newest = mark.commit_ts
        self._quiet.pop(tp.topic, None)

    def table_seen(self, topic: str, table: TableName) -> None:
        """A change of `table` was read on `topic`."""
        known = self._carries.get(topic)
        if known is not table and known != table and known is not _SEVERAL:
            self._carries[topic] = table if known is None or known is _RETIRED else _SEVERAL

    def schema_change(self, change: SchemaChange) -> None:
        """A copy of a DDL read (every copy, before duplicates are dropped): its topic's table; and a DROP or a
        RENAME away makes the topic one to look at (no watermark comes there after it)."""
        # The topic of the table's old name carries a RENAME; any other DDL, its own table's.
        self.table_seen(change.position.topic, change.previous_name or change.table)
        if _removes(change):
            self._removal_read.add(change.position.topic)

    def removed(self, change: SchemaChange) -> None:
        """A DDL that took its table off its topic (DROP, RENAME away) was applied: the topic may stay silent."""
        if _removes(change):
            topic = change.position.topic
            if self._carries.get(topic) == (change.previous_name or change.table):
                self._carries[topic] = _RETIRED

    # --- looks at end offsets ---------------------------------------------------------------------------

    def looks_wanted(self) -> dict[TopicPartition, int]:
        """Partitions whose end offset is worth looking up now, and the value a look would give each once read
        up to it: the newest watermark, for the partitions of topics that get no watermarks (the module
        docstring) below it, where no earlier look already promises as much."""
        wanted: dict[TopicPartition, int] = {}
        target = self._newest
        for topic, tps in self._of_topic.items():
            if not self._silent(topic, tps):
                continue
            for tp in tps:
                progress = self._progress[tp]
                if target > progress.through and not any(value >= target for _, value in progress.looks):
                    wanted[tp] = target
        return wanted

    def _silent(self, topic: str, tps: list[TopicPartition]) -> bool:
        """Whether `topic` gets no watermarks: a DROP or RENAME away was read on it, none was read on it in this
        process, or its newest lags the newest read anywhere by more than SILENT_LAG_MS."""
        if topic in self._removal_read:
            return True
        progress = [self._progress[tp] for tp in tps]
        if not any(p.read_one for p in progress):
            return True
        lag = (self._newest >> _LOGICAL_BITS) - (max(p.watermark for p in progress) >> _LOGICAL_BITS)
        return lag > SILENT_LAG_MS

    def looked(self, ends: Mapping[TopicPartition, int], wanted: Mapping[TopicPartition, int]) -> None:
        """End offsets looked up after `wanted` was asked: each partition is complete through its wanted value
        once read up to its end offset (`read_up_to`)."""
        for tp, end in ends.items():
            progress = self._progress.get(tp)
            if progress is not None and tp in wanted:
                progress.looks.append((end, wanted[tp]))

    def read_up_to(self, positions: Mapping[TopicPartition, int]) -> None:
        """Every partition read up to `positions` (the offset of its next message)."""
        for tp, progress in self._progress.items():
            if not progress.looks:
                continue
            position = positions.get(tp, -1)
            kept = []
            for end, value in progress.looks:
                if position >= end:
                    if value > progress.mark:
                        progress.mark = value
                elif value > progress.through:
                    kept.append((end, value))
            progress.looks = kept

    # --- topics found by pattern ----------------------------------------------------------------------------

    def needs_listing(self) -> bool:
        """Whether the release would pass the newest watermark read before the topics were last listed: a topic
        created since may hold events below the watermarks read after it (`listed`)."""
        return self._uncapped() > self._cap

    def listed(self, newest: int) -> None:
        """The topics were listed, and none is new, after the watermarks through `newest` were read."""
        if self._cap != _NO_CAP and newest > self._cap:
            self._cap = newest

    # --- how far ----------------------------------------------------------------------------------------

    def _uncapped(self) -> int:
        return min((p.through for p in self._progress.values()), default=0)

    def limit(self) -> int:
        """The commitTs through which every partition is complete: events up to it may be released."""
        uncapped = self._uncapped()
        return uncapped if uncapped <= self._cap else self._cap

    def topic_limits(self) -> dict[str, int]:
        """Per topic, the commitTs through which all its partitions are complete."""
        return {topic: min(self._progress[tp].through for tp in tps) for topic, tps in sorted(self._of_topic.items())}

    def newest(self) -> int:
        """The newest watermark read on any partition."""
        return self._newest

    def holders(self) -> list[Holder]:
        """The partitions at the lowest point: what the release waits for."""
        limit = self._uncapped()
        return [Holder(tp, p.through, p.watermark) for tp, p in sorted(self._progress.items()) if p.through == limit]

    def partitions(self) -> list[TopicPartition]:
        return list(self._progress)

    # --- restart state ------------------------------------------------------------------------------------

    def safe(self, committed: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Per partition, the highest watermark read before its committed offset.

        Every event a restart from `committed` will not re-read lies before that offset and has been applied,
        so a restart may begin with these watermarks instead of waiting for fresh ones.
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
        """Start from watermarks saved by `safe` (before any offset)."""
        for tp, ts in watermarks.items():
            progress = self._progress.get(tp)
            if progress is not None and ts > progress.watermark:
                progress.watermark = ts
                progress.observations.insert(0, (-1, ts))
                self._newest = max(self._newest, ts)

    # --- silent topics ------------------------------------------------------------------------------------

    def round_ended(self, unread: Iterable[TopicPartition] = ()) -> list[tuple[str, int, int]]:
        """Topics of a known table that ended `silent_rounds` rounds read to their end (no partition in
        `unread`, those with messages not read yet) with no watermark as new as the newest read elsewhere, each
        once: (topic, its last watermark, the newest). A topic still being read is not counted: its watermark
        may be among what is left."""
        if not self._silent_rounds:
            return []
        behind = {tp.topic for tp in unread}
        silent = []
        for topic, tps in self._of_topic.items():
            carries = self._carries.get(topic)
            if carries is None or carries is _RETIRED or topic in self._warned or topic in behind:
                continue
            last = max(self._progress[tp].watermark for tp in tps)
            if last >= self._newest:
                continue
            self._quiet[topic] = self._quiet.get(topic, 0) + 1
            if self._quiet[topic] >= self._silent_rounds:
                self._warned.add(topic)
                silent.append((topic, last, self._newest))
        return silent


def _removes(change: SchemaChange) -> bool:
    """A DROP, or a RENAME away from the name whose topic carries it."""
    return change.kind is SchemaChangeKind.DROP or (
        change.kind is SchemaChangeKind.RENAME and change.previous_name not in (None, change.table))
