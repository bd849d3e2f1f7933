"""The Delta side alone: idempotent MERGE, applied markers, catalog tables, hostile names."""

from __future__ import annotations

import pytest

from apply.applier import Applier
from apply.collapse import NetChange
from apply.delta_writer import DeltaWriter
from apply.locator import CatalogLocator, PathLocator
from apply.progress import AppliedPoint, TableProgress, read_progress
from schema_cache.events import Column, Op, Position, RowChange, SchemaChange, SchemaChangeKind, TableName, TableSchema

pytestmark = pytest.mark.spark

T = TableName("db", "t")
SCHEMA = TableSchema(T, (Column("id", "INT"), Column("v", "STRING")), ("id",))


def versions(spark, name: str) -> int:
    return spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").collect()[0]["version"]


def test_merge_is_idempotent_per_applied_ts_and_never_moves_back(spark, tmp_path):
    # Setup: a table merged at applied commitTs 100.
    # Expect: the same MERGE again (a replay) and an older one make no commit; a newer one does.
    locator = PathLocator(str(tmp_path))
    writer = DeltaWriter(spark, locator)
    name = locator.sql_name(T)
    writer.create(T, SCHEMA, None, replace=False)
    writer.merge(T, SCHEMA, [NetChange(False, (1, "a"))], AppliedPoint(ts=100))
    after_first = versions(spark, name)

    writer.merge(T, SCHEMA, [NetChange(False, (1, "a"))], AppliedPoint(ts=100))
    writer.merge(T, SCHEMA, [NetChange(False, (1, "stale"))], AppliedPoint(ts=90))
    assert versions(spark, name) == after_first
    assert [tuple(r) for r in spark.table(name).collect()] == [(1, "a")]

    writer.merge(T, SCHEMA, [NetChange(True, (1, "a")), NetChange(False, (2, "b"))], AppliedPoint(ts=110))
    assert [tuple(r) for r in spark.table(name).collect()] == [(2, "b")]
    assert read_progress(spark, name) == TableProgress(True, AppliedPoint(ts=110))


def test_applied_marker_of_a_missing_table(spark, tmp_path):
    assert read_progress(spark, PathLocator(str(tmp_path)).sql_name(T)) == TableProgress(False)


def test_hostile_names_in_a_catalog(spark):
    # Setup: database, table and column names with backticks, spaces, dots and SQL.
    # Expect: the table is created, merged, altered and dropped under exactly those names.
    table = TableName("odd db`x", "t.1; DROP TABLE y --")
    columns = (Column("key`col", "INT"), Column("a b.c", "STRING"), Column("ünï", "DOUBLE"))
    schema = TableSchema(table, columns, ("key`col",))
    locator = CatalogLocator("spark_catalog")
    applier = Applier(spark, locator)
    position = Position("topic", 0, 0)
    applier.apply(
        [
            SchemaChange(table, 10, SchemaChangeKind.CREATE, schema, position),
            RowChange(table, 11, Op.INSERT, None, (1, "x", 1.5), schema, position),
        ],
        {"topic": 11},
    )
    frame = spark.table(locator.sql_name(table))
    assert frame.columns == ["key`col", "a b.c", "ünï"]
    assert [tuple(r) for r in frame.collect()] == [(1, "x", 1.5)]

    wider = TableSchema(table, columns + (Column("new`one", "BIGINT"),), ("key`col",))
    applier.apply([SchemaChange(table, 12, SchemaChangeKind.ALTER, wider, position)], {"topic": 12})
    assert spark.table(locator.sql_name(table)).columns[-1] == "new`one"

    applier.apply([SchemaChange(table, 13, SchemaChangeKind.DROP, wider, position)], {"topic": 13})
    assert read_progress(spark, locator.sql_name(table)) == TableProgress(False)


def test_truncate_keeps_the_table_and_its_history(spark, tmp_path):
    locator = PathLocator(str(tmp_path))
    applier = Applier(spark, locator)
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
    assert operations == ["MERGE", "DELETE", "MERGE", "CREATE TABLE"]
    assert read_progress(spark, name) == TableProgress(True, AppliedPoint(ts=13))
