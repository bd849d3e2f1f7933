"""SQL against Delta tables: create, align structure, MERGE, truncate.

Upstream names reach SQL only quoted (`apply.identifiers.quote`); upstream
values reach Spark only inside DataFrames, never as SQL text.
"""

from __future__ import annotations

import logging
from typing import Sequence

from apply.collapse import NetChange
from apply.identifiers import quote
from apply.locator import TableLocator
from apply.progress import APP_ID, tagged_commit
from apply.views import temp_view
from schema_cache.events import Column, TableName, TableSchema
from schema_cache.exceptions import ApplyError

log = logging.getLogger(__name__)

# Column mapping lets columns be dropped and renamed in place and allows any
# character in names; deletion vectors keep MERGE cost tied to changed rows.
TABLE_PROPERTIES = {
    "delta.columnMapping.mode": "name",
    "delta.enableDeletionVectors": "true",
}

_SOURCE_VIEW = "ticdc_delta_merge_source"
_DELETED = "ticdc_deleted"


def _source_column(i: int) -> str:
    # Source columns are positional so no upstream name can collide with ours.
    return f"c{i}"


# Spark types a DataFrame cannot carry from Python values: the source column
# holds another type and the statement converts it.
_SOURCE_FORMS = {"VARIANT": ("STRING", "parse_json({})")}


def _source_type(column: Column) -> str:
    return _SOURCE_FORMS.get(column.spark_type, (column.spark_type, ""))[0]


def _source_value(i: int, column: Column) -> str:
    template = _SOURCE_FORMS.get(column.spark_type, ("", "{}"))[1]
    return template.format(f"s.{_source_column(i)}")


def _normalized(spark_type: str) -> str:
    return spark_type.replace(" ", "").lower()


def create_table_sql(name: str, schema: TableSchema, *, replace: bool) -> str:
    columns = ", ".join(f"{quote(c.name)} {c.spark_type}" for c in schema.columns)
    properties = ", ".join(f"'{k}' = '{v}'" for k, v in TABLE_PROPERTIES.items())
    verb = "CREATE OR REPLACE TABLE" if replace else "CREATE TABLE"
    return f"{verb} {name} ({columns}) USING DELTA TBLPROPERTIES ({properties})"


def merge_sql(name: str, schema: TableSchema, source: str = _SOURCE_VIEW) -> str:
    """MERGE of net changes, one source row per key.

    Clause order matters: a matched deleted key is deleted, any other matched
    key takes the new image, and an unmatched key is inserted unless deleted.
    """
    names = schema.column_names()
    on = " AND ".join(f"t.{quote(k)} = s.{_source_column(names.index(k))}" for k in schema.key)
    values = [_source_value(i, c) for i, c in enumerate(schema.columns)]
    assignments = ", ".join(f"t.{quote(n)} = {v}" for n, v in zip(names, values))
    targets = ", ".join(quote(n) for n in names)
    return (
        f"MERGE INTO {name} AS t USING {source} AS s ON {on} "
        f"WHEN MATCHED AND s.{_DELETED} THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET {assignments} "
        f"WHEN NOT MATCHED AND NOT s.{_DELETED} THEN INSERT ({targets}) VALUES ({', '.join(values)})"
    )


def add_columns_sql(name: str, additions: Sequence[tuple[Column, str | None]]) -> str:
    """ADD COLUMNS keeping upstream order: each column goes AFTER its predecessor."""
    parts = []
    for column, after in additions:
        position = f" AFTER {quote(after)}" if after else " FIRST"
        parts.append(f"{quote(column.name)} {column.spark_type}{position}")
    return f"ALTER TABLE {name} ADD COLUMNS ({', '.join(parts)})"


class DeltaWriter:
    def __init__(self, spark, locator: TableLocator) -> None:
        self._spark = spark
        self._locator = locator

    def _name(self, table: TableName) -> str:
        return self._locator.sql_name(table)

    def columns(self, table: TableName) -> list[tuple[str, str]]:
        """(name, Spark type) of the table's current columns."""
        fields = self._spark.table(self._name(table)).schema.fields
        return [(f.name, f.dataType.simpleString()) for f in fields]

    def create(self, table: TableName, schema: TableSchema, applied_ts: int | None, *, replace: bool) -> None:
        self._locator.prepare(self._spark, table)
        with tagged_commit(self._spark, applied_ts):
            self._spark.sql(create_table_sql(self._name(table), schema, replace=replace))
        log.info("%s %s (%d columns)", "replaced" if replace else "created", table, len(schema.columns))

    def align(self, table: TableName, schema: TableSchema, applied_ts: int | None) -> bool:
        """Make the table's columns those of `schema`; True if anything changed.

        Only the last statement carries `applied_ts`, so a crash part-way
        leaves the table marked as before the change and it is redone.
        """
        current = self.columns(table)
        current_types = {n.lower(): t for n, t in current}
        target = {c.name.lower() for c in schema.columns}
        statements = []
        dropped = [n for n, _ in current if n.lower() not in target]
        if dropped:
            statements.append(
                f"ALTER TABLE {self._name(table)} DROP COLUMNS ({', '.join(quote(n) for n in dropped)})"
            )
        additions = []
        previous = None
        for column in schema.columns:
            old_type = current_types.get(column.name.lower())
            if old_type is None:
                additions.append((column, previous))
            elif old_type != _normalized(column.spark_type):
                raise ApplyError(
                    f"{table}: column {column.name!r} changes type {old_type} -> {column.spark_type}; "
                    "type changes are not supported yet"
                )
            previous = column.name
        if additions:
            statements.append(add_columns_sql(self._name(table), additions))
        for i, statement in enumerate(statements):
            with tagged_commit(self._spark, applied_ts if i == len(statements) - 1 else None):
                self._spark.sql(statement)
        if statements:
            log.info(
                "%s: dropped columns %s, added %s",
                table,
                dropped or "none",
                [c.name for c, _ in additions] or "none",
            )
        return bool(statements)

    def merge(self, table: TableName, schema: TableSchema, changes: Sequence[NetChange], applied_ts: int) -> None:
        source_schema = ", ".join(
            [f"{_source_column(i)} {_source_type(c)}" for i, c in enumerate(schema.columns)] + [f"{_DELETED} BOOLEAN"]
        )
        rows = [(*change.values, change.deleted) for change in changes]
        with temp_view(self._spark, rows, source_schema, _SOURCE_VIEW) as source:
            with tagged_commit(self._spark, applied_ts, txn=(APP_ID, applied_ts)):
                self._spark.sql(merge_sql(self._name(table), schema, source))

    def truncate(self, table: TableName, applied_ts: int) -> None:
        with tagged_commit(self._spark, applied_ts):
            self._spark.sql(f"DELETE FROM {self._name(table)}")

    def drop(self, table: TableName) -> None:
        self._locator.drop(self._spark, table)

    def rename(self, old: TableName, new: TableName) -> None:
        self._locator.rename(self._spark, old, new)
