"""`target.table_features` end to end: the Delta features of the job's tables, and who can read them.

The workload (tests/workloads.py `ddl_evolution`) goes through every DDL kind that changes a table's
structure: ADD COLUMN with and without default, DROP COLUMN, RENAME COLUMN, MODIFY COLUMN (int ->
bigint), RENAME TABLE, TRUNCATE, DROP and re-CREATE.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest
from deltalake import DeltaTable
from deltalake.exceptions import DeltaProtocolError

from tests.readers import assert_delta_rs_reads_as_spark
from tests.support import applier_for, assert_table, job_config, publish, table_frame
from tests.workloads import DDL_EVOLUTION_TABLES, ddl_evolution, items_feed
from ticdc_delta.apply.base.session import spark_version
from ticdc_delta.apply.places.locator import PathLocator
from ticdc_delta.apply.tables.features import COMPATIBLE, FULL
from ticdc_delta.jobs.pipeline import Pipeline
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
    "which table features each Delta release gives a table, and what delta-rs reads of them"
)]

REWRITE = "CREATE OR REPLACE TABLE AS SELECT"
T = TableName("db", "t")
AT = Position("topic", 0, 0)


def reader_features(table: Path) -> set[str]:
    """The reader features in the table's protocol, as delta-rs reads it from the log."""
    return set(DeltaTable(str(table)).protocol().reader_features or ())


def operations(spark, table: Path) -> list[str]:
    return [r["operation"] for r in spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect()][::-1]


def run_workload(spark, kafka, target: Path, unique: str, **target_settings):
    feed = ddl_evolution(items_feed())
    topic = f"features-{unique}"
    publish(kafka, topic, feed.messages)
    config = job_config(kafka, topic, str(target), f"g-{unique}")
    config = dataclasses.replace(config, target=dataclasses.replace(config.target, **target_settings))
    Pipeline.from_config(config, spark).run()
    for (database, table), ddl in DDL_EVOLUTION_TABLES.items():
        assert_table(spark, str(target), feed, database, table, ddl)
    titles = {r["id"]: r["title"] for r in table_frame(spark, str(target), "archive", "items_2025").collect()}
    assert titles[0] == "item 0" and titles[2] == "big"  # the renamed column kept its data


def test_compatible_tables_open_in_delta_rs_after_every_ddl_kind(spark, kafka, tmp_path, unique):
    # Setup: the workload under the default setting.
    # Expect: no reader feature beyond timestampNtz in any table (the product's own included); renames,
    # drops and the type change rewrote the table; delta-rs reads what Spark reads.
    run_workload(spark, kafka, tmp_path, unique)

    tables = sorted(p.parent for p in tmp_path.glob("**/_delta_log"))
    # (archive.items_2025 is shop.items renamed: in shop.items' folder, `apply.places.folders`)
    assert {p.relative_to(tmp_path).as_posix() for p in tables} >= {"shop/items", "shop/logs", "shop/tmp"}
    assert any(p.parts[-2] == "_ticdc" for p in tables)
    for table in tables:
        assert reader_features(table) <= {"timestampNtz"}, table
        assert_delta_rs_reads_as_spark(spark, table)
    history = operations(spark, tmp_path / "shop" / "items")
    assert "RENAME COLUMN" not in history and "DROP COLUMNS" not in history
    assert history.count(REWRITE) == 3  # DROP COLUMN, RENAME COLUMN, MODIFY COLUMN


@pytest.mark.spark_only_tables("target.table_features = 'full': delta-rs refuses these tables (checked here)")
def test_full_tables_use_column_mapping_deletion_vectors_and_type_widening(spark, kafka, tmp_path, unique):
    # Setup: the same workload under "full".
    # Expect: the same tables; column mapping and deletion vectors (and on Spark 4 type widening) in their
    # protocol; renames, drops and the widening done in place (on Spark 3.5 the widening rewrites);
    # and delta-rs refuses the table, so the read-back comparison fails on it.
    run_workload(spark, kafka, tmp_path, unique, table_features=FULL)

    items = tmp_path / "shop" / "items"  # archive.items_2025, renamed from shop.items: in its folder
    stable_widening = spark_version(spark) >= (4, 0)
    expected = {"columnMapping", "deletionVectors"} | ({"typeWidening"} if stable_widening else set())
    assert reader_features(items) == expected
    history = operations(spark, items)
    assert "RENAME COLUMN" in history and "DROP COLUMNS" in history
    assert ("CHANGE COLUMN" in history) == stable_widening and (REWRITE in history) != stable_widening
    with pytest.raises(DeltaProtocolError, match="deletionVectors"):
        assert_delta_rs_reads_as_spark(spark, items)


@pytest.mark.spark_only_tables("a table created under 'full'")
def test_a_table_keeps_its_own_features_when_the_setting_changes(sql, spark, tmp_path, caplog):
    # Setup: a table created under "full"; the job then runs with "compatible" and renames a column.
    # Expect: the rename uses the table's column mapping (in place, no rewrite); the job says once that
    # the table has features non-Spark readers refuse, naming them.
    locator = PathLocator(str(tmp_path))
    before = TableSchema(T, (Column("id", "INT"), Column("name", "STRING")), ("id",))
    after = TableSchema(T, (Column("id", "INT"), Column("title", "STRING")), ("id",))
    applier_for(sql, locator, table_features=FULL).apply(
        [SchemaChange(T, 10, SchemaChangeKind.CREATE, before, AT), RowChange(T, 11, Op.INSERT, None, (1, "a"), before, AT)],
        {"topic": 11},
    )
    caplog.set_level(logging.WARNING, logger="ticdc_delta.apply.writers.delta_writer")
    applier_for(sql, locator, table_features=COMPATIBLE).apply(
        [
            SchemaChange(T, 20, SchemaChangeKind.ALTER, after, AT, "ALTER TABLE t RENAME COLUMN name TO title"),
            RowChange(T, 21, Op.INSERT, None, (2, "b"), after, AT),
        ],
        {"topic": 21},
    )
    assert sorted(tuple(r) for r in spark.table(locator.sql_name(T)).collect()) == [(1, "a"), (2, "b")]
    assert operations(spark, tmp_path / "db" / "t")[-2:] == ["RENAME COLUMN", "MERGE"]
    warnings = [r.getMessage() for r in caplog.records if "non-Spark readers" in r.getMessage()]
    assert len(warnings) == 1 and "columnMapping, deletionVectors" in warnings[0]


def test_a_compatible_table_under_full_is_rewritten_not_given_column_mapping(sql, spark, tmp_path):
    # Setup: a table created under "compatible"; the job then runs with "full" and renames a column.
    # Expect: the table keeps its features (none delta-rs refuses): the rename rewrites it.
    locator = PathLocator(str(tmp_path))
    before = TableSchema(T, (Column("id", "INT"), Column("name", "STRING")), ("id",))
    after = TableSchema(T, (Column("id", "INT"), Column("title", "STRING")), ("id",))
    applier_for(sql, locator).apply(
        [SchemaChange(T, 10, SchemaChangeKind.CREATE, before, AT), RowChange(T, 11, Op.INSERT, None, (1, "a"), before, AT)],
        {"topic": 11},
    )
    applier_for(sql, locator, table_features=FULL).apply(
        [SchemaChange(T, 20, SchemaChangeKind.ALTER, after, AT, "ALTER TABLE t RENAME COLUMN name TO title")],
        {"topic": 20},
    )
    assert operations(spark, tmp_path / "db" / "t")[-1] == REWRITE
    assert reader_features(tmp_path / "db" / "t") == set()
    assert_delta_rs_reads_as_spark(spark, tmp_path / "db" / "t")
