"""Where a batch comes from and where its events wait until released: the part the two engines do apart.

The batch loop (`jobs.pipeline`) is one for both engines: lease, decoding errors, the applier, dead letters,
checkpoint, Kafka offsets, metrics. It takes an intake:

- `DriverIntake` (`run.engine = "driver"`): the Kafka consumer polled on the driver, messages decoded there,
  events waiting in the gate (memory, spilled to disk past `run.max_pending_events`).
- `jobs.spark_engine.intake.SparkIntake` (`run.engine = "spark"`): offset ranges read by Spark's Kafka
  source, decoded on the executors, events waiting in a Delta staging table, released as runs.

Both release complete events (by watermark, or in offset order) to the one applier; the gate keeps each
topic's watermarks for both.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sized
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from ticdc_delta.apply.base.phases import PhaseTimes
from ticdc_delta.apply.ordering.gate import Gate, Released, Waiting
from ticdc_delta.apply.own_tables.checkpoint import Retention
from ticdc_delta.exceptions import DecodeError
from ticdc_delta.jobs.config import RunConfig
from ticdc_delta.jobs.kafka_source import KafkaSource
from ticdc_delta.jobs.live_progress import ProgressLine
from ticdc_delta.schema_cache.decoder import Decoder
from ticdc_delta.schema_cache.events import TableName, TopicPartition

# Longest wait of one Kafka poll: continuous runs, and draining ones (`DriverIntake.collect`).
_POLL_SECONDS = 0.5
_DRAIN_POLL_SECONDS = 0.05

BadInput = Callable[[DecodeError], None]


@dataclass(frozen=True)
class Reading:
    """What an intake reads and decodes with; the batch loop shares them."""

    source: KafkaSource
    decoder: Decoder
    times: PhaseTimes
    stop: threading.Event
    progress: ProgressLine | None


class Intake(Protocol):
    def open(self, resume: Mapping[TopicPartition, int] | None) -> dict[str, list[int]]:
        """Start reading at `resume` (None: the group's committed offsets, else the topics' start); the
        partitions per topic."""

    def collect(self, until_idle: bool) -> Sized:
        """The next batch (its length: how many messages); until-idle: no further than the end offsets noted at
        start. Empty when nothing new came within `run.batch_max_seconds`."""

    def caught_up(self) -> bool:
        """Every partition read up to the end offsets noted at start."""

    def take(self, batch: Sized, gate: Gate, bad_input: BadInput) -> None:
        """Decode the batch: watermarks into `gate`, events to wait until released, bad input to `bad_input`."""

    def releases(self, gate: Gate, holds: Mapping[TableName, int]) -> Iterator[Released]:
        """Complete events in order, in slices for the applier; a table's events from its hold on stay."""

    def settle(self, batch: Sized, holds: Mapping[TableName, int]) -> None:
        """What was released is in the tables and the batch's dead letters are written: let go of it."""

    def waiting(self, gate: Gate) -> int:
        """Events read and not released yet."""

    def waiting_by_partition(self, gate: Gate) -> dict[TopicPartition, Waiting]:
        """Those events per partition, as the last release left them."""

    def held_offsets(self, gate: Gate) -> dict[TopicPartition, int]:
        """Per partition, the offset of its oldest message whose events are not durable yet (Kafka's
        committed offset stays at or before it)."""

    def clean_up(self, retention: Retention) -> None:
        """Keep what the intake stores small, on the checkpoints' cadence."""


@contextmanager
def _no_cyclic_gc():
    """Pause Python's cyclic garbage collector for a batch's decoding.

    Decoding makes a few objects per message and no reference cycles, but the
    collector keeps walking the growing batch of events it cannot free: on a
    100,000-message batch that costs about a fifth of decoding. It is resumed
    (if it was running) as soon as the batch is decoded.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class DriverIntake:
    """The driver engine's intake: Kafka polled and decoded on the driver, events waiting in the gate."""

    def __init__(self, run: RunConfig, reading: Reading) -> None:
        self._run = run
        self._source, self._decoder, self._times = reading.source, reading.decoder, reading.times
        self._stop, self._progress = reading.stop, reading.progress

    def open(self, resume: Mapping[TopicPartition, int] | None) -> dict[str, list[int]]:
        return self._source.open(resume)

    def collect(self, until_idle: bool) -> list:
        run = self._run
        deadline = time.monotonic() + run.batch_max_seconds
        # A poll that does not fill the batch waits out its whole timeout: draining, polls are short, so
        # the batch closes soon after the end offsets noted at start are reached (and with no poll at all
        # when they already are).
        poll_seconds = _DRAIN_POLL_SECONDS if until_idle else _POLL_SECONDS
        batch = []
        while len(batch) < run.batch_max_messages and not self._stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            with self._times.phase("kafka_poll"):
                if until_idle and self._source.caught_up():
                    break
                got = self._source.poll(min(run.batch_max_messages - len(batch), 10_000), min(remaining, poll_seconds))
                batch.extend(got)
            if self._progress is not None:
                self._progress.read(self._source.next_offsets())
        return batch

    def caught_up(self) -> bool:
        return self._source.caught_up()

    def take(self, batch: list, gate: Gate, bad_input: BadInput) -> None:
        events: list = []
        with _no_cyclic_gc(), self._times.phase("decode"):
            decode = self._decoder.decode
            for message in batch:
                try:
                    events.extend(decode(message))
                except DecodeError as err:
                    bad_input(err)
            for err in self._decoder.take_errors():
                bad_input(err)
        with self._times.phase("gate"):
            add = gate.add
            for event in events:
                add(event)

    def releases(self, gate: Gate, holds: Mapping[TableName, int]) -> Iterator[Released]:
        # In slices of at most a batch (a lagging partition may have held back far more); each ends at a commitTs.
        while True:
            with self._times.phase("gate"):
                released = gate.release(holds, self._run.batch_max_messages)
            yield released
            if not released.more:
                return

    def settle(self, batch: list, holds: Mapping[TableName, int]) -> None:
        pass  # released events left the gate as they were released

    def waiting(self, gate: Gate) -> int:
        return len(gate)

    def waiting_by_partition(self, gate: Gate) -> dict[TopicPartition, Waiting]:
        return gate.waiting_by_partition()

    def held_offsets(self, gate: Gate) -> dict[TopicPartition, int]:
        return gate.pending_offsets()

    def clean_up(self, retention: Retention) -> None:
        pass  # the gate keeps nothing between runs
