"""Each table's DDL descriptions (Debezium's `tableChanges[].table`) by commitTs.

A row takes the description in effect at its commitTs: the last DDL before it. TiCDC sends every DDL
to every partition, and partitions are read at their own pace (a restarted job resumes each at its own
offset), so the DDL decoded last may be newer than a row decoded after it, or older: the last one
decoded would give rows of one commitTs different structures (a DECIMAL read as a double, a column too
many or too few), which splits the commitTs between MERGEs.

Descriptions are forgotten by progress (`forget_before`), never by count: one older than the newest at
or below every partition's watermark can no longer be needed, as no partition delivers rows that old.
Without commitTs (Debezium's own connectors, offset order) only the last one decoded is kept.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping

from ticdc_delta.schema_cache.events import TableName

Description = Mapping[str, object]


class Descriptions:
    def __init__(self) -> None:
        # Per table: (commitTs, description) in commitTs order, those of one commitTs in the order of their
        # DDL events (TiCDC splits a multi-table RENAME into several at one commitTs); None where the table
        # stopped existing under that name (DROP TABLE, or RENAME TABLE away from it).
        self._by_table: dict[TableName, list[tuple[int, Description | None]]] = {}

    def add(self, table: TableName, commit_ts: int, described: Description | None) -> None:
        entries = self._by_table.setdefault(table, [])
        if not commit_ts:
            entries[:] = [(0, described)]
        elif (commit_ts, described) not in entries:  # else another partition's copy of a DDL already known
            bisect.insort_right(entries, (commit_ts, described), key=lambda e: e[0])

    def at(self, table: TableName, commit_ts: int) -> tuple[int, Description] | None:
        """The description in effect for a row of `table` at `commit_ts` (0: the last decoded), with its
        commitTs; None where none is known or the table did not exist then."""
        entries = self._by_table.get(table)
        if not entries:
            return None
        if not commit_ts:
            chosen = entries[-1]
        else:
            position = bisect.bisect_left(entries, commit_ts, key=lambda e: e[0])
            # Older than every description kept (a consumer started mid-stream): the oldest is the nearest.
            chosen = entries[position - 1] if position else entries[0]
        return chosen if chosen[1] is not None else None

    def forget_before(self, commit_ts: int) -> None:
        """Forget what no row after `commit_ts` needs: per table, the descriptions before its newest one at or
        below `commit_ts` (and a table's whole list once that one says it no longer exists)."""
        for table in list(self._by_table):
            entries = self._by_table[table]
            position = bisect.bisect_right(entries, commit_ts, key=lambda e: e[0])
            if position > 1:
                del entries[: position - 1]
            if len(entries) == 1 and entries[0][1] is None and 0 < entries[0][0] <= commit_ts:
                del self._by_table[table]

    def state(self) -> list[list]:
        return [[t.database, t.table, ts, described] for t, entries in self._by_table.items() for ts, described in entries]

    def restore(self, rows: Iterable[list]) -> None:
        for database, table, ts, described in rows:
            self.add(TableName(database, table), ts, described)
