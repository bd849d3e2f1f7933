"""What one warm MERGE of the job is, on this machine (`bench.py --only merge-anatomy`).

A changefeed's round commits every touched table once, so what one small MERGE costs is what a round over
many tables is made of (the tables section's floor, the freshness section's rounds). Per
`target.table_features` layout ("compatible", "full"): a table of `--anatomy-rows` rows in one data file, then
`--anatomy-merges` MERGEs through the job's own writer (`DeltaWriter.merge`: its settings for a small source
held in memory, its idempotent-write pair), each of `--anatomy-keys` changed keys (updates, inserts and
deletes), the layouts alternating, after 5 of each to warm up. Printed per layout: the MERGE's wall time,
its Spark jobs (how many, the time any of them ran, the rest: the driver's planning and Delta's commit
between them), and the jobs by what Delta names them, per MERGE.

Then the same change merged by delta-rs (no JVM) into a table the job's writer made, alternating with the job's
MERGE of it: what a commit costs where Spark does not plan it; Spark reads that table back, checked against a model.

Then what more cores give: `--anatomy-tables` tables of that size merged in rounds through the job's table pool
(`apply.writers.table_pool`, `--anatomy-concurrency` at once, each table once a round, as a continuous job's round over
that many touched tables), by a process of its own pinned to one core and by one on every core, alternating
(`--anatomy-pairs` of each): commits a second and the JVM's CPU seconds per commit. Their ratio is what this
machine's second core gives a round; what more cores would give is not measured here.
"""

from __future__ import annotations

import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from benchmarks import streams
from benchmarks.measure import descendants, section

ROOT = Path(__file__).resolve().parent.parent

_WARM_UP = 5
# Parts of a job's description that differ from MERGE to MERGE (the table's version, how many files).
_VARYING = ((re.compile(r"version: \d+"), "version: N"), (re.compile(r"\d+ files"), "N files"))


def add_arguments(parser) -> None:
    parser.add_argument("--anatomy-merges", type=int, default=30, help="timed MERGEs per layout (merge-anatomy)")
    parser.add_argument("--anatomy-rows", type=int, default=200, help="rows of the merge-anatomy tables")
    parser.add_argument("--anatomy-keys", type=int, default=10, help="changed keys per MERGE (merge-anatomy)")
    parser.add_argument("--anatomy-tables", type=int, default=40, help="tables of merge-anatomy's rounds (0: none)")
    parser.add_argument("--anatomy-concurrency", type=int, default=8, help="tables merged at once in those rounds")
    parser.add_argument("--anatomy-rounds", type=int, default=2, help="timed rounds per process (after one to warm up)")
    parser.add_argument("--anatomy-pairs", type=int, default=2, help="processes on one core and on all, alternating")


class _Jobs:
    """The Spark jobs a job group ran, read from Spark's status store (kept while the UI is off too)."""

    def __init__(self, spark) -> None:
        self._context = spark.sparkContext
        self._store = spark._jsparkSession.sparkContext().statusStore()

    def of(self, group: str) -> list[tuple[str, float, float]]:
        """(description, submitted, completed) of each job of `group`, times in seconds."""
        jobs = []
        for job_id in self._context.statusTracker().getJobIdsForGroup(group):
            data = self._store.job(job_id)
            described = data.description()
            text = described.get() if described.isDefined() else data.name()
            jobs.append((text, data.submissionTime().get().getTime() / 1000, data.completionTime().get().getTime() / 1000))
        return jobs


def _busy(spans: list[tuple[float, float]]) -> float:
    """Seconds during which at least one of `spans` ran."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(spans):
        start = max(start, end)
        if stop > start:
            total += stop - start
            end = stop
    return total


def _kind(description: str, group: str) -> str:
    text = description.replace(f"{group}: ", "").replace(f"{group} - ", "").replace(group, "(no name of Delta's: the statement's own, Delta's checkpoint)")
    for varying, constant in _VARYING:
        text = varying.sub(constant, text)
    return text


def _table_of(spark, writer, locator, table, codec, rows: int) -> None:
    """`table` made by `writer` (its layout), then `rows` rows appended in one data file."""
    writer.create(table, codec.schema, None, replace=False)
    spark.range(rows).selectExpr(
        "id", "concat('name-', id) AS name", "CAST(id % 1000 AS DECIMAL(12,2)) AS amount",
        "CAST(id % 1000 AS INT) AS qty", "TIMESTAMP_NTZ'2026-01-01 00:00:00' AS at",
        "TIMESTAMP'2026-01-01 00:00:00' AS ts", "'' AS note",
    ).repartition(1).write.format("delta").mode("append").save(locator.path(table))


def _changes(codec, chosen: random.Random, rows: int, keys: int, stamp: int):
    """A MERGE source of `keys` changed keys over 1.5x the table's: about a third inserts, a fifth deletes."""
    from ticdc_delta.apply.changes.collapse import NetChange
    from ticdc_delta.apply.changes.merge_source import SourceRows

    changes = []
    for key in chosen.sample(range(rows * 3 // 2), keys):
        values = codec.row({"id": str(key), "name": f"changed-{stamp}", "amount": "1.00", "qty": "1",
                            "at": "2026-02-01 00:00:00", "ts": {"location": "UTC", "value": "2026-02-01 00:00:00"},
                            "note": "n"})
        changes.append(NetChange(chosen.random() < 0.2, values))
    return SourceRows.of(changes)


def bench_merge_anatomy(args, lake) -> None:
    from ticdc_delta.apply.base.session import SqlSession
    from ticdc_delta.apply.places.locator import PathLocator
    from ticdc_delta.apply.tables.features import COMPATIBLE, FULL
    from ticdc_delta.apply.tables.points import AppliedPoint
    from ticdc_delta.apply.writers.delta_writer import DeltaWriter
    from ticdc_delta.schema_cache.events import TableName
    from ticdc_delta.schema_cache.simple.table_schema import parse_table_schema

    spark, rows, keys = lake.spark, args.anatomy_rows, args.anatomy_keys
    section(f"One warm MERGE of {keys} changed keys into a {rows}-row table, by target.table_features "
            f"({args.anatomy_merges} each, alternating)")
    codec = parse_table_schema(streams.SCHEMA)
    table = TableName(*streams.TABLE)
    sql = SqlSession(spark)
    writers = {}
    for setting in (COMPATIBLE, FULL):
        locator = PathLocator(lake.path("anatomy"))
        writers[setting] = DeltaWriter(sql, locator, table_features=setting)
        _table_of(spark, writers[setting], locator, table, codec, rows)
    jobs, chosen = _Jobs(spark), random.Random(28)
    point = [1 << 50]
    walls: dict[str, list[float]] = defaultdict(list)
    busy: dict[str, list[float]] = defaultdict(list)
    counts: dict[str, list[int]] = defaultdict(list)
    kinds: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))

    def merge(setting: str, timed: bool) -> None:
        point[0] += 1
        source = _changes(codec, chosen, rows, keys, point[0])
        group = f"anatomy-{point[0]}"
        spark.sparkContext.setJobGroup(group, group)
        try:
            began = time.perf_counter()
            writers[setting].merge(table, codec.schema, source, AppliedPoint(ts=point[0]))
            wall = time.perf_counter() - began
        finally:
            spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
            spark.sparkContext.setLocalProperty("spark.job.description", None)
        if not timed:
            return
        ran = jobs.of(group)
        walls[setting].append(wall)
        busy[setting].append(_busy([(start, stop) for _, start, stop in ran]))
        counts[setting].append(len(ran))
        for description, start, stop in ran:
            kinds[setting][_kind(description, group)].append(stop - start)

    for _ in range(_WARM_UP):
        for setting in writers:
            merge(setting, timed=False)
    for _ in range(args.anatomy_merges):
        for setting in writers:
            merge(setting, timed=True)
    for setting in writers:
        wall, inside, n = walls[setting], busy[setting], len(walls[setting])
        print(f"  {setting:<10} wall min {min(wall):5.2f}s median {statistics.median(wall):5.2f}s;  Spark jobs per MERGE "
              f"median {statistics.median(counts[setting]):g} (max {max(counts[setting])});  some job running: median "
              f"{statistics.median(inside):5.2f}s, the rest (driver: planning, Delta's commit) median "
              f"{statistics.median(w - i for w, i in zip(wall, inside, strict=True)):5.2f}s")
        for kind, seconds in sorted(kinds[setting].items(), key=lambda item: -sum(item[1])):
            print(f"      {len(seconds) / n:5.2f} a MERGE  median {statistics.median(seconds) * 1000:5.0f} ms  {kind}")
    compatible, full = walls[COMPATIBLE], walls[FULL]
    print(f"  full vs compatible (wall): {min(full) / min(compatible):5.2f}x "
          f"({statistics.median(full) / statistics.median(compatible):.2f}x)")
    _without_jvm(args, lake, codec)
    if args.anatomy_tables:
        _cores(args)


# --- a commit without the JVM ---------------------------------------------------------------------


def _arrow_changes(chosen: random.Random, rows: int, keys: int, stamp: int):
    """As `_changes`, as an Arrow table with the `deleted` flag, for delta-rs."""
    import datetime
    from decimal import Decimal

    import pyarrow as pa

    ids = chosen.sample(range(rows * 3 // 2), keys)
    return pa.table({
        "id": pa.array(ids, pa.int64()), "name": [f"changed-{stamp}"] * keys,
        "amount": pa.array([Decimal("1.00")] * keys, pa.decimal128(12, 2)), "qty": pa.array([1] * keys, pa.int32()),
        "at": pa.array([datetime.datetime(2026, 2, 1)] * keys, pa.timestamp("us")),
        "ts": pa.array([datetime.datetime(2026, 2, 1, tzinfo=datetime.timezone.utc)] * keys, pa.timestamp("us", "UTC")),
        "note": ["n"] * keys, "deleted": [chosen.random() < 0.2 for _ in ids],
    })


def _without_jvm(args, lake, codec) -> None:
    """The same small change merged by delta-rs (Rust, in this process; a dependency of the tests, not of the
    product) into a table the job's writer made, alternating with the job's own MERGE of such a change into a
    twin: what a commit costs where no JVM plans it. Spark then reads the delta-rs table, which must equal a
    model of the changes."""
    from ticdc_delta.apply.base.session import SqlSession
    from ticdc_delta.apply.places.locator import PathLocator
    from ticdc_delta.apply.tables.features import COMPATIBLE
    from ticdc_delta.apply.tables.points import AppliedPoint
    from ticdc_delta.apply.writers.delta_writer import DeltaWriter
    from ticdc_delta.schema_cache.events import TableName

    spark, rows, keys = lake.spark, args.anatomy_rows, args.anatomy_keys
    section(f"The same MERGE by delta-rs (no JVM) into a table the job made, against the job's MERGE "
            f"({args.anatomy_merges} each, alternating)")
    try:
        import deltalake  # noqa: F401 - (only whether it is there: `_merge_by_delta_rs` uses it)
    except ImportError:
        print("  skipped: delta-rs is not installed (`pip install deltalake`, one of the tests' dependencies)")
        return
    locator = PathLocator(lake.path("anatomy-delta-rs"))
    writer = DeltaWriter(SqlSession(spark), locator, table_features=COMPATIBLE)
    ours, theirs = TableName("bench", "by_job"), TableName("bench", "by_delta_rs")
    for table in (ours, theirs):
        _table_of(spark, writer, locator, table, codec, rows)
    path, model = locator.path(theirs), set(range(rows))
    columns = [c.name for c in codec.schema.columns]
    chosen, stamp = random.Random(29), [1 << 50]
    spent: dict[str, list[tuple[float, float]]] = defaultdict(list)

    def job_merge() -> None:
        writer.merge(ours, codec.schema, _changes(codec, chosen, rows, keys, stamp[0]), AppliedPoint(ts=stamp[0]))

    def delta_rs_merge() -> None:
        source = _arrow_changes(chosen, rows, keys, stamp[0])
        _merge_by_delta_rs(path, source, stamp[0], columns)
        for key, deleted in zip(source["id"].to_pylist(), source["deleted"].to_pylist(), strict=True):
            (model.discard if deleted else model.add)(key)

    for n in range(_WARM_UP + args.anatomy_merges):
        for label, merge in (("the job's MERGE (Spark)", job_merge), ("delta-rs MERGE", delta_rs_merge)):
            stamp[0] += 1
            began, cpu = time.perf_counter(), _cpu_seconds()
            merge()
            if n >= _WARM_UP:
                spent[label].append((time.perf_counter() - began, _cpu_seconds() - cpu))
    for label, pairs in spent.items():
        walls, cpus = [w for w, _ in pairs], [c for _, c in pairs]
        print(f"  {label:<24} wall min {min(walls) * 1000:6.0f} ms median {statistics.median(walls) * 1000:6.0f} ms; "
              f"CPU median {statistics.median(cpus) * 1000:6.0f} ms (this process and its JVM)")
    job, rust = (statistics.median(w for w, _ in pairs) for pairs in spent.values())
    print(f"  the job's MERGE vs delta-rs (wall medians): {job / rust:.1f}x")
    read = {row[0] for row in spark.read.format("delta").load(path).select("id").collect()}
    engines = {row[0] for row in spark.sql(f"DESCRIBE HISTORY delta.`{path}`").select("engineInfo").collect()}
    if read != model:
        raise AssertionError(f"Spark read the delta-rs table unlike the model: {len(read - model)} keys not in it, "
                             f"{len(model - read)} missing")
    print(f"  Spark reads the delta-rs table equal to the model ({len(read)} keys; its writers: "
          f"{', '.join(sorted(e.split(' ')[0] for e in engines if e))})")
    if args.anatomy_tables:
        _delta_rs_rounds(args, lake, codec, writer, locator, columns)


def _merge_by_delta_rs(path: str, source, version: int, columns: list[str]) -> None:
    """`source` (`_arrow_changes`) merged into the table at `path` by delta-rs, with an application transaction
    of `version` as the job's idempotent-write pair has."""
    from deltalake import DeltaTable
    from deltalake.transaction import CommitProperties, Transaction

    (DeltaTable(path).merge(source, "t.id = s.id", source_alias="s", target_alias="t", commit_properties=(
        CommitProperties(app_transactions=[Transaction("ticdc-delta-bench", version)])))
     .when_matched_delete("s.deleted")
     .when_matched_update({c: f"s.{c}" for c in columns[1:]})
     .when_not_matched_insert({c: f"s.{c}" for c in columns}, predicate="NOT s.deleted")
     .execute())


def _delta_rs_rounds(args, lake, codec, writer, locator, columns) -> None:
    """Rounds over `--anatomy-tables` tables the job's writer made, each merged once a round by delta-rs,
    `--anatomy-concurrency` at once on threads: the rounds of the part below without the JVM."""
    from concurrent.futures import ThreadPoolExecutor

    from ticdc_delta.schema_cache.events import TableName

    names = [TableName("bench", f"rs{n}") for n in range(args.anatomy_tables)]
    for name in names:
        _table_of(lake.spark, writer, locator, name, codec, args.anatomy_rows)
    chosen = random.Random(len(names))
    spent = [0.0, 0.0]
    with ThreadPoolExecutor(args.anatomy_concurrency) as pool:
        for stamp in range(1, args.anatomy_rounds + 2):
            sources = {name: _arrow_changes(chosen, args.anatomy_rows, args.anatomy_keys, stamp) for name in names}
            began, cpu = time.perf_counter(), _cpu_seconds()
            list(pool.map(lambda name, stamp=stamp, sources=sources: _merge_by_delta_rs(
                locator.path(name), sources[name], stamp, columns), names))
            if stamp > 1:  # the first warmed up
                spent[0] += time.perf_counter() - began
                spent[1] += _cpu_seconds() - cpu
    commits = len(names) * args.anatomy_rounds
    print(f"  rounds over {len(names)} such tables by delta-rs, {args.anatomy_concurrency} at once (threads): "
          f"{commits / spent[0]:.0f} commits a second ({commits} in {spent[0]:.1f}s), CPU {spent[1] / commits * 1000:.0f} ms "
          "a commit (this process and its JVM)")


# --- what a second core gives a round ------------------------------------------------------------


def _cores(args) -> None:
    section(f"Rounds over {args.anatomy_tables} tables ({args.anatomy_rows} rows each, {args.anatomy_keys} changed keys a "
            f"table), {args.anatomy_concurrency} at once through the job's table pool: a process on one core against "
            f"one on every core, {args.anatomy_pairs} each, alternating")
    every = os.sched_getaffinity(0)
    contenders = {"one core": {min(every)}, f"every core ({len(every)})": every}
    results: dict[str, list[dict]] = defaultdict(list)
    for _ in range(args.anatomy_pairs):
        for label, cores in contenders.items():
            command = [sys.executable, "-m", "benchmarks.merge_anatomy", *(str(v) for v in (
                args.anatomy_tables, args.anatomy_concurrency, args.anatomy_rounds, args.anatomy_rows, args.anatomy_keys))]
            ran = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3600,
                                 env={**os.environ, "PYTHONPATH": str(ROOT)},
                                 preexec_fn=lambda cores=cores: os.sched_setaffinity(0, cores))
            lines = [line for line in ran.stdout.splitlines() if line.startswith("{")]
            if ran.returncode or not lines:
                raise RuntimeError(f"the rounds' process failed ({ran.returncode}): {ran.stderr[-2000:]}")
            result = json.loads(lines[-1])
            results[label].append(result)
            print(f"  {label:<16} {result['commits'] / result['seconds']:5.2f} commits a second "
                  f"({result['commits']} in {result['seconds']:.1f}s), CPU {result['cpu_seconds'] / result['commits']:.2f}s "
                  "a commit (JVM + Python)", flush=True)
    rates = {label: [r["commits"] / r["seconds"] for r in runs] for label, runs in results.items()}
    one, every_core = rates["one core"], rates[f"every core ({len(every)})"]
    print(f"  every core vs one: {max(every_core) / max(one):.2f}x the commits a second "
          f"(medians {statistics.median(every_core) / statistics.median(one):.2f}x)")


def _cpu_seconds() -> float:
    """CPU seconds this process and its children (Spark's JVM) used so far."""
    ticks, total = os.sysconf("SC_CLK_TCK"), sum(os.times()[:2])
    for pid in descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
    return total


def _rounds(tables: int, concurrency: int, rounds: int, rows: int, keys: int) -> dict:
    """In a process of its own (its cores chosen by the caller): `tables` tables made, one round to warm up, then
    `rounds` rounds each merging every table once through the job's table pool."""
    from ticdc_delta.apply.base.session import SqlSession
    from ticdc_delta.apply.places.locator import PathLocator
    from ticdc_delta.apply.tables.features import COMPATIBLE
    from ticdc_delta.apply.tables.points import AppliedPoint
    from ticdc_delta.apply.writers.delta_writer import DeltaWriter
    from ticdc_delta.apply.writers.table_pool import TablePool
    from ticdc_delta.jobs.session import get_spark
    from ticdc_delta.schema_cache.events import TableName
    from ticdc_delta.schema_cache.simple.table_schema import parse_table_schema

    spark = get_spark("local[*]")
    codec = parse_table_schema(streams.SCHEMA)
    names = [TableName("bench", f"t{n}") for n in range(tables)]
    chosen = random.Random(tables)
    with tempfile.TemporaryDirectory(prefix="ticdc-anatomy-") as work:
        locator = PathLocator(work)
        pool = TablePool(DeltaWriter(SqlSession(spark), locator, table_features=COMPATIBLE), concurrency)
        pool.run_each(names, lambda name: _table_of(spark, pool.writer(), locator, name, codec, rows))
        spent = [0.0, 0.0]
        for stamp in range(rounds + 1):
            sources = {name: _changes(codec, chosen, rows, keys, stamp) for name in names}
            point = AppliedPoint(ts=(1 << 50) + stamp)
            began, cpu = time.perf_counter(), _cpu_seconds()
            pool.run_each(names, lambda name, sources=sources, point=point: pool.writer().merge(
                name, codec.schema, sources[name], point))
            if stamp:  # the first warmed up
                spent[0] += time.perf_counter() - began
                spent[1] += _cpu_seconds() - cpu
        pool.close()
    return {"commits": tables * rounds, "seconds": spent[0], "cpu_seconds": spent[1], "cores": len(os.sched_getaffinity(0))}


if __name__ == "__main__":
    print(json.dumps(_rounds(*(int(v) for v in sys.argv[1:6]))), flush=True)
