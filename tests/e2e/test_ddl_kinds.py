"""Each DDL kind against real Delta tables, through the applier."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from apply.delta_writer import DeltaWriter, add_columns_sql
from apply.locator import CatalogLocator, PathLocator
from apply.progress import AppliedPoint, PendingBackfill, TableProgress, commit_tags, read_progress
from apply.sql_session import spark_version
from jobs import config as config_module
from jobs.runtime import check_session
from schema_cache.events import Column, Op, Position, RowChange, SchemaChange, SchemaChangeKind, TableName, TableSchema
from schema_cache.exceptions import ConfigError
from tests.support import applier_for

pytestmark = pytest.mark.e2e

T = TableName("shop", "items")
AT = Position("topic", 0, 0)
BASE = (Column("id", "INT"), Column("name", "STRING"), Column("qty", "INT"))


def _before_spark_4(spark) -> bool:
    return spark_version(spark) < (4, 0)


def schema(*columns: Column, table: TableName = T) -> TableSchema:
    return TableSchema(table, columns, ("id",))


def ddl(ts: int, kind: SchemaChangeKind, target: TableSchema | None, statement: str = "", **extra) -> SchemaChange:
    table = target.name if target is not None else T
    return SchemaChange(table, ts, kind, target, AT, statement, **extra)


def insert(ts: int, target: TableSchema, *values) -> RowChange:
    return RowChange(target.name, ts, Op.INSERT, None, tuple(values), target, AT)


def rows(spark, locator, table: TableName = T) -> list[tuple]:
    return sorted(tuple(r) for r in spark.table(locator.sql_name(table)).collect())


def operations(spark, locator, table: TableName = T) -> list[str]:
    return [r["operation"] for r in spark.sql(f"DESCRIBE HISTORY {locator.sql_name(table)}").collect()][::-1]


@pytest.fixture
def table(sql, spark, tmp_path):
    """A table with two rows, applied through commitTs 11."""
    locator = PathLocator(str(tmp_path))
    applier = applier_for(sql, locator)
    base = schema(*BASE)
    applier.apply([ddl(10, SchemaChangeKind.CREATE, base), insert(11, base, 1, "a", 5), insert(11, base, 2, "b", 6)], {"topic": 11})
    return locator, applier


def test_add_column_with_default_fills_existing_rows(sql, spark, table):
    # Setup: two rows, then ALTER TABLE ADD COLUMN stock INT DEFAULT 7 and ADD COLUMN note (no default).
    # Expect: the existing rows read 7 and NULL (as in TiDB); a later row keeps its own value.
    locator, applier = table
    wider = schema(*BASE, Column("stock", "INT", default=7), Column("note", "STRING"))
    applier.apply([ddl(20, SchemaChangeKind.ALTER, wider), insert(21, wider, 3, "c", 1, 0, "n")], {"topic": 21})
    assert rows(spark, locator) == [(1, "a", 5, 7, None), (2, "b", 6, 7, None), (3, "c", 1, 0, "n")]
    assert read_progress(sql, locator.sql_name(T)) == TableProgress(True, AppliedPoint(ts=21))


def test_default_backfill_interrupted_by_a_crash_is_finished_on_redo(sql, spark, table):
    # Setup: the ADD COLUMNS commit of a DDL at 20 exists (with its pending-backfill
    # record) but the process died before writing the default.
    # Expect: a new applier redoing the DDL writes the default, then marks 20.
    locator, _ = table
    wider = schema(*BASE, Column("stock", "INT", default=7))
    tags = commit_tags(AppliedPoint(ts=11), pending=PendingBackfill("ts:20", ("stock",)))
    sql.run(add_columns_sql(locator.sql_name(T), [(wider.columns[-1], "qty")]), tags)
    assert read_progress(sql, locator.sql_name(T)) == TableProgress(True, AppliedPoint(ts=11), PendingBackfill("ts:20", ("stock",)))

    applier_for(sql, locator).apply([ddl(20, SchemaChangeKind.ALTER, wider)], {"topic": 20})

    assert rows(spark, locator) == [(1, "a", 5, 7), (2, "b", 6, 7)]
    assert read_progress(sql, locator.sql_name(T)) == TableProgress(True, AppliedPoint(ts=20))


def test_drop_column(spark, table):
    locator, applier = table
    narrower = schema(Column("id", "INT"), Column("qty", "INT"))
    applier.apply([ddl(20, SchemaChangeKind.ALTER, narrower, "ALTER TABLE items DROP COLUMN name")], {"topic": 20})
    assert rows(spark, locator) == [(1, 5), (2, 6)]
    assert operations(spark, locator)[-1] == "DROP COLUMNS"


def test_rename_column_keeps_the_data_in_place(spark, table):
    locator, applier = table
    renamed = schema(Column("id", "INT"), Column("title", "STRING"), Column("qty", "INT"))
    applier.apply(
        [ddl(20, SchemaChangeKind.ALTER, renamed, "ALTER TABLE `items` RENAME COLUMN `name` TO `title`")],
        {"topic": 20},
    )
    assert spark.table(locator.sql_name(T)).columns == ["id", "title", "qty"]
    assert rows(spark, locator) == [(1, "a", 5), (2, "b", 6)]
    assert operations(spark, locator)[-1] == "RENAME COLUMN"


def test_widening_type_change_is_in_place(sql, spark, table):
    # INT -> BIGINT (e.g. MODIFY COLUMN qty BIGINT, or INT -> INT UNSIGNED): Delta 4 type widening, no
    # rewrite; Delta 3.x (Spark 3.5) cannot widen INT -> BIGINT and rewrites the table instead.
    locator, applier = table
    wider = schema(Column("id", "INT"), Column("name", "STRING"), Column("qty", "BIGINT"))
    applier.apply([ddl(20, SchemaChangeKind.ALTER, wider), insert(21, wider, 3, "c", 2**40)], {"topic": 21})
    assert rows(spark, locator) == [(1, "a", 5), (2, "b", 6), (3, "c", 2**40)]
    assert dict(DeltaWriter(sql, locator).columns(T))["qty"] == "bigint"
    rewritten = "CREATE OR REPLACE TABLE AS SELECT" in operations(spark, locator)
    assert rewritten == _before_spark_4(spark)


@pytest.mark.parametrize(
    "old, new, value, expected",
    [
        (Column("qty", "BIGINT"), Column("qty", "INT"), 5, 5),  # narrowing
        (Column("qty", "STRING"), Column("qty", "INT"), "5", 5),  # varchar -> int
        (Column("qty", "DATE"), Column("qty", "TIMESTAMP_NTZ"), dt.date(2024, 2, 29), dt.datetime(2024, 2, 29)),
        (Column("qty", "DECIMAL(10,2)"), Column("qty", "STRING"), Decimal("1.50"), "1.50"),  # -> decimal(50,2)
    ],
    ids=["bigint->int", "string->int", "date->datetime", "decimal->wide decimal"],
)
def test_other_type_changes_rewrite_the_table_atomically(sql, spark, tmp_path, old, new, value, expected):
    locator = PathLocator(str(tmp_path))
    applier = applier_for(sql, locator)
    before = schema(Column("id", "INT"), old)
    after = schema(Column("id", "INT"), new)
    applier.apply([ddl(10, SchemaChangeKind.CREATE, before), insert(11, before, 1, value)], {"topic": 11})
    applier.apply([ddl(20, SchemaChangeKind.ALTER, after, "ALTER TABLE items MODIFY COLUMN qty ...")], {"topic": 20})
    assert rows(spark, locator) == [(1, expected)]
    assert operations(spark, locator)[-1] == "CREATE OR REPLACE TABLE AS SELECT"
    assert read_progress(sql, locator.sql_name(T)) == TableProgress(True, AppliedPoint(ts=20))


def test_rename_table_moves_the_data(sql, spark, table):
    locator, applier = table
    moved = schema(*BASE, table=TableName("archive", "old_items"))
    applier.apply(
        [ddl(20, SchemaChangeKind.RENAME, moved, "RENAME TABLE shop.items TO archive.old_items", previous_name=T),
         insert(21, moved, 9, "z", 0)],
        {"topic": 21},
    )
    assert rows(spark, locator, moved.name) == [(1, "a", 5), (2, "b", 6), (9, "z", 0)]
    assert read_progress(sql, locator.sql_name(T)) == TableProgress(False)


def test_rename_table_in_a_catalog(sql, spark):
    locator = CatalogLocator("spark_catalog")
    source = schema(*BASE, table=TableName("ddl_cat", "before"))
    moved = schema(*BASE, table=TableName("ddl_cat", "after"))
    applier = applier_for(sql, locator)
    applier.apply([ddl(10, SchemaChangeKind.CREATE, source), insert(11, source, 1, "a", 5)], {"topic": 11})
    applier.apply([ddl(20, SchemaChangeKind.RENAME, moved, previous_name=source.name)], {"topic": 20})
    assert rows(spark, locator, moved.name) == [(1, "a", 5)]
    assert read_progress(sql, locator.sql_name(source.name)) == TableProgress(False)


def test_index_ddl_changes_nothing_in_delta(spark, table):
    locator, applier = table
    versions_before = len(operations(spark, locator))
    applier.apply([ddl(20, SchemaChangeKind.INDEX, schema(*BASE), "CREATE INDEX i ON items (qty)")], {"topic": 20})
    assert len(operations(spark, locator)) == versions_before


def test_drop_and_recreate_starts_empty(spark, table):
    locator, applier = table
    again = schema(Column("id", "INT"), Column("other", "STRING"))
    applier.apply(
        [ddl(20, SchemaChangeKind.DROP, schema(*BASE)), ddl(21, SchemaChangeKind.CREATE, again), insert(22, again, 7, "x")],
        {"topic": 22},
    )
    assert rows(spark, locator) == [(7, "x")]
    assert spark.table(locator.sql_name(T)).columns == ["id", "other"]


def test_create_over_a_stale_table_replaces_it(sql, spark, table):
    # A CREATE newer than the table's applied point: upstream dropped and re-created
    # the table while this job was not looking (e.g. the DROP predates its start).
    locator, _ = table
    applier_for(sql, locator).apply([ddl(30, SchemaChangeKind.CREATE, schema(*BASE))], {"topic": 30})
    assert rows(spark, locator) == []
    assert operations(spark, locator)[-1] == "REPLACE TABLE"


def test_json_as_variant(sql, spark, tmp_path):
    if _before_spark_4(spark):
        pytest.skip("VARIANT exists from Spark 4.0; on Spark 3.5 the job refuses types.json = 'variant' at start")
    locator = PathLocator(str(tmp_path))
    doc = schema(Column("id", "INT"), Column("doc", "VARIANT", default='{"new": true}'))
    applier_for(sql, locator).apply(
        [ddl(10, SchemaChangeKind.CREATE, doc), insert(11, doc, 1, '{"a": [1, 2], "b": null}')], {"topic": 11}
    )
    (row,) = spark.sql(f"SELECT variant_get(doc, '$.a[1]', 'int') AS second FROM {locator.sql_name(T)}").collect()
    assert row["second"] == 2


def test_variant_is_refused_at_start_where_spark_has_none(spark, tmp_path):
    # Expect: on Spark 3.5 the job stops before reading anything, naming the key; on Spark 4 it starts.
    config = config_module.from_mapping(
        {"kafka": {"topics": ["t"]}, "target": {"path": str(tmp_path)}, "types": {"json": "variant"}}
    )
    if _before_spark_4(spark):
        with pytest.raises(ConfigError, match="types.json: 'variant' needs Spark 4.0"):
            check_session(config, spark)
    else:
        check_session(config, spark)
