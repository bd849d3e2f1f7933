"""Each table's DDL descriptions (Debezium's `tableChanges[].table`) by commitTs.

A row takes the description in effect at its commitTs: the last DDL before it. TiCDC sends every DDL
to every partition, and partitions are read at their own pace (a restarted job resumes each at its own
offset), so the DDL decoded last may be newer than a row decoded after it, or older: the last one
decoded would give rows of one commitTs different structures (a DECIMAL read as a double, a column too
many or too few), which splits the commitTs between MERGEs.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping

from schema_cache.events import TableName

# Descriptions kept per table, the newest: enough for the DDLs a partition can be read ahead of another.
KEPT = 8

Description = Mapping[str, object]


class Descriptions:
    def __init__(self) -> None:
        # Per table: (commitTs, description) in commitTs order; None where the table stopped existing
        # under that name (DROP TABLE, or RENAME TABLE away from it).
        self._by_table: dict[TableName, list[tuple[int, Description | None]]] = {}

    def add(self, table: TableName, commit_ts: int, described: Description | None) -> None:
        entries = self._by_table.setdefault(table, [])
        if not commit_ts:
            # No commitTs (Debezium's own connectors, offset order): in the order decoded.
            entries.append((0, described))
        else:
            # The same DDL from another partition replaces the copy already known.
            entries[:] = [e for e in entries if e[0] != commit_ts]
            bisect.insort(entries, (commit_ts, described), key=lambda e: e[0])
        del entries[:-KEPT]

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
            # Older than every description kept: the oldest is the nearest known.
            chosen = entries[position - 1] if position else entries[0]
        return chosen if chosen[1] is not None else None

    def state(self) -> list[list]:
        return [[t.database, t.table, ts, described] for t, entries in self._by_table.items() for ts, described in entries]

    def restore(self, rows: Iterable[list]) -> None:
        for database, table, ts, described in rows:
            self.add(TableName(database, table), ts, described)
