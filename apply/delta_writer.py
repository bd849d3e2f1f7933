"""SQL against Delta tables: create, evolve structure, MERGE, truncate.

Upstream names reach SQL only quoted (`apply.identifiers.quote`); upstream
values reach Spark only inside DataFrames, never as SQL text.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass

from apply.collapse import NetChange
from apply.evolution import EvolutionPlan, plan
from apply.identifiers import quote
from apply.locator import TableLocator
from apply.metrics import PhaseTimes
from apply.progress import APP_ID, AppliedPoint, PendingBackfill, TableProgress, commit_tags, read_progress
from apply.sql_session import SqlSession, spark_version
from schema_cache.events import Column, TableName, TableSchema

log = logging.getLogger(__name__)

# Column mapping lets columns be dropped and renamed in place and allows any
# character in names; deletion vectors keep MERGE cost tied to changed rows;
# type widening lets integer, float and decimal columns grow in place.
TABLE_PROPERTIES = {
    "delta.columnMapping.mode": "name",
    "delta.enableDeletionVectors": "true",
    "delta.enableTypeWidening": "true",
}

# Table features a column type needs. CREATE TABLE enables them itself; a
# later ADD COLUMN or type change must enable them first.
_TYPE_FEATURES = {"TIMESTAMP_NTZ": "timestampNtz", "VARIANT": "variantType"}

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


def _source_schema(columns: Sequence[Column], *extra: str) -> str:
    return ", ".join([f"{_source_column(i)} {_source_type(c)}" for i, c in enumerate(columns)] + list(extra))


def _properties() -> str:
    return ", ".join(f"'{k}' = '{v}'" for k, v in TABLE_PROPERTIES.items())


def create_table_sql(name: str, schema: TableSchema, *, replace: bool) -> str:
    columns = ", ".join(f"{quote(c.name)} {c.spark_type}" for c in schema.columns)
    # Not CREATE OR REPLACE: on an existing path table Delta treats that as
    # "create unless it exists" and keeps the rows.
    verb = "REPLACE TABLE" if replace else "CREATE TABLE"
    return f"{verb} {name} ({columns}) USING DELTA TBLPROPERTIES ({_properties()})"


def merge_sql(name: str, schema: TableSchema, source: str) -> str:
    """MERGE of net changes, one source row per key.

    Clause order matters: a matched deleted key is deleted, any other matched
    key takes the new image, and an unmatched key is inserted unless deleted.
    """
    names = schema.column_names()
    on = " AND ".join(f"t.{quote(k)} = s.{_source_column(names.index(k))}" for k in schema.key)
    values = [_source_value(i, c) for i, c in enumerate(schema.columns)]
    assignments = ", ".join(f"t.{quote(n)} = {v}" for n, v in zip(names, values, strict=True))
    targets = ", ".join(quote(n) for n in names)
    return (
        f"MERGE INTO {name} AS t USING {source} AS s ON {on} "
        f"WHEN MATCHED AND s.{_DELETED} THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET {assignments} "
        f"WHEN NOT MATCHED AND NOT s.{_DELETED} THEN INSERT ({targets}) VALUES ({', '.join(values)})"
    )


def insert_sql(name: str, schema: TableSchema, source: str) -> str:
    """The upserts of a MERGE source appended: for a table known to be empty."""
    targets = ", ".join(quote(c.name) for c in schema.columns)
    values = ", ".join(_source_value(i, c) for i, c in enumerate(schema.columns))
    return f"INSERT INTO {name} ({targets}) SELECT {values} FROM {source} AS s WHERE NOT s.{_DELETED}"


def add_columns_sql(name: str, additions: Sequence[tuple[Column, str | None]]) -> str:
    """ADD COLUMNS keeping upstream order: each column goes AFTER its predecessor."""
    parts = []
    for column, after in additions:
        position = f" AFTER {quote(after)}" if after else " FIRST"
        parts.append(f"{quote(column.name)} {column.spark_type}{position}")
    return f"ALTER TABLE {name} ADD COLUMNS ({', '.join(parts)})"


def _cast(expression: str, new_type: str) -> str:
    if new_type == "VARIANT":
        return f"parse_json(CAST({expression} AS STRING))"
    return f"CAST({expression} AS {new_type})"


def rewrite_sql(name: str, columns: Sequence[str], new_types: dict[str, str]) -> str:
    """Replace the table by itself with some columns cast, in one atomic commit."""
    select = ", ".join(
        f"{_cast(quote(c), new_types[c])} AS {quote(c)}" if c in new_types else quote(c) for c in columns
    )
    return f"CREATE OR REPLACE TABLE {name} USING DELTA TBLPROPERTIES ({_properties()}) AS SELECT {select} FROM {name}"


@dataclass(frozen=True)
class _Step:
    statement: str | Callable[[], object]
    # Recorded on this step's commit when it is not the last one.
    pending: PendingBackfill | None = None


class DeltaWriter:
    """The statements that change upstream tables' Delta tables, on the job's SQL session."""

    def __init__(self, sql: SqlSession, locator: TableLocator, times: PhaseTimes | None = None) -> None:
        self._sql = sql
        self._locator = locator
        self._times = times or PhaseTimes()

    def _name(self, table: TableName) -> str:
        return self._locator.sql_name(table)

    def progress(self, table: TableName) -> TableProgress:
        """Whether the table exists, and how far its commits say it is applied."""
        with self._times.phase("table_state"):
            return read_progress(self._sql, self._name(table))

    def columns(self, table: TableName) -> list[tuple[str, str]]:
        """(name, Spark type) of the table's current columns."""
        fields = self._sql.table(self._name(table)).schema.fields
        return [(f.name, f.dataType.simpleString()) for f in fields]

    def create(self, table: TableName, schema: TableSchema, point: AppliedPoint | None, *, replace: bool) -> None:
        statement = create_table_sql(self._name(table), schema, replace=replace)
        with self._times.phase("ddl"):
            self._locator.prepare(self._sql, table)
            self._sql.run(statement, commit_tags(point), what=f"create {table}")
        log.info("%s %s (%d columns)", "replaced" if replace else "created", table, len(schema.columns))

    def evolve(
        self,
        table: TableName,
        schema: TableSchema,
        point: AppliedPoint | None,
        *,
        statement: str = "",
        ddl: str | None = None,
        prior: AppliedPoint | None = None,
        pending: PendingBackfill | None = None,
        additive_only: bool = False,
    ) -> bool:
        """Make the table's structure that of `schema`; True if anything changed.

        Order: renames, drops, adds, type changes, then defaults written into
        the rows that existed before. Only the last step carries `point`, so a
        crash part-way leaves the table marked as before (`prior`) and the
        change is redone; since a redo finds the new columns already there,
        the add step records which defaults are still to be written for the
        DDL identified by `ddl` (`pending`, read back on restart).

        `additive_only`: only add and widen columns (structure seen in rows,
        not announced by a DDL: never lose data on its account).
        """
        with self._times.phase("ddl"):
            return self._evolve(table, schema, point, statement, ddl, prior, pending, additive_only)

    def _evolve(self, table, schema, point, statement, ddl, prior, pending, additive_only) -> bool:
        name = self._name(table)
        change = plan(self.columns(table), schema, statement)
        if additive_only:
            change = EvolutionPlan(adds=change.adds, widenings=change.widenings, backfill=change.backfill)
        if change.widenings and spark_version(self._sql.spark) < (4, 0):
            # Delta 3.x widens only among the small integer types, as a preview: rewrite instead.
            change = dataclasses.replace(change, widenings=[], rewrite=change.rewrite + change.widenings)
        backfill = list(change.backfill)
        if pending is not None and ddl is not None and pending.ddl == ddl:
            done = {c.name.lower() for c in backfill}
            wanted = {n.lower() for n in pending.columns} - done
            backfill += [c for c in schema.columns if c.name.lower() in wanted and c.default is not None]

        new_types = [c.spark_type for c, _ in change.adds] + [t for _, t in change.widenings + change.rewrite]
        features = sorted({_TYPE_FEATURES[t] for t in new_types if t in _TYPE_FEATURES} - self._features(table))
        steps = [_Step(f"ALTER TABLE {name} SET TBLPROPERTIES ('delta.feature.{f}' = 'supported')") for f in features]
        steps += [_Step(f"ALTER TABLE {name} RENAME COLUMN {quote(a)} TO {quote(b)}") for a, b in change.renames]
        if change.drops:
            dropped = ", ".join(quote(n) for n in change.drops)
            steps.append(_Step(f"ALTER TABLE {name} DROP COLUMNS ({dropped})"))
        if change.adds:
            defaults = tuple(c.name for c in change.backfill)
            marker = PendingBackfill(ddl, defaults) if defaults and ddl is not None else None
            steps.append(_Step(add_columns_sql(name, change.adds), marker))
        steps += [_Step(f"ALTER TABLE {name} ALTER COLUMN {quote(c)} TYPE {new}") for c, new in change.widenings]
        if change.rewrite:
            # Its SELECT names the columns as the earlier steps left them.
            steps.append(_Step(lambda: self._sql.spark.sql(self._rewrite_sql(table, dict(change.rewrite)))))
        if backfill:
            steps.append(_Step(lambda: self._write_defaults(table, backfill)))

        for i, step in enumerate(steps):
            if i == len(steps) - 1:
                tags = commit_tags(point)
            else:
                tags = commit_tags(prior if step.pending else None, pending=step.pending)
            self._sql.run(step.statement, tags, what=f"evolve {table}")
        if steps:
            log.info(
                "%s: renamed %s, dropped %s, added %s, widened %s, rewrote %s, defaults written for %s",
                table,
                change.renames or "-",
                change.drops or "-",
                [c.name for c, _ in change.adds] or "-",
                change.widenings or "-",
                change.rewrite or "-",
                [c.name for c in backfill] or "-",
            )
        return bool(steps)

    def _features(self, table: TableName) -> set[str]:
        properties = self._sql.sql(f"SHOW TBLPROPERTIES {self._name(table)}").collect()
        prefix = "delta.feature."
        return {r["key"][len(prefix):] for r in properties if r["key"].startswith(prefix) and r["value"] == "supported"}

    def _rewrite_sql(self, table: TableName, new_types: dict[str, str]) -> str:
        # Changes Delta cannot make in place (narrowing, to or from text, DATE
        # to TIMESTAMP_NTZ, ...): the table is replaced by itself, cast, in one
        # commit; its history stays.
        columns = [n for n, _ in self.columns(table)]
        by_lower = {k.lower(): v for k, v in new_types.items()}
        cast = {c: by_lower[c.lower()] for c in columns if c.lower() in by_lower}
        log.warning("%s: rewriting the table to change column types %s", table, cast)
        return rewrite_sql(self._name(table), columns, cast)

    def _write_defaults(self, table: TableName, columns: Sequence[Column]) -> None:
        # Rows that existed before ADD COLUMN read its default in TiDB; one
        # MERGE against a single-row source writes it into all of them. Runs
        # inside the tagged step (the caller holds the session).
        row = [tuple(c.default for c in columns)]
        with self._sql.view(row, _source_schema(columns)) as source:
            assignments = ", ".join(f"t.{quote(c.name)} = {_source_value(i, c)}" for i, c in enumerate(columns))
            self._sql.spark.sql(
                f"MERGE INTO {self._name(table)} AS t USING {source} AS s ON TRUE "
                f"WHEN MATCHED THEN UPDATE SET {assignments}"
            )

    def merge(
        self,
        table: TableName,
        schema: TableSchema,
        changes: Sequence[NetChange],
        point: AppliedPoint,
        *,
        into_empty: bool = False,
    ) -> None:
        """Apply net changes through `point`; `into_empty`: the table is known to hold no rows.

        Into an empty table the changes are appended (the upserts; deletes have
        nothing to delete): the same result as a MERGE, without its join.
        """
        if into_empty:
            changes = [c for c in changes if not c.deleted]
            if not changes:
                return
        rows = [(*change.values, change.deleted) for change in changes]
        source_schema = _source_schema(schema.columns, f"{_DELETED} BOOLEAN")
        # Delta's idempotent writes need one number that grows with every MERGE:
        # the commitTs. Offset points (several partitions; their `ts` is only the
        # newest DDL) rely on the applier's replay check alone.
        txn = (APP_ID, point.ts) if point.ts is not None and not point.offsets else None
        with ExitStack() as scope:
            with self._times.phase("source_build"):
                source = scope.enter_context(self._sql.view(rows, source_schema))
            with self._times.phase("merge"):
                build = insert_sql if into_empty else merge_sql
                statement = build(self._name(table), schema, source)
                self._sql.run(statement, commit_tags(point, txn=txn), what=f"merge {table}")

    def truncate(self, table: TableName, point: AppliedPoint) -> None:
        with self._times.phase("ddl"):
            self._sql.run(f"DELETE FROM {self._name(table)}", commit_tags(point), what=f"truncate {table}")

    def drop(self, table: TableName) -> None:
        with self._times.phase("ddl"):
            self._locator.drop(self._sql, table)

    def rename(self, old: TableName, new: TableName) -> None:
        with self._times.phase("ddl"):
            self._locator.rename(self._sql, old, new)
