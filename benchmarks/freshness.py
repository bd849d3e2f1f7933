"""The continuous-freshness section (`bench.py --only freshness`): a steady stream over many tables against a
`--continuous` job, freshness and backlog per minute.

Upstream: `--fresh-rate` row events per second (10-row transactions, index-value dispatch over 3 partitions,
inserts, updates and deletes over a fixed key space) spread over `--fresh-tables` tables that already exist,
for `--fresh-seconds`, each transaction's commitTs made of the wall clock when it is produced (as TiDB's TSO:
milliseconds << 18); watermarks every 0.5 s on every partition. The job (`ticdc-delta run --continuous` as a
process of its own, `run.batch_max_seconds` = `--fresh-batch-seconds`) runs throughout, then until it has read
everything (at most `--fresh-drain-seconds` more), then is stopped with SIGTERM.

Freshness of a change: from its commitTs's physical part (when upstream committed it) to the timestamp of the
Delta commit that holds it (the first version of its table whose applied point covers its commitTs, read from
the table's history afterwards). Backlog: messages produced and not yet committed by the job's consumer group,
sampled every 5 s. Printed per minute of production: how many changes, freshness p50/p95/max, the backlog at
the minute's end, the tables' data files at its end (in the snapshot: mean, max; on disk: mean; sampled every
minute) and a table's work per batch (its MERGEs, DDL and first reads, the job's metrics' `table_seconds`).
With `--fresh-inserts-only` each batch adds a file to every table it touches, so without maintenance the
snapshots grow; with `--fresh-also maintenance.every_batches=N` they stay bounded (and with
`maintenance.vacuum_retain_hours=0` the folders too). With updates and deletes (the default stream) a MERGE
rewrites the files it touches: the snapshots stay small, the folders grow. Every table is then compared with
the stream's model, where the job drained its backlog (a job stopped with changes unapplied is not compared:
its tables lack them by design; the section says so and fails).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from bisect import bisect_left
from collections import defaultdict
from pathlib import Path

from benchmarks import streams
from benchmarks.measure import log_tail, section
from benchmarks.tables import check_tables, job_config, job_run, merged, one_row_each, settings_of

ROOT = Path(__file__).resolve().parent.parent
_PARTITIONS = 3
_TXN_ROWS = 10
_KEYS_PER_TABLE = 200
_TICK = 0.1  # seconds between sends
_WATERMARK_EVERY = 0.5


def add_arguments(parser) -> None:
    parser.add_argument("--fresh-rate", type=float, default=1000,
                        help="row events per second of the freshness section (fractions: one transaction every few seconds)")
    parser.add_argument("--fresh-tables", type=int, default=100, help="tables of the freshness section")
    parser.add_argument("--fresh-seconds", type=int, default=300, help="seconds the freshness section produces for")
    parser.add_argument("--fresh-drain-seconds", type=int, default=None,
                        help="seconds the job may take after production to drain its backlog (default: 2 x "
                             "--fresh-seconds + 120; a 1,000-table job's rounds last 10 minutes on 2 cores)")
    parser.add_argument("--fresh-engine", default="driver", help="engine of the freshness section: driver or spark")
    parser.add_argument("--fresh-batch-seconds", type=float, default=5.0, help="the job's run.batch_max_seconds")
    parser.add_argument("--fresh-concurrency", type=int, default=8, help="the job's run.apply_concurrency")
    parser.add_argument("--fresh-inserts-only", action="store_true",
                        help="inserts of new keys only (an append-only changefeed) instead of inserts, updates, deletes")
    parser.add_argument("--fresh-also", metavar="KEY=VALUE", action="append", default=[],
                        help="another setting of the job: [run]'s, or SECTION.KEY (e.g. append_new_keys=false, "
                             "maintenance.every_batches=5)")


class Upstream:
    """Transactions over `tables` tables with commitTs of the wall clock; remembers every change's commitTs per
    table and the rows each table ends with."""

    def __init__(self, tables: int, seed: int = 7, *, inserts_only: bool = False) -> None:
        from testbed.encoders.simple import SimpleJsonWriter
        from testbed.tables import table_schema

        self._rng = random.Random(seed)
        self._writer = SimpleJsonWriter(build_ts_ms=1)
        self.tables = [streams.table_name(n, tables) for n in range(tables)]
        self._schemas = [table_schema(*name, table_id=n + 1, version=1, columns=streams.COLUMNS, primary_key=["id"])
                         for n, name in enumerate(self.tables)]
        self._keys = tables * _KEYS_PER_TABLE
        self._inserts_only = inserts_only  # each transaction inserts keys never seen before
        self._live: dict[int, dict] = {}
        self._last_ts = 0
        self._n = 0
        self.changes: dict[tuple[str, str], list[int]] = defaultdict(list)  # table -> commitTs of its changes

    def bootstraps(self) -> list[tuple[int, bytes]]:
        return [(p, self._writer.bootstrap(schema)) for schema in self._schemas for p in range(_PARTITIONS)]

    def _tso(self) -> int:
        self._last_ts = max(self._last_ts + 1, int(time.time() * 1000) << 18)
        return self._last_ts

    def transaction(self) -> list[tuple[int, bytes]]:
        commit_ts, out, keys = self._tso(), [], set()
        if self._inserts_only:
            keys = set(range(self._n, self._n + _TXN_ROWS))
        while len(keys) < _TXN_ROWS:
            keys.add(self._rng.randrange(self._keys))
        for key in sorted(keys):
            n, self._n = self._n, self._n + 1
            table = key % len(self.tables)
            value = streams.change(self._rng, self._writer, self._schemas[table], self._live, key, n, commit_ts)
            out.append((key % _PARTITIONS, value))
            self.changes[self.tables[table]].append(commit_ts)
        return out

    def watermark(self) -> list[tuple[int, bytes]]:
        value = self._writer.watermark(self._tso())
        return [(p, value) for p in range(_PARTITIONS)]

    def model(self) -> streams.Stream:
        rows: dict[tuple[str, str], dict] = {name: {} for name in self.tables}
        for key, row in self._live.items():
            rows[self.tables[key % len(self.tables)]][key] = streams._delta_row(row)
        return streams.Stream([], rows, self._n, _PARTITIONS)


def _backlog(bootstrap_servers: str, topic: str, group: str) -> int:
    """Messages of `topic` its group has not committed."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": group, "enable.auto.commit": False})
    try:
        partitions = [TopicPartition(topic, p) for p in range(_PARTITIONS)]
        committed = consumer.committed(partitions, timeout=10)
        total = 0
        for tp in committed:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=10)
            total += high - max(tp.offset, 0)
        return total
    finally:
        consumer.close()


def _commit_times(spark, target: Path, tables) -> dict[tuple[str, str], tuple[list[int], list[float]]]:
    """Per table: the applied commitTs of its commits in order, and each commit's epoch seconds."""
    out = {}
    for database, table in tables:
        rows = spark.sql(f"DESCRIBE HISTORY delta.`{target / database / table}`").select(
            "version", "timestamp", "userMetadata").collect()
        points = []
        for row in sorted(rows, key=lambda r: r["version"]):
            marker = json.loads(row["userMetadata"] or "{}").get("ticdc_delta") or {}
            if marker.get("appliedTs") is not None:
                points.append((int(marker["appliedTs"]), row["timestamp"].timestamp()))
        out[database, table] = ([p for p, _ in points], [t for _, t in points])
    return out


def _data_files(target: Path, tables) -> list[tuple[int, int]]:
    """Each table's data files: in its current snapshot (read by delta-rs: no Spark job in the bench's session),
    and on disk (those a MERGE or an OPTIMIZE replaced stay there until a VACUUM removes them)."""
    from deltalake import DeltaTable

    counts = []
    for database, table in tables:
        folder = target / database / table
        try:
            in_snapshot = len(DeltaTable(str(folder)).file_uris())
        except Exception:  # noqa: BLE001 - a table mid-commit or not there yet: left out of this sample
            continue
        counts.append((in_snapshot, sum(1 for _ in folder.rglob("*.parquet"))))
    return counts


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def bench_freshness(args, lake) -> None:
    from confluent_kafka import Producer

    from testbed.produce import ensure_topic

    rate, n_tables, seconds, engine = args.fresh_rate, args.fresh_tables, args.fresh_seconds, args.fresh_engine
    section(f"freshness: {rate:,g} row events/s over {n_tables} tables for {seconds}s against a --continuous job "
            f"({engine} engine, batch_max_seconds {args.fresh_batch_seconds:g}, apply_concurrency "
            f"{args.fresh_concurrency}{', inserts of new keys only' if args.fresh_inserts_only else ''}"
            f"{''.join(', ' + item for item in args.fresh_also)})")
    with tempfile.TemporaryDirectory(dir=lake.work) as scratch:
        work = Path(scratch)
        topic, target = f"fresh-{engine}-{n_tables}-{int(time.time())}", work / "lake"
        upstream = Upstream(n_tables, inserts_only=args.fresh_inserts_only)
        first = one_row_each(n_tables)  # creates the tables (keys above the measured stream's)
        lake.publish(topic, first)
        job_run(lake, topic, topic, target, engine, args.fresh_concurrency, work)
        ensure_topic(lake.broker.bootstrap_servers, topic, _PARTITIONS)
        producer = Producer({"bootstrap.servers": lake.broker.bootstrap_servers, "linger.ms": 5,
                             "enable.idempotence": True})

        def send(messages) -> None:
            for partition, value in messages:
                producer.produce(topic, value=value, partition=partition)
            producer.poll(0)

        send(upstream.bootstraps())
        producer.flush()
        config = job_config(lake, topic, topic, target, work, engine=engine,
                            batch_max_seconds=args.fresh_batch_seconds, apply_concurrency=args.fresh_concurrency,
                            **settings_of(args.fresh_also))
        log = work / "continuous.log"
        with open(log, "wb") as out:
            job = subprocess.Popen(
                [sys.executable, "-m", "ticdc_delta.jobs.cli", "run", "--config", str(config), "--continuous"],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
        # Produce once the job is in its rounds (its first round takes the tables' structures): freshness is
        # measured on a running job, its start is the other section's figure.
        ready_by = time.time() + 300
        while "ticdc_delta.metrics" not in log.read_text(errors="replace"):
            if job.poll() is not None or time.time() > ready_by:
                raise RuntimeError(f"the continuous job did not start its rounds (exit {job.poll()}); the end of its log:\n{log_tail(log)}")
            time.sleep(0.5)
        backlog: list[tuple[float, int]] = []
        stop = threading.Event()
        began = time.time()

        files: list[tuple[float, list[tuple[int, int]]]] = []  # (seconds since began, each table's data files)

        def sample() -> None:
            next_files = 60.0
            while not stop.wait(5.0):
                backlog.append((time.time() - began, _backlog(lake.broker.bootstrap_servers, topic, topic)))
                if time.time() - began >= next_files:
                    files.append((time.time() - began, _data_files(target, upstream.tables)))
                    next_files += 60.0

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        per_tick = rate * _TICK / _TXN_ROWS  # transactions per tick (fractions carried over)
        owed, next_watermark, tick = 0.0, began + _WATERMARK_EVERY, began
        while time.time() < began + seconds:
            if job.poll() is not None:
                raise RuntimeError(f"the continuous job exited with {job.returncode}; the end of its log:\n{log_tail(log)}")
            owed += per_tick
            while owed >= 1:
                send(upstream.transaction())
                owed -= 1
            if time.time() >= next_watermark:
                send(upstream.watermark())
                next_watermark += _WATERMARK_EVERY
            tick += _TICK
            time.sleep(max(0.0, tick - time.time()))
        send(upstream.watermark())
        producer.flush()
        produced_for = time.time() - began
        drained_at = None
        drain_seconds = args.fresh_drain_seconds if args.fresh_drain_seconds is not None else seconds * 2 + 120
        while drained_at is None and time.time() < began + produced_for + drain_seconds:
            time.sleep(5)
            if job.poll() is not None:
                raise RuntimeError(f"the continuous job exited with {job.returncode}; the end of its log:\n{log_tail(log)}")
            if backlog and backlog[-1][1] == 0 and backlog[-1][0] > produced_for:
                drained_at = backlog[-1][0]
        stop.set()
        sampler.join()
        job.send_signal(signal.SIGTERM)
        if job.wait(timeout=300) != 0:
            raise RuntimeError(f"the continuous job exited with {job.returncode} when stopped; the end of its log:\n{log_tail(log)}")

        commits = _commit_times(lake.spark, target, upstream.tables)
        minutes: dict[int, list[float]] = defaultdict(list)
        unapplied = 0
        for table, stamps in upstream.changes.items():
            points, times = commits[table]
            for commit_ts in stamps:
                i = bisect_left(points, commit_ts)
                if i == len(points):
                    unapplied += 1
                    continue
                physical = (commit_ts >> 18) / 1000
                minutes[max(0, int((physical - began) // 60))].append(times[i] - physical)
        produced = sum(len(s) for s in upstream.changes.values())
        print(f"  produced {produced:,} row events in {produced_for:.0f}s "
              f"({produced / produced_for:,.{0 if produced >= 10 * produced_for else 2}f}/s); "
              + (f"backlog 0 at {drained_at:.0f}s" if drained_at is not None else "backlog NOT drained")
              + (f"; {unapplied} changes in no commit" if unapplied else ""), flush=True)
        records = [json.loads(line.split("ticdc_delta.metrics: ", 1)[1])
                   for line in log.read_text(errors="replace").splitlines() if "ticdc_delta.metrics: " in line]
        # A table's work in a batch (its MERGEs, DDL, first reads: the metrics' table_seconds), per minute.
        work: dict[int, list[float]] = defaultdict(list)
        for record in records[1:]:
            at = dt.datetime.fromisoformat(record["recorded_at"]).timestamp() - began
            work[max(0, int(at // 60))] += [t["seconds"] for t in record["table_seconds"]]
        for minute in sorted(minutes):
            values = minutes[minute]
            at_end = [b for t, b in backlog if t <= (minute + 1) * 60]
            counts = [c for t, c in files if t <= (minute + 1) * 60]
            spent = work.get(minute, [])
            print(f"  minute {minute + 1}: {len(values):6,} changes, freshness p50 {_percentile(values, 0.5):5.1f}s "
                  f"p95 {_percentile(values, 0.95):5.1f}s max {max(values):5.1f}s; backlog at its end "
                  f"{at_end[-1] if at_end else 0:,} messages"
                  + (f"; a table's data files mean {_mean(c[0] for c in counts[-1]):.1f} max "
                     f"{max(c[0] for c in counts[-1])}, on disk mean {_mean(c[1] for c in counts[-1]):.1f}"
                     if counts and counts[-1] else "")
                  + (f"; a table's work a batch mean {_mean(spent):.2f}s p95 {_percentile(spent, 0.95):.2f}s"
                     if spent else ""), flush=True)
        seconds_each = sorted(r["batch_seconds"] for r in records[1:])
        if seconds_each:
            phases: dict[str, float] = defaultdict(float)
            for record in records[1:]:
                for phase, spent in record["stage_seconds"].items():
                    phases[phase] += spent / len(seconds_each)
            print(f"  the job's rounds while producing and after: {len(seconds_each)}, each p50 "
                  f"{_percentile(seconds_each, 0.5):.1f}s max {seconds_each[-1]:.1f}s; a round's phases on average "
                  "(threads' seconds add up): " + ", ".join(f"{k} {v:.1f}s" for k, v in phases.items()), flush=True)
        # Last: the figures above are printed even where the check fails (or the bench's own session runs out of
        # memory reading a thousand tables, as it once did when the check came first).
        if drained_at is None:
            raise RuntimeError(f"tables not compared with upstream: the job had not drained its backlog {drain_seconds}s "
                               "after production (--fresh-drain-seconds), so they lack changes by design")
        check_tables(lake.spark, target, merged(first, upstream.model()))
        print("  tables equal upstream", flush=True)


