"""Tables merged at once (`run.apply_concurrency`, `apply.writers.table_pool`): a failing table among committing ones."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from testbed.demo import demo_changefeed
from tests.support import assert_table, job_config, publish
from tests.workloads import DEMO_TABLE_DDLS
from ticdc_delta.apply.base.session import SqlSession
from ticdc_delta.apply.places.locator import PathLocator
from ticdc_delta.apply.tables.markers import read_progress
from ticdc_delta.apply.writers.delta_writer import DeltaWriter
from ticdc_delta.apply.writers.table_pool import TablePool
from ticdc_delta.jobs.pipeline import Pipeline
from ticdc_delta.schema_cache.events import TableName

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("small_merges", ["spark", "delta-rs"])
def test_one_table_failing_while_the_others_commit_ends_exact_after_a_restart(spark, kafka, tmp_path, unique, monkeypatch,
                                                                              small_merges):
    """About 15 s: two in-process job runs over the demo stream."""
    # Setup: the demo stream (customers and orders, an ALTER, key changes) in one batch, the tables merged at
    #    once on two threads; customers' MERGE there fails (as a lost storage call would) while orders' runs
    #    on the other thread. Then a run without the fault.
    # Expect: the first run fails with that error after orders committed (its applied point is on its
    #    table, merged at once with customers' failing one); the second run applies what customers lacks,
    #    skips what orders holds, and both tables equal upstream. With small MERGEs committed by delta-rs
    #    (target.small_merge_writer), the same, and customers' MERGEs are delta-rs commits; orders' stay
    #    Spark's (its keys near 2^64 are values whose statistics delta-rs cannot record exactly).
    feed = demo_changefeed(seed=21, changes=200)
    topic, target, group = f"tables-{unique}", str(tmp_path), f"g-{unique}"
    publish(kafka, topic, feed.messages)
    merge, run_each, pooled, failed, at_once = DeltaWriter.merge, TablePool.run_each, [], [], threading.Event()

    def tables_at_once(pool, items, work):  # the batch's last MERGE of each table, all at once
        at_once.set()
        try:
            return run_each(pool, items, work)
        finally:
            at_once.clear()

    def failing_merge(writer, table, *args, **kwargs):
        if at_once.is_set():
            if table.table == "customers" and not failed:
                failed.append(threading.current_thread().name)
                raise OSError("the storage call of customers' MERGE failed")
            merge(writer, table, *args, **kwargs)
            pooled.append(table.table)
            return None
        return merge(writer, table, *args, **kwargs)

    monkeypatch.setattr(TablePool, "run_each", tables_at_once)
    monkeypatch.setattr(DeltaWriter, "merge", failing_merge)
    run = {"mode": "until-idle", "batch_max_seconds": 30.0, "batch_max_messages": 100_000, "apply_concurrency": 2}
    config = job_config(kafka, topic, target, group, run=run)
    config = dataclasses.replace(config, target=dataclasses.replace(config.target, small_merge_writer=small_merges))
    with pytest.raises(OSError, match="customers' MERGE failed"):
        Pipeline.from_config(config, spark).run()
    orders = read_progress(SqlSession(spark), PathLocator(target).sql_name(TableName("shop", "orders")))
    assert orders.exists and orders.point is not None and orders.point.ts is not None
    assert pooled == ["orders"] and failed
    monkeypatch.setattr(DeltaWriter, "merge", merge)

    again = Pipeline.from_config(config, spark).run()

    assert again.replays_skipped > 0
    for table, ddl in DEMO_TABLE_DDLS.items():
        assert_table(spark, target, feed, "shop", table, ddl)
        name = PathLocator(target).sql_name(TableName("shop", table))
        engines = {row[0].split(":")[0] for row in spark.sql(f"DESCRIBE HISTORY {name}").select("engineInfo").collect()}
        assert ("delta-rs" in engines) == (small_merges == "delta-rs" and table == "customers"), engines
