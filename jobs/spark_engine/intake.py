"""The Spark engine's intake (`run.engine = "spark"`): Kafka read by Spark, decoded on the executors, staged in
Delta. The batch loop around it is the driver engine's (`jobs.pipeline`, `jobs.intake`).

Per batch:
1. per partition, an offset range (from where the last batch ended, at most `run.batch_max_messages`
   in all), read with Spark's Kafka source (`jobs.spark_engine.kafka_frame`);
2. decoded on the executors in offset order (`mapInArrow`, `jobs.spark_engine.executor_decoding`) with the
   driver's decoder state as of the batch's start, and staged into the consumer's staging table
   (`jobs.spark_engine.staging`, one commit that also replaces what an earlier try staged from these offsets);
3. the messages the executors handed back (BOOTSTRAP, DDL, watermarks, rows waiting for their
   structure, bad input) decoded by the driver's decoder in partition and offset order: watermarks to
   the gate, schema changes and rows to the staging table, bad input to the policy;
   a batch of at most `run.driver_decode_max_messages` is instead read by the driver's Kafka consumer and
   decoded there as a whole (steps 1-3 at once), then staged in the same one commit; or, while the staging
   table holds nothing, its events wait in the gate as the driver engine's (offsets held back while they
   wait), so such batches read and write no staging; the first large batch stages what they left waiting;
4. the release: everything of each topic at or below its watermark (offset ordering: everything), in
   runs of one table and structure between schema changes, applied by the same applier (one MERGE of
   net changes per run, built by Spark; DDL barriers, replays, applied points, idempotent writes);
5. dead letters, the release removed from the staging table, the checkpoint (offsets at the batch's
   end: everything before them is staged or applied), Kafka offsets.

Memory on the driver is the messages handed back (small batches: their messages and the events waiting in
memory, as the driver engine's) and one row per run, whatever the lag: large batches' waiting events are
in Delta. A crash anywhere loses nothing: a batch not checkpointed is read and staged again (replacing its
first staging), events waiting in memory hold their offsets back, applied events are known by each table's
applied point.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator, Mapping

from ticdc_delta.apply.ordering.gate import DdlCopies, Gate, Released, Waiting
from ticdc_delta.apply.own_tables.checkpoint import Retention
from ticdc_delta.exceptions import DecodeError
from ticdc_delta.jobs.config import Config
from ticdc_delta.jobs.intake import BadInput, Reading
from ticdc_delta.jobs.spark_engine.executor_decoding import STAGED_FIELDS, WorkerSpec, decode_arrow
from ticdc_delta.jobs.spark_engine.kafka_frame import kafka_frame
from ticdc_delta.jobs.spark_engine.runs import Release
from ticdc_delta.jobs.spark_engine.staging import StagingTable
from ticdc_delta.schema_cache.events import Ordering, RowChange, SchemaChange, TableName, TopicPartition, Watermark
from ticdc_delta.schema_cache.protocols import worker_payload

log = logging.getLogger(__name__)

_STAGED_SCHEMA = ", ".join(f"`{name}` {kind}" for name, _, kind in STAGED_FIELDS)


class _Ranges(dict):
    """A batch: per partition, (first offset, offset after the last); its length is its message count."""

    def __len__(self) -> int:
        return sum(end - start for start, end in self.values())

    def __bool__(self) -> bool:
        return len(self) > 0


def plan_ranges(starts: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int], budget: int) -> _Ranges:
    """A batch's offset ranges: per partition from `starts` towards `ends`, at most `budget` messages in all.

    An even share per partition; what a partition does not need goes to the others.
    """
    left = {tp: max(0, ends.get(tp, start) - start) for tp, start in starts.items()}
    ranges = _Ranges()
    pending = sorted((tp for tp in left if left[tp] > 0), key=lambda tp: left[tp])
    while pending and budget > 0:
        share = max(1, budget // len(pending))
        tp = pending.pop(0)
        take = min(left[tp], share)
        ranges[tp] = (starts[tp], starts[tp] + take)
        budget -= take
    return ranges


class SparkIntake:
    """The Spark engine's intake (`jobs.intake.Intake`): offset ranges, staged in Delta, released as runs."""

    def __init__(self, config: Config, reading: Reading, *, spark, staging: StagingTable) -> None:
        self._config = config
        self._source, self._decoder, self._times = reading.source, reading.decoder, reading.times
        self._stop, self._progress = reading.stop, reading.progress
        self._spark = spark
        self._staging = staging
        self._ddl_copies = DdlCopies()
        self._release: Release | None = None
        self._limits: dict[str, int] | None = None
        self._waiting = 0
        # The staging table holds nothing: it held nothing at `open`, or a release left nothing waiting, and
        # nothing was staged since (this process is its only writer).
        self._empty = False
        # Small batches' events wait in the gate, in memory, as the driver engine's (`_take_on_driver`): while
        # the staging table is empty and batches are small. Their offsets are then held back (`held_offsets`).
        self._in_memory = False

    def open(self, resume: Mapping[TopicPartition, int] | None) -> dict[str, list[int]]:
        partitions = self._source.plan(resume)
        log.info("reading %s with Spark's Kafka source from %s", ", ".join(map(str, self._source.next_offsets())),
                 {str(tp): o for tp, o in self._source.next_offsets().items()})
        # Nothing staged (no waiting event, nothing an earlier try staged): the first batch may wait in memory.
        self._empty = self._staging.is_empty()
        return partitions

    def collect(self, until_idle: bool) -> _Ranges:
        """The next batch's offset ranges: what is there up to the end offsets, at most a batch in all."""
        ends = self._source.end_offsets() if until_idle else self._source.refresh_end_offsets()
        ranges = plan_ranges(self._source.next_offsets(), ends, self._config.run.batch_max_messages)
        if not ranges and not until_idle:
            self._stop.wait(self._config.run.batch_max_seconds)  # nothing new: look again a batch later
        return ranges

    def caught_up(self) -> bool:
        ends = self._source.end_offsets()
        return all(offset >= ends.get(tp, 0) for tp, offset in self._source.next_offsets().items())

    def take(self, ranges: _Ranges, gate: Gate, bad_input: BadInput) -> None:
        """Read, decode and stage a batch: on the driver if small, else on the executors (the driver decoding
        what they handed back)."""
        small = len(ranges) <= self._config.run.driver_decode_max_messages
        if self._in_memory and not small:
            # The events small batches left waiting go first to the staging table, where this batch's go.
            with self._times.phase("gate"):
                self._staging.append(gate.take_waiting())
        self._in_memory = self._empty and small
        if not ranges:
            return
        if small:
            self._take_on_driver(ranges, gate, bad_input)
        else:
            self._empty = False
            self._take_on_executors(ranges, gate, bad_input)
        self._source.advance({tp: end for tp, (_, end) in ranges.items()})
        if self._progress is not None:
            self._progress.read(self._source.next_offsets())

    def _take_on_driver(self, ranges: _Ranges, gate: Gate, bad_input: BadInput) -> None:
        """A small batch, read and decoded here as the driver engine's. Spark's Kafka source, the executors'
        Python workers and the handed-back messages' read cost seconds however few the messages.

        With nothing staged, its events wait in the gate, as the driver engine's: what is complete is applied
        from memory, the rest waits there with its offsets held back, and no staging is written or read.
        Otherwise they are staged in one commit with the rest."""
        with self._times.phase("kafka_poll"):
            messages = self._source.read(ranges)
        staged: list = []
        with self._times.phase("decode"):
            self._decode(messages, gate, staged, bad_input)
            if self._in_memory:
                for event in staged:
                    gate.add(event)
            else:
                self._staging.stage_events(staged, ranges)
        log.debug("read and decoded %d messages on the driver; %s", len(messages),
                  "their events wait in memory" if self._in_memory else "staged")

    def _take_on_executors(self, ranges: _Ranges, gate: Gate, bad_input: BadInput) -> None:
        spec = WorkerSpec(
            self._config.protocol, self._config.types, self._decoder.state(),
            worker_payload(self._config.protocol, self._decoder),
        )
        with self._times.phase("decode"):
            raw = kafka_frame(self._spark, self._config.kafka, ranges)
            decoded = raw.mapInArrow(functools.partial(decode_arrow, spec), _STAGED_SCHEMA)
            self._staging.stage(decoded, ranges)
            handed_back = self._staging.handed_back(ranges)
        staged: list = []
        with self._times.phase("decode"):
            self._decode(handed_back, gate, staged, bad_input)
        with self._times.phase("gate"):
            self._staging.append(staged)
        log.debug("staged %d messages; the driver decoded %d of them", len(ranges), len(handed_back))

    def _decode(self, messages: list, gate: Gate, staged: list, bad_input: BadInput) -> None:
        """Decode `messages` in order with the driver's decoder: watermarks to the gate, what is staged to `staged`."""
        for message in messages:
            try:
                events = self._decoder.decode(message)
            except DecodeError as err:
                bad_input(err)
                continue
            for event in events:
                self._route(event, gate, staged)
        for err in self._decoder.take_errors():
            bad_input(err)

    def _route(self, event, gate: Gate, staged: list) -> None:
        if event.__class__ is Watermark:
            gate.add(event)
        elif event.__class__ is SchemaChange:
            gate.observe(event)  # (every copy: what it says of its partition's completeness)
            # One copy of each DDL is staged (a later copy, after a restart, is a replay).
            if self._ddl_copies.first(event):
                staged.append(event)
        elif event.__class__ is RowChange:
            staged.append(event)

    def releases(self, gate: Gate, holds: Mapping[TableName, int]) -> Iterator[Released]:
        """Everything of each topic at or below its watermark (offset ordering: everything), at once: the
        driver holds one row per run, whatever the lag, and the rows of a small release
        (`StagingTable._held_rows`)."""
        ordering = self._decoder.ordering
        self._limits = gate.limits() if ordering is Ordering.COMMIT_TS else None
        if self._limits:
            self._ddl_copies.forget_through(min(self._limits.values()))
        if self._in_memory:
            # As the driver engine's (`jobs.intake.DriverIntake.releases`): in slices of at most a batch.
            while True:
                with self._times.phase("gate"):
                    released = gate.release(holds, self._config.run.batch_max_messages)
                yield released
                if not released.more:
                    return
        with self._times.phase("gate"):
            self._release = self._staging.release(self._limits, holds)
        self._waiting = self._release.waiting
        yield Released(self._release.for_applier(ordering), self._limits or {})

    def settle(self, ranges: _Ranges, holds: Mapping[TableName, int]) -> None:
        if self._in_memory:
            return  # released events left the gate as they were released
        with self._times.phase("gate"):
            self._staging.remove(self._release, ranges, self._limits, holds)
        self._empty = self._release.waiting == 0

    def waiting(self, gate: Gate) -> int:
        return len(gate) if self._in_memory else self._waiting

    def waiting_by_partition(self, gate: Gate) -> dict[TopicPartition, Waiting]:
        if self._in_memory or self._release is None:
            return gate.waiting_by_partition()
        return dict(self._release.waiting_by_partition)

    def held_offsets(self, gate: Gate) -> dict[TopicPartition, int]:
        # In memory: the oldest waiting event's offset (a restart reads it again); else everything read is
        # staged or applied.
        return gate.pending_offsets() if self._in_memory else {}

    def clean_up(self, retention: Retention) -> None:
        self._staging.clean_up(retention)
