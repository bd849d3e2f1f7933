"""Offset ranges read on the driver (`KafkaSource.read`: the Spark engine's small batches) against a real broker:
exactly the messages of each range, and a range Kafka no longer holds refused, as Spark's Kafka source refuses
it (`failOnDataLoss`). No Spark: a few seconds."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition as KafkaPartition
from confluent_kafka.admin import AdminClient

from testbed.produce import ensure_topic, produce
from ticdc_delta.exceptions import SourceError
from ticdc_delta.jobs import config, kafka_source
from ticdc_delta.jobs.kafka_source import KafkaSource
from ticdc_delta.schema_cache.events import TopicPartition

pytestmark = [pytest.mark.e2e]


def _source(kafka, topic: str, group: str) -> KafkaSource:
    loaded = config.from_mapping({
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers, "topics": [topic], "group_id": group},
        "target": {"path": "/unused"},
    })
    return KafkaSource(loaded.kafka)


def test_ranges_read_exactly_their_messages_and_a_range_retention_removed_is_refused(kafka, unique, monkeypatch):
    # Setup: 10 messages on each of 3 partitions; the source planned (as the Spark engine plans, nothing assigned).
    # Expect: per partition exactly the offsets asked for, in order, none past a range's end (the partition
    # holds more) and none of an empty range; nothing stays assigned. Then the first 4 offsets of partition 0
    # deleted (as retention deletes them): a range starting before them fails naming the partition and
    # retention, and one starting at the oldest offset held reads. A range past a partition's last message
    # (messages it had reported, then lost) fails once none came for the stall limit (2 s here).
    topic = f"ranges-{unique}"
    ensure_topic(kafka.bootstrap_servers, topic, 3)
    produce(kafka.bootstrap_servers, topic, [(p, f"k{p}".encode(), f"{p}:{i}".encode()) for i in range(10) for p in range(3)])
    source = _source(kafka, topic, f"g-{unique}")
    try:
        source.plan()
        tp = [TopicPartition(topic, p) for p in range(3)]
        read = source.read({tp[0]: (2, 7), tp[1]: (4, 4), tp[2]: (5, 10)})
        assert sorted((m.partition, m.offset, m.value) for m in read) == (
            [(0, o, f"0:{o}".encode()) for o in range(2, 7)] + [(2, o, f"2:{o}".encode()) for o in range(5, 10)]
        )
        for p in (0, 2):
            offsets = [m.offset for m in read if m.partition == p]
            assert offsets == sorted(offsets)  # a partition's messages in offset order
        assert source._consumer.assignment() == []  # no fetching ahead between batches

        admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
        (future,) = admin.delete_records([KafkaPartition(topic, 0, 4)]).values()
        future.result(30)
        with pytest.raises(SourceError, match=rf"{topic} partition 0: offsets from 1 were removed from Kafka \(retention\)"):
            source.read({tp[0]: (1, 6)})
        assert [m.offset for m in source.read({tp[0]: (4, 6)})] == [4, 5]
        monkeypatch.setattr(kafka_source, "_READ_STALL_SECONDS", 2.0)
        with pytest.raises(SourceError, match=rf"reading {topic} partition 1 at 10 of 12: no message for 2s"):
            source.read({tp[1]: (10, 12)})
    finally:
        source.close()
