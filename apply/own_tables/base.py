"""The product's own Delta tables (checkpoints, dead letters, tombstones, metrics, ...): created on first use."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from pyspark.errors import AnalysisException

from ticdc_delta.apply.base.errors import error_condition
from ticdc_delta.apply.base.identifiers import quote
from ticdc_delta.apply.base.session import SqlSession
from ticdc_delta.apply.tables.features import TableLayout

log = logging.getLogger(__name__)

# What a creation is told, across Spark and Delta releases, when the table is there already.
ALREADY_THERE = frozenset({"TABLE_OR_VIEW_ALREADY_EXISTS", "TABLE_ALREADY_EXISTS", "DELTA_PATH_EXISTS"})
# Whatever target.table_features says, the product's own tables need no table feature (never renamed,
# small): every reader opens them, whatever defaults the session or workspace sets.
_PROPERTIES = ", ".join(f"'{k}' = '{v}'" for k, v in TableLayout().create_properties().items())


class OwnDeltaRs(Protocol):
    """Who reads and writes the product's own tables besides Spark (apply.own_tables.delta_rs); None from
    `rows`, `create` or `update_one`, False from `append`, leaves the statement to Spark."""

    def append(self, location: str, columns: Sequence[tuple[str, str]], rows: Sequence[tuple],
               check_write: Callable[[], None], create_with: Mapping[str, str] | None = None) -> bool:
        """The rows appended to the table at `location` (created with the table properties `create_with` where it is
        missing); False: not taken (Spark's to do)."""
        ...

    def rows(self, location: str):
        """The table at `location` as an Arrow table (its columns, every row); None: Spark's to read."""
        ...

    def create(self, location: str, columns: Sequence[tuple[str, str]], row: tuple,
               properties: Mapping[str, str]) -> bool | None:
        """The table made at `location` holding `row` as its first commit: True by this call, False by another
        writer, None Spark's to do."""
        ...

    def update_one(self, location: str, where: Mapping[str, object], values: Mapping[str, object]) -> bool | None:
        """The row holding `where`'s values changed to `values`, committed only where nothing else was since the
        read: True changed, False not (nothing committed), None Spark's to do."""
        ...


def own_rows(locator: OwnTablePlaces, table: str):
    """One of the product's own tables as delta-rs reads it (an Arrow table); None where Spark reads it."""
    location = locator.internal_location(table)
    if locator.own_delta_rs is None or location is None:
        return None
    return locator.own_delta_rs.rows(location)


class OwnTablePlaces(Protocol):
    """Where the product's own tables are (apply.places.locator's locators; named here, not imported: the locator
    records path tables' folders in one of these tables)."""

    # Reads and writes of own tables besides Spark's (None: Spark's only).
    own_delta_rs: OwnDeltaRs | None

    def internal_sql_name(self, name: str) -> str: ...

    def internal_location(self, name: str) -> str | None:
        """The folder of one of the product's own tables (None: a catalog table)."""
        ...

    def prepare_internal(self, sql) -> None: ...

    def internal_table_exists(self, sql, name: str) -> bool: ...


class InternalTable:
    """One of the product's own tables as one session writes it: `sql_name` is how SQL names it."""

    def __init__(self, sql: SqlSession, locator: OwnTablePlaces, table: str) -> None:
        self._sql = sql
        self._locator = locator
        self.sql_name = locator.internal_sql_name(table)


def ensure_internal_table(
    sql: SqlSession,
    locator: OwnTablePlaces,
    table: str,
    columns: str,
    *,
    properties: Mapping[str, str] | None = None,
    guarded: bool = True,
) -> str:
    """Create one of the product's own Delta tables if missing; return its SQL name.

    `properties`: table properties besides those every one of them has;
    `guarded` False: not a write the consumer's lease must allow (the lease's own table).
    """
    name = locator.internal_sql_name(table)
    if locator.internal_table_exists(sql, table):
        return name
    locator.prepare_internal(sql)
    statement = f"CREATE TABLE IF NOT EXISTS {name} ({columns}) USING DELTA TBLPROPERTIES ({_properties(properties)})"
    _create(sql, statement, f"create {name}", guarded)
    return name


def create_internal_table_as(
    sql: SqlSession,
    locator: OwnTablePlaces,
    table: str,
    select: str,
    *,
    properties: Mapping[str, str] | None = None,
    guarded: bool = True,
    what: str = "",
) -> None:
    """Create one of the product's own Delta tables holding the rows of `select` (one commit); raises if the
    table is there already, or another job's creation of it commits first. `what`: the statement's name in
    errors and logs (default: create <table>)."""
    name = locator.internal_sql_name(table)
    locator.prepare_internal(sql)
    statement = f"CREATE TABLE {name} USING DELTA TBLPROPERTIES ({_properties(properties)}) AS {select}"
    _create(sql, statement, what or f"create {name}", guarded)


def _properties(properties: Mapping[str, str] | None) -> str:
    return _PROPERTIES + "".join(f", '{k}' = '{v}'" for k, v in (properties or {}).items())


def _create(sql: SqlSession, statement: str, what: str, guarded: bool) -> None:
    if guarded:
        sql.run(statement, what=what)
    else:
        sql.run_unguarded(statement, what=what)


def append_internal_rows(
    sql: SqlSession,
    locator: OwnTablePlaces,
    table: str,
    columns: Sequence[tuple[str, str]],
    rows: Sequence[tuple],
    *,
    exists: bool,
    what: str = "",
    add_missing_columns: bool = False,
) -> None:
    """Append `rows` to one of the product's own tables in one commit, creating the table with them if missing.

    For tables written besides the data (metrics, the table registry): the
    first append of a process (`exists` False) to a table not seen to exist
    tries CREATE TABLE AS SELECT, which also covers a missing table without a
    commit of its own, and falls back to an INSERT when the table is there
    (another job made it meanwhile); other appends INSERT. Columns
    are matched by name, so a table with more columns (a later release's)
    takes the rows; with `add_missing_columns`, a table made by an earlier
    release gets the columns it lacks (nullable: its earlier rows hold NULL
    there) before the first INSERT of a process (a schema read: only for
    tables whose columns grew, not on every run's first checkpoint). One
    task writes them, so one file: rows spread over the session's
    parallelism would also write an empty file per other task, which Delta
    leaves out of the table but on disk.
    """
    name = locator.internal_sql_name(table)
    schema = ", ".join(f"{quote(column)} {kind}" for column, kind in columns)
    names = ", ".join(quote(column) for column, _ in columns)
    what = what or f"append to {name}"
    if _appended_by_delta_rs(sql, locator, table, columns, rows, what):
        return
    with sql.view(rows, schema) as source:
        if not exists:
            if not locator.internal_table_exists(sql, table):
                try:
                    create_internal_table_as(sql, locator, table, f"SELECT /*+ COALESCE(1) */ * FROM {source}", what=what)
                    return
                except AnalysisException as err:
                    if error_condition(err) not in ALREADY_THERE:
                        raise
            if add_missing_columns:
                _add_missing_columns(sql, name, columns, what)
        sql.run(f"INSERT INTO {name} ({names}) SELECT /*+ COALESCE(1) */ * FROM {source}", what=what)


def _appended_by_delta_rs(sql: SqlSession, locator: OwnTablePlaces, table: str, columns: Sequence[tuple[str, str]],
                          rows: Sequence[tuple], what: str) -> bool:
    """The rows appended by the locator's other writer (creating the table where it is missing, with the properties
    every own table has); False where it did not take them."""
    location = locator.internal_location(table)
    if locator.own_delta_rs is None or location is None or not rows:
        return False
    return locator.own_delta_rs.append(location, columns, rows, lambda: sql.check_write(what),
                                       create_with=TableLayout().create_properties())


def _add_missing_columns(sql: SqlSession, name: str, columns: Sequence[tuple[str, str]], what: str) -> None:
    """Add the columns `name` lacks (made by an earlier release). Asked before the process's first INSERT (its
    schema is the snapshot that INSERT loads anyway), not after a refused one, which Spark 4 logs at ERROR."""
    missing = _lacking(sql, name, columns)
    if not missing:
        return
    added = ", ".join(f"{quote(column)} {kind}" for column, kind in missing)
    try:
        sql.run(f"ALTER TABLE {name} ADD COLUMNS ({added})", what=f"{what}: add columns {added}")
    except AnalysisException:
        # Another job (another consumer writing the same table) added them first: fine if they are there now.
        if _lacking(sql, name, missing):
            raise
        return
    log.info("%s: added columns of this release: %s", name, added)


def _lacking(sql: SqlSession, name: str, columns: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The `columns` table `name` does not have (names compared as Spark does, ignoring case)."""
    present = {field.name.lower() for field in sql.table(name).schema.fields}
    return [(column, kind) for column, kind in columns if column.lower() not in present]


# VACUUM LITE finds the files to delete in the log (no listing of the table's folder, which costs a task
# per listing partition); where the session's Delta has no LITE (before 3.3) or the log no longer covers
# every file to delete (the job stood still longer than the log is kept), the full VACUUM does it.
NO_VACUUM_LITE = frozenset({"DELTA_CANNOT_VACUUM_LITE", "PARSE_SYNTAX_ERROR"})


def vacuum_internal_table(sql: SqlSession, name: str, what: str) -> None:
    """Delete the files a product table stopped using longer ago than its file retention."""
    try:
        sql.run(f"VACUUM {name} LITE", what=what)
    except Exception as err:
        if error_condition(err) not in NO_VACUUM_LITE:
            raise
        sql.run(f"VACUUM {name}", what=what)
