"""What one warm MERGE of the job is, on this machine (`bench.py --only merge-anatomy`).

A changefeed's round commits every touched table once, so what one small MERGE costs is what a round over
many tables is made of (the tables section's floor, the freshness section's rounds). Per
`target.table_features` layout ("compatible", "full"): a table of `--anatomy-rows` rows in one data file, then
`--anatomy-merges` MERGEs through the job's own writer (`DeltaWriter.merge`: its settings for a small source
held in memory, its idempotent-write pair), each of `--anatomy-keys` changed keys (updates, inserts and
deletes), the layouts alternating, after 5 of each to warm up. Printed per layout: the MERGE's wall time,
its Spark jobs (how many, the time any of them ran, the rest: the driver's planning and Delta's commit
between them), and the jobs by what Delta names them, per MERGE.
"""

from __future__ import annotations

import random
import re
import statistics
import time
from collections import defaultdict

from benchmarks import streams
from benchmarks.measure import section

_WARM_UP = 5
# Parts of a job's description that differ from MERGE to MERGE (the table's version, how many files).
_VARYING = ((re.compile(r"version: \d+"), "version: N"), (re.compile(r"\d+ files"), "N files"))


def add_arguments(parser) -> None:
    parser.add_argument("--anatomy-merges", type=int, default=30, help="timed MERGEs per layout (merge-anatomy)")
    parser.add_argument("--anatomy-rows", type=int, default=200, help="rows of the merge-anatomy tables")
    parser.add_argument("--anatomy-keys", type=int, default=10, help="changed keys per MERGE (merge-anatomy)")


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


def bench_merge_anatomy(args, lake) -> None:
    from ticdc_delta.apply.collapse import NetChange
    from ticdc_delta.apply.delta_writer import DeltaWriter
    from ticdc_delta.apply.locator import PathLocator
    from ticdc_delta.apply.merge_source import SourceRows
    from ticdc_delta.apply.points import AppliedPoint
    from ticdc_delta.apply.sql_session import SqlSession
    from ticdc_delta.apply.table_features import COMPATIBLE, FULL
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
        root = lake.path("anatomy")
        writer = DeltaWriter(sql, PathLocator(root), table_features=setting)
        writer.create(table, codec.schema, None, replace=False)
        spark.range(rows).selectExpr(
            "id", "concat('name-', id) AS name", "CAST(id % 1000 AS DECIMAL(12,2)) AS amount",
            "CAST(id % 1000 AS INT) AS qty", "TIMESTAMP_NTZ'2026-01-01 00:00:00' AS at",
            "TIMESTAMP'2026-01-01 00:00:00' AS ts", "'' AS note",
        ).repartition(1).write.format("delta").mode("append").save(f"{root}/bench/events")
        writers[setting] = writer
    jobs, chosen = _Jobs(spark), random.Random(28)
    point = [1 << 50]
    walls: dict[str, list[float]] = defaultdict(list)
    busy: dict[str, list[float]] = defaultdict(list)
    counts: dict[str, list[int]] = defaultdict(list)
    kinds: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))

    def merge(setting: str, timed: bool) -> None:
        point[0] += 1
        changes = []
        # Keys over 1.5x the table's: about a third inserts, a fifth of the changes deletes.
        for key in chosen.sample(range(rows * 3 // 2), keys):
            values = codec.row({"id": str(key), "name": f"changed-{point[0]}", "amount": "1.00", "qty": "1",
                                "at": "2026-02-01 00:00:00", "ts": {"location": "UTC", "value": "2026-02-01 00:00:00"},
                                "note": "n"})
            changes.append(NetChange(chosen.random() < 0.2, values))
        group = f"anatomy-{point[0]}"
        spark.sparkContext.setJobGroup(group, group)
        try:
            began = time.perf_counter()
            writers[setting].merge(table, codec.schema, SourceRows.of(changes), AppliedPoint(ts=point[0]))
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
