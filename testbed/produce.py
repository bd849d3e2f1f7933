"""Writing prepared messages to Kafka (demo, tests, benchmark)."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic


def ensure_topic(bootstrap_servers: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    try:
        futures[topic].result(30)
    except KafkaException as err:
        if err.args[0].name() != "TOPIC_ALREADY_EXISTS":
            raise


def produce(bootstrap_servers: str, topic: str, messages: Iterable[tuple[int, bytes | None, bytes | None]]) -> int:
    """Send (partition, key, value) in order; returns how many were sent."""
    producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 5, "enable.idempotence": True})
    failures = []

    def on_delivery(err, _message) -> None:
        if err is not None:
            failures.append(err)

    count = 0
    for partition, key, value in messages:
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=partition, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        count += 1
    remaining = producer.flush(60)
    if remaining or failures:
        raise RuntimeError(f"{remaining + len(failures)} messages to {topic} were not delivered: {failures[:3]}")
    return count


def publish_in_order(bootstrap_servers: str, messages: Iterable, default_topic: str, partitions: int) -> int:
    """Send a changefeed's messages (`testbed.changefeed.Message`) as TiCDC does, in order: rows asynchronously,
    a DDL or watermark only once every message before it is acknowledged, and acknowledged before anything after
    it (TiCDC's DDL sink sends them synchronously, a checkpoint only after the rows below it are flushed: what lets
    a consumer take a partition read to its end as complete through a watermark read elsewhere). Those naming no
    topic go to `default_topic`; every topic is created first with `partitions`. Returns how many were sent."""
    messages = list(messages)
    for topic in dict.fromkeys(m.topic or default_topic for m in messages):
        ensure_topic(bootstrap_servers, topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 5, "enable.idempotence": True})
    failures = []

    def on_delivery(err, _message) -> None:
        if err is not None:
            failures.append(err)

    def flushed() -> None:
        if producer.flush(60) or failures:
            raise RuntimeError(f"messages were not delivered: {failures[:3]}")

    synchronous = False
    for message in messages:
        barrier = message.kind in ("DDL", "WATERMARK")
        if barrier != synchronous:
            flushed()
            synchronous = barrier
        while True:
            try:
                producer.produce(message.topic or default_topic, value=message.value, key=message.key,
                                 partition=message.partition, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
    flushed()
    return len(messages)
