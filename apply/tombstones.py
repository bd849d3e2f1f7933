"""Tables the job dropped or renamed away, with the commitTs of that DDL.

A dropped table takes its commit history (and so its applied marker) with
it. Without a record, replaying the topic from the beginning would re-create
a table that was renamed away, or briefly resurrect a dropped one. The record
is written before the drop or rename, so a crash in between only repeats the
DDL. Events of a missing table at or below its tombstone are replays.
"""

from __future__ import annotations

import datetime as dt

from pyspark.errors import AnalysisException

from apply.internal_tables import ensure_internal_table
from apply.locator import TableLocator
from apply.progress import is_missing_table
from apply.sql_session import SqlSession
from schema_cache.events import TableName

_TABLE = "tombstones"
_COLUMNS = "database STRING, table STRING, removed_ts BIGINT, reason STRING, recorded_at TIMESTAMP"


class Tombstones:
    def __init__(self, sql: SqlSession, locator: TableLocator) -> None:
        self._sql = sql
        self._locator = locator
        self._name = locator.internal_sql_name(_TABLE)
        self._known: dict[TableName, int] | None = None

    def _load(self) -> dict[TableName, int]:
        if self._known is None:
            try:
                rows = self._sql.table(self._name).collect()
            except AnalysisException as err:
                if not is_missing_table(err):
                    raise
                rows = []
            self._known = {TableName(r["database"], r["table"]): r["removed_ts"] for r in rows}
        return self._known

    def removed_at(self, table: TableName) -> int | None:
        return self._load().get(table)

    def record(self, table: TableName, removed_ts: int, reason: str) -> None:
        ensure_internal_table(self._sql, self._locator, _TABLE, _COLUMNS)
        row = [(table.database, table.table, removed_ts, reason, dt.datetime.now(dt.timezone.utc))]
        with self._sql.view(row, _COLUMNS) as source:
            self._sql.run(
                f"MERGE INTO {self._name} AS t USING {source} AS s "
                "ON t.database = s.database AND t.table = s.table "
                "WHEN MATCHED AND s.removed_ts > t.removed_ts THEN UPDATE SET * "
                "WHEN NOT MATCHED THEN INSERT *",
                what="record tombstone",
            )
        self._load()[table] = max(removed_ts, self._load().get(table, removed_ts))
