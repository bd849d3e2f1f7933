"""Reading topics outside the job: from given offsets to their end, committing nothing; consumer lag.

For notebooks exploring a topic and for dead-letter replay, which re-reads
what the job read. The job's own reading is `jobs.kafka_source`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ticdc_delta.exceptions import SourceError
from ticdc_delta.jobs.config import KafkaConfig
from ticdc_delta.jobs.kafka_source import KafkaSource
from ticdc_delta.schema_cache.events import RawMessage, TopicPartition

_POLL_MESSAGES = 10_000


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """How far a consumer is behind one partition."""

    topic: str
    partition: int
    position: int  # the next offset the consumer reads
    end: int  # the partition's end offset

    @property
    def lag(self) -> int:
        return max(self.end - self.position, 0)


class TopicReader:
    """All partitions of the topics read (`kafka.topics` or `kafka.topic_pattern`) from `start` (default: their beginning) up to their end offsets at `open`.

    Uses a consumer group of its own (`<group_id>.reader`) that never commits, so
    the job's committed offsets are untouched.
    """

    def __init__(self, kafka: KafkaConfig, *, idle_timeout_seconds: float = 30.0) -> None:
        self._config = dataclasses.replace(kafka, group_id=f"{kafka.group_id}.reader", start_from="earliest")
        self._idle_timeout = idle_timeout_seconds
        self._source: KafkaSource | None = None
        self.start: dict[TopicPartition, int] = {}
        self.end: dict[TopicPartition, int] = {}

    def open(self, start: Mapping[TopicPartition, int] | None = None) -> TopicReader:
        """Assign every partition at `start` (partitions not named: offset 0).

        Where Kafka no longer holds the offset asked for (retention), reading
        begins at the oldest it holds: `start` says where it did.
        """
        self.close()
        self._source = KafkaSource(self._config)
        partitions = self._source.partitions()
        wanted = {TopicPartition(t, p): (start or {}).get(TopicPartition(t, p), 0) for t, ids in partitions.items() for p in ids}
        self._source.open(wanted)
        self.start = self._source.next_offsets()
        self.end = self._source.end_offsets()
        return self

    def lost(self, wanted: Mapping[TopicPartition, int]) -> dict[TopicPartition, tuple[int, int]]:
        """Partitions where reading could not begin at `wanted`: (wanted, oldest offset Kafka holds)."""
        return {tp: (offset, self.start[tp]) for tp, offset in wanted.items() if tp in self.start and self.start[tp] > offset}

    def __iter__(self) -> Iterator[RawMessage]:
        if self._source is None:
            self.open()
        source = self._source
        last_message_at = time.monotonic()
        while not source.caught_up():
            messages = source.poll(_POLL_MESSAGES, 0.5)
            if messages:
                last_message_at = time.monotonic()
            elif time.monotonic() - last_message_at > self._idle_timeout:
                raise SourceError(
                    f"no message for {self._idle_timeout:g}s before the end offsets {self.end} were reached"
                )
            for message in messages:
                if message.offset < self.end[TopicPartition(message.topic, message.partition)]:
                    yield message

    def close(self) -> None:
        if self._source is not None:
            self._source.close()
            self._source = None

    def __enter__(self) -> TopicReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_topics(kafka: KafkaConfig, start: Mapping[TopicPartition, int] | None = None) -> list[RawMessage]:
    """Every message of the topics read (`kafka.topics` or `kafka.topic_pattern`) from `start` (default: the beginning) to the end offsets now."""
    with TopicReader(kafka) as reader:
        return list(reader.open(start))


def consumer_lag(kafka: KafkaConfig, positions: Mapping[TopicPartition, int] | None = None) -> list[PartitionLag]:
    """Per partition of the topics read: where the consumer group resumes, the end offset, the lag.

    The resume point is `positions` (e.g. the job's checkpoint offsets, which
    are authoritative), else the group's committed offsets, else
    `kafka.start_from`. Nothing is committed.
    """
    source = KafkaSource(kafka)
    try:
        source.open(positions)
        position, end = source.next_offsets(), source.end_offsets()
    finally:
        source.close()
    return [PartitionLag(tp.topic, tp.partition, position[tp], end[tp]) for tp in sorted(end)]
