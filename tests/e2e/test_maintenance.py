"""Data tables kept healthy ([maintenance], `ticdc-delta maintain`): compaction and VACUUM of the tables the job
writes, on real Delta tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from tests.support import assert_table, publish, run_job
from tests.workloads import ITEMS_DDL, item, items_feed
from ticdc_delta.apply.locator import PathLocator
from ticdc_delta.apply.maintenance import TableMaintenance
from ticdc_delta.jobs.cli import exit_status
from ticdc_delta.schema_cache.events import TableName

pytestmark = pytest.mark.e2e


def _files(spark, folder: Path) -> tuple[int, int]:
    """(files of the table's current snapshot, data files on disk)."""
    snapshot = spark.sql(f"DESCRIBE DETAIL delta.`{folder}`").collect()[0]["numFiles"]
    return snapshot, sum(1 for p in folder.rglob("*.parquet") if "_delta_log" not in p.parts)


def _many_small_batches(kafka, topic: str):
    feed = items_feed()
    for i in range(12):  # each its own batch (run.batch_max_messages below): a MERGE adding a file, each
        with feed.transaction() as txn:
            txn.insert("shop", "items", item(i))
    publish(kafka, topic, feed.messages)
    return feed


@pytest.mark.both_pairs("OPTIMIZE, DESCRIBE DETAIL and VACUUM (LITE, RETAIN, the retention check) on each Delta")
def test_the_job_compacts_and_vacuums_its_tables_every_n_batches(spark, kafka, tmp_path, unique):
    # Setup: twelve transactions read one batch each; maintenance every 2 batches, tables of 3 files or more
    # compacted, VACUUM keeping nothing older than now (retention 0 hours: Delta's check turned off for it).
    # Expect: the table equals upstream; its snapshot is few files, and no other data file is left on disk.
    topic, target = f"maint-{unique}", tmp_path / "lake"
    feed = _many_small_batches(kafka, topic)

    run_job(spark, kafka, topic, str(target), f"g-{unique}", run={"batch_max_messages": 4},
            maintenance={"every_batches": 2, "min_files": 3, "vacuum_retain_hours": 0})

    assert_table(spark, str(target), feed, "shop", "items", ITEMS_DDL)
    snapshot, on_disk = _files(spark, target / "shop" / "items")
    assert snapshot <= 4 and on_disk == snapshot  # (unmaintained: 12, a file each batch)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{target / 'shop' / 'items'}`").select("operation").collect()
    assert {"OPTIMIZE", "VACUUM END"} <= {r[0] for r in history}


def test_maintain_compacts_every_table_or_those_named_and_a_budget_goes_on_from_where_it_stopped(
        spark, sql, kafka, tmp_path, unique, capsys):
    # Setup: two tables the job made (maintenance off, the default), each given five more small files.
    # Expect: `maintain --tables shop.orders` compacts that table only; `maintain` then the other, printing each
    # with its files before and after; a bad --tables is exit 2; a pass given a budget it spends on its first table
    # stops there, and the next pass begins with the table after it.
    topic, target = f"maintain-{unique}", tmp_path / "lake"
    feed = items_feed()
    feed.create_table("shop", "orders", feed.columns("shop", "items"), primary_key=["id"])
    with feed.transaction() as txn:
        for table in ("items", "orders"):
            txn.insert("shop", table, item(0))
    publish(kafka, topic, feed.messages)
    run_job(spark, kafka, topic, str(target), f"g-{unique}")
    items, orders = target / "shop" / "items", target / "shop" / "orders"
    for folder in (items, orders):  # (small files as many small MERGEs leave them, made faster)
        for i in range(1, 6):
            spark.read.format("delta").load(str(folder)).limit(1).withColumn("id", F.lit(i)) \
                .write.format("delta").mode("append").save(str(folder))
    rows = {f: spark.read.format("delta").load(str(f)).collect() for f in (items, orders)}
    before = _files(spark, items)[0], _files(spark, orders)[0]
    assert min(before) >= 6
    config = tmp_path / "job.toml"
    config.write_text(f'[kafka]\nbootstrap_servers = "{kafka.bootstrap_servers}"\ntopics = ["{topic}"]\n'
                      f'group_id = "g-{unique}"\n[target]\npath = "{target}"\n'
                      "[maintenance]\nmin_files = 2\nvacuum_retain_hours = 0\n")

    assert exit_status(["maintain", "--config", str(config), "--tables", "shop.ord*", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [(m["table"], m["files_before"]) for m in printed] == [("shop.orders", before[1])]
    assert _files(spark, orders)[0] < before[1] and _files(spark, items)[0] == before[0]
    assert exit_status(["maintain", "--config", str(config)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"shop.items: {before[0]} -> ") and lines[1].startswith("shop.orders: ")
    assert _files(spark, items)[1] == _files(spark, items)[0]  # nothing left on disk but the snapshot's files
    assert exit_status(["maintain", "--config", str(config), "--tables", "orders"]) == 2
    for folder, held in rows.items():
        assert sorted(spark.read.format("delta").load(str(folder)).collect()) == sorted(held)

    locator = PathLocator(str(target), f"g-{unique}")
    locator.load(sql)
    maintenance = TableMaintenance(sql, locator, min_files=2, retain_hours=168)
    tables = [TableName("shop", "items"), TableName("shop", "orders")]
    assert [m.table for m in maintenance.run(tables, budget_seconds=1e-6)] == [tables[0]]
    assert [m.table for m in maintenance.run(tables, budget_seconds=1e-6)] == [tables[1]]
