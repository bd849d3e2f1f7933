"""Topics by pattern (`kafka.topic_pattern`), as TiCDC's topic dispatcher writes them: one topic per table, a new
topic when a table is created upstream, on the real broker."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka.admin import AdminClient
from pyspark.errors import AnalysisException

from testbed.tables import column
from tests.support import assert_gone, assert_table, job_config, publish, table_frame
from tests.workloads import ITEMS_DDL, item, items_feed
from ticdc_delta.exceptions import SourceError
from ticdc_delta.jobs.kafka_source import KafkaSource
from ticdc_delta.jobs.pipeline import runs

pytestmark = pytest.mark.e2e


def _rows_of(spark, target: str, database: str, table: str) -> int:
    """The table's rows as a reader finds it (through the registry: a renamed table stays in its folder); -1 while
    there is none under that name."""
    try:
        return table_frame(spark, target, database, table).count()
    except (LookupError, AnalysisException):
        return -1


def _wait(what: str, done, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if done():
            return
        time.sleep(1)
    raise AssertionError(f"{what}: not within {seconds:g}s")


def test_a_topic_created_while_the_job_runs_is_read_from_its_start_one_deleted_stops_nothing(spark, kafka, tmp_path, unique, engine):
    # Setup: a changefeed with a topic per table, as TiCDC's router writes it (`<prefix>shop_items`), a topic the
    # pattern does not match, and a continuous job on `<prefix>.*` looking for new topics every second. While it
    # runs, a table is created upstream, in a topic of its own (`<prefix>shop_orders`); more rows reach both;
    # the new table is renamed (the RENAME on its topic, which then gets no watermark; its later rows on a new
    # topic, `<prefix>shop_orders_2026`); then the old name's topic is deleted and a row reaches the first.
    # Expect: every table equal upstream, the new one from its CREATE on, the renamed one holding its rows from
    # before the RENAME and after it; the other topic's table never made; each run that found a topic (and the
    # one that found it gone) ended at a checkpoint saying so, and the next went on in the same process;
    # the stop ended it cleanly; what status covers is the matching topics left, and a pattern matching none is
    # one line. (It is also the continuous mode's test of waves applied while the job runs, and of DDL across
    # topics; test_metrics_and_status.py's continuous test reads a list of topics.)
    prefix, target = f"tp-{unique}-", str(tmp_path)
    feed = items_feed(topic_per_table=prefix + "{schema}_{table}")
    for i in range(20):
        with feed.transaction() as txn:
            txn.insert("shop", "items", item(i))
    sent = publish(kafka, "unused", feed.messages)
    elsewhere = items_feed()
    with elsewhere.transaction() as txn:
        txn.insert("shop", "items", item(99))
    publish(kafka, f"other-{unique}", elsewhere.messages)

    def publish_new() -> None:
        nonlocal sent
        sent += publish(kafka, "unused", feed.messages[sent:])

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
        _wait("the first topic's rows", lambda: _rows_of(spark, target, "shop", "items") == 20)
        feed.create_table("shop", "orders", [column("id", "int", nullable=False), column("name", "varchar", length=64),
                                             column("price", "decimal", length=10, decimal=2),
                                             column("updated", "timestamp", decimal=6)], primary_key=["id"])
        for i in range(5):
            with feed.transaction() as txn:
                txn.insert("shop", "orders", item(i))
        publish_new()
        _wait("the new topic's table", lambda: _rows_of(spark, target, "shop", "orders") == 5)
        for i in range(20, 30):
            with feed.transaction() as txn:
                txn.insert("shop", "items", item(i))
                txn.insert("shop", "orders", item(i))
        publish_new()
        _wait("both tables' later rows", lambda: (_rows_of(spark, target, "shop", "items"),
                                                  _rows_of(spark, target, "shop", "orders")) == (30, 15))
        feed.rename_table("shop", "orders", "shop", "orders_2026")
        for i in range(30, 33):
            with feed.transaction() as txn:
                txn.insert("shop", "orders_2026", item(i))
        publish_new()
        _wait("the renamed table's later rows", lambda: _rows_of(spark, target, "shop", "orders_2026") == 18)
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
        admin.delete_topics([f"{prefix}shop_orders"])[f"{prefix}shop_orders"].result(30)
        with feed.transaction() as txn:
            txn.insert("shop", "items", item(30))
        publish_new()
        _wait("a row after a topic's deletion", lambda: _rows_of(spark, target, "shop", "items") == 31)
    finally:
        stop.set()
        job.join(120)
    assert not job.is_alive() and failures == []
    assert_table(spark, target, feed, "shop", "items", ITEMS_DDL)
    assert_table(spark, target, feed, "shop", "orders_2026", ITEMS_DDL)
    assert_gone(spark, target, "shop", "orders")
    # (a fourth run, unless the stop came before the look that found the topic gone, whose run then ended)
    changes = [r.topics_changed for r in results]
    assert changes[:3] == [f"new topics {prefix}shop_orders", f"new topics {prefix}shop_orders_2026",
                           f"deleted topics {prefix}shop_orders"] and changes[3:] in ([], [""]), changes
    assert not (tmp_path / "other").exists() and sorted(p.name for p in (tmp_path / "shop").iterdir()) == ["items", "orders"]
    source = KafkaSource(config.kafka)  # (what `status` and its lag cover: every matching topic now)
    try:
        assert source.partitions() == {f"{prefix}shop_items": [0, 1, 2], f"{prefix}shop_orders_2026": [0, 1, 2]}
    finally:
        source.close()
    nothing = job_config(kafka, [], target, f"g-{unique}", kafka={"topics": [], "topic_pattern": f"none-{unique}.*"})
    source = KafkaSource(nothing.kafka)
    try:
        with pytest.raises(SourceError, match=rf"kafka.topic_pattern: no topic matches 'none-{unique}\.\*' at "):
            source.partitions()
    finally:
        source.close()
