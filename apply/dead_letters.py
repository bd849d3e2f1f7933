"""The dead-letter table: messages that could not be decoded, kept whole.

Written before the offsets past them are committed, and merged on
(topic, partition, offset) so a replay never records a message twice.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from apply.internal_tables import ensure_internal_table
from apply.locator import TableLocator
from apply.sql_session import SqlSession
from schema_cache.exceptions import DecodeError

_TABLE = "dead_letters"
_COLUMNS = (
    "topic STRING, partition INT, offset BIGINT, key BINARY, value BINARY, "
    "error_type STRING, reason STRING, consumer STRING, recorded_at TIMESTAMP"
)


class DeadLetterTable:
    def __init__(self, sql: SqlSession, locator: TableLocator, consumer: str) -> None:
        self._sql = sql
        self._locator = locator
        self._consumer = consumer
        self.sql_name = locator.internal_sql_name(_TABLE)
        self._created = False

    def write(self, errors: Sequence[DecodeError]) -> None:
        if not errors:
            return
        if not self._created:
            ensure_internal_table(self._sql, self._locator, _TABLE, _COLUMNS)
            self._created = True
        now = dt.datetime.now(dt.timezone.utc)
        rows = [
            (
                e.position.topic,
                e.position.partition,
                e.position.offset,
                e.key,
                e.value,
                type(e).__name__,
                e.reason,
                self._consumer,
                now,
            )
            for e in errors
        ]
        with self._sql.view(rows, _COLUMNS) as source:
            self._sql.run(
                f"MERGE INTO {self.sql_name} AS t USING {source} AS s "
                "ON t.topic = s.topic AND t.partition = s.partition AND t.offset = s.offset "
                "WHEN NOT MATCHED THEN INSERT *",
                what="record dead letters",
            )
