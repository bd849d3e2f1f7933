"""Topics by pattern (`kafka.topic_pattern`), as TiCDC's topic dispatcher writes them: one topic per table, a new
topic when a table is created upstream, on the real broker."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from testbed.changefeed import Changefeed
from testbed.tables import column
from tests.support import assert_table, job_config, publish, table_frame
from tests.workloads import ITEMS_DDL, item, items_feed
from ticdc_delta.exceptions import SourceError
from ticdc_delta.jobs.kafka_source import KafkaSource
from ticdc_delta.jobs.pipeline import runs

pytestmark = pytest.mark.e2e


def _orders_feed(after: Changefeed | None = None) -> Changefeed:
    """A table of the items table's columns, created (after `after`'s last commit) in a feed of its own."""
    feed = Changefeed(3)
    if after is not None:
        feed.advance_to(after.last_ts)
    feed.create_table("shop", "orders", [column("id", "int", nullable=False), column("name", "varchar", length=64),
                                         column("price", "decimal", length=10, decimal=2),
                                         column("updated", "timestamp", decimal=6)], primary_key=["id"])
    return feed


class _Topics:
    """Each feed's messages not yet published, to its own topic."""

    def __init__(self, kafka) -> None:
        self.kafka, self.sent = kafka, {}

    def publish(self, feed: Changefeed, topic: str) -> None:
        publish(self.kafka, topic, feed.messages[self.sent.get(topic, 0):])
        self.sent[topic] = len(feed.messages)


def _in_step(*feeds: Changefeed) -> None:
    """A watermark on every feed at the newest commitTs among them, as TiCDC sends it to every topic."""
    now = max(feed.last_ts for feed in feeds)
    for feed in feeds:
        feed.advance_to(now)
        feed.watermark()


def _rows_of(spark, target: str, table: str) -> int:
    # (the folder appears before the table's first commit)
    if not any((Path(target) / "shop" / table / "_delta_log").glob("*.json")):
        return -1
    return table_frame(spark, target, "shop", table).count()


def _wait(what: str, done, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if done():
            return
        time.sleep(1)
    raise AssertionError(f"{what}: not within {seconds:g}s")


def test_a_topic_created_while_the_job_runs_is_read_from_its_start_one_deleted_stops_nothing(spark, kafka, tmp_path, unique, engine):
    # Setup: one topic per table (`<prefix>shop_items`), a topic the pattern does not match, and a continuous
    # job on `<prefix>.*` looking for new topics every second. While it runs, a table is created upstream in a
    # topic of its own (`<prefix>shop_orders`); then more rows reach both; then that topic is deleted and a row
    # reaches the first.
    # Expect: both tables equal upstream, the new one from its CREATE on; the other topic's table never made;
    # the run that found the topic (and the one that found it gone) ended at a checkpoint saying so, and the
    # next went on in the same process;
    # the stop ended it cleanly; what status covers is the matching topics left, and a pattern matching none is
    # one line. (It is also the continuous mode's test of waves applied while the job runs;
    # test_metrics_and_status.py's continuous test reads a list of topics.)
    prefix, target = f"tp-{unique}-", str(tmp_path)
    topics = _Topics(kafka)
    items = items_feed()
    for i in range(20):
        with items.transaction() as txn:
            txn.insert("shop", "items", item(i))
    topics.publish(items, f"{prefix}shop_items")
    elsewhere = items_feed()
    with elsewhere.transaction() as txn:
        txn.insert("shop", "items", item(99))
    topics.publish(elsewhere, f"other-{unique}")

    config = job_config(kafka, [], target, f"g-{unique}", engine=engine,
                        kafka={"topics": [], "topic_pattern": f"{prefix}.*", "topic_refresh_seconds": 1.0},
                        run={"mode": "continuous", "batch_max_seconds": 1.0})
    stop, results, failures = threading.Event(), [], []

    def run() -> None:
        try:
            results.extend(runs(config, spark, stop=stop))
        except BaseException as err:
            failures.append(err)
            raise

    job = threading.Thread(target=run)
    job.start()
    try:
        _wait("the first topic's rows", lambda: _rows_of(spark, target, "items") == 20)
        orders = _orders_feed(after=items)
        for i in range(5):
            with orders.transaction() as txn:
                txn.insert("shop", "orders", item(i))
        _in_step(items, orders)
        topics.publish(orders, f"{prefix}shop_orders")
        topics.publish(items, f"{prefix}shop_items")
        _wait("the new topic's table", lambda: _rows_of(spark, target, "orders") == 5)
        for i in range(20, 30):
            with items.transaction() as txn:
                txn.insert("shop", "items", item(i))
            orders.advance_to(items.last_ts)
            with orders.transaction() as txn:
                txn.insert("shop", "orders", item(i))
            _in_step(items, orders)
        topics.publish(items, f"{prefix}shop_items")
        topics.publish(orders, f"{prefix}shop_orders")
        _wait("both tables' later rows", lambda: (_rows_of(spark, target, "items"), _rows_of(spark, target, "orders")) == (30, 15))
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
        admin.delete_topics([f"{prefix}shop_orders"])[f"{prefix}shop_orders"].result(30)
        with items.transaction() as txn:
            txn.insert("shop", "items", item(30))
        topics.publish(items, f"{prefix}shop_items")
        _wait("a row after a topic's deletion", lambda: _rows_of(spark, target, "items") == 31)
    finally:
        stop.set()
        job.join(120)
    assert not job.is_alive() and failures == []
    assert_table(spark, target, items, "shop", "items", ITEMS_DDL)
    assert_table(spark, target, orders, "shop", "orders", ITEMS_DDL)
    # (a third run, unless the stop came before the look that found the topic gone, whose run then ended)
    changes = [r.topics_changed for r in results]
    assert changes[:2] == [f"new topics {prefix}shop_orders", f"deleted topics {prefix}shop_orders"] and changes[2:] in ([], [""])
    assert not (tmp_path / "other").exists() and sorted(p.name for p in (tmp_path / "shop").iterdir()) == ["items", "orders"]
    source = KafkaSource(config.kafka)  # (what `status` and its lag cover: every matching topic now)
    try:
        assert source.partitions() == {f"{prefix}shop_items": [0, 1, 2]}
    finally:
        source.close()
    nothing = job_config(kafka, [], target, f"g-{unique}", kafka={"topics": [], "topic_pattern": f"none-{unique}.*"})
    source = KafkaSource(nothing.kafka)
    try:
        with pytest.raises(SourceError, match=rf"kafka.topic_pattern: no topic matches 'none-{unique}\.\*' at "):
            source.partitions()
    finally:
        source.close()
