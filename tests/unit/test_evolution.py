"""Planning Delta schema changes from upstream structures (no Spark)."""

from __future__ import annotations

import pytest

from ticdc_delta.apply.writers.evolution import is_widening, plan, renames_in_statement
from ticdc_delta.schema_cache.events import Column, TableName, TableSchema

T = TableName("d", "t")


def schema(*columns: Column) -> TableSchema:
    return TableSchema(T, columns, (columns[0].name,))


CURRENT = [("id", "int"), ("name", "string"), ("qty", "int")]


def test_add_columns_keep_upstream_positions_and_defaults_are_backfilled():
    target = schema(
        Column("id", "INT"),
        Column("first", "STRING", default="x"),
        Column("name", "STRING"),
        Column("qty", "INT"),
        Column("last", "BIGINT"),
    )
    change = plan(CURRENT, target)
    assert [(c.name, after) for c, after in change.adds] == [("first", "id"), ("last", "qty")]
    assert [c.name for c in change.backfill] == ["first"]
    assert not (change.drops or change.renames or change.widenings or change.rewrite)


def test_drop_column():
    change = plan(CURRENT, schema(Column("id", "INT"), Column("qty", "INT")))
    assert change.drops == ["name"] and not change.adds


def test_rename_needs_the_statement_and_the_structure_to_agree():
    target = schema(Column("id", "INT"), Column("title", "STRING"), Column("qty", "INT"))
    renamed = plan(CURRENT, target, "ALTER TABLE t RENAME COLUMN name TO title")
    assert renamed.renames == [("name", "title")] and not renamed.drops and not renamed.adds
    # Without the clause, the same structures are a drop and an add: data is not carried over.
    guessed = plan(CURRENT, target, "ALTER TABLE t DROP COLUMN name, ADD COLUMN title varchar(10) AFTER id")
    assert guessed.renames == [] and guessed.drops == ["name"] and [c.name for c, _ in guessed.adds] == ["title"]


def test_change_column_renames_and_retypes():
    target = schema(Column("id", "INT"), Column("name", "STRING"), Column("amount", "BIGINT"))
    change = plan(CURRENT, target, "ALTER TABLE `t` CHANGE COLUMN `qty` `amount` BIGINT NOT NULL")
    assert change.renames == [("qty", "amount")]
    assert change.widenings == [("amount", "BIGINT")]


def test_type_changes_split_into_widening_and_rewrite():
    current = [("id", "int"), ("a", "tinyint"), ("b", "bigint"), ("c", "string"), ("d", "date"), ("e", "decimal(10,2)")]
    target = schema(
        Column("id", "BIGINT"),
        Column("a", "DECIMAL(5,0)"),
        Column("b", "INT"),
        Column("c", "INT"),
        Column("d", "TIMESTAMP_NTZ"),
        Column("e", "DECIMAL(12,4)"),
    )
    change = plan(current, target)
    assert change.widenings == [("id", "BIGINT"), ("a", "DECIMAL(5,0)"), ("e", "DECIMAL(12,4)")]
    assert change.rewrite == [("b", "INT"), ("c", "INT"), ("d", "TIMESTAMP_NTZ")]


def test_names_match_case_insensitively_like_mysql_and_spark():
    assert not plan([("ID", "int")], schema(Column("id", "INT")))


@pytest.mark.parametrize(
    "old, new, widening",
    [
        ("tinyint", "SMALLINT", True),
        ("smallint", "BIGINT", True),
        ("bigint", "INT", False),
        ("int", "DECIMAL(10,0)", True),
        ("int", "DECIMAL(12,3)", False),
        ("bigint", "DECIMAL(20,0)", True),
        ("float", "DOUBLE", True),
        ("double", "FLOAT", False),
        ("decimal(10,2)", "DECIMAL(11,3)", True),
        ("decimal(10,2)", "DECIMAL(10,3)", False),
        ("decimal(10,2)", "DECIMAL(10,2)", False),
        ("date", "TIMESTAMP_NTZ", False),
        ("string", "BINARY", False),
    ],
)
def test_is_widening(old, new, widening):
    assert is_widening(old, new) is widening


@pytest.mark.parametrize(
    "statement, pairs",
    [
        ("ALTER TABLE t RENAME COLUMN a TO b", [("a", "b")]),
        ("alter table t rename column `a``x` to `b c`", [("a`x", "b c")]),
        ("ALTER TABLE t CHANGE a b INT", [("a", "b")]),
        ("ALTER TABLE t CHANGE COLUMN a a BIGINT", []),
        ("ALTER TABLE t RENAME COLUMN a TO b, RENAME COLUMN c TO d", [("a", "b"), ("c", "d")]),
        ("ALTER TABLE t RENAME TO u", []),
        ("ALTER TABLE t ADD COLUMN c INT", []),
    ],
)
def test_renames_in_statement(statement, pairs):
    assert renames_in_statement(statement) == pairs
