"""Tables the job dropped or renamed away, with the commitTs of that DDL.

A dropped table takes its commit history (and so its applied marker) with
it. Without a record, replaying the topic from the beginning would re-create
a table that was renamed away, or briefly resurrect a dropped one. The record
is written before the drop or rename, so a crash in between only repeats the
DDL. Events of a missing table at or below its tombstone are replays, except
a rename into it at that very commitTs while it had held rows from before
(`Removal.freed_for_later_rename`).
"""

from __future__ import annotations

import datetime as dt
from typing import NamedTuple

from pyspark.errors import AnalysisException

from ticdc_delta.apply.base.errors import is_missing_table
from ticdc_delta.apply.base.session import SqlSession
from ticdc_delta.apply.own_tables.base import OwnTablePlaces, ensure_internal_table, own_rows
from ticdc_delta.schema_cache.events import TableName

_TABLE = "tombstones"
_COLUMNS = "database STRING, table STRING, removed_ts BIGINT, reason STRING, recorded_at TIMESTAMP, held_through BIGINT"
# Added after the first release: older tables get it on their next record.
_HELD_THROUGH = "held_through"


class Removal(NamedTuple):
    ts: int  # commitTs of the DROP or RENAME that removed the name
    # The commitTs the table was applied through when removed (None: unknown, an older record).
    held_through: int | None = None

    def freed_for_later_rename(self, commit_ts: int) -> bool:
        """Whether a rename into this name at `commit_ts` comes after the removal, so is still to do.

        TiDB renames several tables in one DDL at one commitTs, and TiCDC sends it as one RENAME per
        table in order (`RENAME TABLE t TO t_old, t_new TO t`: a swap). TiDB refuses a rename onto an
        existing table, so a name that held rows from before the commitTs was freed before any rename
        into it. A name created at that commitTs and removed there again (the swap's temporary name)
        had its rename into it first: that one is a replay.
        """
        return self.ts == commit_ts and (self.held_through is None or self.held_through < commit_ts)


class Tombstones:
    def __init__(self, sql: SqlSession, locator: OwnTablePlaces) -> None:
        self._sql = sql
        self._locator = locator
        self._name = locator.internal_sql_name(_TABLE)
        self._known: dict[TableName, Removal] | None = None
        self._columns_checked = False

    def _load(self) -> dict[TableName, Removal]:
        if self._known is None:
            read = own_rows(self._locator, _TABLE)  # (delta-rs's read: no Spark statement)
            if read is not None:
                rows = read.to_pylist()
            elif self._locator.own_delta_rs is not None and not self._locator.internal_table_exists(self._sql, _TABLE):
                rows = []  # (none yet, as on most targets: a look at the folder, not a Spark statement)
            else:
                try:
                    rows = [r.asDict() for r in self._sql.table(self._name).collect()]
                except AnalysisException as err:
                    if not is_missing_table(err):
                        raise
                    rows = []
            self._known = {
                TableName(r["database"], r["table"]): Removal(r["removed_ts"], r.get(_HELD_THROUGH)) for r in rows
            }
        return self._known

    def removed_at(self, table: TableName) -> int | None:
        removal = self.removal(table)
        return None if removal is None else removal.ts

    def removal(self, table: TableName) -> Removal | None:
        return self._load().get(table)

    def record(self, table: TableName, removed_ts: int, reason: str, held_through: int | None = None) -> None:
        ensure_internal_table(self._sql, self._locator, _TABLE, _COLUMNS)
        self._add_missing_column()
        row = [(table.database, table.table, removed_ts, reason, dt.datetime.now(dt.timezone.utc), held_through)]
        # A later removal at the same commitTs replaces the record: the swap's temporary name, created and
        # removed there, must say it was created there.
        with self._sql.view(row, _COLUMNS) as source:
            self._sql.run(
                f"MERGE INTO {self._name} AS t USING {source} AS s "
                "ON t.database = s.database AND t.table = s.table "
                "WHEN MATCHED AND s.removed_ts >= t.removed_ts THEN UPDATE SET * "
                "WHEN NOT MATCHED THEN INSERT *",
                what="record tombstone",
            )
        known = self._load().get(table)
        if known is None or removed_ts >= known.ts:
            self._load()[table] = Removal(removed_ts, held_through)

    def _add_missing_column(self) -> None:
        if self._columns_checked:
            return
        if _HELD_THROUGH not in self._sql.table(self._name).columns:
            self._sql.run(f"ALTER TABLE {self._name} ADD COLUMNS ({_HELD_THROUGH} BIGINT)", what="add held_through to tombstones")
        self._columns_checked = True
