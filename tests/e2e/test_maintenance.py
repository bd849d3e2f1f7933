"""Data tables kept healthy ([maintenance], `ticdc-delta maintain`): compaction and VACUUM of the tables the job
writes, on real Delta tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from tests.support import assert_table, publish, run_job
from tests.workloads import ITEMS_DDL, item, items_feed
from ticdc_delta.apply.maintenance import TableMaintenance
from ticdc_delta.apply.places.locator import PathLocator
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


def test_as_of_reads_a_table_compacted_and_vacuumed_since_at_the_maintenance_version(spark, kafka, tmp_path, unique):
    # Setup: a run applies ten inserts (A), a batch each (ten files); the table is compacted and vacuumed keeping
    # nothing (as `maintain` with vacuum_retain_hours = 0): the version its applied point is marked on has no file
    # left. Then ten more inserts (B), applied by a second run.
    # Expect: after the maintenance, `read_as_of` and `consistent_read` at the current commitTs read the table (at
    # the maintenance's last version: the same rows); after B, at A's commitTs, the rows of A; at the current
    # one, all twenty. (Before: a read at A's point read the marked version, whose files were gone.)
    from ticdc_delta.apply.as_of import consistent_read
    from ticdc_delta.apply.progress import read_as_of

    topic, target = f"asof-maint-{unique}", tmp_path / "lake"
    feed = items_feed()
    for i in range(10):
        with feed.transaction() as txn:
            txn.insert("shop", "items", item(i))
    publish(kafka, topic, feed.messages)
    small = {"batch_max_messages": 4}  # (a transaction a batch: a file each, for the OPTIMIZE to replace)
    run_job(spark, kafka, topic, str(target), f"g-{unique}", run=small)
    at_a, name = feed.last_ts, f"delta.`{target / 'shop' / 'items'}`"
    spark.sql(f"OPTIMIZE {name}").collect()
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        spark.sql(f"VACUUM {name} RETAIN 0 HOURS").collect()
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    assert sorted(r["id"] for r in read_as_of(spark, name, at_a).collect()) == list(range(10))
    read = consistent_read(spark, [name], at_a)
    assert sorted(r["id"] for r in read.frames(spark)[name].collect()) == list(range(10))

    sent = len(feed.messages)
    for i in range(10, 20):
        with feed.transaction() as txn:
            txn.insert("shop", "items", item(i))
    publish(kafka, topic, feed.messages[sent:])
    run_job(spark, kafka, topic, str(target), f"g-{unique}", run=small)
    assert sorted(r["id"] for r in read_as_of(spark, name, at_a).collect()) == list(range(10))
    assert sorted(r["id"] for r in read_as_of(spark, name, feed.last_ts).collect()) == list(range(20))


def _small_table(spark, folder: Path, files: int, properties: str = "") -> None:
    """A table of `files` small files (made faster than by many MERGEs), with `properties` (TBLPROPERTIES text)."""
    spark.sql(f"CREATE TABLE delta.`{folder}` (id INT) USING DELTA {properties}")
    for i in range(files):
        spark.range(i, i + 1).selectExpr("CAST(id AS INT) AS id").write.format("delta").mode("append").save(str(folder))


def test_vacuum_keeps_what_the_tables_own_retention_promises_and_idle_tables_get_no_commits(sql, tmp_path):
    # Setup: three tables of six small files, each then compacted by a pass: one whose own
    # delta.deletedFileRetentionDuration (24 hours, as a [[tables]] rule may set) is longer than
    # maintenance.vacuum_retain_hours = 0; one whose own (30 days) is longer than a setting of 168 hours
    # (Delta's check on: it refused such a VACUUM, and the job stopped at every pass); one without.
    # Expect: the files the compaction replaced stay on disk where the table promises to keep them (24 h and 30
    # days), the pass runs; without a promise, a setting of 0 deletes them. A second pass on an idle table
    # vacuumed less than its retention ago adds no commit (at 2 a pass, an idle table's applied marker fell out
    # of the history read after 100 passes).
    spark = sql.spark
    cases = {"promised": ("TBLPROPERTIES ('delta.deletedFileRetentionDuration' = 'interval 24 hours')", 0),
             "long": ("TBLPROPERTIES ('delta.deletedFileRetentionDuration' = 'interval 30 days')", 168),
             "plain": ("", 0)}
    for name, (properties, hours) in cases.items():
        folder = tmp_path / "lake" / "db" / name
        _small_table(spark, folder, 6, properties)
        locator = PathLocator(str(tmp_path / "lake"))
        done = TableMaintenance(sql, locator, min_files=2, retain_hours=hours).maintain(TableName("db", name))
        snapshot, on_disk = _files(spark, folder)
        assert snapshot == 1 and done.files_after == 1, name
        assert (on_disk == snapshot) == (name == "plain"), (name, on_disk)
        assert done.retain_hours == {"promised": 24, "long": 720, "plain": 0}[name]
    folder = tmp_path / "lake" / "db" / "long"
    versions = spark.sql(f"DESCRIBE HISTORY delta.`{folder}`").count()
    again = TableMaintenance(sql, PathLocator(str(tmp_path / "lake")), min_files=2, retain_hours=168)
    assert again.maintain(TableName("db", "long")).idle
    assert spark.sql(f"DESCRIBE HISTORY delta.`{folder}`").count() == versions


def test_an_idle_tables_applied_point_is_found_under_hundreds_of_maintenance_commits(spark, kafka, tmp_path, unique,
                                                                                     monkeypatch):
    # Setup: a run applies a stream; then 210 commits that change no row land on the table (as maintenance passes
    # leave on a table nothing is written to: each VACUUM logs two; here SET TBLPROPERTIES by delta-rs, faster).
    # Expect: `status` shows the table's applied commitTs, and a run of a new consumer reading the stream again
    # skips every change as a replay, writing nothing (before: the marker was looked for in the 200 newest
    # commits only, and the table replayed from scratch).
    from deltalake import DeltaTable

    from tests.support import job_config
    from ticdc_delta.jobs.pipeline import Pipeline
    from ticdc_delta.jobs.status import gather_status

    topic, target = f"idle-{unique}", tmp_path / "lake"
    feed = _many_small_batches(kafka, topic)
    run_job(spark, kafka, topic, str(target), f"g-{unique}")
    table = DeltaTable(str(target / "shop" / "items"))
    for i in range(210):
        table.alter.set_table_properties({"delta.logRetentionDuration": f"interval {30 + i % 2} days"})
    versions = spark.sql(f"DESCRIBE HISTORY delta.`{target / 'shop' / 'items'}`").count()

    (status,) = gather_status(job_config(kafka, topic, str(target), f"g-{unique}"), spark).tables
    assert status.applied_ts == feed.last_ts
    again = Pipeline.from_config(job_config(kafka, topic, str(target), f"again-{unique}"), spark).run()
    assert again.rows_applied == 0 and again.replays_skipped > 0
    assert spark.sql(f"DESCRIBE HISTORY delta.`{target / 'shop' / 'items'}`").count() == versions
    assert_table(spark, str(target), feed, "shop", "items", ITEMS_DDL)
