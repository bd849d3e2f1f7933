"""The Delta side alone: idempotent MERGE, applied markers, catalog tables, hostile names."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
from pyspark.sql import functions

from tests.support import applier_for
from ticdc_delta.apply.changes.collapse import NetChange
from ticdc_delta.apply.changes.merge_source import SourceRows
from ticdc_delta.apply.places.locator import CatalogLocator, PathLocator
from ticdc_delta.apply.tables.features import COMPATIBLE, FULL
from ticdc_delta.apply.tables.markers import read_progress
from ticdc_delta.apply.tables.points import AppliedPoint, TableProgress
from ticdc_delta.apply.writers.delta_writer import DeltaWriter
from ticdc_delta.schema_cache.events import (
    Column,
    Op,
    Position,
    RowChange,
    SchemaChange,
    SchemaChangeKind,
    TableName,
    TableSchema,
)

pytestmark = [pytest.mark.e2e, pytest.mark.both_pairs(
    "MERGE, appends, idempotent writes and commit conflicts as each Delta release does them"
)]

T = TableName("db", "t")
SCHEMA = TableSchema(T, (Column("id", "INT"), Column("v", "STRING")), ("id",))


def versions(spark, name: str) -> int:
    return spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").collect()[0]["version"]


def test_the_local_session_has_its_jars_without_copying_them(spark):
    # Expect: the tests' local session (started like a job's, `jobs.session.get_spark`) loads Delta's, the Kafka
    # source's and the S3 connector's classes from the cached jars on the JVM's class path, and the session's
    # files folder holds no copy of them (spark.jars would have put 700 MB there at every start).
    from pyspark import SparkFiles

    jvm = spark.sparkContext._jvm
    for name in ("io.delta.sql.DeltaSparkSessionExtension", "org.apache.spark.sql.kafka010.KafkaSourceProvider",
                 "org.apache.hadoop.fs.s3a.S3AFileSystem"):
        assert jvm.java.lang.Class.forName(name) is not None
    assert not spark.sparkContext.getConf().get("spark.jars", "")
    assert not list(Path(SparkFiles.getRootDirectory()).glob("*.jar"))


def _table_merged_at_100(sql, tmp_path) -> tuple[DeltaWriter, str]:
    """A writer and the name of table T, created and holding row (1, "a") merged at applied commitTs 100."""
    locator = PathLocator(str(tmp_path))
    writer = DeltaWriter(sql, locator)
    writer.create(T, SCHEMA, None, replace=False)
    writer.merge(T, SCHEMA, SourceRows.of([NetChange(False, (1, "a"))]), AppliedPoint(ts=100))
    return writer, locator.sql_name(T)


def test_merge_is_idempotent_per_applied_ts_and_never_moves_back(sql, spark, tmp_path):
    # Setup: a table merged at applied commitTs 100.
    # Expect: the same MERGE again (a replay) and an older one make no commit; a newer one does.
    writer, name = _table_merged_at_100(sql, tmp_path)
    after_first = versions(spark, name)

    writer.merge(T, SCHEMA, SourceRows.of([NetChange(False, (1, "a"))]), AppliedPoint(ts=100))
    writer.merge(T, SCHEMA, SourceRows.of([NetChange(False, (1, "stale"))]), AppliedPoint(ts=90))
    assert versions(spark, name) == after_first
    assert [tuple(r) for r in spark.table(name).collect()] == [(1, "a")]

    writer.merge(T, SCHEMA, SourceRows.of([NetChange(True, (1, "a")), NetChange(False, (2, "b"))]), AppliedPoint(ts=110))
    assert [tuple(r) for r in spark.table(name).collect()] == [(2, "b")]
    assert read_progress(sql, name) == TableProgress(True, AppliedPoint(ts=110))


def test_applied_marker_of_a_missing_table(sql, spark, tmp_path):
    assert read_progress(sql, PathLocator(str(tmp_path)).sql_name(T)) == TableProgress(False)


def test_the_applied_point_is_read_past_commits_of_other_writers(sql, spark, tmp_path):
    # Setup: a table merged at applied commitTs 100, then commits of other writers on top (a user's INSERT, an
    # OPTIMIZE), which carry no applied marker.
    # Expect: the point read back is the job's newest marked commit's (the first read, of the newest commit
    # alone, finds none and the deeper one does); once the job commits again, its new point.
    writer, name = _table_merged_at_100(sql, tmp_path)
    spark.sql(f"INSERT INTO {name} VALUES (9, 'theirs')")
    spark.sql(f"OPTIMIZE {name}")

    assert read_progress(sql, name) == TableProgress(True, AppliedPoint(ts=100))
    writer.merge(T, SCHEMA, SourceRows.of([NetChange(False, (2, "b"))]), AppliedPoint(ts=120))
    assert read_progress(sql, name) == TableProgress(True, AppliedPoint(ts=120))


@pytest.mark.parametrize(
    "features", [COMPATIBLE, pytest.param(FULL, marks=pytest.mark.spark_only_tables("table_features = 'full'"))]
)
def test_hostile_names_in_a_catalog(sql, spark, features):
    # Setup: database, table and column names with backticks, spaces, dots and SQL.
    # Expect: the table is created, merged, altered and dropped under exactly those names ("compatible"
    # tables store "a b.c" as "a%20b.c": Delta refuses spaces in names without column mapping).
    table = TableName(f"odd db`x {features}", "t.1; DROP TABLE y --")
    columns = (Column("key`col", "INT"), Column("a b.c", "STRING"), Column("ünï", "DOUBLE"))
    schema = TableSchema(table, columns, ("key`col",))
    locator = CatalogLocator("spark_catalog")
    applier = applier_for(sql, locator, table_features=features)
    position = Position("topic", 0, 0)
    applier.apply(
        [
            SchemaChange(table, 10, SchemaChangeKind.CREATE, schema, position),
            RowChange(table, 11, Op.INSERT, None, (1, "x", 1.5), schema, position),
        ],
        {"topic": 11},
    )
    frame = spark.table(locator.sql_name(table))
    assert frame.columns == ["key`col", "a b.c" if features == FULL else "a%20b.c", "ünï"]
    assert [name for name, _ in DeltaWriter(sql, locator).columns(table)] == ["key`col", "a b.c", "ünï"]
    assert [tuple(r) for r in frame.collect()] == [(1, "x", 1.5)]

    wider = TableSchema(table, columns + (Column("new`one", "BIGINT"),), ("key`col",))
    applier.apply([SchemaChange(table, 12, SchemaChangeKind.ALTER, wider, position)], {"topic": 12})
    assert spark.table(locator.sql_name(table)).columns[-1] == "new`one"

    applier.apply([SchemaChange(table, 13, SchemaChangeKind.DROP, wider, position)], {"topic": 13})
    assert read_progress(sql, locator.sql_name(table)) == TableProgress(False)


def test_truncate_keeps_the_table_and_its_history(sql, spark, tmp_path):
    locator = PathLocator(str(tmp_path))
    applier = applier_for(sql, locator)
    position = Position("topic", 0, 0)
    applier.apply(
        [
            SchemaChange(T, 10, SchemaChangeKind.CREATE, SCHEMA, position),
            RowChange(T, 11, Op.INSERT, None, (1, "x"), SCHEMA, position),
            SchemaChange(T, 12, SchemaChangeKind.TRUNCATE, SCHEMA, position),
            RowChange(T, 13, Op.INSERT, None, (2, "y"), SCHEMA, position),
        ],
        {"topic": 13},
    )
    name = locator.sql_name(T)
    assert [tuple(r) for r in spark.table(name).collect()] == [(2, "y")]
    operations = [r["operation"] for r in spark.sql(f"DESCRIBE HISTORY {name}").collect()]
    # Into a table known to be empty (just created, just truncated) a batch is appended.
    assert operations == ["WRITE", "DELETE", "WRITE", "CREATE TABLE"]
    assert read_progress(sql, name) == TableProgress(True, AppliedPoint(ts=13))


@pytest.mark.spark_only_tables("a hand-made table with deletion vectors")
def test_a_merge_that_loses_a_race_with_another_writer_is_run_again(sql, spark, tmp_path, caplog):
    # Setup: a table with rows 1-4. A MERGE (updating 2 and 3) whose source is held inside a
    # Python UDF, after the MERGE has read the table, until another session has deleted row 1
    # and committed. Expect: Delta refuses the MERGE's first commit (a concurrent modification);
    # the job's session runs it again, it commits, and the table holds both writers' changes.
    name = f"delta.`{tmp_path / 't'}`"
    spark.sql(f"CREATE TABLE {name} (id INT, v STRING) USING DELTA TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.sql(f"INSERT INTO {name} VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')")
    waiting, go = tmp_path / "merge-waiting", tmp_path / "other-writer-done"

    def held_until_the_other_writer_committed(value):
        if not go.exists():
            waiting.touch()
            deadline = time.time() + 60
            while not go.exists() and time.time() < deadline:
                time.sleep(0.05)
        return value

    hold = functions.udf(held_until_the_other_writer_committed, "INT")
    sql.spark.range(2, 4).select(hold(functions.col("id").cast("int")).alias("id")).createOrReplaceTempView("racing")
    merge = f"MERGE INTO {name} AS t USING racing AS s ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = 'merged'"
    outcome: dict = {}
    caplog.set_level(logging.WARNING, logger="ticdc_delta.apply.base.session")
    racer = threading.Thread(target=lambda: outcome.update(result=sql.run(merge, what="merge racing")))
    racer.start()
    deadline = time.time() + 120
    while not waiting.exists() and time.time() < deadline:
        time.sleep(0.05)
    spark.sql(f"DELETE FROM {name} WHERE id = 1")
    go.touch()
    racer.join(120)

    assert "result" in outcome, "the MERGE did not finish"
    assert "merge racing: concurrent commit" in caplog.text
    assert sorted(tuple(r) for r in spark.table(name).collect()) == [(2, "merged"), (3, "merged"), (4, "d")]
    operations = [r["operation"] for r in spark.sql(f"DESCRIBE HISTORY {name}").collect()][::-1]
    assert operations == ["CREATE TABLE", "WRITE", "DELETE", "MERGE"]


def test_a_job_waits_for_the_lease_table_another_job_is_creating(sql, spark, tmp_path, caplog):
    # Setup: the leases table's folder holds another job's files and no commit yet (its creation half-way,
    # as a cold JVM on a busy machine left it for more than 12 s in CI); 14 s later that job's table lands
    # there at once (made aside beforehand: its data file moved in, then its log folder renamed into place,
    # so that this job never sees an empty folder it could create the table in itself).
    # Expect: this job's creation waits for it instead of failing (the table was "in the way" before, after
    # 6 s of retries): it reports that it did not make the table, which holds the other job's row only.
    from ticdc_delta.apply.own_tables.lease_store import TABLE, DeltaLeaseStore, LeaseRecord

    now = int(time.time() * 1_000_000)

    def row(owner: str) -> LeaseRecord:
        return LeaseRecord("g", owner, 1, 1, owner, None, now, now, now + 45_000_000)

    aside = tmp_path / "aside" / "_ticdc" / TABLE
    assert DeltaLeaseStore(sql, PathLocator(str(tmp_path / "aside"))).prepare(row("other"))
    locator = PathLocator(str(tmp_path / "lake"))
    folder = tmp_path / "lake" / "_ticdc" / TABLE
    spark.range(1).write.parquet(str(folder))  # what a creation writes before its first commit

    def the_other_job_commits() -> None:
        time.sleep(14)
        for data in aside.glob("*.parquet"):
            data.rename(folder / data.name)
        (aside / "_delta_log").rename(folder / "_delta_log")

    other = threading.Thread(target=the_other_job_commits)
    other.start()
    caplog.set_level(logging.INFO, logger="ticdc_delta.apply.own_tables.lease_store")
    try:
        made = DeltaLeaseStore(sql, locator).prepare(row("this"))
    finally:
        other.join(120)

    assert made is False and not (aside / "_delta_log").exists()
    assert "being created by another job" in caplog.text
    assert [r["owner"] for r in spark.read.format("delta").load(str(folder)).collect()] == ["other"]


def test_a_batch_into_a_table_known_empty_is_appended_and_later_ones_merged(sql, spark, tmp_path):
    # Setup: the job creates a table; its first batch inserts 1-3, updates 2 and deletes 3; the
    # second batch updates 1 and deletes 2. Expect: the first batch is one append (WRITE) of the
    # net rows (3 is gone, 2 has its new value); the second is a MERGE; both carry applied points.
    locator = PathLocator(str(tmp_path))
    applier = applier_for(sql, locator)
    at = Position("topic", 0, 0)
    applier.apply(
        [
            SchemaChange(T, 10, SchemaChangeKind.CREATE, SCHEMA, at),
            RowChange(T, 11, Op.INSERT, None, (1, "a"), SCHEMA, at),
            RowChange(T, 11, Op.INSERT, None, (2, "b"), SCHEMA, at),
            RowChange(T, 11, Op.INSERT, None, (3, "c"), SCHEMA, at),
            RowChange(T, 12, Op.UPDATE, (2, None), (2, "B"), SCHEMA, at),
            RowChange(T, 12, Op.DELETE, (3, None), None, SCHEMA, at),
        ],
        {"topic": 12},
    )
    name = locator.sql_name(T)
    assert sorted(tuple(r) for r in spark.table(name).collect()) == [(1, "a"), (2, "B")]
    applier.apply(
        [RowChange(T, 13, Op.UPDATE, (1, None), (1, "A"), SCHEMA, at), RowChange(T, 13, Op.DELETE, (2, None), None, SCHEMA, at)],
        {"topic": 13},
    )
    assert sorted(tuple(r) for r in spark.table(name).collect()) == [(1, "A")]
    history = spark.sql(f"DESCRIBE HISTORY {name}").collect()
    assert [r["operation"] for r in history] == ["MERGE", "WRITE", "CREATE TABLE"]
    assert read_progress(sql, name) == TableProgress(True, AppliedPoint(ts=13))


def test_a_run_of_keys_new_to_a_table_with_a_point_is_appended_and_ends_as_a_merge_would(sql, spark, tmp_path):
    # Setup: a table applied through 11 holding 1 and 2, read by a new job (nothing known of its rows). A batch of
    # new keys only (3 inserted then updated, 4 inserted then deleted, 5) with INSERT meaning a new key (Simple):
    # expect one append (WRITE) holding 3 and 5 as last seen, its point recorded; the same batch again: a
    # replay, nothing written. Then key 1's update split as INSERT + DELETE at one commitTs (the INSERT half
    # first) and key 6: a MERGE, one row of 1. The Open Protocol's INSERT (an update without old values
    # looks alike) merges a batch of new keys.
    locator = PathLocator(str(tmp_path))
    at = Position("topic", 0, 0)
    applier_for(sql, locator).apply(
        [
            SchemaChange(T, 10, SchemaChangeKind.CREATE, SCHEMA, at),
            RowChange(T, 11, Op.INSERT, None, (1, "a"), SCHEMA, at),
            RowChange(T, 11, Op.INSERT, None, (2, "b"), SCHEMA, at),
        ],
        {"topic": 11},
    )
    name = locator.sql_name(T)
    new_keys = [
        RowChange(T, 12, Op.INSERT, None, (3, "c"), SCHEMA, at),
        RowChange(T, 12, Op.INSERT, None, (4, "d"), SCHEMA, at),
        RowChange(T, 13, Op.UPDATE, (3, None), (3, "C"), SCHEMA, at),
        RowChange(T, 13, Op.DELETE, (4, None), None, SCHEMA, at),
        RowChange(T, 13, Op.INSERT, None, (5, "e"), SCHEMA, at),
    ]
    applier = applier_for(sql, locator, inserts_are_new=True)
    assert applier.apply(new_keys, {"topic": 13}).appends == 1
    assert sorted(tuple(r) for r in spark.table(name).collect()) == [(1, "a"), (2, "b"), (3, "C"), (5, "e")]
    assert spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").collect()[0]["operation"] == "WRITE"
    assert read_progress(sql, name) == TableProgress(True, AppliedPoint(ts=13))
    appended = versions(spark, name)
    replayed = applier_for(sql, locator, inserts_are_new=True).apply(new_keys, {"topic": 13})
    assert (replayed.merges, replayed.skipped_replays) == (0, len(new_keys))
    assert versions(spark, name) == appended

    split = [
        RowChange(T, 14, Op.INSERT, None, (1, "A"), SCHEMA, at),
        RowChange(T, 14, Op.DELETE, (1, None), None, SCHEMA, at),
        RowChange(T, 14, Op.INSERT, None, (6, "f"), SCHEMA, at),
    ]
    assert applier.apply(split, {"topic": 14}).appends == 0
    assert sorted(tuple(r) for r in spark.table(name).collect()) == [(1, "A"), (2, "b"), (3, "C"), (5, "e"), (6, "f")]
    assert spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").collect()[0]["operation"] == "MERGE"

    open_protocol = applier_for(sql, locator).apply([RowChange(T, 15, Op.INSERT, None, (7, "g"), SCHEMA, at)], {"topic": 15})
    assert (open_protocol.merges, open_protocol.appends) == (1, 0)
    assert spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").collect()[0]["operation"] == "MERGE"
