"""Baseline throughput of the Simple JSON path. Prints its figures; asserts nothing.

    .venv/bin/python benchmarks/bench_simple.py --events 100000 --keys 10000

Measures, for a synthetic stream of N row events over K keys of one table
(7 columns: bigint key, varchar, decimal, int, datetime(6), timestamp(3), text):

- decode: Simple JSON bytes -> typed row events (events/s, MB/s);
- collapse: row events -> net change per key (events/s);
- end to end: from a real local Kafka broker (3 partitions) through the
  materializer into a Delta table, until idle (events/s), Spark session start
  excluded; once cold (the JVM's first Delta commits, JIT warm-up) and once
  warm (the same stream into a second table in the same session).
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TICDC_DELTA_CACHE", str(Path(__file__).resolve().parent.parent / ".cache"))

from apply.collapse import collapse  # noqa: E402
from jobs import config as config_module  # noqa: E402
from jobs.pipeline import Pipeline  # noqa: E402
from jobs.session import get_spark  # noqa: E402
from schema_cache.events import RawMessage, RowChange  # noqa: E402
from schema_cache.simple.decoder import SimpleDecoder  # noqa: E402
from testbed.encoders.simple import SimpleJsonWriter  # noqa: E402
from testbed.local_kafka import LocalKafka  # noqa: E402
from testbed.produce import ensure_topic, produce  # noqa: E402
from testbed.tables import column, table_schema, timestamp  # noqa: E402

PARTITIONS = 3
TXN_SIZE = 50  # row events per upstream transaction (one commitTs)


def build_stream(events: int, keys: int, seed: int = 1) -> list[tuple[int, bytes]]:
    """(partition, value) messages: BOOTSTRAP, then rows, a watermark per transaction."""
    rng = random.Random(seed)
    writer = SimpleJsonWriter(build_ts_ms=1)
    schema = table_schema(
        "bench",
        "events",
        table_id=1,
        version=1,
        columns=[
            column("id", "bigint", nullable=False),
            column("name", "varchar", length=64),
            column("amount", "decimal", length=12, decimal=2),
            column("qty", "int"),
            column("at", "datetime", decimal=6),
            column("ts", "timestamp", decimal=3),
            column("note", "text"),
        ],
        primary_key=["id"],
    )
    out = [(p, writer.bootstrap(schema)) for p in range(PARTITIONS)]
    live: dict[int, dict] = {}
    commit_ts = 1 << 40
    for n in range(events):
        if n % TXN_SIZE == 0:
            if n:
                out.extend((p, writer.watermark(commit_ts)) for p in range(PARTITIONS))
            commit_ts += 1 << 18
        key = rng.randrange(keys)
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
            value = writer.insert(schema, commit_ts, row)
            live[key] = row
        elif rng.random() < 0.1:
            value = writer.delete(schema, commit_ts, old)
            del live[key]
        else:
            value = writer.update(schema, commit_ts, old, row)
            live[key] = row
        out.append((key % PARTITIONS, value))
    out.extend((p, writer.watermark(commit_ts)) for p in range(PARTITIONS))
    return out


def bench_decode(stream: list[tuple[int, bytes]]) -> list[RowChange]:
    messages = [RawMessage("bench", p, i, None, v) for i, (p, v) in enumerate(stream)]
    decoder = SimpleDecoder()
    start = time.perf_counter()
    events = [e for m in messages for e in decoder.decode(m)]
    elapsed = time.perf_counter() - start
    rows = [e for e in events if isinstance(e, RowChange)]
    size = sum(len(v) for _, v in stream)
    print(f"decode:     {len(rows):>9,} row events in {elapsed:6.2f}s = {len(rows) / elapsed:>10,.0f} events/s "
          f"({size / elapsed / 1e6:.1f} MB/s of JSON, {len(messages):,} messages incl. watermarks)")
    return rows


def bench_collapse(rows: list[RowChange]) -> None:
    start = time.perf_counter()
    net = collapse(rows)
    elapsed = time.perf_counter() - start
    print(f"collapse:   {len(rows):>9,} row events in {elapsed:6.2f}s = {len(rows) / elapsed:>10,.0f} events/s "
          f"-> {len(net):,} keys")


def bench_end_to_end(stream: list[tuple[int, bytes]], rows: int, batch: int) -> None:
    with tempfile.TemporaryDirectory() as work, LocalKafka(Path(work) / "kafka") as broker:
        ensure_topic(broker.bootstrap_servers, "bench", PARTITIONS)
        produce(broker.bootstrap_servers, "bench", ((p, None, v) for p, v in stream))
        spark = get_spark("local[*]")
        spark.range(1).count()  # the session exists before the clock starts
        for run in ("cold", "warm"):
            config = config_module.from_mapping(
                {
                    "kafka": {"bootstrap_servers": broker.bootstrap_servers, "topics": ["bench"], "group_id": run},
                    "target": {"path": str(Path(work) / run)},
                    "run": {"mode": "until-idle", "batch_max_messages": batch, "batch_max_seconds": 30.0},
                }
            )
            start = time.perf_counter()
            result = Pipeline.from_config(config, spark).run()
            elapsed = time.perf_counter() - start
            print(f"end to end ({run}): {result.rows_applied:>9,} row events in {elapsed:6.2f}s = "
                  f"{result.rows_applied / elapsed:>10,.0f} events/s ({result.batches} rounds, "
                  f"batch <= {batch:,} messages)")
            if result.rows_applied != rows:
                print(f"  WARNING: applied {result.rows_applied:,} of {rows:,} row events")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=200_000, help="run.batch_max_messages for the end-to-end run")
    parser.add_argument("--skip-end-to-end", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(f"stream: {args.events:,} row events over {args.keys:,} keys, {PARTITIONS} partitions, "
          f"{TXN_SIZE} events per transaction; python {sys.version.split()[0]}, {os.cpu_count()} cpus")
    stream = build_stream(args.events, args.keys)
    rows = bench_decode(stream)
    bench_collapse(rows)
    if not args.skip_end_to_end:
        bench_end_to_end(stream, len(rows), args.batch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
