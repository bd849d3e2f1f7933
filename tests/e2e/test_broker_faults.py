"""The Kafka broker stops mid-run: the job waits for it, or gives up after its limit having committed only what it applied."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from testbed.demo import demo_changefeed
from testbed.local_kafka import LocalKafka
from tests.support import assert_table, publish, run_job
from ticdc_delta.apply.base.session import SqlSession
from ticdc_delta.apply.own_tables.checkpoint import CheckpointStore
from ticdc_delta.apply.places.locator import PathLocator
from ticdc_delta.exceptions import KafkaUnreachableError
from ticdc_delta.jobs import config as config_module
from ticdc_delta.jobs.config import KafkaConfig
from ticdc_delta.jobs.kafka_source import KafkaSource
from ticdc_delta.jobs.pipeline import Pipeline

pytestmark = pytest.mark.e2e

CUSTOMERS = "id INT, name STRING, balance DECIMAL(12,2), signed_up TIMESTAMP, tier STRING"
ORDERS = "order_no DECIMAL(20,0), customer_id INT, amount DECIMAL(10,2), status STRING, placed_at TIMESTAMP_NTZ, note STRING"


def _checkpoints(target: Path) -> int:
    log = target / "_ticdc" / "checkpoints" / "_delta_log"
    return len(list(log.glob("*.json"))) if log.is_dir() else 0


class _Running:
    """The job in a thread of this process (the test's Spark session): its result or its error."""

    def __init__(self, config, spark) -> None:
        self.result, self.error = None, None
        self._pipeline = Pipeline.from_config(config, spark)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.result = self._pipeline.run()
        except Exception as err:  # noqa: BLE001 (handed to the test, which asserts its type)
            self.error = err

    def wait_for_checkpoints(self, target: Path, count: int) -> None:
        deadline = time.monotonic() + 240
        while _checkpoints(target) < count:
            assert self.thread.is_alive(), f"the job ended before {count} checkpoints: {self.error or self.result}"
            assert time.monotonic() < deadline, "no checkpoint saved"
            time.sleep(0.2)


def test_broker_outage_is_waited_out_and_one_past_the_limit_stops_the_job_with_only_applied_work_committed(spark, tmp_path, unique):
    """About 70 s in CI, mostly waiting: a broker of its own started three times, an 8 s outage waited out,
    then one outlasting the job's limit."""
    # Setup: a broker of this test's own, the demo stream read in small batches, idle timeout 2 s.
    # 1. The broker is stopped after the first checkpoint and started again 8 s later (past the idle
    #    timeout): the job waits and finishes with the upstream tables.
    # 2. More changes; the broker is stopped mid-run and kept down past kafka.unreachable_timeout_seconds
    #    (4 s): the job stops with KafkaUnreachableError; the group's committed offsets do not pass the
    #    checkpoint; once the broker is back, a new run ends with the upstream tables (nothing was skipped).
    broker = LocalKafka(tmp_path / "kafka")
    broker.start()
    try:
        feed = demo_changefeed(seed=17, changes=120)
        topic, group, target = f"outage-{unique}", f"g-{unique}", tmp_path / "delta"
        half = len(feed.messages) // 2
        publish(broker, topic, feed.messages[:half])

        def config(unreachable_limit: float, batch: int):
            return config_module.from_mapping({
                "kafka": {"bootstrap_servers": broker.bootstrap_servers, "topics": [topic], "group_id": group,
                          "unreachable_timeout_seconds": unreachable_limit},
                "target": {"path": str(target)},
                "run": {"mode": "until-idle", "batch_max_messages": batch, "batch_max_seconds": 2.0, "idle_timeout_seconds": 2.0},
            })

        job = _Running(config(120.0, 25), spark)
        job.wait_for_checkpoints(target, 1)
        broker.stop()
        time.sleep(8)
        assert job.thread.is_alive(), f"the job stopped while the broker was down: {job.error or job.result}"
        broker.start()
        job.thread.join(timeout=300)
        assert job.error is None and job.result is not None and job.result.rows_applied > 0

        publish(broker, topic, feed.messages[half:])
        before = _checkpoints(target)
        job = _Running(config(4.0, 10), spark)  # small batches: the stream outlasts the broker
        job.wait_for_checkpoints(target, before + 1)
        broker.stop()
        # Generous: it first applies what it had already fetched, batch by batch, which a loaded CI machine
        # (both pairs at once) stretched past two minutes once.
        job.thread.join(timeout=600)
        assert not job.thread.is_alive(), "the job neither stopped nor finished within 600 s of the outage"
        assert isinstance(job.error, KafkaUnreachableError), job.error or f"finished before the outage: {job.result}"
        assert "unreachable for" in str(job.error) and "kafka.unreachable_timeout_seconds = 4" in str(job.error)

        broker.start()
        checkpoint = CheckpointStore(SqlSession(spark), PathLocator(str(target))).load(group)
        committed = _committed_offsets(broker.bootstrap_servers, group, topic)
        assert all(offset <= checkpoint.offsets[tp] for tp, offset in committed.items()), (committed, checkpoint.offsets)
        run_job(spark, broker, topic, str(target), group)
        assert_table(spark, str(target), feed, "shop", "customers", CUSTOMERS)
        assert_table(spark, str(target), feed, "shop", "orders", ORDERS)
    finally:
        broker.stop()


def test_a_commit_in_flight_when_the_broker_stops_ends_in_kafka_unreachable_error(tmp_path, unique):
    # Setup: three sources of three new groups (a group's first commit also looks up its coordinator) commit
    #    their offsets again and again from threads started 0.1 s, 0.05 s and 0 s before the broker stops, so
    #    the stop meets commits at different stages.
    # Expect: every source's commits end within the limit plus a commit's wait, with KafkaUnreachableError;
    #    none blocks (librdkafka's synchronous commit could wait forever when the broker went away mid-commit,
    #    which left a job running, neither applying nor stopping); closing each source ends too.
    broker = LocalKafka(tmp_path / "kafka")
    broker.start()
    try:
        topic = f"commits-{unique}"
        publish(broker, topic, demo_changefeed(seed=5, changes=30).messages)
        sources = [KafkaSource(KafkaConfig(bootstrap_servers=broker.bootstrap_servers, topics=(topic,),
                                           group_id=f"g-{unique}-{n}", unreachable_timeout_seconds=2)) for n in range(3)]
        outcomes: list[list[BaseException]] = [[] for _ in sources]

        def commit_until_it_fails(source: KafkaSource, outcome: list[BaseException]) -> None:
            ends = source.end_offsets()
            try:
                while True:
                    source.commit(ends)
            except BaseException as err:  # noqa: BLE001 (handed to the test, which asserts its type)
                outcome.append(err)

        committing = []
        for source in sources:
            source.open()
        for source, outcome in zip(sources, outcomes, strict=True):
            committing.append(threading.Thread(target=commit_until_it_fails, args=(source, outcome), daemon=True))
            committing[-1].start()
            time.sleep(0.05)
        broker.stop()
        for n, thread in enumerate(committing):
            thread.join(timeout=60)
            assert not thread.is_alive(), f"source {n}: a commit still blocks 60 s after the broker stopped"
            assert isinstance(outcomes[n][0], KafkaUnreachableError), outcomes[n]
        closing = [threading.Thread(target=source.close, daemon=True) for source in sources]
        for thread in closing:
            thread.start()
        for n, thread in enumerate(closing):
            thread.join(timeout=30)
            assert not thread.is_alive(), f"source {n}: closing it blocks"
    finally:
        broker.stop()


def _committed_offsets(bootstrap_servers: str, group: str, topic: str) -> dict:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaPartition

    from ticdc_delta.schema_cache.events import TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": group, "enable.auto.commit": False})
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        found = consumer.committed([KafkaPartition(topic, p) for p in partitions], timeout=30)
        return {TopicPartition(c.topic, c.partition): c.offset for c in found if c.offset >= 0}
    finally:
        consumer.close()
