"""SCD type 2 history tables (`[history] tables`): exact, across DDL and replays; begun from a table's rows.

The expected history comes from `tests.history_model`, kept beside the upstream model as the workload runs.
Kills between a table's MERGE or rename and its history's: tests/e2e/test_crash_recovery.py (the killed
run's history must be the uninterrupted run's) and, without Spark, tests/unit/test_history_applier.py.
"""

from __future__ import annotations

import random
import uuid

import pytest

from benchmarks import fault_kills
from testbed.changefeed import Changefeed
from tests.history_model import HISTORY_COLUMNS, HistoryModel, history_workload, random_changes
from tests.support import SPARK_ENGINE_PAIR, assert_gone, job_config, publish, run_job, table_frame
from ticdc_delta.apply.places.locator import PathLocator
from ticdc_delta.jobs.status import gather_status
from ticdc_delta.schema_cache.events import TableName

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.one_pair("history tables are built by the applier's SQL, the same on both pairs", pair="newest"),
]

HISTORY = {"history": {"tables": ["shop.*"]}}


def history_rows(spark, target, database: str, table: str) -> tuple[list[str], list[tuple]]:
    """The history table's columns (sorted) and its rows as tuples of them, sorted."""
    frame = table_frame(spark, str(target), f"{database}_history", table)
    columns = sorted(frame.columns)
    return columns, sorted((tuple(row[c] for c in columns) for row in frame.collect()), key=repr)


def assert_history(spark, target, model: HistoryModel, table_columns: set[str]) -> None:
    columns, rows = history_rows(spark, target, *model.name)
    assert set(columns) == table_columns | set(HISTORY_COLUMNS)
    expected = model.rows(columns)
    assert rows == expected, (
        f"{len(rows)} history rows, expected {len(expected)}; missing {[r for r in expected if r not in rows][:3]}, "
        f"extra {[r for r in rows if r not in expected][:3]}"
    )


def test_history_chosen_for_a_table_already_applied_begins_with_its_rows(spark, kafka, tmp_path):
    # Setup: a table applied without history; then history chosen for it and more changes applied.
    # Expect: its history begins with the rows it held, op SNAPSHOT, valid from its applied commitTs, and
    # continues with every later state; a re-run with nothing new changes nothing.
    rng = random.Random(7)
    feed = Changefeed(3)
    from testbed.tables import column

    feed.create_table("shop", "items", [column("id", "int", nullable=False), column("qty", "int")], primary_key=["id"])
    feed.create_table("crm", "notes", [column("id", "int", nullable=False), column("body", "text")], primary_key=["id"])
    earlier = HistoryModel(feed, "shop", "items")
    counter = iter(range(10**6))
    random_changes(feed, earlier, rng, 5, counter)
    topic, target, group = f"history-{uuid.uuid4().hex[:8]}", str(tmp_path / "delta"), f"g-{uuid.uuid4().hex}"
    publish(kafka, topic, feed.messages)
    run_job(spark, kafka, topic, target, group)
    applied_through = feed.last_ts

    model = HistoryModel(feed, "shop", "items")
    model.begin_from_table(applied_through)
    sent = len(feed.messages)
    random_changes(feed, model, rng, 5, counter)
    publish(kafka, topic, feed.messages[sent:])
    run_job(spark, kafka, topic, target, group, **HISTORY)
    assert_history(spark, target, model, {"id", "qty"})
    assert any(state["op"] == "SNAPSHOT" for state in model.states)

    name = PathLocator(target).sql_name(TableName("shop_history", "items"))
    versions = spark.sql(f"DESCRIBE HISTORY {name}").count()
    run_job(spark, kafka, topic, target, group, **HISTORY)
    assert spark.sql(f"DESCRIBE HISTORY {name}").count() == versions
    # `ticdc-delta status` lists the history after its table, applied through the same point.
    listed = gather_status(job_config(kafka, topic, target, group, **HISTORY), spark).tables
    tables = {t.name: t for t in listed}
    assert len(tables) == len(listed)  # each once (the history table is registered too)
    names = list(tables)
    assert names[names.index("shop.items") + 1] == "shop_history.items" and "crm_history.notes" not in names
    assert tables["shop_history.items"].exists and tables["shop_history.items"].applied_ts == tables["shop.items"].applied_ts


@SPARK_ENGINE_PAIR
def test_the_spark_engine_keeps_the_same_history(spark, kafka, tmp_path):
    # Setup: the DDL workload (`history_workload`), applied by the Spark engine (`run.engine = "spark"`) in one
    # batch (CI time: each costs the Spark engine about six Spark actions), split into runs by the DDL: the
    # history's MERGE source built by Spark from the staged rows (a release of at most `run.max_pending_events`
    # rows is merged from the driver's memory instead, as the driver engine does: 1 here), each run's closing the
    # states of the last.
    # Expect: the tables upstream has and the exact history, as the driver engine gives them.
    rng = random.Random(11)
    feed = Changefeed(3)
    model = history_workload(feed, rng, txns=2)
    topic, target = f"history-{uuid.uuid4().hex[:8]}", tmp_path / "delta"
    publish(kafka, topic, feed.messages)
    run_job(spark, kafka, topic, str(target), f"g-{uuid.uuid4().hex}", engine="spark",
            run={"batch_max_messages": 10_000, "batch_max_seconds": 30.0, "max_pending_events": 1}, **HISTORY)
    assert fault_kills.differences(spark, target, feed, None) == []
    assert_history(spark, target, model, {"id", "title", "qty", "note", "stock"})
    assert not (target / "crm_history").exists()
    assert_gone(spark, str(target), "shop_history", "items")
