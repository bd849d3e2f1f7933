"""The benchmark's synthetic TiCDC streams: one table, N row events over K keys, known net result.

The table: bigint key, varchar, decimal(12,2), int, datetime(6), timestamp(3), text. Rows change in
50-row transactions (one commitTs each, a key changed at most once in each, as TiDB reports them), each
followed by a watermark on every partition; about 10% of the changes to a live key are deletes. Rows go to partition `key % 3` (index-value dispatch).
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal

from testbed.encoders.simple import SimpleAvroWriter, SimpleJsonWriter
from testbed.tables import column, table_schema, timestamp

PARTITIONS = 3
TXN_SIZE = 50  # row events per upstream transaction (one commitTs)
SPARK_SCHEMA = "id BIGINT, name STRING, amount DECIMAL(12,2), qty INT, at TIMESTAMP_NTZ, ts TIMESTAMP, note STRING"
TABLE = ("bench", "events")

COLUMNS = [
    column("id", "bigint", nullable=False),
    column("name", "varchar", length=64),
    column("amount", "decimal", length=12, decimal=2),
    column("qty", "int"),
    column("at", "datetime", decimal=6),
    column("ts", "timestamp", decimal=3),
    column("note", "text"),
]
SCHEMA = table_schema(*TABLE, table_id=1, version=1, columns=COLUMNS, primary_key=["id"])
FIRST_COMMIT_TS = 1 << 40


def table_name(number: int, tables: int) -> tuple[str, str]:
    """The (database, table) of table `number` of a stream over `tables` tables."""
    return TABLE if tables == 1 else (TABLE[0], f"t{number:04d}")


@dataclass
class Stream:
    """(partition, value) messages and the table's rows after them (Delta's expected contents)."""

    messages: list[tuple[int, bytes]]
    rows: dict  # key -> the row (one table), or (database, table) -> {key: row}
    row_events: int
    partitions: int = PARTITIONS

    def size(self) -> int:
        return sum(len(v) for _, v in self.messages)


def _delta_row(row: dict) -> tuple:
    at = dt.datetime.fromisoformat(row["at"])
    ts = dt.datetime.fromisoformat(row["ts"]["value"]).replace(tzinfo=dt.timezone.utc)
    return (row["id"], row["name"], row["amount"], row["qty"], at, ts, row["note"])


def change(rng: random.Random, writer, schema: dict, live: dict[int, dict], key: int, n: int, commit_ts: int) -> bytes:
    """The `n`-th row event of a stream, on `key`: an insert if `live` lacks it, else a delete one time in ten or
    an update; `live` (key -> its row upstream) follows."""
    row = {
        "id": key,
        "name": f"name-{key}-{n}",
        "amount": Decimal(rng.randrange(10**8)) / 100,
        "qty": rng.randrange(1000),
        "at": f"2026-01-01 10:00:{n % 60:02d}.{n % 1_000_000:06d}",
        "ts": timestamp(f"2026-01-01 10:00:{n % 60:02d}.{n % 1000:03d}"),
        "note": "x" * rng.randrange(40),
    }
    old = live.get(key)
    if old is None:
        live[key] = row
        return writer.insert(schema, commit_ts, row)
    if rng.random() < 0.1:
        del live[key]
        return writer.delete(schema, commit_ts, old)
    live[key] = row
    return writer.update(schema, commit_ts, old, row)


def build(
    events: int, keys: int, *, encoding: str = "json", seed: int = 1, lagging_partition: int | None = None,
    partitions: int = PARTITIONS, tables: int = 1, first_commit_ts: int = FIRST_COMMIT_TS, inserts_only: bool = False,
    first_key: int = 0,
) -> Stream:
    """The stream over `partitions` partitions; `lagging_partition` gets no watermark until the very end (its
    watermark lags all others). `tables` > 1: key k belongs to table k % tables (the same events spread over
    more tables), and `rows` holds each table's rows. `inserts_only`: the `n`-th event inserts key `first_key` + `n`
    (an append-only changefeed: logs, events; `keys` unused)."""
    rng = random.Random(seed)
    writer = (SimpleJsonWriter if encoding == "json" else SimpleAvroWriter)(build_ts_ms=1)
    schemas = [table_schema(*table_name(n, tables), table_id=n + 1, version=1, columns=COLUMNS, primary_key=["id"])
               for n in range(tables)]
    out = [(p, writer.bootstrap(schema)) for schema in schemas for p in range(partitions)]
    live: dict[int, dict] = {}
    commit_ts = first_commit_ts

    def watermark(ts: int, final: bool = False) -> Iterator[tuple[int, bytes]]:
        value = writer.watermark(ts)
        return ((p, value) for p in range(partitions) if final or p != lagging_partition)

    in_txn: set[int] = set()
    for n in range(events):
        if n % TXN_SIZE == 0:
            if n:
                out.extend(watermark(commit_ts))
            commit_ts += 1 << 18
            in_txn.clear()
        key = first_key + n if inserts_only else rng.randrange(keys)
        while key in in_txn and len(in_txn) < keys and not inserts_only:
            key = rng.randrange(keys)  # TiDB reports one change per row and transaction
        in_txn.add(key)
        out.append((key % partitions, change(rng, writer, schemas[key % tables], live, key, n, commit_ts)))
    out.extend(watermark(commit_ts, final=True))
    if tables == 1:
        return Stream(out, {k: _delta_row(r) for k, r in live.items()}, events, partitions)
    per_table: dict[tuple[str, str], dict] = {table_name(n, tables): {} for n in range(tables)}
    for key, row in live.items():
        per_table[table_name(key % tables, tables)][key] = _delta_row(row)
    return Stream(out, per_table, events, partitions)
