"""A recording stand-in for the Delta writer and the tombstones, for unit tests of the applier's decisions.

The applier's statements themselves run against real Delta tables in tests/e2e; these stand-ins only record
which statements it asks for, with which applied points, and can raise after the n-th call of a kind (a crash).
"""

from __future__ import annotations

from ticdc_delta.apply.changes.merge_source import SourceRows
from ticdc_delta.apply.own_tables.tombstones import Removal
from ticdc_delta.apply.tables.points import TableProgress
from ticdc_delta.apply.writers.delta_writer import Evolution
from ticdc_delta.schema_cache.events import Column, Op, Position, RowChange, TableName, TableSchema


def structure(table: TableName, *names: str) -> TableSchema:
    return TableSchema(table, tuple(Column(n, "INT") for n in names), ("id",))


class Crash(Exception):
    pass


class RecordingWriter:
    """What the applier asked for, and the applied point each table's last marked commit holds."""

    def __init__(self) -> None:
        self.tables: dict[TableName, dict] = {}
        self.calls: list[tuple] = []
        self.crash_on: tuple[str, int] | None = None  # (call, n-th): raise Crash after it
        self.evolved: list[tuple] = []  # (table, column names, options)
        self.appended: list[TableName] = []  # tables whose changes were appended (`into_empty`), not merged

    def _did(self, *call) -> None:
        self.calls.append(call)
        if self.crash_on and self.crash_on[0] == call[0]:
            self.crash_on = (call[0], self.crash_on[1] - 1)
            if self.crash_on[1] == 0:
                self.crash_on = None
                raise Crash(call)

    def _mark(self, table, point) -> None:
        if point is not None:
            self.tables[table]["point"] = point

    def progress(self, table):
        if table not in self.tables:
            return TableProgress(False)
        return TableProgress(True, self.tables[table]["point"])

    def columns(self, table):
        return [(c, "int") for c in self.tables[table]["columns"]]

    def create(self, table, schema, point, *, replace=False, note=None):
        self.tables[table] = {"point": point, "columns": [c.name for c in schema.columns]}
        self._did("create", table, point)

    def create_history_from(self, history, table, point, *, exists):
        self.tables[history] = {"point": point, "columns": self.tables[table]["columns"]}
        self._did("begin", history, point)

    def evolve(self, table, schema, point, how=Evolution()):
        self._mark(table, point)
        self.evolved.append((table, [c.name for c in schema.columns], how))
        self._did("evolve", table, point)
        return False

    def merge(self, table, schema, source, point, **options):
        if options.get("into_empty"):
            self.appended.append(table)
        self._mark(table, point)
        self._did("merge", table, point, _count(source))

    def merge_history(self, history, schema, source, point, *, note=None):
        self._mark(history, point)
        self._did("merge_history", history, point, _count(source))

    def close_history(self, history, commit_ts, point):
        self._mark(history, point)
        self._did("close", history, commit_ts)

    def rename(self, old, new):
        self.tables[new] = self.tables.pop(old)
        self._did("rename", old, new)


def _count(source) -> int | None:
    """A MERGE source's rows: in memory, how many; a DataFrame (staged runs) is not counted here."""
    return len(source.rows) if isinstance(source, SourceRows) else None


class Tombstones:
    """The product's tombstones' decisions (a later or equal removal replaces the record), in memory."""

    def __init__(self) -> None:
        self.at: dict[TableName, Removal] = {}

    def removal(self, table):
        return self.at.get(table)

    def removed_at(self, table):
        removal = self.at.get(table)
        return None if removal is None else removal.ts

    def record(self, table, commit_ts, why, held_through=None):
        known = self.at.get(table)
        if known is None or commit_ts >= known.ts:
            self.at[table] = Removal(commit_ts, held_through)


def insert(table, ts, key, schema=None):
    return RowChange(table, ts, Op.INSERT, None, (key, ts), schema or structure(table, "id", "v"), Position("t", 0, ts))
