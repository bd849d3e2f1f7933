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
