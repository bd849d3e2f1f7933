"""Reading several tables consistently as upstream had them at one commitTs (`ticdc-delta as-of`)."""

from __future__ import annotations

import json

import pytest
from chispa import assert_df_equality

from testbed.tables import column
from tests.support import publish, run_job
from tests.workloads import ITEMS_DDL, item, items_feed
from ticdc_delta.apply.as_of import consistent_read
from ticdc_delta.apply.places.locator import PathLocator
from ticdc_delta.apply.progress import upstream_time
from ticdc_delta.jobs import cli
from ticdc_delta.schema_cache.events import TableName

pytestmark = [pytest.mark.e2e]

LOGS_DDL = "id INT, msg STRING"


def test_a_consistent_read_of_two_tables_is_upstream_at_one_commit_ts(spark, kafka, tmp_path, unique, capsys):
    """Over 60 s in CI because it is the newest side's first end-to-end test: its set-up starts the session's
    Spark and the broker, and its statements (a batch every three messages) are the side's first, run cold."""
    # Setup: two tables changed by six transactions, some touching one table, some both; the job applies
    # them in batches of a few messages (versions at different points per table).
    # Expect: for three transactions' commitTs and one after the last, the consistent read lands at a
    # point no newer than asked, at which both tables equal upstream's tables at that point; the CLI
    # (by commitTs and by time, JSON) names the same versions.
    feed = items_feed(partitions=1)
    feed.create_table("shop", "logs", [column("id", "int", nullable=False), column("msg", "varchar", length=64)],
                      primary_key=["id"])
    states = []  # (commitTs, {table: upstream rows})

    def transaction(change) -> None:
        with feed.transaction() as txn:
            change(txn)
        states.append((feed.last_ts, {t: feed.expected_rows("shop", t) for t in ("items", "logs")}))

    transaction(lambda txn: [txn.insert("shop", "items", item(i)) for i in range(4)])
    transaction(lambda txn: txn.insert("shop", "logs", {"id": 0, "msg": "a"}))
    transaction(lambda txn: txn.update("shop", "items", [1], {"name": "one"}))
    transaction(lambda txn: (txn.insert("shop", "logs", {"id": 1, "msg": "b"}), txn.delete("shop", "items", [0])))
    transaction(lambda txn: txn.insert("shop", "items", item(4)))
    transaction(lambda txn: txn.update("shop", "logs", [0], {"msg": "c"}))
    topic, target, group = f"asof-{unique}", str(tmp_path), f"g-{unique}"
    publish(kafka, topic, feed.messages, partitions=1)
    run_job(spark, kafka, topic, target, group, run={"batch_max_messages": 3})
    locator = PathLocator(target)
    names = {t: locator.sql_name(TableName("shop", t)) for t in ("items", "logs")}
    ddls = {"items": ITEMS_DDL, "logs": LOGS_DDL}

    landed = set()
    # Four points of different shapes (CI time: each read compares both tables), the first transaction (one
    # table changed), the second (the other table's first row), the fourth (both tables in one transaction),
    # and past the last.
    for asked in (states[0][0], states[1][0], states[3][0], states[-1][0] + 1):
        read = consistent_read(spark, list(names.values()), asked)
        assert read.commit_ts <= asked
        if read.commit_ts in landed:
            continue  # the same versions as a read already compared
        expected = [rows for ts, rows in states if ts <= read.commit_ts][-1]
        frames = read.frames(spark)
        for table, name in names.items():
            assert_df_equality(frames[name], spark.createDataFrame(expected[table], ddls[table]), ignore_row_order=True,
                               ignore_nullable=True)
        landed.add(read.commit_ts)
    assert len(landed) >= 3  # reads land at several points, not all at the newest or oldest

    asked = states[3][0]
    flags = ["--bootstrap-servers", kafka.bootstrap_servers, "--topics", topic, "--group-id", group, "--target-path", target]
    capsys.readouterr()
    assert cli.exit_status(["as-of", *flags, "--commit-ts", str(asked), "--json"]) == 0
    by_ts = json.loads(capsys.readouterr().out)
    assert cli.exit_status(["as-of", *flags, "--time", upstream_time(asked).isoformat(), "--json"]) == 0
    by_time = json.loads(capsys.readouterr().out)
    read = consistent_read(spark, list(names.values()), asked)
    assert {t["sql_name"]: t["version"] for t in by_ts["tables"]} == dict(read.versions)
    assert by_time["tables"] == by_ts["tables"] and by_ts["commit_ts"] == read.commit_ts
