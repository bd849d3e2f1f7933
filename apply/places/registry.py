"""The tables a consumer materializes, in `_ticdc/tables`: what `ticdc-delta status` reports on, and, for
path tables, which folder holds each (`apply.places.folders`).

A table is registered before the job first creates it (or renames another
table to its name): the applier registers every table of a batch that does
not exist yet, in one commit, before applying the batch. So the registry
never misses a table the job made; a crash between registering and creating
leaves a name whose table the replay creates. Tables that already exist are
looked up in the registry once per process (one read) and registered when
missing, so tables made by a release before the registry appear too. A name
may be registered more than once (a table dropped, then seen again): the
latest row of a name says where it is, or that it is gone.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Protocol

from pyspark.errors import AnalysisException
from pyspark.sql import functions as F

from ticdc_delta.apply.base.errors import is_missing_table
from ticdc_delta.apply.base.session import SqlSession
from ticdc_delta.apply.own_tables.base import InternalTable, OwnTablePlaces, append_internal_rows, own_rows
from ticdc_delta.apply.places.folders import Entry, TablePlaces
from ticdc_delta.schema_cache.events import TableName


class TableLocator(OwnTablePlaces, Protocol):
    """What the registry asks of apply.places.locator's locators (named here, not imported: they read and write it)."""

    places: TablePlaces | None

    def load(self, sql) -> None: ...

    def record(self, sql, entries: Sequence[Entry]) -> None: ...

TABLE = "tables"
_COLUMNS = (("consumer", "STRING"), ("database", "STRING"), ("table", "STRING"), ("registered_at", "TIMESTAMP"),
            ("folder", "STRING"), ("removed", "BOOLEAN"), ("seq", "BIGINT"))
# Added with table folders: a registry of an older release gets them before the first row that has them.
_ADDED = _COLUMNS[4:]


# What a process knows of the registry table: not looked at yet (None), or one of these.
MISSING, OLD, CURRENT = "missing", "old", "current"


def registry_shape(sql: SqlSession, locator: TableLocator) -> str:
    try:
        columns = sql.table(locator.internal_sql_name(TABLE)).columns
    except AnalysisException as err:
        if is_missing_table(err):
            return MISSING
        raise
    return CURRENT if all(name in columns for name, _ in _ADDED) else OLD


def read_entries(sql: SqlSession, locator: TableLocator, consumer: str | None = None) -> tuple[list[Entry], str]:
    """The registry's rows (of `consumer` only, if given), and its shape."""
    if locator.places is not None and not locator.internal_table_exists(sql, TABLE):
        return [], MISSING  # a look at the folder, not a Spark read: a new target's every run asks
    read = own_rows(locator, TABLE)
    if read is not None:  # (delta-rs's read: no Spark statement)
        current = all(name in read.column_names for name, _ in _ADDED)
        rows = [r for r in read.to_pylist() if consumer is None or r["consumer"] == consumer]
    else:
        try:
            frame = sql.table(locator.internal_sql_name(TABLE))
            current = all(name in frame.columns for name, _ in _ADDED)
            wanted = ["consumer", "database", "table"] + ([name for name, _ in _ADDED] if current else [])
            if consumer is not None:
                frame = frame.where(F.col("consumer") == F.lit(consumer))
            rows = frame.select(*wanted).collect()
        except AnalysisException as err:
            if is_missing_table(err):
                return [], MISSING
            raise
    entries = [
        Entry(TableName(r["database"], r["table"]), r["folder"] if current else None,
              bool(current and r["removed"]), (r["seq"] or 0) if current else 0, r["consumer"])
        for r in rows
    ]
    return entries, CURRENT if current else OLD


def append_entries(sql: SqlSession, locator: TableLocator, consumer: str, entries: Sequence[Entry],
                   shape: str | None) -> str:
    """One commit of `entries` (and the columns an older registry lacks first); the registry's shape after."""
    name = locator.internal_sql_name(TABLE)
    if shape is None:
        shape = registry_shape(sql, locator)
    if shape == OLD:
        added = ", ".join(f"{column} {kind}" for column, kind in _ADDED)
        sql.run(f"ALTER TABLE {name} ADD COLUMNS ({added})", what=f"add folder columns to {name}")
    now = dt.datetime.now(dt.timezone.utc)
    rows = [(e.consumer or consumer, e.table.database, e.table.table, now, e.folder, e.removed, e.seq) for e in entries]
    append_internal_rows(sql, locator, TABLE, _COLUMNS, rows, exists=shape != MISSING,
                         what=f"register tables in {name}")
    return CURRENT


class TableRegistry(InternalTable):
    def __init__(self, sql: SqlSession, locator: TableLocator, consumer: str) -> None:
        super().__init__(sql, locator, TABLE)
        self._consumer = consumer
        self._registered: set[TableName] = set()  # by this object: not written again
        self._shape: str | None = None
        self._read = False  # the registry's names are in `_registered`

    def register(self, tables: Iterable[TableName], *, existing: Iterable[TableName] = ()) -> None:
        """Record `tables` (about to be created) and those of `existing` (Delta tables already there) the
        registry lacks, as this consumer's: one commit, none when all are registered."""
        places = self._locator.places
        if places is not None:
            # Path tables: the locator holds the registry's rows, and gives each new name its folder.
            self._locator.load(self._sql)
            # A name gone (dropped or renamed away) is not registered ahead: its events are most often
            # replays the applier skips; one created again registers as it is created (`PathLocator.prepare`).
            new = [t for t in _sorted(set(tables))
                   if not places.gone(t) and not (places.live(t) and places.known(t, self._consumer))]
            old = [t for t in _sorted(set(existing) - set(new)) if not places.known(t, self._consumer)]
            if new or old:
                seq = places.next_seq()
                entries = [Entry(t, places.choose(t), False, seq, self._consumer) for t in new + old]
                self._locator.record(self._sql, entries)
            return
        existing = set(existing) - self._registered
        if existing and not self._read:
            self._registered.update(self.tables())
            self._read = True
        fresh = _sorted((set(tables) | existing) - self._registered)
        if not fresh:
            return
        entries = [Entry(t, None, False, 0) for t in fresh]
        self._shape = append_entries(self._sql, self._locator, self._consumer, entries, self._shape)
        self._registered.update(fresh)

    def tables(self) -> list[TableName]:
        """This consumer's registered tables (path tables: those not dropped or renamed away), sorted by name."""
        places = self._locator.places
        if places is not None:
            self._locator.load(self._sql)
            return places.names(self._consumer)
        entries, self._shape = read_entries(self._sql, self._locator, self._consumer)
        return _sorted({e.table for e in entries})


def _sorted(tables: Iterable[TableName]) -> list[TableName]:
    return sorted(tables, key=lambda t: (t.database, t.table))
