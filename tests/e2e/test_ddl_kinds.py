"""Each DDL kind against real Delta tables, through the applier, under both `target.table_features` settings.

"compatible" tables (no column mapping, deletion vectors or type widening) rename, drop and retype
columns by rewriting the table; "full" tables rename and drop in place and widen types in place where
Delta has stable type widening (4.0+). Both must end with the same rows, applied exactly once.
"""

from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal

import pytest

from tests.support import applier_for
from ticdc_delta.apply.base.session import spark_version
from ticdc_delta.apply.changes.collapse import NetChange
from ticdc_delta.apply.changes.merge_source import SourceRows
from ticdc_delta.apply.places.locator import CatalogLocator, PathLocator
from ticdc_delta.apply.tables.features import COMPATIBLE, FULL
from ticdc_delta.apply.tables.markers import commit_tags, read_progress
from ticdc_delta.apply.tables.points import AppliedPoint, PendingBackfill, TableProgress
from ticdc_delta.apply.writers.delta_writer import DeltaWriter, add_columns_sql
from ticdc_delta.exceptions import ConfigError
from ticdc_delta.jobs import config as config_module
from ticdc_delta.jobs.runtime import check_session
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
    "schema evolution is Delta's: type widening, column mapping and rewrites differ between Delta 3.3 and 4.4"
)]

REWRITE = "CREATE OR REPLACE TABLE AS SELECT"
# "full" tables are not for non-Spark readers: the delta-rs read-back (tests/conftest.py) leaves them alone.
# When both pairs run (CI), each runs every kind under one setting (CI time: 75 s a side): "compatible" (the
# default, for non-Spark readers) on Delta 4.4, "full" (type widening, column mapping: Databricks' kind of
# table) on Delta 3.3, Databricks Runtime 16.x's. Every kind under "compatible" and the "full" features' own
# statements run on both pairs in tests/e2e/test_table_features.py.
_ONE_SETTING_A_PAIR = "every DDL kind under {} on {}; tests/e2e/test_table_features.py runs both settings on both pairs"
SETTINGS = [
    pytest.param(COMPATIBLE, marks=pytest.mark.one_pair(_ONE_SETTING_A_PAIR.format("'compatible'", "the newest"),
                                                        pair="newest")),
    pytest.param(FULL, marks=[pytest.mark.spark_only_tables("table_features = 'full'"),
                              pytest.mark.one_pair(_ONE_SETTING_A_PAIR.format("'full'", "the oldest"), pair="oldest")]),
]

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


@pytest.fixture(params=SETTINGS)
def features(request) -> str:
    """The `target.table_features` setting of the test's applier."""
    return request.param


@pytest.fixture
def table(sql, spark, tmp_path, features):
    """A table with two rows, applied through commitTs 11."""
    locator = PathLocator(str(tmp_path))
    applier = applier_for(sql, locator, table_features=features)
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


def test_default_backfill_interrupted_by_a_crash_is_finished_on_redo(sql, spark, table, features):
    # Setup: the ADD COLUMNS commit of a DDL at 20 exists (with its pending-backfill
    # record) but the process died before writing the default.
    # Expect: a new applier redoing the DDL writes the default, then marks 20.
    locator, _ = table
    wider = schema(*BASE, Column("stock", "INT", default=7))
    tags = commit_tags(AppliedPoint(ts=11), pending=PendingBackfill("ts:20", ("stock",)))
    sql.run(add_columns_sql(locator.sql_name(T), [(wider.columns[-1], "qty")]), tags)
    assert read_progress(sql, locator.sql_name(T)) == TableProgress(True, AppliedPoint(ts=11), PendingBackfill("ts:20", ("stock",)))

    applier_for(sql, locator, table_features=features).apply([ddl(20, SchemaChangeKind.ALTER, wider)], {"topic": 20})

    assert rows(spark, locator) == [(1, "a", 5, 7), (2, "b", 6, 7)]
    assert read_progress(sql, locator.sql_name(T)) == TableProgress(True, AppliedPoint(ts=20))


def test_drop_column(spark, table, features):
    # Expect: "full" drops in place (column mapping); "compatible" rewrites the table without the column.
    locator, applier = table
    narrower = schema(Column("id", "INT"), Column("qty", "INT"))
    applier.apply([ddl(20, SchemaChangeKind.ALTER, narrower, "ALTER TABLE items DROP COLUMN name")], {"topic": 20})
    assert rows(spark, locator) == [(1, 5), (2, 6)]
    assert operations(spark, locator)[-1] == ("DROP COLUMNS" if features == FULL else REWRITE)


def test_rename_column_keeps_the_data(spark, table, features):
    # Expect: "full" renames in place (column mapping); "compatible" rewrites the table, the column's data kept.
    locator, applier = table
    renamed = schema(Column("id", "INT"), Column("title", "STRING"), Column("qty", "INT"))
    applier.apply(
        [ddl(20, SchemaChangeKind.ALTER, renamed, "ALTER TABLE `items` RENAME COLUMN `name` TO `title`")],
        {"topic": 20},
    )
    assert spark.table(locator.sql_name(T)).columns == ["id", "title", "qty"]
    assert rows(spark, locator) == [(1, "a", 5), (2, "b", 6)]
    assert operations(spark, locator)[-1] == ("RENAME COLUMN" if features == FULL else REWRITE)


def test_widening_type_change(sql, spark, table, features):
    # INT -> BIGINT (e.g. MODIFY COLUMN qty BIGINT, or INT -> INT UNSIGNED). In place only on "full" tables
    # with Delta 4 (stable type widening); "compatible" tables, and Delta 3.x (Spark 3.5; its preview
    # cannot widen INT -> BIGINT), rewrite the table.
    locator, applier = table
    wider = schema(Column("id", "INT"), Column("name", "STRING"), Column("qty", "BIGINT"))
    applier.apply([ddl(20, SchemaChangeKind.ALTER, wider), insert(21, wider, 3, "c", 2**40)], {"topic": 21})
    assert rows(spark, locator) == [(1, "a", 5), (2, "b", 6), (3, "c", 2**40)]
    assert dict(DeltaWriter(sql, locator).columns(T))["qty"] == "bigint"
    rewritten = REWRITE in operations(spark, locator)
    assert rewritten == (features == COMPATIBLE or _before_spark_4(spark))


def test_rename_drop_add_and_retype_in_one_ddl(sql, spark, table, features):
    # Setup: one DDL renames name -> title, drops qty, adds stock INT DEFAULT 7 first and retypes id to BIGINT.
    # Expect: the same rows in both settings; "compatible" makes it one rewrite (plus the default's MERGE).
    locator, applier = table
    after = schema(
        Column("stock", "INT", default=7), Column("id", "BIGINT"), Column("title", "STRING")
    )
    statement = "ALTER TABLE items RENAME COLUMN name TO title, DROP COLUMN qty, ADD COLUMN stock INT DEFAULT 7 FIRST"
    versions = len(operations(spark, locator))
    applier.apply([ddl(20, SchemaChangeKind.ALTER, after, statement), insert(21, after, 0, 3, "c")], {"topic": 21})
    assert spark.table(locator.sql_name(T)).columns == ["stock", "id", "title"]
    assert rows(spark, locator) == [(0, 3, "c"), (7, 1, "a"), (7, 2, "b")]
    assert read_progress(sql, locator.sql_name(T)) == TableProgress(True, AppliedPoint(ts=21))
    if features == COMPATIBLE:
        assert operations(spark, locator)[versions:] == [REWRITE, "MERGE", "MERGE"]


def test_a_rewrite_keeps_replays_harmless(sql, spark, table, features):
    # Setup: a rename at 20 (a rewrite under "compatible"), a row at 21. Then the whole stream again from
    # commitTs 10, as after a restart that replays it, through a new applier, and the MERGE of 11 alone
    # with its idempotent-write pair.
    # Expect: no new commit: the applied marker and Delta's idempotent writes survive the rewrite.
    locator, applier = table
    base = schema(*BASE)
    renamed = schema(Column("id", "INT"), Column("title", "STRING"), Column("qty", "INT"))
    rename = ddl(20, SchemaChangeKind.ALTER, renamed, "ALTER TABLE items RENAME COLUMN name TO title")
    applier.apply([rename, insert(21, renamed, 3, "c", 7)], {"topic": 21})
    versions = len(operations(spark, locator))

    replay = [ddl(10, SchemaChangeKind.CREATE, base), insert(11, base, 1, "a", 5), rename, insert(21, renamed, 3, "c", 7)]
    applier_for(sql, locator, table_features=features).apply(replay, {"topic": 21})
    writer = DeltaWriter(sql, locator, table_features=features)
    writer.merge(T, renamed, SourceRows.of([NetChange(False, (1, "stale", 0))]), AppliedPoint(ts=11))

    assert len(operations(spark, locator)) == versions
    assert rows(spark, locator) == [(1, "a", 5), (2, "b", 6), (3, "c", 7)]


def test_a_crash_between_a_rewrite_and_its_default_is_finished_on_redo(sql, spark, table, features, monkeypatch):
    # Setup: a DDL renaming name -> title and adding stock INT DEFAULT 7: the structure step (a rewrite under
    # "compatible") commits, then the process dies before the default is written (injected failure).
    # Expect: the table stays marked at 11 with the pending default; a new applier redoing the DDL writes
    # the default and marks 20, and the rename is not done twice.
    locator, applier = table
    after = schema(Column("id", "INT"), Column("title", "STRING"), Column("qty", "INT"), Column("stock", "INT", default=7))
    change = ddl(20, SchemaChangeKind.ALTER, after, "ALTER TABLE items RENAME COLUMN name TO title, ADD stock INT DEFAULT 7")

    def crash(*_args):
        raise RuntimeError("killed before the default was written")

    monkeypatch.setattr(DeltaWriter, "_write_defaults", crash)
    with pytest.raises(RuntimeError, match="killed"):
        applier.apply([change], {"topic": 20})
    monkeypatch.undo()
    assert read_progress(sql, locator.sql_name(T)) == TableProgress(
        True, AppliedPoint(ts=11), PendingBackfill("ts:20", ("stock",))
    )

    applier_for(sql, locator, table_features=features).apply([change], {"topic": 20})

    assert spark.table(locator.sql_name(T)).columns == ["id", "title", "qty", "stock"]
    assert rows(spark, locator) == [(1, "a", 5, 7), (2, "b", 6, 7)]
    assert read_progress(sql, locator.sql_name(T)) == TableProgress(True, AppliedPoint(ts=20))


def test_column_names_delta_refuses_without_column_mapping(sql, spark, tmp_path, features):
    # Setup: upstream columns named "unit price", "a,b=c" and "100%" (MySQL allows them quoted), renamed,
    # added and retyped. Expect: the job reads and writes them under their upstream names; "full" stores
    # them as they are, "compatible" escapes what Delta refuses without column mapping ("unit%20price").
    locator = PathLocator(str(tmp_path))
    applier = applier_for(sql, locator, table_features=features)
    before = schema(Column("id", "INT"), Column("unit price", "INT"), Column("a,b=c", "STRING"))
    after = schema(Column("id", "INT"), Column("unit price", "BIGINT"), Column("x;y", "STRING"), Column("100%", "INT", default=1))
    applier.apply([ddl(10, SchemaChangeKind.CREATE, before), insert(11, before, 1, 5, "a")], {"topic": 11})
    rename = "ALTER TABLE items RENAME COLUMN `a,b=c` TO `x;y`, MODIFY `unit price` BIGINT, ADD `100%` INT DEFAULT 1"
    applier.apply([ddl(20, SchemaChangeKind.ALTER, after, rename), insert(21, after, 2, 2**40, "b", 3)], {"topic": 21})

    assert rows(spark, locator) == [(1, 5, "a", 1), (2, 2**40, "b", 3)]
    assert DeltaWriter(sql, locator).columns(T) == [("id", "int"), ("unit price", "bigint"), ("x;y", "string"), ("100%", "int")]
    stored = spark.table(locator.sql_name(T)).columns
    if features == FULL:
        assert stored == ["id", "unit price", "x;y", "100%"]
    else:
        assert stored == ["id", "unit%20price", "x%3By", "100%25"]


# Type changes Delta cannot make in place, each from a value to what it becomes: (old, new, value, expected).
OTHER_TYPE_CHANGES = {
    "narrowing": (Column("narrowed", "BIGINT"), Column("narrowed", "INT"), 5, 5),
    "varchar -> int": (Column("parsed", "STRING"), Column("parsed", "INT"), "5", 5),
    "date -> datetime": (Column("widened", "DATE"), Column("widened", "TIMESTAMP_NTZ"), dt.date(2024, 2, 29),
                         dt.datetime(2024, 2, 29)),
    "decimal -> decimal(50,2)": (Column("wide", "DECIMAL(10,2)"), Column("wide", "STRING"), Decimal("1.50"), "1.50"),
}


def test_other_type_changes_rewrite_the_table_atomically(sql, spark, tmp_path, features):
    # Setup: a table with a column for each kind of type change Delta cannot make in place, one row; then one
    # DDL retyping all of them (one table and one rewrite for the four, CI time: a rewrite retypes every column
    # its DDL changed the same way, one or several; test_rename_drop_add_and_retype_in_one_ddl mixes kinds).
    # Expect: each value becomes what TiDB's conversion gives, by one rewrite, and the DDL is applied.
    locator = PathLocator(str(tmp_path))
    applier = applier_for(sql, locator, table_features=features)
    changes = OTHER_TYPE_CHANGES.values()
    before = schema(Column("id", "INT"), *(old for old, _, _, _ in changes))
    after = schema(Column("id", "INT"), *(new for _, new, _, _ in changes))
    applier.apply([ddl(10, SchemaChangeKind.CREATE, before), insert(11, before, 1, *(v for _, _, v, _ in changes))],
                  {"topic": 11})
    applier.apply([ddl(20, SchemaChangeKind.ALTER, after, "ALTER TABLE items MODIFY COLUMN ...")], {"topic": 20})
    assert dict(zip(OTHER_TYPE_CHANGES, rows(spark, locator)[0][1:], strict=True)) == {
        kind: expected for kind, (_, _, _, expected) in OTHER_TYPE_CHANGES.items()
    }
    assert operations(spark, locator)[-1] == REWRITE
    assert read_progress(sql, locator.sql_name(T)) == TableProgress(True, AppliedPoint(ts=20))


def test_rename_table_moves_the_data_by_one_registry_commit(sql, spark, table):
    # Setup: shop.items renamed to archive.old_items, a row added under the new name.
    # Expect: the new name has every row, the old one is gone (for this process and a fresh one reading
    # the registry), and the folder did not move: no folder copy or delete, which object stores lack.
    locator, applier = table
    moved = schema(*BASE, table=TableName("archive", "old_items"))
    applier.apply(
        [ddl(20, SchemaChangeKind.RENAME, moved, "RENAME TABLE shop.items TO archive.old_items", previous_name=T),
         insert(21, moved, 9, "z", 0)],
        {"topic": 21},
    )
    assert rows(spark, locator, moved.name) == [(1, "a", 5), (2, "b", 6), (9, "z", 0)]
    assert locator.path(moved.name) == f"{locator.root}/shop/items"
    fresh = PathLocator(locator.root)
    assert DeltaWriter(sql, fresh).progress(T) == TableProgress(False)
    assert fresh.path(moved.name) == locator.path(moved.name)
    assert fresh.clean_up(sql) == []  # the folder is held by the new name
    assert rows(spark, fresh, moved.name) == [(1, "a", 5), (2, "b", 6), (9, "z", 0)]


def test_folders_are_deleted_only_by_the_clean_up_and_a_freed_name_gets_a_folder_of_its_own(sql, spark, table):
    # Setup: shop.items renamed to shop.kept, then shop.items created again, then shop.kept dropped.
    # Expect: the new shop.items cannot take its usual folder (shop.kept's rows are there) and gets
    # shop/items.2; the drop deletes nothing until the clean-up (after the checkpoint), which deletes
    # the folder no name holds and only it.
    locator, applier = table
    kept = schema(*BASE, table=TableName("shop", "kept"))
    applier.apply([ddl(20, SchemaChangeKind.RENAME, kept, "RENAME TABLE shop.items TO shop.kept", previous_name=T),
                   ddl(21, SchemaChangeKind.CREATE, schema(*BASE)), insert(22, schema(*BASE), 7, "n", 1)],
                  {"topic": 22})
    assert locator.path(T) == f"{locator.root}/shop/items.2"
    assert rows(spark, locator) == [(7, "n", 1)]
    applier.apply([ddl(30, SchemaChangeKind.DROP, kept)], {"topic": 30})
    assert os.path.isdir(f"{locator.root}/shop/items")
    assert locator.clean_up(sql) == [f"{locator.root}/shop/items"]
    assert not os.path.exists(f"{locator.root}/shop/items")
    assert rows(spark, locator) == [(7, "n", 1)]
    fresh = PathLocator(locator.root)
    assert DeltaWriter(sql, fresh).progress(kept.name) == TableProgress(False)
    assert fresh.path(T) == f"{locator.root}/shop/items.2"


def test_rename_table_in_a_catalog(sql, spark, features):
    locator = CatalogLocator("spark_catalog")
    source = schema(*BASE, table=TableName(f"ddl_cat_{features}", "before"))
    moved = schema(*BASE, table=TableName(f"ddl_cat_{features}", "after"))
    applier = applier_for(sql, locator, table_features=features)
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


def test_create_over_a_stale_table_replaces_it(sql, spark, table, features):
    # A CREATE newer than the table's applied point: upstream dropped and re-created
    # the table while this job was not looking (e.g. the DROP predates its start).
    locator, _ = table
    applier_for(sql, locator, table_features=features).apply([ddl(30, SchemaChangeKind.CREATE, schema(*BASE))], {"topic": 30})
    assert rows(spark, locator) == []
    assert operations(spark, locator)[-1] == "REPLACE TABLE"


@pytest.mark.spark_only_tables("VARIANT: delta-rs reads its binary encoding; the job allows it only with 'full'")
def test_json_as_variant(sql, spark, tmp_path):
    if _before_spark_4(spark):
        pytest.skip("VARIANT exists from Spark 4.0; on Spark 3.5 the job refuses types.json = 'variant' at start")
    locator = PathLocator(str(tmp_path))
    doc = schema(Column("id", "INT"), Column("doc", "VARIANT", default='{"new": true}'))
    applier_for(sql, locator, table_features=FULL).apply(
        [ddl(10, SchemaChangeKind.CREATE, doc), insert(11, doc, 1, '{"a": [1, 2], "b": null}')], {"topic": 11}
    )
    (row,) = spark.sql(f"SELECT variant_get(doc, '$.a[1]', 'int') AS second FROM {locator.sql_name(T)}").collect()
    assert row["second"] == 2


def test_variant_is_refused_at_start_where_spark_has_none(spark, tmp_path):
    # Expect: on Spark 3.5 the job stops before reading anything, naming the key; on Spark 4 it starts.
    config = config_module.from_mapping(
        {
            "kafka": {"topics": ["t"]},
            "target": {"path": str(tmp_path), "table_features": FULL},
            "types": {"json": "variant"},
        }
    )
    if _before_spark_4(spark):
        with pytest.raises(ConfigError, match="types.json: 'variant' needs Spark 4.0"):
            check_session(config, spark)
    else:
        check_session(config, spark)
