"""Events waiting for a watermark, kept on local disk once memory holds its share.

A partition whose watermark lags (a slow TiCDC capture, a replay) makes every
event of the other partitions wait. The gate keeps a bounded number in
memory and hands the rest to this store: a SQLite file in a private temporary
directory, indexed by (commitTs, arrival) so complete events come back in
release order and by (topic, partition, offset) so the lowest waiting offset
per partition is one query.

Nothing here needs to survive a crash: offsets are never committed past a
waiting event, so a restart reads such events from Kafka again. Events are
pickled with their table structure replaced by a number; structures are few
and kept in memory.
"""

from __future__ import annotations

import os
import pickle
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator, Sequence

from ticdc_delta.schema_cache.events import Event, RowChange, SchemaChange, TableSchema, TopicPartition

_ROW, _SCHEMA_CHANGE = 0, 1


class SpillStore:
    def __init__(self, directory: str | None = None) -> None:
        self._dir = tempfile.mkdtemp(prefix="ticdc-delta-spill-", dir=directory)
        self._db = sqlite3.connect(os.path.join(self._dir, "pending.sqlite"), isolation_level=None)
        # A scratch file: no journal, no fsync.
        self._db.execute("PRAGMA journal_mode = OFF")
        self._db.execute("PRAGMA synchronous = OFF")
        self._db.execute(
            "CREATE TABLE pending (arrival INTEGER PRIMARY KEY, commit_ts INTEGER NOT NULL, topic TEXT NOT NULL, "
            "part INTEGER NOT NULL, off INTEGER NOT NULL, event BLOB NOT NULL)"
        )
        self._db.execute("CREATE INDEX by_order ON pending (commit_ts, arrival)")
        self._db.execute("CREATE INDEX by_offset ON pending (topic, part, off)")
        self._schemas: list[TableSchema | None] = []
        self._schema_ids: dict[TableSchema | None, int] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def close(self) -> None:
        self._db.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    # --- in ----------------------------------------------------------------------------

    def _schema_id(self, schema: TableSchema | None) -> int:
        found = self._schema_ids.get(schema)
        if found is None:
            found = self._schema_ids[schema] = len(self._schemas)
            self._schemas.append(schema)
        return found

    def _encode(self, event: Event) -> bytes:
        kind = _ROW if event.__class__ is RowChange else _SCHEMA_CHANGE
        fields = event._replace(schema=self._schema_id(event.schema))
        return pickle.dumps((kind, tuple(fields)), protocol=pickle.HIGHEST_PROTOCOL)

    def add(self, items: Sequence[tuple[int, int, Event]]) -> None:
        """Store (commitTs, arrival, event) items."""
        rows = [
            (arrival, commit_ts, e.position.topic, e.position.partition, e.position.offset, self._encode(e))
            for commit_ts, arrival, e in items
        ]
        self._db.executemany("INSERT INTO pending VALUES (?, ?, ?, ?, ?, ?)", rows)
        self._count += len(rows)

    # --- out ---------------------------------------------------------------------------

    def _decode(self, blob: bytes) -> Event:
        kind, fields = pickle.loads(blob)
        cls = RowChange if kind == _ROW else SchemaChange
        event = cls(*fields)
        return event._replace(schema=self._schemas[event.schema])

    def up_to(self, commit_ts: int) -> Iterator[tuple[int, int, Event]]:
        """Stored items with commitTs <= `commit_ts`, in (commitTs, arrival) order (still stored)."""
        cursor = self._db.execute(
            "SELECT commit_ts, arrival, event FROM pending WHERE commit_ts <= ? ORDER BY commit_ts, arrival",
            (commit_ts,),
        )
        for ts, arrival, blob in cursor:
            yield ts, arrival, self._decode(blob)

    def remove(self, arrivals: Sequence[int]) -> None:
        self._db.executemany("DELETE FROM pending WHERE arrival = ?", ((a,) for a in arrivals))
        self._count -= len(arrivals)

    def lowest_offsets(self) -> dict[TopicPartition, int]:
        rows = self._db.execute("SELECT topic, part, MIN(off) FROM pending GROUP BY topic, part")
        return {TopicPartition(topic, part): offset for topic, part, offset in rows}

    def waiting_by_partition(self) -> dict[TopicPartition, tuple[int, Event]]:
        """Per partition, (events stored, the oldest one)."""
        # (SQLite takes a bare column of an aggregate's row from the row MIN chose)
        rows = self._db.execute("SELECT topic, part, COUNT(*), MIN(commit_ts), event FROM pending GROUP BY topic, part")
        return {TopicPartition(topic, part): (count, self._decode(blob)) for topic, part, count, _, blob in rows}
