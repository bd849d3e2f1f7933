"""Small MERGEs committed by delta-rs (`target.small_merge_writer = "delta-rs"`, apply.writers.delta_rs): what Spark
reads back, the commit's tags, and the tables left to Spark's MERGE."""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import subprocess
import sys
from decimal import Decimal

import pyarrow
import pytest

from ticdc_delta.apply.changes.collapse import NetChange
from ticdc_delta.apply.changes.merge_source import SourceRows
from ticdc_delta.apply.places.locator import PathLocator
from ticdc_delta.apply.tables.features import COMPATIBLE, FULL
from ticdc_delta.apply.tables.markers import read_progress
from ticdc_delta.apply.tables.points import AppliedPoint, TableProgress
from ticdc_delta.apply.writers.delta_rs import DeltaRs
from ticdc_delta.apply.writers.delta_writer import DeltaWriter
from ticdc_delta.schema_cache.events import Column, TableName, TableSchema

pytestmark = [pytest.mark.e2e, pytest.mark.both_pairs(
    "Spark and Delta of each release read what delta-rs committed: its files, tags and idempotent-write pair"
)]

UTC = dt.timezone.utc
# Every scalar type the product maps upstream columns to, each column named as upstream may name it, at the
# extremes whose statistics delta-rs records exactly (test_delta_rs_reads.py has those it does not, which are
# Spark's to merge): DECIMAL(20,0) up to 2^53, DECIMAL(20,4) of 15 digits, dates and times from the earliest
# Spark 3.5 reads in another writer's files, no NaN or infinity.
COLUMNS = (
    Column("id", "BIGINT"), Column("Tiny", "TINYINT"), Column("small", "SMALLINT"), Column("medium int", "INT"),
    Column("unsigned big", "DECIMAL(20,0)"), Column("price", "DECIMAL(20,4)"), Column("f", "FLOAT"),
    Column("d", "DOUBLE"), Column("day", "DATE"), Column("at", "TIMESTAMP"), Column("wall", "TIMESTAMP_NTZ"),
    Column('na"me.ü', "STRING"), Column("blob", "BINARY"), Column("flag", "BOOLEAN"),
)
EXTREMES = [
    (1, -128, -32768, -2**31, Decimal(2**53), Decimal("-99999999999.9999"), -0.0,
     5e-324, dt.date(1582, 10, 15), dt.datetime(1900, 1, 1, tzinfo=UTC), dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
     "𝄞 four-byte ü", b"\x00\xff", True),
    (2, 127, 32767, 2**31 - 1, Decimal(0), Decimal("0.0001"), 3.4028235e38, -1.7976931348623157e308,
     dt.date(9999, 12, 31), dt.datetime(2038, 1, 19, 3, 14, 8, 123456, tzinfo=UTC),
     dt.datetime(1900, 1, 1), "", b"", False),
    (3, None, None, None, None, None, None, None, None, None, None, None, None, None),
]


def _writers(sql, tmp_path, layout: str = COMPATIBLE):
    locator = PathLocator(str(tmp_path))
    return (DeltaWriter(sql, locator, table_features=layout, small_merges=DeltaRs()),
            DeltaWriter(sql, locator, table_features=layout), locator)


def _engines(spark, name: str) -> list[str]:
    """The engine of each commit, oldest first."""
    rows = spark.sql(f"DESCRIBE HISTORY {name}").orderBy("version").select("engineInfo").collect()
    return [(r[0] or "").split("/")[0].split(":")[0] for r in rows]


def _rows(spark, name: str) -> list[tuple]:
    return sorted(tuple(r) for r in spark.table(name).collect())


def test_delta_rs_merges_read_back_as_spark_merges_them(sql, spark, tmp_path):
    # Setup: two tables of every scalar type, made by the job's writer; the same net changes merged into one
    # by delta-rs and into the other by Spark, in three batches (inserts at each type's extremes, an update and
    # a delete, then a replay of the first batch and an older one, then one deleting a key neither holds).
    # Expect: Spark reads both tables equal after every batch, the delta-rs table's MERGE commits are delta-rs's,
    # its applied point reads back, and the replayed and older batches commit nothing.
    by_rs, by_spark, locator = _writers(sql, tmp_path)
    tables = {by_rs: TableName("db", "rs"), by_spark: TableName("db", "spark")}
    schemas = {w: TableSchema(t, COLUMNS, ("id",)) for w, t in tables.items()}
    for writer, table in tables.items():
        writer.create(table, schemas[writer], None, replace=False)
    updated = (2, *EXTREMES[0][1:])
    batches = [
        (100, [NetChange(False, row) for row in EXTREMES]),
        (200, [NetChange(False, updated), NetChange(True, EXTREMES[2])]),
        (100, [NetChange(False, EXTREMES[2])]),  # a replay: the table holds it already
        (150, [NetChange(True, EXTREMES[0])]),  # older than the table: never moves it back
        (300, [NetChange(True, (99, *EXTREMES[2][1:]))]),  # deletes a key neither holds: no row changes
    ]
    for ts, changes in batches:
        for writer, table in tables.items():
            writer.merge(table, schemas[writer], SourceRows.of(changes), AppliedPoint(ts=ts))
        assert _rows(spark, locator.sql_name(tables[by_rs])) == _rows(spark, locator.sql_name(tables[by_spark]))
    rs_name = locator.sql_name(tables[by_rs])
    assert [r[0] for r in _rows(spark, rs_name)] == [1, 2]
    # A MERGE that changes nothing still commits its tags (the point moves on), as Spark's does.
    assert _engines(spark, rs_name) == ["Apache-Spark", "delta-rs", "delta-rs", "delta-rs"]
    assert read_progress(sql, rs_name) == read_progress(sql, locator.sql_name(tables[by_spark])) == TableProgress(
        True, AppliedPoint(ts=300))


def test_spark_and_delta_rs_merge_the_same_table_in_turn(sql, spark, tmp_path):
    # Setup: one table merged by delta-rs, then by Spark (a source over the row limit), then by delta-rs again.
    # Expect: each sees the other's rows and pair: the Spark MERGE at an older commitTs commits nothing, nor do
    # delta-rs's at the commitTs Spark committed and an older one.
    schema = TableSchema(TableName("db", "t"), (Column("id", "INT"), Column("v", "STRING")), ("id",))
    locator = PathLocator(str(tmp_path))
    writer = DeltaWriter(sql, locator, small_merges=DeltaRs(max_rows=2))
    writer.create(schema.name, schema, None, replace=False)
    name = locator.sql_name(schema.name)
    writer.merge(schema.name, schema, SourceRows.of([NetChange(False, (1, "a"))]), AppliedPoint(ts=10))
    many = [NetChange(False, (k, "b")) for k in range(1, 4)]
    writer.merge(schema.name, schema, SourceRows.of(many), AppliedPoint(ts=5))  # older: skipped by Spark
    writer.merge(schema.name, schema, SourceRows.of(many), AppliedPoint(ts=20))
    # Spark committed the pair of 20: delta-rs commits nothing at 20 (a replay) or 15 (older).
    for ts in (20, 15):
        writer.merge(schema.name, schema, SourceRows.of([NetChange(False, (9, "replayed"))]), AppliedPoint(ts=ts))
    writer.merge(schema.name, schema, SourceRows.of([NetChange(True, (2, "b"))]), AppliedPoint(ts=30))
    assert _rows(spark, name) == [(1, "b"), (3, "b")]
    assert _engines(spark, name) == ["Apache-Spark", "delta-rs", "Apache-Spark", "delta-rs"]
    # Then 8 more by delta-rs: version 10 gets a checkpoint as Spark's commits do, and Spark reads through it.
    for ts in range(31, 39):
        writer.merge(schema.name, schema, SourceRows.of([NetChange(False, (ts, "c"))]), AppliedPoint(ts=ts))
    assert (tmp_path / "db" / "t" / "_delta_log" / "00000000000000000010.checkpoint.parquet").exists()
    spark.catalog.clearCache()
    assert len(_rows(spark, name)) == 10
    assert read_progress(sql, name) == TableProgress(True, AppliedPoint(ts=38))


def test_a_checkpoint_delta_rs_writes_after_spark_s_reads_back_on_a_local_file_system(sql, spark, tmp_path):
    # Setup: a table whose log is checkpointed every 2 commits: Spark commits versions 1 (the property) and 2 (a
    # MERGE over delta-rs's row limit), so Spark checkpoints version 2 and Hadoop's local file system writes a
    # checksum file beside `_last_checkpoint`; delta-rs commits 3 and 4 and checkpoints 4, rewriting it.
    # Expect: Hadoop's local file system reads `_last_checkpoint` back (a stale checksum file would fail it, and
    # Delta would then retry it three times a second apart and list the log instead, at every first read).
    schema = _table("checkpoints")
    locator = PathLocator(str(tmp_path))
    writer = DeltaWriter(sql, locator, small_merges=DeltaRs(max_rows=2))
    writer.create(schema.name, schema, None, replace=False)
    name = locator.sql_name(schema.name)
    spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('delta.checkpointInterval' = '2')")
    writer.merge(schema.name, schema, SourceRows.of([NetChange(False, (k, "s")) for k in range(3)]), AppliedPoint(ts=10))
    log = tmp_path / "db" / "checkpoints" / "_delta_log"
    assert (log / "._last_checkpoint.crc").exists()  # (Spark's checkpoint of version 2, through Hadoop)
    for ts in (20, 30):
        writer.merge(schema.name, schema, SourceRows.of([NetChange(False, (ts, "r"))]), AppliedPoint(ts=ts))
    assert _engines(spark, name)[-2:] == ["delta-rs", "delta-rs"]
    jvm = spark._jvm
    local = jvm.org.apache.hadoop.fs.FileSystem.getLocal(spark._jsc.hadoopConfiguration())
    stream = local.open(jvm.org.apache.hadoop.fs.Path(str(log / "_last_checkpoint")))
    try:
        written = jvm.java.io.BufferedReader(jvm.java.io.InputStreamReader(stream)).readLine()
    finally:
        stream.close()
    assert json.loads(written)["version"] == 4


def _merged_by(engine: str, spark, writer, where, schema: TableSchema, prepare=None) -> None:
    """A table made by the writer, then `prepare`d (SQL text on it, or a callable given its name); then one MERGE
    by the writer, which must be `engine`'s."""
    writer.create(schema.name, schema, None, replace=False)
    name = where.sql_name(schema.name)
    if isinstance(prepare, str):
        spark.sql(prepare.format(name=name))
    elif prepare is not None:
        prepare(name)
    writer.merge(schema.name, schema, SourceRows.of([NetChange(False, (1, "a"))]), AppliedPoint(ts=10))
    assert (1, "a") in [r[:2] for r in _rows(spark, name)], schema.name
    assert _engines(spark, name)[-1] == engine, schema.name


def _table(name: str) -> TableSchema:
    return TableSchema(TableName("db", name), (Column("id", "INT"), Column("v", "STRING")), ("id",))


def test_compatible_tables_delta_rs_cannot_write_as_spark_would_are_merged_by_spark(sql, spark, tmp_path):
    # Setup: a table whose column name holds a backquote (delta-rs cannot address it), one with a column the
    # changes lack (added by a user: Spark's MERGE leaves it NULL, delta-rs's write would refuse), one with a
    # CHECK constraint, one with the change data feed on, one whose symlink manifest Spark keeps (a property
    # delta-rs does not act on), and one holding a file Spark wrote without statistics.
    # Expect: each MERGE is Spark's, with the right rows (and the manifest names the new file); a table with
    # properties that change nothing a reader sees (retention, checkpoint interval, a user's note) is delta-rs's.
    writer, _, locator = _writers(sql, tmp_path)
    spark_merges = functools.partial(_merged_by, "Apache-Spark", spark, writer, locator)
    spark_merges(TableSchema(TableName("db", "tick"), (Column("id", "INT"), Column("v`", "STRING")), ("id",)))
    spark_merges(_table("extra"), "ALTER TABLE {name} ADD COLUMNS (note STRING)")
    spark_merges(_table("checked"), "ALTER TABLE {name} ADD CONSTRAINT positive CHECK (id > 0)")
    spark_merges(_table("feed"), "ALTER TABLE {name} SET TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')")
    spark_merges(_table("manifest"),
                 "ALTER TABLE {name} SET TBLPROPERTIES ('delta.compatibility.symlinkFormatManifest.enabled' = 'true')")
    manifest = (tmp_path / "db" / "manifest" / "_symlink_format_manifest" / "manifest").read_text()
    assert len(manifest.split()) == 1, manifest

    def without_statistics(name: str) -> None:
        spark.conf.set("spark.databricks.delta.stats.collect", "false")
        try:
            spark.sql(f"INSERT INTO {name} VALUES (2, 'b')")
        finally:
            spark.conf.unset("spark.databricks.delta.stats.collect")

    spark_merges(_table("unknown"), without_statistics)
    _merged_by("delta-rs", spark, writer, locator, _table("neutral"),
               "ALTER TABLE {name} SET TBLPROPERTIES ('delta.logRetentionDuration' = 'interval 7 days', "
               "'delta.checkpointInterval' = '5', 'team.owner' = 'payments')")


@pytest.mark.spark_only_tables("a full-layout table, which delta-rs refuses to open")
def test_full_layout_tables_are_merged_by_spark(sql, spark, tmp_path):
    # Setup: a full-layout table (column mapping, deletion vectors) and a writer with delta-rs configured.
    # Expect: its MERGE is Spark's, with the right rows.
    writer, _, locator = _writers(sql, tmp_path, FULL)
    _merged_by("Apache-Spark", spark, writer, locator, _table("full"))


def test_first_touch_reads_by_delta_rs_equal_spark_s(sql, spark, tmp_path):
    # Setup: a table of every type merged at commitTs 100, then a commit of a user on top (unmarked), and a
    # table name with nothing there; one writer reading through delta-rs, one through Spark.
    # Expect: delta-rs reads each table (not Spark's fallback), and the applied point (from below the user's
    # commit), the columns and the layout are what Spark reads.
    by_rs, by_spark, locator = _writers(sql, tmp_path)
    table, missing = TableName("db", "t"), TableName("db", "missing")
    schema = TableSchema(table, COLUMNS, ("id",))
    by_rs.create(table, schema, None, replace=False)
    by_rs.merge(table, schema, SourceRows.of([NetChange(False, EXTREMES[0])]), AppliedPoint(ts=100))
    spark.sql(f"ALTER TABLE {locator.sql_name(table)} SET TBLPROPERTIES ('owner.note' = 'a user was here')")
    assert by_rs._facts(table) is not None and by_rs._facts(missing) is not None
    assert by_rs.progress(table) == by_spark.progress(table) == TableProgress(True, AppliedPoint(ts=100))
    assert by_rs.progress(missing) == by_spark.progress(missing) == TableProgress(exists=False)
    assert by_rs.columns(table) == by_spark.columns(table)
    assert by_rs._read_layout(table) == by_spark._read_layout(table)


@pytest.mark.spark_only_tables("a full-layout table, which delta-rs refuses to open")
def test_first_touch_reads_of_full_layout_tables_are_spark_s(sql, spark, tmp_path):
    # Setup: a full-layout table (column mapping: its files' column names are not the schema's) merged at 100.
    # Expect: delta-rs declines to read it (Spark reads it), and what the writer reads is Spark's.
    by_rs, by_spark, _ = _writers(sql, tmp_path, FULL)
    schema = TableSchema(TableName("db", "full"), (Column("id", "INT"), Column("v", "STRING")), ("id",))
    by_rs.create(schema.name, schema, None, replace=False)
    by_rs.merge(schema.name, schema, SourceRows.of([NetChange(False, (1, "a"))]), AppliedPoint(ts=100))
    assert by_rs._facts(schema.name) is None
    assert by_rs.progress(schema.name) == by_spark.progress(schema.name) == TableProgress(True, AppliedPoint(ts=100))
    assert by_rs.columns(schema.name) == by_spark.columns(schema.name)
    assert by_rs._read_layout(schema.name) == by_spark._read_layout(schema.name)


@pytest.mark.spark_only_tables("Spark writes a TIMESTAMP after 2262 as INT96, which delta-rs reads wrong (nanoseconds)")
def test_timestamps_after_2262_are_written_by_delta_rs_then_merged_by_spark(sql, spark, tmp_path):
    # Setup: a table given a TIMESTAMP of 9999 by a delta-rs MERGE, then changes without one; another table
    # holding a TIMESTAMP of 9999 that Spark wrote, then changes without one.
    # Expect: the first MERGE is delta-rs's (it writes such a value as Spark reads it), and every MERGE into a
    # table holding one is Spark's (Spark would write it as INT96 into any file it rewrites; a delta-rs MERGE
    # rewriting a file Spark wrote would misread it); the values read back as they were written.
    writer, _, locator = _writers(sql, tmp_path)
    late = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    for table, first in (("by_rs", "delta-rs"), ("by_spark", "Apache-Spark")):
        schema = TableSchema(TableName("db", table), (Column("id", "INT"), Column("at", "TIMESTAMP")), ("id",))
        writer.create(schema.name, schema, None, replace=False)
        name = locator.sql_name(schema.name)
        if first == "delta-rs":
            writer.merge(schema.name, schema, SourceRows.of([NetChange(False, (1, late))]), AppliedPoint(ts=5))
        else:
            spark.sql(f"INSERT INTO {name} VALUES (1, TIMESTAMP'9999-12-31 23:59:59.999999Z')")
        writer.merge(schema.name, schema, SourceRows.of([NetChange(False, (2, None))]), AppliedPoint(ts=10))
        assert _engines(spark, name)[1:] == [first, "Apache-Spark"], table
        assert _rows(spark, name)[0] == (1, dt.datetime(9999, 12, 31, 23, 59, 59, 999999)), table


_ANOTHER_WRITER = """
import sys
from deltalake import DeltaTable
table, what = DeltaTable(sys.argv[1]), sys.argv[2]
if what == "OPTIMIZE":
    table.optimize.compact()
elif what.startswith("UPDATE "):
    table.update(predicate=what[len("UPDATE "):], updates={"v": "'user'"})
else:
    table.delete(what)
"""


def test_delta_rs_merges_go_on_after_other_writers_and_its_own_errors(sql, spark, tmp_path, monkeypatch, caplog):
    # Setup: a table of 4 keys merged by delta-rs. Then three delta-rs MERGEs, each of which, after it read the
    # table and before it commits, another process commits to it: a user's DELETE of another key in the file the
    # MERGE rewrites, a user's UPDATE of a key in a file the MERGE (a new key's) does not touch, then an OPTIMIZE
    # of the files. Then a MERGE whose rows' stream breaks inside delta-rs's write.
    # Expect: the two conflicts are met by merging again (a warning each, then delta-rs's commit), the UPDATE is
    # none; the broken MERGE is Spark's after one warning line; the table ends holding exactly the model's rows
    # (the user's changes and the job's), applied through the last.
    writer, _, locator = _writers(sql, tmp_path)
    schema = _table("busy")
    path = str(tmp_path / "db" / "busy")
    name = locator.sql_name(schema.name)
    writer.create(schema.name, schema, None, replace=False)
    writer.merge(schema.name, schema, SourceRows.of([NetChange(False, (k, "a")) for k in range(1, 5)]),
                 AppliedPoint(ts=10))
    execute = DeltaRs._execute
    meddling = []

    def with_another_writer(self, table, *args):
        if meddling:  # (once: its retry reads the table again and commits)
            subprocess.run([sys.executable, "-c", _ANOTHER_WRITER, path, meddling.pop()], check=True)
        return execute(self, table, *args)

    monkeypatch.setattr(DeltaRs, "_execute", with_another_writer)
    caplog.set_level(logging.WARNING, logger="ticdc_delta.apply.writers.delta_rs")
    others = [((1, "b"), '"id" = 3'), ((5, "c"), 'UPDATE "id" = 4'), ((2, "c"), "OPTIMIZE")]
    for ts, (change, other) in enumerate(others, start=20):
        meddling.append(other)
        writer.merge(schema.name, schema, SourceRows.of([NetChange(False, change)]), AppliedPoint(ts=ts))
        assert not meddling and _engines(spark, name)[-1] == "delta-rs", other
    conflicts = [r.getMessage() for r in caplog.records if "concurrent commit" in r.getMessage()]
    assert len(conflicts) == 2, conflicts

    def breaking(self, source):
        batches = self._upserts_of(source).to_batches()

        def stream():
            yield batches[0]
            raise OSError("injected: the rows' stream broke")
        return pyarrow.RecordBatchReader.from_batches(batches[0].schema, stream())

    monkeypatch.setattr(DeltaRs, "_upserts_of", DeltaRs._upserts, raising=False)
    monkeypatch.setattr(DeltaRs, "_upserts", breaking)
    caplog.clear()
    writer.merge(schema.name, schema, SourceRows.of([NetChange(False, (2, "d")), NetChange(True, (4, "a"))]),
                 AppliedPoint(ts=30))
    assert _engines(spark, name)[-1] == "Apache-Spark"
    failed = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(failed) == 1 and "failed before committing" in failed[0] and "injected" in failed[0], failed
    assert _rows(spark, name) == [(1, "b"), (2, "d"), (5, "c")]
    assert read_progress(sql, name) == TableProgress(True, AppliedPoint(ts=30))


@pytest.mark.parametrize("first", ["spark", "delta-rs"])
def test_the_products_own_tables_take_appends_and_reads_from_both_writers_in_turn(sql, spark, tmp_path, first):
    # Setup: checkpoints, metrics rows and registry rows written to one target by Spark and by delta-rs
    # (apply.own_tables.delta_rs) in turn, the first writer creating each table.
    # Expect: each writer takes the other's table (the engine of every commit says so); Spark reads every row;
    # the newest checkpoint, the registry and the tombstones read by delta-rs equal Spark's reads.
    from ticdc_delta.apply.own_tables.checkpoint import Checkpoint, CheckpointStore
    from ticdc_delta.apply.own_tables.delta_rs import DeltaRsOwnTables
    from ticdc_delta.apply.own_tables.metrics import BatchRecord, MetricsTable
    from ticdc_delta.apply.own_tables.tombstones import Tombstones
    from ticdc_delta.apply.places.registry import TableRegistry
    from ticdc_delta.schema_cache.events import TopicPartition

    by_spark, by_delta_rs = PathLocator(str(tmp_path), "c"), PathLocator(str(tmp_path), "c", own_delta_rs=DeltaRsOwnTables())
    turns = [by_spark, by_delta_rs, by_spark] if first == "spark" else [by_delta_rs, by_spark, by_delta_rs]
    tp = TopicPartition("t", 0)
    for turn, locator in enumerate(turns, start=1):
        CheckpointStore(sql, locator).save(Checkpoint("c", turn, {tp: turn}, {tp: 10 * turn}, bytes([turn])))
        MetricsTable(sql, locator).append([BatchRecord(
            consumer="c", run_id="r", round=turn, checkpoint=turn, recorded_at=dt.datetime.now(UTC), messages=turn,
            row_events={}, ddl=0, dead_letters=0, replays_skipped=0, waiting=0, applied_ts=turn, commit_ts_lag_ms=1,
            offsets={tp: turn}, offset_lag={tp: 0}, stage_seconds={"apply": 0.5}, batch_seconds=1.0,
            table_seconds={TableName("db", f"t{turn}"): 0.25})])
        TableRegistry(sql, locator, "c").register([TableName("db", f"t{turn}")])
    Tombstones(sql, by_spark).record(TableName("db", "gone"), 7, "DROP TABLE")
    engine = {"spark": "Apache-Spark", "delta-rs": "delta-rs"}
    expected = [engine[first], engine[{"spark": "delta-rs", "delta-rs": "spark"}[first]], engine[first]]
    for table in ("checkpoints", "metrics", "tables"):
        name = by_spark.internal_sql_name(table)
        assert _engines(spark, name) == expected, table
    metrics = spark.table(by_spark.internal_sql_name("metrics")).orderBy("round").collect()
    assert [(r["round"], r["offsets"], r["table_seconds"][0]["table"]) for r in metrics] == [
        (turn, {"t/0": turn}, f"t{turn}") for turn in (1, 2, 3)]
    assert CheckpointStore(sql, by_delta_rs).load("c") == CheckpointStore(sql, by_spark).load("c")
    assert CheckpointStore(sql, by_delta_rs).load("c").batch == 3
    assert TableRegistry(sql, PathLocator(str(tmp_path), "c", own_delta_rs=DeltaRsOwnTables()), "c").tables() == \
        TableRegistry(sql, PathLocator(str(tmp_path), "c"), "c").tables() == [TableName("db", f"t{t}") for t in (1, 2, 3)]
    assert Tombstones(sql, by_delta_rs).removal(TableName("db", "gone")) == Tombstones(sql, by_spark).removal(
        TableName("db", "gone"))


@pytest.mark.one_pair("Spark of each release reads the own tables' delta-rs commits in the test above; the lease's "
                      "conditional changes are delta-rs's and Spark's same statements on both (CI time: 10-15 s a side)")
def test_the_lease_row_changes_by_delta_rs_only_where_nothing_was_committed_since_its_read(sql, spark, tmp_path):
    # Setup: the leases table Spark made, holding two consumers' rows (one named with quotes, a backslash and
    # non-ASCII letters); their takes, renewals and releases by delta-rs (where it writes the own tables) and by
    # Spark in turn; one delta-rs UPDATE from a read made before Spark's UPDATE replaced the row's file with one
    # that no longer matches its condition (the race two jobs taking the lease at once run).
    # Expect: delta-rs's reads equal Spark's; its changes land (delta-rs commits) where the row is as read, every
    # time to the microsecond as Spark reads it; the stale UPDATE and one expecting an old revision change
    # nothing and commit nothing; one row per consumer throughout. A table delta-rs makes, Spark reads alike.
    from deltalake import DeltaTable

    from ticdc_delta.apply.own_tables.delta_rs import DeltaRsOwnTables
    from ticdc_delta.apply.own_tables.lease_store import TABLE, DeltaLeaseStore, LeaseRecord

    own = DeltaRsOwnTables()
    by_spark, by_delta_rs = PathLocator(str(tmp_path), "c"), PathLocator(str(tmp_path), "c", own_delta_rs=own)
    spark_store, rs_store = DeltaLeaseStore(sql, by_spark), DeltaLeaseStore(sql, by_delta_rs)
    odd = "o'dd \\ consumer ü 𝄞"
    base_us = 1_790_000_000_123_457

    def record(consumer: str, revision: int, owner: str | None = "job-1") -> LeaseRecord:
        return LeaseRecord(consumer, owner, 1, revision, "host:1", "proc 'x'", base_us, base_us + revision,
                           base_us + 60_000_000 + revision)

    assert spark_store.prepare(record("c", 1))
    assert spark_store.write(record(odd, 1), None)  # (Spark's MERGE: a consumer's first row in a table that exists)
    name = by_spark.internal_sql_name(TABLE)
    path = by_spark.internal_location(TABLE)
    for consumer in ("c", odd):
        assert rs_store.read(consumer) == spark_store.read(consumer) == record(consumer, 1)

    assert rs_store.write(record("c", 2), record("c", 1))  # a renewal by delta-rs
    assert rs_store.write(record(odd, 2, owner=None), record(odd, 1))  # a release by delta-rs
    assert spark_store.read("c") == record("c", 2) and spark_store.read(odd) == record(odd, 2, owner=None)

    read_before = DeltaTable(path)
    assert spark_store.write(record("c", 3, owner="job-2"), record("c", 2))  # another job's take, by Spark
    version = DeltaTable(path).version()
    values = {"owner": "job-1", "revision": 3, "renewed_at": dt.datetime.fromtimestamp(1, UTC)}
    assert own.update_read(read_before, path, name, {"consumer": "c", "revision": 2}, values) is False
    assert not rs_store.write(record("c", 3), record("c", 2))  # expecting a revision the row has left
    assert DeltaTable(path).version() == version  # neither committed
    assert spark_store.read("c") == rs_store.read("c") == record("c", 3, owner="job-2")
    assert sorted(r["consumer"] for r in spark.table(name).collect()) == sorted(["c", odd])
    assert _engines(spark, name) == ["Apache-Spark", "Apache-Spark", "delta-rs", "delta-rs", "Apache-Spark"]

    # A new target's leases table made by delta-rs, holding its first row, read by Spark.
    made_by_rs = PathLocator(str(tmp_path / "new"), "c", own_delta_rs=own)
    assert DeltaLeaseStore(sql, made_by_rs).prepare(record(odd, 1))
    assert not DeltaLeaseStore(sql, made_by_rs).prepare(record(odd, 1))
    assert DeltaLeaseStore(sql, PathLocator(str(tmp_path / "new"), "c")).read(odd) == record(odd, 1)
    assert _engines(spark, made_by_rs.internal_sql_name(TABLE)) == ["delta-rs"]
