"""SCD type 2 history tables (`[history] tables`): exact, across DDL, kills and replays; begun from a table's rows.

The expected history comes from `tests.history_model`, kept beside the upstream model as the workload runs.
"""

from __future__ import annotations

import random
import uuid

import pytest

from apply.locator import PathLocator
from benchmarks import fault_kills
from jobs.status import gather_status
from schema_cache.events import TableName
from testbed.changefeed import Changefeed
from tests.history_model import HISTORY_COLUMNS, HistoryModel, history_workload, random_changes
from tests.support import job_config, publish, run_job

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.one_pair("history tables are built by the applier's SQL, the same on both pairs", pair="newest"),
]

BATCH = 40  # messages per batch: several batches, so kills land between a table's MERGE and its history's
HISTORY = {"history": {"tables": ["shop.*"]}}


def history_rows(spark, target, database: str, table: str) -> tuple[list[str], list[tuple]]:
    """The history table's columns (sorted) and its rows as tuples of them, sorted."""
    frame = spark.table(PathLocator(str(target)).sql_name(TableName(f"{database}_history", table)))
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


def test_history_is_exact_through_ddl_and_after_kills_between_a_tables_merge_and_its_historys(spark, kafka, tmp_path):
    # Setup: Simple JSON; shop.items (history chosen by `shop.*`) through inserts, updates, deletes, a key move,
    # ADD COLUMN DEFAULT, DROP COLUMN, RENAME COLUMN, TRUNCATE, RENAME TABLE (to shop.goods); crm.notes beside
    # it. A run killed (SIGKILL) right after a MERGE committed (a table's or its history's) or right after
    # the table's rename (before its history's), then restarted. (The uninterrupted run is the Spark-engine
    # test's below, whose history must be the same; CI time: each job process here costs a JVM.)
    # Expect: the tables upstream has and the exact history: every state with its commitTs range, op and
    # current flag, dropped column kept, added default in current states only; the history follows the
    # rename and nothing is left under the old name; crm.notes keeps none.
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    rng = random.Random(seed)
    feed = Changefeed(3)
    model = history_workload(feed, rng, txns=3)
    scene = fault_kills.Scenario("simple-json", feed, HISTORY, f"history-{uuid.uuid4().hex[:8]}", carries_ddl=True)
    fault_kills.publish_scenario(kafka.bootstrap_servers, scene)
    columns = {"id", "title", "qty", "note", "stock"}

    def sections(target):
        return fault_kills.job_sections(kafka.bootstrap_servers, scene, target, f"h-{uuid.uuid4().hex}", BATCH)

    # One kill (each costs a job process: CI time): after a MERGE (the history's or the table's, whichever
    # came first), or between the table's rename and its history's, by the seed. Kills during a MERGE are the
    # crash test's; tests/unit/test_history_applier.py takes each crash point's decisions without Spark.
    planned = [rng.choice([fault_kills.KillPlan("after_table_commit", hit=rng.randint(1, 4)),
                           fault_kills.KillPlan("rename", moment="after")])]
    workdir = tmp_path / "killed"
    workdir.mkdir()
    killed = sections(workdir / "delta")
    outcome = fault_kills.kill_run(scene, killed, workdir, len(planned), rng, None, spark, planned=planned)
    print(f"kills: {outcome.kills}")
    assert outcome.kills, "no kill happened: the workload ended before its kill points"
    assert outcome.equal, outcome.problems
    assert_history(spark, workdir / "delta", model, columns)
    assert not (workdir / "delta" / "crm_history").exists()
    assert not (workdir / "delta" / "shop_history" / "items").exists()


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
    tables = {t.name: t for t in gather_status(job_config(kafka, topic, target, group, **HISTORY), spark).tables}
    names = list(tables)
    assert names[names.index("shop.items") + 1] == "shop_history.items" and "crm_history.notes" not in names
    assert tables["shop_history.items"].exists and tables["shop_history.items"].applied_ts == tables["shop.items"].applied_ts


def test_the_spark_engine_keeps_the_same_history(spark, kafka, tmp_path):
    # Setup: the DDL workload of the kill test, applied by the Spark engine (`run.engine = "spark"`) in one
    # batch (CI time: each costs the Spark engine about six Spark actions), split into runs by the DDL: the
    # history's MERGE source built by Spark from the staged rows, each run's closing the states of the last.
    # Expect: the tables upstream has and the exact history, as the driver engine gives them.
    rng = random.Random(11)
    feed = Changefeed(3)
    model = history_workload(feed, rng, txns=2)
    topic, target = f"history-{uuid.uuid4().hex[:8]}", tmp_path / "delta"
    publish(kafka, topic, feed.messages)
    run_job(spark, kafka, topic, str(target), f"g-{uuid.uuid4().hex}", engine="spark",
            run={"batch_max_messages": 10_000, "batch_max_seconds": 30.0}, **HISTORY)
    assert fault_kills.differences(spark, target, feed, None) == []
    assert_history(spark, target, model, {"id", "title", "qty", "note", "stock"})
    assert not (target / "crm_history").exists() and not (target / "shop_history" / "items").exists()
