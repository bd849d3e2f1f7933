"""Reading the configured topics with confluent-kafka.

All partitions of every configured topic are assigned to this one consumer
(no group rebalancing): a table's rows are spread over all partitions of its
topic, and only a consumer that sees every partition can tell when a
commitTs is complete. The consumer group is used for committed offsets only.
Scale out by running one materializer per set of topics.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaPartition

from jobs.config import KafkaConfig
from schema_cache.events import RawMessage, TopicPartition
from schema_cache.exceptions import SourceError

log = logging.getLogger(__name__)

_METADATA_TIMEOUT = 30.0
# Answers of a group coordinator that is starting or moving: librdkafka does not
# flag them retriable, but asking again a moment later succeeds.
_COORDINATOR_MOVING = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError._WAIT_COORD,
    KafkaError._TIMED_OUT,
}
T = TypeVar("T")


class KafkaSource:
    def __init__(self, config: KafkaConfig) -> None:
        self._config = config
        self._consumer = Consumer(
            {
                **config.properties,
                "bootstrap.servers": config.bootstrap_servers,
                "group.id": config.group_id,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": config.start_from,
            }
        )
        self._next: dict[TopicPartition, int] = {}
        self._end: dict[TopicPartition, int] = {}

    def partitions(self) -> dict[str, list[int]]:
        try:
            metadata = self._consumer.list_topics(timeout=_METADATA_TIMEOUT)
        except KafkaException as err:
            raise SourceError(f"cannot reach Kafka at {self._config.bootstrap_servers}: {err}") from err
        found = {}
        for topic in self._config.topics:
            described = metadata.topics.get(topic)
            if described is None or described.error is not None or not described.partitions:
                raise SourceError(f"kafka.topics: topic {topic!r} does not exist at {self._config.bootstrap_servers}")
            found[topic] = sorted(described.partitions)
        return found

    def _retrying(self, what: str, call: Callable[[], T]) -> T:
        """`call`, again while Kafka answers with a retriable error (a coordinator still loading, ...)."""
        deadline = time.monotonic() + _METADATA_TIMEOUT
        while True:
            try:
                return call()
            except KafkaException as err:
                error = err.args[0] if err.args else None
                retriable = isinstance(error, KafkaError) and (error.retriable() or error.code() in _COORDINATOR_MOVING)
                if not retriable or time.monotonic() >= deadline:
                    raise SourceError(f"cannot {what} at {self._config.bootstrap_servers}: {err}") from err
                log.info("Kafka: %s; retrying", err)
                time.sleep(0.5)

    def _offset_range(self, tp: TopicPartition) -> tuple[int, int]:
        """(oldest offset Kafka holds, end offset) of `tp`, asked of the broker now."""
        return self._retrying(
            f"read the offsets of {tp}",
            lambda: self._consumer.get_watermark_offsets(KafkaPartition(tp.topic, tp.partition), timeout=_METADATA_TIMEOUT),
        )

    def offset_ranges(self) -> dict[TopicPartition, tuple[int, int]]:
        """Per partition of the configured topics: (oldest offset held, end offset), asked now.

        Nothing is assigned, read or committed: for reports on a consumer that runs elsewhere.
        """
        return {
            TopicPartition(topic, p): self._offset_range(TopicPartition(topic, p))
            for topic, ids in self.partitions().items()
            for p in ids
        }

    def open(self, resume: Mapping[TopicPartition, int] | None = None) -> dict[str, list[int]]:
        """Assign every partition; start at `resume`, else the group's commits, else `start_from`.

        Also notes each partition's end offset now: what "until idle" drains.
        """
        partitions = self.partitions()
        tps = [KafkaPartition(t, p) for t, ids in partitions.items() for p in ids]
        committed = {
            TopicPartition(c.topic, c.partition): c.offset
            for c in self._retrying("read the group's committed offsets", lambda: self._consumer.committed(tps, timeout=_METADATA_TIMEOUT))
        }
        assignment = []
        for tp in tps:
            key = TopicPartition(tp.topic, tp.partition)
            low, high = self._offset_range(key)
            self._end[key] = high
            start = (resume or {}).get(key)
            if start is None and committed.get(key, -1) >= 0:
                start = committed[key]
            if start is None:
                start = low if self._config.start_from == "earliest" else high
            start = max(start, low)  # retention may have removed what we would resume from
            self._next[key] = start
            assignment.append(KafkaPartition(tp.topic, tp.partition, start))
        self._consumer.assign(assignment)
        log.info(
            "reading %s from %s",
            ", ".join(str(tp) for tp in self._next),
            {str(tp): o for tp, o in self._next.items()},
        )
        return partitions

    def poll(self, max_messages: int, timeout: float) -> list[RawMessage]:
        out = []
        append = out.append
        last: dict[tuple[str, int], int] = {}
        for message in self._consumer.consume(num_messages=max_messages, timeout=timeout):
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                if error.fatal() or not error.retriable():
                    raise SourceError(f"reading {message.topic()}[{message.partition()}] failed: {error}")
                log.warning("transient Kafka error: %s", error)
                continue
            topic, partition, offset = message.topic(), message.partition(), message.offset()
            last[topic, partition] = offset
            append(RawMessage(topic, partition, offset, message.key(), message.value()))
        for (topic, partition), offset in last.items():
            self._next[TopicPartition(topic, partition)] = offset + 1
        return out

    def next_offsets(self) -> dict[TopicPartition, int]:
        """Per partition, the offset after the last message read."""
        return dict(self._next)

    def end_offsets(self) -> dict[TopicPartition, int]:
        """Per partition, its end offset noted at `open` (the offset the next message written gets)."""
        return dict(self._end)

    def latest_end_offsets(self) -> dict[TopicPartition, int]:
        """Per assigned partition, the newest end offset known without asking the broker.

        librdkafka keeps the end offset each fetch response brought; before any
        fetch of a partition, the one noted at `open` stands.
        """
        ends = dict(self._end)
        for tp, noted in ends.items():
            try:
                _, high = self._consumer.get_watermark_offsets(KafkaPartition(tp.topic, tp.partition), cached=True)
            except KafkaException:
                continue  # nothing cached for it yet
            if high is not None and high > noted:
                ends[tp] = high
        return ends

    def caught_up(self) -> bool:
        """True once every partition was read up to its end offset noted at `open`."""
        positions = self._consumer.position([KafkaPartition(tp.topic, tp.partition) for tp in self._next])
        for tp in positions:
            key = TopicPartition(tp.topic, tp.partition)
            # position() also steps over transaction markers, which are never delivered.
            reached = max(self._next[key], tp.offset if tp.offset >= 0 else -1)
            if reached < self._end[key]:
                return False
        return True

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        if offsets:
            partitions = [KafkaPartition(tp.topic, tp.partition, o) for tp, o in offsets.items()]
            # The checkpoint is already saved (and authoritative): a refused commit is retried, then reported.
            self._retrying("commit offsets", lambda: self._consumer.commit(offsets=partitions, asynchronous=False))

    def close(self) -> None:
        self._consumer.close()
