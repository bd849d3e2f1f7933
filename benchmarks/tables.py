"""The many-tables section of the benchmark (`bench.py --only tables`): the same row events over 1 to 500 tables.

Per engine and table count N: a Simple JSON stream of `--table-events` row events (50-row transactions,
index-value dispatch, 3 partitions) spread over N tables that already exist (a first run creates them), applied
by `ticdc-delta run --until-idle` as a process of its own (so its wall time has every fixed cost: Python,
Spark's start, the job's own tables, the lease); then a run with nothing new to read (which ends before Spark
starts, `run.skip_when_caught_up`), and one more with `--no-skip-when-caught-up` (what such a run costs when it
starts Spark: the fixed costs of every run, read and compared with Spark's start). Printed per run: the
batch (the metrics record's `batch_seconds`: the round's read, decode, apply, checkpoint), its ratio to N = 1,
the marginal cost per touched table, the job's wall time and what it spends outside batches, and its peak
memory (Python + JVM). Every table is then compared with the stream's model, row by row. `--table-serial` adds
the same runs with `run.apply_concurrency = 1` (tables one after another), the way to see what overlapping
them gains in one run of this script; `--table-also KEY=VALUE` the same with another [run] setting (e.g.
`max_pending_events=1`: the Spark engine's MERGE sources built by Spark, not from the driver's memory).
`--table-inserts-only` makes the stream inserts of new keys only (an append-only changefeed; with
`--table-also append_new_keys=true` each table's run is appended instead of merged, `run.append_new_keys`).

The floor: per N, the same rows merged by bare Delta MERGE statements (each table's final rows into a table
holding one row), up to the job's concurrency at once on sessions of their own, in this script's warm session,
with the settings the job's MERGE of as many rows held in memory has (`in_memory_source_settings`: no copy of
the source; up to 10,000 rows no adaptive execution, expressions interpreted): what N tables' commits cost here
without the product (no history read, no job tables, no decoding). Its marginal cost per table is the floor
the product's marginal cost is held against.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path

from benchmarks import streams
from benchmarks.measure import descendants, log_tail, rss_kib, section
from ticdc_delta.apply.writers.delta_writer import in_memory_source_settings

ROOT = Path(__file__).resolve().parent.parent
_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (\w+) (\S+): (.*)$")
_PARTITIONS = 3
_FIRST_KEYS = 10**12  # the creating stream's keys: above any measured stream's


def add_arguments(parser) -> None:
    parser.add_argument("--table-events", type=int, default=60_000, help="row events of the tables section")
    parser.add_argument("--table-counts", default="1,20,100,500", help="comma-separated table counts")
    parser.add_argument("--table-engines", default="driver,spark", help="comma-separated: driver, spark")
    parser.add_argument("--table-serial", action="store_true", help="also run each with run.apply_concurrency = 1")
    parser.add_argument("--table-no-floor", action="store_true",
                        help="leave out the bare-MERGE floor (its 500 tables take ~10 minutes beside the job's runs)")
    parser.add_argument("--table-inserts-only", action="store_true",
                        help="a stream of inserts of new keys only (an append-only changefeed) instead of the mixed one")
    parser.add_argument("--table-also", metavar="KEY=VALUE", action="append", default=[],
                        help="also run each engine with this [run] setting, or SECTION.KEY for another section "
                             "(a JSON value, else a string; repeatable, all at once), e.g. with --table-engines spark, "
                             "max_pending_events=1: the Spark engine's MERGE sources built by Spark (the driver engine "
                             "would spill); spark.quick_compiler_max_backlog=0: the JVM's full compiler")


def job_config(lake, topic: str, group: str, target: Path, work: Path, **run: object) -> Path:
    """A job's configuration file: `topic` read by `group` into `target`, with `run` as its [run] section; a key
    "section.name" goes to that section instead (e.g. "spark.quick_compiler_max_backlog")."""
    sections: dict[str, dict[str, object]] = {"target": {"path": str(target)}, "run": {}}
    for key, value in run.items():
        section, _, name = key.rpartition(".")
        sections.setdefault(section or "run", {})[name] = value
    config = work / f"{group}.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{lake.broker.bootstrap_servers}"\ntopics = ["{topic}"]\ngroup_id = "{group}"\n'
        + "".join(f"[{section}]\n" + "".join(f"{key} = {_toml(value)}\n" for key, value in values.items())
                  for section, values in sections.items())
    )
    return config


def _toml(value: object) -> str:
    """`value` as a TOML value: a mapping as an inline table (`spark.conf`), anything else as its JSON."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(key)} = {_toml(item)}" for key, item in value.items()) + " }"
    return json.dumps(value)


def job_run(lake, topic: str, group: str, target: Path, engine: str, concurrency: int, work: Path,
            *flags: str, settings: dict | None = None, launcher: list[str] | None = None,
            env: dict[str, str] | None = None) -> dict:
    """`ticdc-delta run` (with `flags`, and `settings` in its [run] section) as a process: wall seconds, peak MiB
    of its process tree, what its log says. `launcher`: the command before `run` (spark-submit and its primary
    resource; by default this Python's `-m ticdc_delta.jobs.cli`), `env` its environment."""
    run = {"engine": engine, "batch_max_messages": 10_000_000, "batch_max_seconds": 600,
           "apply_concurrency": concurrency, **(settings or {})}
    config = job_config(lake, topic, group, target, work, **run)
    log = work / f"{group}-{int(time.time() * 1000)}.log"
    began_at = dt.datetime.now()
    began = time.perf_counter()
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [*(launcher or [sys.executable, "-m", "ticdc_delta.jobs.cli"]), "run", "--config", str(config), "--until-idle",
             *flags],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env or {**os.environ, "PYTHONPATH": str(ROOT)},
        )
        peak = 0
        while process.poll() is None:
            peak = max(peak, rss_kib(process.pid) + sum(rss_kib(c) for c in descendants(process.pid)))
            time.sleep(0.2)
    wall = time.perf_counter() - began
    if process.returncode != 0:
        raise RuntimeError(f"the job on {topic} exited with {process.returncode}; the end of its log:\n{log_tail(log)}")
    spark_up = batch = 0.0
    phases: dict[str, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        match = _LINE.match(line)
        if not match:
            continue
        at = (dt.datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f") - began_at).total_seconds()
        if match[4].startswith("ticdc-delta ") and " on Python " in match[4]:
            spark_up = at
        elif match[3] == "ticdc_delta.metrics":
            record = json.loads(match[4])
            batch += record["batch_seconds"]
            for phase, seconds in record["stage_seconds"].items():
                phases[phase] = phases.get(phase, 0.0) + seconds
    return {"wall": wall, "peak": peak / 1024, "batch": batch, "spark_up": spark_up, "phases": phases}


# Tables compared in one query. With a hundred (a union of their scans, compared both ways) the bench's 2 GB heap
# filled with catalyst trees on 2026-12-04 (which queries' was not isolated); 25 with 4 GB checked 1,000 tables.
_CHECK_CHUNK = 25


def _forget_delta_logs(spark) -> None:
    """Delta keeps the log and snapshot state of every table the session has read (all 1,000 of a 1,000-table
    run): a thousand-table check ran the bench's own session out of heap on 2026-12-02, and on 2026-12-04 spent
    its time in full collections of a full heap, which a heap histogram showed held catalyst trees (Delta's
    action deserializers among them): cached state and logs are dropped between chunks."""
    spark.catalog.clearCache()
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()


def check_tables(spark, target: Path, stream: streams.Stream) -> None:
    """Every table of `target` equals the stream's model of it (rows and values); raises if not. Compared by
    Spark both ways (`exceptAll`), `_CHECK_CHUNK` tables at a time."""
    from functools import reduce

    from pyspark.sql import functions as F

    tables = sorted(stream.rows)
    for start in range(0, len(tables), _CHECK_CHUNK):
        _forget_delta_logs(spark)  # (the first time, what the caller read: the freshness section's every history)
        chunk = tables[start:start + _CHECK_CHUNK]
        model = spark.createDataFrame(
            [(f"{d}.{t}", *row) for d, t in chunk for row in stream.rows[d, t].values()],
            f"tbl STRING, {streams.SPARK_SCHEMA}",
        )
        got = reduce(lambda a, b: a.unionByName(b), (
            spark.read.format("delta").load(str(target / d / t)).select(F.lit(f"{d}.{t}").alias("tbl"), "*")
            for d, t in chunk))
        missing, extra = model.exceptAll(got).count(), got.exceptAll(model).count()
        if missing or extra:
            raise AssertionError(f"tables {chunk[0]}..{chunk[-1]}: {missing} model rows missing, {extra} rows not in the model")


def _floor(spark, work: Path, stream: streams.Stream, concurrency: int) -> float:
    """Seconds to MERGE each table's final rows of `stream` into a Delta table of one row, `concurrency` tables
    at once, each thread on a session of its own (as the job's table pool)."""
    stream = by_table(stream)
    tables = sorted(stream.rows)
    folder = work / f"floor-{int(time.time() * 1000)}"
    paths = [folder / d / t for d, t in tables]
    local = threading.local()

    def session_of_thread():
        session = getattr(local, "session", None) or spark.newSession()
        local.session = session
        return session

    def prepare(path: Path) -> None:
        # `concurrency` at once too: at 500 tables one after another took ~15 min before the timed part.
        session = session_of_thread()
        session.sql(f"CREATE TABLE delta.`{path}` ({streams.SPARK_SCHEMA}) USING DELTA")
        session.sql(f"INSERT INTO delta.`{path}` SELECT {_FIRST_KEYS}, 'first', 1.00, 1, "
                    "TIMESTAMP_NTZ'2026-01-01 09:00:00', TIMESTAMP'2026-01-01 09:00:00', ''")

    def merge(item) -> None:
        table, path = item
        session = session_of_thread()
        rows = list(stream.rows[table].values())
        for key in in_memory_source_settings(0):
            session.conf.unset(key)
        for key, value in in_memory_source_settings(len(rows)).items():
            session.conf.set(key, value)
        session.createDataFrame(rows, streams.SPARK_SCHEMA).createOrReplaceTempView("s")
        session.sql(f"MERGE INTO delta.`{path}` AS t USING s ON t.id = s.id "
                    "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(prepare, paths))
        began = time.perf_counter()
        list(pool.map(merge, zip(tables, paths, strict=True)))
        return time.perf_counter() - began


def settings_of(items: list[str]) -> dict[str, object]:
    """`KEY=VALUE` items of the command line as job settings: a JSON value, else a string."""
    return {key: _setting_value(value) for key, _, value in (item.partition("=") for item in items)}


def _setting_value(value: str) -> object:
    try:
        return json.loads(value)
    except ValueError:
        return value


def argument_error(args) -> str | None:
    """What is wrong with the section's arguments, checked before the broker and Spark start; None: nothing."""
    counts = [int(n) for n in args.table_counts.split(",") if n.strip()]
    events = args.table_events
    if not args.table_inserts_only and max(events // 10, min(counts)) < streams.TXN_SIZE:
        # Fewer keys than a transaction's rows would repeat keys within one transaction, which TiDB never
        # reports (`streams.build`); the model and the job would then disagree about the stream, not the job.
        return (f"--table-events {events:,}: at least {streams.TXN_SIZE * 10:,} (a tenth of the events are "
                f"the keys, and a transaction changes {streams.TXN_SIZE} different keys)")
    return None


def bench_tables(args, lake) -> None:
    counts = [int(n) for n in args.table_counts.split(",") if n.strip()]
    engines = [e.strip() for e in args.table_engines.split(",") if e.strip()]
    events = args.table_events
    shape = "inserts of new keys" if args.table_inserts_only else "row events"
    section(f"tables: {events:,} {shape} over N tables (existing), {_PARTITIONS} partitions, one batch, "
            "a job process per run")
    configurations = [(engine, 8, "", {}) for engine in engines]
    if args.table_serial:
        configurations += [(engine, 1, ", one table at a time", {}) for engine in engines]
    if args.table_also:
        also = settings_of(args.table_also)
        configurations += [(engine, 8, ", " + ", ".join(args.table_also), also) for engine in engines]
    with tempfile.TemporaryDirectory(dir=lake.work) as scratch:
        work = Path(scratch)
        warmed = False
        for number, (engine, concurrency, label, settings) in enumerate(configurations):
            batches: dict[int, float] = {}
            floors: dict[int, float] = {}
            peaks: dict[int, float] = {}
            for n in counts:
                topic, target = f"tables-{number}-{engine}-{concurrency}-{n}", work / f"lake-{number}-{n}"
                first = one_row_each(n)
                stream = streams.build(events, max(events // 10, n), tables=n, partitions=_PARTITIONS, seed=12,
                                       first_commit_ts=streams.FIRST_COMMIT_TS << 1, inserts_only=args.table_inserts_only)
                lake.publish(topic, first)
                job_run(lake, topic, topic, target, engine, concurrency, work, settings=settings)
                lake.publish(topic, stream)
                run = job_run(lake, topic, topic, target, engine, concurrency, work, settings=settings)
                idle = job_run(lake, topic, topic, target, engine, concurrency, work, settings=settings)
                idle_spark = job_run(lake, topic, topic, target, engine, concurrency, work, "--no-skip-when-caught-up",
                                     settings=settings)
                check_tables(lake.spark, target, merged(first, stream))
                batches[n], peaks[n] = run["batch"], run["peak"]
                base = batches.get(counts[0])
                marginal = (run["batch"] - base) / (n - counts[0]) if n != counts[0] else float("nan")
                print(f"  {engine} engine{label}, {n:>4} tables: batch {run['batch']:6.1f}s "
                      f"({run['batch'] / base:5.2f}x N={counts[0]}), per touched table "
                      f"{marginal:6.3f}s; job {run['wall']:6.1f}s, outside the batch {run['wall'] - run['batch']:5.1f}s "
                      f"(Spark up at {run['spark_up']:4.1f}s); nothing-new run {idle['wall']:5.1f}s "
                      f"(starting Spark: {idle_spark['wall']:5.1f}s, Spark up at {idle_spark['spark_up']:4.1f}s); "
                      f"peak {run['peak']:6,.0f} MiB ({run['peak'] / peaks[counts[0]]:4.2f}x N={counts[0]}); "
                      "tables equal upstream", flush=True)
                if not args.table_no_floor:
                    if not warmed:  # (once: later configurations measure their floors again, beside their runs)
                        _floor(lake.spark, work, stream, concurrency)  # warms the session's code paths up
                        warmed = True
                    floors[n] = _floor(lake.spark, work, stream, concurrency)
                    floor = (floors[n] - floors[counts[0]]) / (n - counts[0]) if n != counts[0] else float("nan")
                    print(f"      floor: bare MERGEs of the same rows {floors[n]:5.1f}s, per table {floor:6.3f}s "
                          f"(the job's per touched table {marginal / floor if n != counts[0] else float('nan'):4.2f}x it)",
                          flush=True)
                print("      the batch's phases (threads' seconds add up): "
                      + ", ".join(f"{k} {v:.1f}s" for k, v in run["phases"].items()), flush=True)


def one_row_each(tables: int) -> streams.Stream:
    """A stream that creates the tables: one insert each, keys above the measured stream's, an early commitTs."""
    from testbed.encoders.simple import SimpleJsonWriter
    from testbed.tables import table_schema, timestamp

    writer = SimpleJsonWriter(build_ts_ms=1)
    commit_ts = streams.FIRST_COMMIT_TS
    out, rows = [], {}
    for n in range(tables):
        name = streams.table_name(n, tables)
        schema = table_schema(*name, table_id=n + 1, version=1, columns=streams.COLUMNS, primary_key=["id"])
        out.extend((p, writer.bootstrap(schema)) for p in range(_PARTITIONS))
        row = {"id": _FIRST_KEYS + n, "name": "first", "amount": Decimal("1.00"), "qty": 1, "at": "2026-01-01 09:00:00.000000",
               "ts": timestamp("2026-01-01 09:00:00.000"), "note": ""}
        commit_ts += 1 << 18
        out.append((n % _PARTITIONS, writer.insert(schema, commit_ts, row)))
        rows[name] = {row["id"]: streams._delta_row(row)}
    out.extend((p, writer.watermark(commit_ts)) for p in range(_PARTITIONS))
    return streams.Stream(out, rows, tables, _PARTITIONS)


def merged(first: streams.Stream, then: streams.Stream) -> streams.Stream:
    """The model after `first` then `then`, whose keys are apart."""
    then = by_table(then)
    rows = {table: {**first.rows.get(table, {}), **then.rows.get(table, {})} for table in {*first.rows, *then.rows}}
    return streams.Stream([], rows, first.row_events + then.row_events, first.partitions)


def by_table(stream: streams.Stream) -> streams.Stream:
    """`stream` with its rows per table (a one-table stream keeps them per key)."""
    if stream.rows and not isinstance(next(iter(stream.rows)), tuple):
        return streams.Stream(stream.messages, {streams.TABLE: stream.rows}, stream.row_events, stream.partitions)
    return stream
