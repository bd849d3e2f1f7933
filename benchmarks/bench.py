"""The performance benchmark: every row of the speed issue's table, measured side by side in one run.

    .venv/bin/python benchmarks/bench.py                       # everything (about 15 minutes on 2 cores)
    .venv/bin/python benchmarks/bench.py --only decode,e2e     # some sections

Prints figures and ratios; asserts nothing. Each timed contender runs `--repeats` times, interleaved
with the others, and the table shows the minimum and the median; ratios are taken of minimums (and
of medians in brackets). The load average is printed with each section. Sections:

- decode: SimpleDecoder (JSON) vs orjson.loads and json.loads of the same values; Simple Avro vs
  fastavro's schemaless reader; the other protocols' decoders vs their raw parse.
- e2e: Kafka -> Delta until idle in one batch (warm session, fresh group and table each repeat) vs a
  plain Delta append of the same net rows, vs one MERGE of them into a table already holding them,
  vs one MERGE per 10-row upstream transaction (extrapolated); the job's time split per phase.
- handwritten: the job vs Spark's Kafka source + from_json + last change per key + one MERGE.
- table-size: one batch of 10,000 changed keys into a 1M-row table vs a 100k-row table; then a 100-row change
  into tables of `--size-rows` rows (10^4, 10^6, 10^7; `--size-files` files each, their keys in ranges or
  scattered) by Spark's MERGE, by delta-rs and by the default writer, which says whom it chose.
- features: the job's MERGE into tables made under `target.table_features` "compatible" (no deletion
  vectors) and "full" (deletion vectors, column mapping), and with deletion vectors alone; a batch of
  10,000 and one of 100 changed keys spread over a 1M-row table, the 10,000 also into 100k rows; a
  full scan of each table; a RENAME COLUMN (a rewrite of the table under "compatible").
- merge-anatomy: one warm small MERGE of the job (10 keys into 200 rows) under each layout: its wall time,
  its Spark jobs by name, and the time outside them; the same change by delta-rs (no JVM) against the job's
  MERGE; rounds over many tables on one core against every core (`benchmarks/merge_anatomy.py`).
- memory: peak RSS of the job (Python + JVM) for 1M vs 100k events, and with one partition's
  watermark lagging the whole stream, each run as `ticdc-delta run` in its own process.
- engines: the Spark engine (`run.engine = "spark"`) on a local[1] vs a local[2] session (what a second
  core gives), and the Spark engine vs the driver engine on local[2]; `--engine-events` (1M) over 4
  partitions, one batch per run, a session of its own per configuration (warmed up by a small run).
- snapshot: `ticdc-delta snapshot` of a Dumpling export vs Spark's CSV reader and a plain append.
- history: one batch of 10,000 row changes (5,000 keys, each updated at two commitTs) applied by the
  driver engine's applier to a 100k-row table without and with a history table (`[history]`).
- tables: the same row events over 1 to 500 tables, both engines, a job process per run; the floor of
  bare MERGEs of the same rows (`benchmarks/tables.py`).
- freshness: a steady stream over 100 tables against a `--continuous` job for 5 minutes: freshness and
  backlog per minute (`benchmarks/freshness.py`).
- short-runs: whole short runs of the job, its defaults against other settings, alternating
  (`benchmarks/short_runs.py`).
- cluster: the Spark engine by spark-submit on a standalone cluster of one-core workers (each a JVM) against
  local[2], the same stream; then a worker killed in the middle of a batch (`benchmarks/cluster.py`).
- yarn: cluster deploy mode on Hadoop's mini YARN cluster, the product shipped as a packed environment
  (`--archives`) and its configuration by `--files`; the driver's container killed; an unset secret variable
  as YARN reports it (`benchmarks/yarn.py`). Needs Python 3.12 (the environment's) and Maven.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import io
import json
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TICDC_DELTA_CACHE", str(ROOT / ".cache"))

import fastavro  # noqa: E402
import orjson  # noqa: E402

from benchmarks import cluster, freshness, merge_anatomy, short_runs, streams, tables, yarn  # noqa: E402
from benchmarks.measure import descendants, load, rss_kib, section  # noqa: E402
from ticdc_delta.schema_cache.events import RawMessage  # noqa: E402

ENGINE_PARTITIONS = 4  # an even share per core of the 2-core machine
SECTIONS = ("decode", "e2e", "handwritten", "table-size", "features", "merge-anatomy", "memory", "engines", "snapshot",
            "history", "tables", "freshness", "short-runs", "cluster", "yarn")


# --- measuring -------------------------------------------------------------------------------


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved(contenders: dict[str, Callable[[], object]], repeats: int) -> dict[str, list[float]]:
    """Each contender's times over `repeats` rounds, the contenders interleaved within a round."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, fn in contenders.items():
            times[name].append(timed(fn))
    return times


def fmt(seconds: list[float]) -> str:
    return f"min {min(seconds):7.2f}s  median {statistics.median(seconds):7.2f}s"


def ratio(a: list[float], b: list[float]) -> str:
    return f"{min(a) / min(b):5.2f}x ({statistics.median(a) / statistics.median(b):.2f}x)"


def row(what: str, ours: list[float], theirs: list[float], target: str) -> None:
    print(f"  {what:<58} {ratio(ours, theirs):>16}   target {target}")


def messages_of(stream: streams.Stream, topic: str = "bench") -> list[RawMessage]:
    return [RawMessage(topic, p, i, None, v) for i, (p, v) in enumerate(stream.messages)]


# --- decode ----------------------------------------------------------------------------------


def _kept(fn: Callable[[object], object], items: list) -> Callable[[], list]:
    """Apply `fn` to every item, keeping the results (as the pipeline keeps decoded events for its gate)."""
    return lambda: [fn(item) for item in items]


def _dropped(fn: Callable[[object], object], items: list) -> Callable[[], None]:
    """Apply `fn` to every item, dropping the results: the pure cost of the work."""

    def run() -> None:
        for item in items:
            fn(item)

    return run


def compare(label: str, ours: Callable[[], Callable], theirs: dict[str, Callable], items: list, ours_items: list, repeats: int) -> dict:
    """Time ours and each raw parse, results kept and results dropped; return {mode: {name: times}}."""
    out = {}
    for mode, wrap in (("kept", _kept), ("dropped", _dropped)):
        contenders = {label: lambda wrap=wrap: wrap(ours(), ours_items)()}
        contenders.update({name: wrap(fn, items) for name, fn in theirs.items()})
        out[mode] = interleaved(contenders, repeats)
    return out


def bench_decode(args) -> None:
    from ticdc_delta.schema_cache.simple.avro import MESSAGE_SCHEMA
    from ticdc_delta.schema_cache.simple.decoder import SimpleDecoder
    from ticdc_delta.schema_cache.simple.options import SimpleOptions

    section(f"decode: {args.events:,} row events over {args.keys:,} keys")
    print("  kept: results kept in a list (the pipeline keeps decoded events for its gate; the method of the")
    print("  issue's figures); dropped: results dropped (the work alone, no garbage-collector passes over them)")
    stream = streams.build(args.events, args.keys)
    messages = messages_of(stream)
    values = [m.value for m in messages]
    times = compare(
        "SimpleDecoder (JSON)",
        lambda: SimpleDecoder().decode,
        {"orjson.loads": orjson.loads, "json.loads": json.loads},
        values,
        messages,
        args.repeats,
    )
    for mode, by_name in times.items():
        for name, t in by_name.items():
            print(f"  {mode:<8} {name:<28} {fmt(t)}   {stream.size() / min(t) / 1e6:6.1f} MB/s")
    for mode in times:
        row(f"decode vs orjson.loads ({mode})", times[mode]["SimpleDecoder (JSON)"], times[mode]["orjson.loads"], "<= 2.0x")
        row(f"decode vs json.loads ({mode})", times[mode]["SimpleDecoder (JSON)"], times[mode]["json.loads"], "<= 1.0x")

    avro_stream = streams.build(args.events, args.keys, encoding="avro")
    avro_messages = messages_of(avro_stream)
    parsed = fastavro.parse_schema(MESSAGE_SCHEMA)
    times = compare(
        "SimpleDecoder (Avro)",
        lambda: SimpleDecoder(SimpleOptions(encoding="avro")).decode,
        {"fastavro.schemaless_reader": lambda v: fastavro.schemaless_reader(io.BytesIO(v), parsed)},
        [m.value for m in avro_messages],
        avro_messages,
        args.repeats,
    )
    for mode, by_name in times.items():
        for name, t in by_name.items():
            print(f"  {mode:<8} {name:<28} {fmt(t)}")
    for mode in times:
        row(f"Simple Avro decode vs fastavro ({mode})", times[mode]["SimpleDecoder (Avro)"],
            times[mode]["fastavro.schemaless_reader"], "<= 1.1x")
    bench_other_protocols(args)


def bench_other_protocols(args) -> None:
    from benchmarks.protocol_streams import protocol_contenders

    events = max(args.events // 5, 5_000)
    print(f"  other protocols ({events:,} row events each), decoder vs the raw parse of the same messages:")
    for name, (decoder, messages, (raw_name, raw_parse)) in protocol_contenders(events, args.keys).items():
        times = compare("ours", decoder, {raw_name: raw_parse}, messages, messages, args.repeats)
        for mode in times:
            print(f"    {name:<14} {mode:<8} decoder {fmt(times[mode]['ours'])}; {raw_name:<26} "
                  f"{fmt(times[mode][raw_name])}; ratio {ratio(times[mode]['ours'], times[mode][raw_name])}")


# --- end to end ------------------------------------------------------------------------------


class Lake:
    """A local broker and a warm Spark session for the end-to-end sections."""

    def __init__(self, work: Path, packages: tuple[str, ...] = ()) -> None:
        from testbed.local_kafka import LocalKafka
        from ticdc_delta.jobs.session import get_spark

        self.work = work
        self.broker = LocalKafka(work / "kafka")
        self.broker.start()
        # (more heap than a job's 2g: the bench's own session reads every table of a thousand-table run to check it)
        self.spark = get_spark("local[*]", conf={"spark.driver.memory": "4g"}, packages=packages)
        self.spark.range(1).count()
        self._runs = 0

    def publish(self, topic: str, stream: streams.Stream) -> None:
        from testbed.produce import ensure_topic, produce

        ensure_topic(self.broker.bootstrap_servers, topic, stream.partitions)
        produce(self.broker.bootstrap_servers, topic, ((p, None, v) for p, v in stream.messages))

    def run_job(self, topic: str, **run):
        from ticdc_delta.jobs import config as config_module
        from ticdc_delta.jobs.pipeline import Pipeline

        self._runs += 1
        config = config_module.from_mapping(
            {
                "kafka": {"bootstrap_servers": self.broker.bootstrap_servers, "topics": [topic], "group_id": f"g{self._runs}"},
                "target": {"path": str(self.work / f"job{self._runs}")},
                "run": {"mode": "until-idle", "batch_max_messages": 10_000_000, "batch_max_seconds": 600.0, **run},
            }
        )
        return Pipeline.from_config(config, self.spark).run()

    def path(self, name: str) -> str:
        self._runs += 1
        return str(self.work / f"{name}{self._runs}")

    def close(self) -> None:
        self.broker.stop()


def net_frame(spark, stream: streams.Stream):
    return spark.createDataFrame(list(stream.rows.values()), schema=streams.SPARK_SCHEMA)


def merge_into(spark, path: str, source, keyed_on: str = "id") -> None:
    source.createOrReplaceTempView("bench_source")
    spark.sql(
        f"MERGE INTO delta.`{path}` AS t USING bench_source AS s ON t.{keyed_on} = s.{keyed_on} "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )


def bench_e2e(args, lake: Lake) -> None:
    section(f"end to end: {args.events:,} row events over {args.keys:,} keys, one batch, warm session")
    stream = streams.build(args.events, args.keys)
    lake.publish("bench", stream)
    lake.publish("warmup", streams.build(5_000, 1_000, seed=2))
    lake.run_job("warmup")
    spark = lake.spark
    net = len(stream.rows)
    result = {}

    def job():
        result["last"] = lake.run_job("bench")

    def append():
        net_frame(spark, stream).write.format("delta").save(lake.path("append"))

    full = lake.path("full")
    net_frame(spark, stream).write.format("delta").save(full)

    def merge_full():
        merge_into(spark, full, net_frame(spark, stream))

    times = interleaved({"job": job, "append": append, "merge": merge_full}, args.repeats)
    print(f"  the job, Kafka -> Delta          {fmt(times['job'])}   {args.events / min(times['job']):>9,.0f} events/s; "
          f"{result['last'].rows_applied:,} applied, {net:,} net rows")
    print(f"  plain Delta append of net rows   {fmt(times['append'])}")
    print(f"  one MERGE into a full table      {fmt(times['merge'])}")
    phases = result["last"].phases
    print("  the job's time split (last run): " + ", ".join(f"{k} {v:.2f}s" for k, v in phases.items()))

    per_txn = lake.path("pertxn")
    net_frame(spark, stream).limit(1000).write.format("delta").save(per_txn)
    rows = list(stream.rows.values())
    samples = []
    for i in range(args.txn_merges):
        chunk = rows[i * 10 : i * 10 + 10]
        samples.append(timed(lambda chunk=chunk: merge_into(spark, per_txn, spark.createDataFrame(chunk, streams.SPARK_SCHEMA))))
    extrapolated = statistics.median(samples) * args.events / 10
    print(f"  one MERGE per 10-row transaction: median {statistics.median(samples):.2f}s each, "
          f"{extrapolated:,.0f}s extrapolated to {args.events // 10:,} transactions")
    row("end to end vs a plain Delta append of the net rows", times["job"], times["append"], "<= 3x")
    row("end to end vs one MERGE of the net rows into a full table", times["job"], times["merge"], "<= 1.5x")
    print(f"  {'one MERGE per 10-row transaction vs end to end':<58} {extrapolated / min(times['job']):>8,.0f}x faster   target >= 1,000x")


def handwritten_query(spark, bootstrap: str, topic: str, target: str) -> None:
    """What a Spark user writes by hand: Kafka source, from_json, last change per key, one MERGE.

    It ignores watermarks, DDL and split updates at one commitTs; it only has to be fast.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, MapType, StringType, StructField, StructType

    message = StructType(
        [
            StructField("type", StringType()),
            StructField("commitTs", LongType()),
            StructField("data", MapType(StringType(), StringType())),
            StructField("old", MapType(StringType(), StringType())),
        ]
    )
    raw = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    dml = raw.select(F.from_json(F.col("value").cast("string"), message).alias("m")).select("m.*")
    dml = dml.where(F.col("type").isin("INSERT", "UPDATE", "DELETE"))
    image = F.coalesce(F.col("data"), F.col("old"))
    changes = dml.select(
        "type",
        "commitTs",
        image["id"].cast("bigint").alias("id"),
        image["name"].alias("name"),
        image["amount"].cast("decimal(12,2)").alias("amount"),
        image["qty"].cast("int").alias("qty"),
        F.to_timestamp_ntz(image["at"]).alias("at"),
        F.to_timestamp(F.get_json_object(image["ts"], "$.value")).alias("ts"),
        image["note"].alias("note"),
    )
    latest = changes.withColumn("n", F.row_number().over(Window.partitionBy("id").orderBy(F.col("commitTs").desc())))
    latest.where("n = 1").drop("n").createOrReplaceTempView("handwritten_source")
    spark.sql(
        f"MERGE INTO delta.`{target}` AS t USING handwritten_source AS s ON t.id = s.id "
        "WHEN MATCHED AND s.type = 'DELETE' THEN DELETE "
        "WHEN MATCHED THEN UPDATE SET t.name = s.name, t.amount = s.amount, t.qty = s.qty, t.at = s.at, t.ts = s.ts, t.note = s.note "
        "WHEN NOT MATCHED AND s.type != 'DELETE' THEN INSERT (id, name, amount, qty, at, ts, note) "
        "VALUES (s.id, s.name, s.amount, s.qty, s.at, s.ts, s.note)"
    )


def bench_handwritten(args, lake: Lake) -> None:
    events = args.handwritten_events
    section(f"hand-written Spark job: {events:,} row events over {args.keys:,} keys")
    stream = streams.build(events, args.keys, seed=3)
    lake.publish("handwritten", stream)
    spark = lake.spark

    def handwritten():
        target = lake.path("hand")
        spark.sql(f"CREATE TABLE delta.`{target}` ({streams.SPARK_SCHEMA}) USING DELTA")
        handwritten_query(spark, lake.broker.bootstrap_servers, "handwritten", target)

    handwritten()  # warm: the Kafka source's first use
    times = interleaved({"job": lambda: lake.run_job("handwritten"), "handwritten": handwritten}, args.repeats)
    print(f"  the job                          {fmt(times['job'])}")
    print(f"  Kafka source + from_json + MERGE {fmt(times['handwritten'])}")
    row("end to end vs the hand-written Spark job", times["job"], times["handwritten"], "<= 1.0x")


# --- table size ------------------------------------------------------------------------------


def bench_table_size(args, lake: Lake) -> None:
    from ticdc_delta.apply.applier import Applier
    from ticdc_delta.apply.base.session import SqlSession
    from ticdc_delta.apply.own_tables.tombstones import Tombstones
    from ticdc_delta.apply.places.locator import PathLocator
    from ticdc_delta.apply.writers.delta_writer import DeltaWriter
    from ticdc_delta.schema_cache.events import Op, Position, RowChange, TableName
    from ticdc_delta.schema_cache.simple.table_schema import parse_table_schema

    section("one batch of 10,000 changed keys into a 1M-row vs a 100k-row table")
    spark = lake.spark
    codec = parse_table_schema(streams.SCHEMA)
    table = TableName(*streams.TABLE)
    sizes = {"100k": 100_000, "1M": 1_000_000}
    roots = {}
    for label, size in sizes.items():
        root = lake.path(f"size{label}")
        roots[label] = root
        path = f"{root}/bench/events"
        frame = spark.range(size).selectExpr(
            "id", "concat('name-', id) AS name", "CAST(id % 1000 AS DECIMAL(12,2)) AS amount", "CAST(id % 1000 AS INT) AS qty",
            "TIMESTAMP_NTZ'2026-01-01 00:00:00' AS at", "TIMESTAMP'2026-01-01 00:00:00' AS ts", "'' AS note",
        )
        spark.sql(f"CREATE TABLE delta.`{path}` ({streams.SPARK_SCHEMA}) USING DELTA "
                  "TBLPROPERTIES ('delta.columnMapping.mode' = 'name', 'delta.enableDeletionVectors' = 'true')")
        frame.write.format("delta").mode("append").save(path)
    batch_ts = [1 << 50]

    def apply_batch(label: str):
        size = sizes[label]
        batch_ts[0] += 1
        rows = []
        for i in range(10_000):
            key = (i * 7919) % size
            values = codec.row({"id": str(key), "name": f"changed-{i}", "amount": "1.00", "qty": "1",
                                "at": "2026-02-01 00:00:00", "ts": {"location": "UTC", "value": "2026-02-01 00:00:00"}, "note": "n"})
            rows.append(RowChange(table, batch_ts[0], Op.UPDATE, values, values, codec.schema, Position("t", 0, i)))
        sql = SqlSession(spark)
        locator = PathLocator(roots[label])
        Applier(DeltaWriter(sql, locator), Tombstones(sql, locator)).apply(rows, {"t": batch_ts[0]})

    times = interleaved({"1M": lambda: apply_batch("1M"), "100k": lambda: apply_batch("100k")}, args.repeats)
    print(f"  into 1M rows    {fmt(times['1M'])}")
    print(f"  into 100k rows  {fmt(times['100k'])}")
    row("1M-row table vs 100k-row table", times["1M"], times["100k"], "<= 1.5x")
    bench_writers_by_size(args, lake)


def bench_writers_by_size(args, lake: Lake) -> None:
    """A 100-row change (80 updates, 10 deletes, 10 inserts) merged into compatible-layout tables of each size, by
    Spark's MERGE, by delta-rs whatever it has to read, and by the default (`auto`: delta-rs unless the files the
    keys may be in are more than `DeltaRs.max_read_bytes`), alternating; which engine the default chose is printed.
    Tables of each size come in two layouts: files holding key ranges (rows appended in key order, as an
    auto-increment key's are) and files each holding keys from all over (rows in random order)."""
    import datetime as dt
    import random
    from decimal import Decimal

    from ticdc_delta.apply.base.session import SqlSession
    from ticdc_delta.apply.changes.collapse import NetChange
    from ticdc_delta.apply.changes.merge_source import SourceRows
    from ticdc_delta.apply.places.locator import PathLocator
    from ticdc_delta.apply.tables.points import AppliedPoint
    from ticdc_delta.apply.writers.delta_rs import DeltaRs
    from ticdc_delta.apply.writers.delta_writer import DeltaWriter
    from ticdc_delta.schema_cache.events import Column, TableName, TableSchema

    sizes = [int(n) for n in args.size_rows.split(",")]
    section(f"a 100-row change into tables of {', '.join(f'{n:,}' for n in sizes)} rows ({args.size_files} files "
            "each): Spark's MERGE, delta-rs, the default")
    spark, rng = lake.spark, random.Random(7)
    columns = tuple(Column(*c.strip().split(" ", 1)) for c in re.split(r",(?![^()]*\))", streams.SPARK_SCHEMA))
    table = TableName("bench", "sized")
    schema = TableSchema(table, columns, ("id",))
    at, ts = dt.datetime(2026, 2, 1), dt.datetime(2026, 2, 1, tzinfo=dt.timezone.utc)
    point = [1 << 50]

    def row(key: int, i: int) -> tuple:
        return (key, f"changed-{i}", Decimal("1.00"), i, at, ts, "n")

    print(f"  {'rows':>12} {'layout':<9} {'MiB':>6} {'Spark':>29} {'delta-rs':>29} {'default':>29}  default chose")
    def one(size: int, layout: str) -> None:
        root = lake.path(f"sized-{size}-{layout}")
        sql = SqlSession(spark)
        locator = PathLocator(root)
        writers = {"spark": DeltaWriter(sql, locator), "delta-rs": DeltaWriter(sql, locator, small_merges=DeltaRs(max_read_bytes=None)),
                   "default": DeltaWriter(sql, locator, small_merges=DeltaRs())}
        writers["spark"].create(table, schema, None, replace=False)
        rows = spark.range(size).selectExpr(
            "id", "concat('name-', id) AS name", "CAST(id % 1000 AS DECIMAL(12,2)) AS amount", "CAST(id % 1000 AS INT) AS qty",
            "TIMESTAMP_NTZ'2026-01-01 00:00:00' AS at", "TIMESTAMP'2026-01-01 00:00:00' AS ts", "'' AS note")
        rows = rows.repartitionByRange(args.size_files, "id") if layout == "ranges" else rows.repartition(args.size_files)
        path = locator.path(table)
        rows.write.format("delta").mode("append").save(path)
        mib = sum(f.stat().st_size for f in Path(path).glob("*.parquet")) / 2**20
        inserted = [size]

        def merge(who: str) -> None:
            keys = rng.sample(range(size), 90)
            changes = [NetChange(False, row(k, i)) for i, k in enumerate(keys[:80])]
            changes += [NetChange(True, row(k, 0)) for k in keys[80:]]
            changes += [NetChange(False, row(inserted[0] + j, j)) for j in range(10)]
            inserted[0] += 10
            point[0] += 1
            writers[who].merge(table, schema, SourceRows.of(changes), AppliedPoint(ts=point[0]))

        for who in writers:  # (warm: each writer's first read of the table)
            merge(who)
        times = interleaved({who: functools.partial(merge, who) for who in writers}, args.repeats)
        # The engine of each of the default's commits: every third of the timed rounds' commits.
        history = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT {3 * args.repeats}").orderBy("version").collect()
        chose = ["delta-rs" if (h["engineInfo"] or "").startswith("delta-rs") else "Spark" for h in history[2::3]]
        print(f"  {size:>12,} {layout:<9} {mib:6.0f} {fmt(times['spark'])} {fmt(times['delta-rs'])} "
              f"{fmt(times['default'])}  {', '.join(sorted(set(chose)))}")
        print(f"  {'':>12} {'':<9} {'':>6} delta-rs / Spark {ratio(times['delta-rs'], times['spark'])}, "
              f"default / Spark {ratio(times['default'], times['spark'])}")
        shutil.rmtree(root, ignore_errors=True)

    for size in sizes:
        for layout in ("ranges", "scattered"):
            one(size, layout)


# --- table features --------------------------------------------------------------------------


def bench_features(args, lake: Lake) -> None:
    from ticdc_delta.apply.base.session import SqlSession
    from ticdc_delta.apply.changes.collapse import NetChange
    from ticdc_delta.apply.changes.merge_source import SourceRows
    from ticdc_delta.apply.places.locator import PathLocator
    from ticdc_delta.apply.tables.features import COMPATIBLE, FULL
    from ticdc_delta.apply.tables.points import AppliedPoint
    from ticdc_delta.apply.writers.delta_writer import DeltaWriter, Evolution
    from ticdc_delta.schema_cache.events import TableName
    from ticdc_delta.schema_cache.simple.table_schema import parse_table_schema

    spark = lake.spark
    files = args.features_files
    section(f"MERGE into tables by target.table_features ({files} data files per table, keys spread over all)")
    codec = parse_table_schema(streams.SCHEMA)
    table = TableName(*streams.TABLE)
    sql = SqlSession(spark)
    # contender -> (the job's setting, deletion vectors added by hand or not)
    kinds = {"compatible": (COMPATIBLE, False), "full": (FULL, False), "compatible + deletion vectors": (COMPATIBLE, True)}
    sizes = {"1M": 1_000_000, "100k": 100_000}
    writers: dict[tuple[str, str], tuple[DeltaWriter, str]] = {}
    for kind, (setting, dv) in kinds.items():
        for label, size in sizes.items():
            root = lake.path("features")
            writer = DeltaWriter(sql, PathLocator(root), table_features=setting)
            writer.create(table, codec.schema, None, replace=False)
            path = f"{root}/bench/events"
            if dv:
                spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
            spark.range(size).selectExpr(
                "id", "concat('name-', id) AS name", "CAST(id % 1000 AS DECIMAL(12,2)) AS amount",
                "CAST(id % 1000 AS INT) AS qty", "TIMESTAMP_NTZ'2026-01-01 00:00:00' AS at",
                "TIMESTAMP'2026-01-01 00:00:00' AS ts", "'' AS note",
            ).repartition(files).write.format("delta").mode("append").save(path)
            writers[kind, label] = writer, path
    batch_ts = [1 << 50]

    def merge(kind: str, label: str, keys: int) -> Callable[[], None]:
        writer, _ = writers[kind, label]
        size = sizes[label]

        def run() -> None:
            batch_ts[0] += 1
            changes = []
            for i in range(keys):
                values = codec.row({"id": str((i * 7919) % size), "name": f"changed-{batch_ts[0]}-{i}", "amount": "1.00",
                                    "qty": "1", "at": "2026-02-01 00:00:00",
                                    "ts": {"location": "UTC", "value": "2026-02-01 00:00:00"}, "note": "n"})
                changes.append(NetChange(False, values))
            writer.merge(table, codec.schema, SourceRows.of(changes), AppliedPoint(ts=batch_ts[0]))

        return run

    def copied(kind: str, label: str) -> str:
        metrics = spark.sql(f"DESCRIBE HISTORY delta.`{writers[kind, label][1]}` LIMIT 1").collect()[0]["operationMetrics"]
        return f"{int(metrics.get('numTargetRowsCopied', 0)):,} rows copied, {metrics.get('numTargetFilesAdded')} files written"

    results = {}
    for keys, label in ((10_000, "1M"), (100, "1M"), (10_000, "100k")):
        print(f"  ({load()})")
        times = interleaved({kind: merge(kind, label, keys) for kind in kinds}, args.repeats)
        for kind in kinds:
            print(f"  {keys:>6,} keys into {label:>4} rows, {kind:<30} {fmt(times[kind])}   last: {copied(kind, label)}")
        row(f"{keys:,} keys into {label} rows: compatible vs full", times["compatible"], times["full"], "-")
        row(f"{keys:,} keys into {label} rows: compatible vs deletion vectors alone", times["compatible"],
            times["compatible + deletion vectors"], "-")
        results[keys, label] = times
    for kind in kinds:
        row(f"{kind}: 10,000 keys into 1M vs 100k rows", results[10_000, "1M"][kind], results[10_000, "100k"][kind], "-")

    def scan(kind: str) -> Callable[[], None]:
        return lambda: spark.read.format("delta").load(writers[kind, "1M"][1]).selectExpr("count(*)", "sum(qty)").collect()

    times = interleaved({kind: scan(kind) for kind in kinds}, args.repeats)
    for kind in kinds:
        print(f"  full scan of the 1M-row table after the MERGEs, {kind:<30} {fmt(times[kind])}")
    row("full scan: compatible vs full", times["compatible"], times["full"], "-")

    # RENAME COLUMN note <-> remark, back and forth: in place with column mapping, a rewrite without.
    columns = codec.schema.column_names()
    names = ["note", "remark"]

    def rename(kind: str) -> Callable[[], None]:
        writer, _ = writers[kind, "1M"]

        def run() -> None:
            old = writer.columns(table)[-1][0]
            new = names[1 - names.index(old)]
            target = dataclasses.replace(
                codec.schema,
                columns=tuple(dataclasses.replace(c, name=new) if c.name == "note" else c for c in codec.schema.columns),
            )
            assert target.column_names()[:-1] == columns[:-1]
            batch_ts[0] += 1
            writer.evolve(table, target, AppliedPoint(ts=batch_ts[0]), Evolution(statement=f"ALTER TABLE t RENAME COLUMN {old} TO {new}"))

        return run

    print(f"  ({load()})")
    times = interleaved({kind: rename(kind) for kind in ("compatible", "full")}, args.repeats)
    for kind in ("compatible", "full"):
        print(f"  RENAME COLUMN on the 1M-row table, {kind:<30} {fmt(times[kind])}")
    row("RENAME COLUMN: compatible (rewrite) vs full (in place)", times["compatible"], times["full"], "-")


# --- memory ----------------------------------------------------------------------------------


def peak_rss_of_job(
    lake: Lake, topic: str, work: Path, spark_conf: dict[str, str]
) -> tuple[float, float, float, float]:
    """(peak MiB of the job's process tree, of its Python process, of its JVM, seconds) for
    `ticdc-delta run` on `topic` with default settings (plus `spark_conf`), sampled every 0.2 s
    from /proc."""
    config = work / f"{topic}.toml"
    extra = "".join(f'"{k}" = "{v}"\n' for k, v in spark_conf.items())
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{lake.broker.bootstrap_servers}"\ntopics = ["{topic}"]\ngroup_id = "mem-{topic}"\n'
        f'[target]\npath = "{work / topic}"\n'
        + (f"[spark.conf]\n{extra}" if extra else "")
    )
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "ticdc_delta.jobs.cli", "--log-level", "WARNING", "run", "--config", str(config), "--until-idle"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    peak = python = jvm = 0
    while process.poll() is None:
        mine = rss_kib(process.pid)
        children = sum(rss_kib(c) for c in descendants(process.pid))
        peak, python, jvm = max(peak, mine + children), max(python, mine), max(jvm, children)
        time.sleep(0.2)
    if process.returncode != 0:
        raise RuntimeError(f"the job on {topic} exited with {process.returncode}")
    return peak / 1024, python / 1024, jvm / 1024, time.perf_counter() - started


def bench_memory(args, lake: Lake) -> None:
    section("peak RSS of the job (Python + JVM), default settings, one process per run")
    small, big = args.memory_events // 10, args.memory_events
    # The 1M-event stream once over the same keys (the stream's length alone) and once over ten times
    # the keys (a ten times larger table as well).
    runs = {
        f"{small:,} events over {args.keys:,} keys": streams.build(small, args.keys, seed=4),
        f"{big:,} events over {args.keys:,} keys": streams.build(big, args.keys, seed=6),
        f"{big:,} events over {args.keys * 10:,} keys": streams.build(big, args.keys * 10, seed=5),
        f"{big:,} events over {args.keys * 10:,} keys, partition 0 lagging all": streams.build(
            big, args.keys * 10, seed=5, lagging_partition=0
        ),
    }
    peaks = {}
    with tempfile.TemporaryDirectory(dir=lake.work) as scratch:
        for i, (label, stream) in enumerate(runs.items()):
            topic = f"mem{i}"
            lake.publish(topic, stream)
            del stream
            peaks[label], python, jvm, seconds = peak_rss_of_job(lake, topic, Path(scratch), args.spark_conf)
            print(f"  {label:<58} peak {peaks[label]:7,.0f} MiB (Python {python:,.0f}, JVM {jvm:,.0f}) "
                  f"in {seconds:5.1f}s", flush=True)
    small_run, same_keys, more_keys, lagging = peaks.values()
    print(f"  {'1M vs 100k events, same keys':<58} {same_keys / small_run:>8.2f}x   target <= 1.2x")
    print(f"  {'1M events over 10x the keys vs 100k events':<58} {more_keys / small_run:>8.2f}x   target <= 1.2x")
    print(f"  {'lagging partition vs no lag':<58} {lagging / more_keys:>8.2f}x   target <= 1.2x")


def bench_engines(args, lake: Lake) -> None:
    from ticdc_delta.jobs.session import get_spark, kafka_source_package

    events = args.engine_events
    section(f"engines: {events:,} row events over {args.keys * 10:,} keys, {ENGINE_PARTITIONS} partitions, one batch a run")
    lake.publish("engines", streams.build(events, args.keys * 10, seed=8, partitions=ENGINE_PARTITIONS))
    lake.publish("engines-warmup", streams.build(5_000, 1_000, seed=9, partitions=ENGINE_PARTITIONS))
    lake.spark.stop()  # one session per configuration: a master is fixed when its session starts
    runs = {"spark engine, local[1]": ("local[1]", "spark"), "spark engine, local[2]": ("local[2]", "spark"),
            "driver engine, local[2]": ("local[2]", "driver")}
    times: dict[str, list[float]] = {label: [] for label in runs}
    phases: dict[str, dict] = {}
    for _ in range(args.engine_repeats):
        for label, (master, engine) in runs.items():
            lake.spark = get_spark(master, packages=[kafka_source_package()])
            lake.run_job("engines-warmup", engine=engine)
            began = time.perf_counter()
            result = lake.run_job("engines", engine=engine)
            times[label].append(time.perf_counter() - began)
            phases[label] = result.phases
            lake.spark.stop()
            print(f"  {label:<30} {times[label][-1]:7.1f}s  {events / times[label][-1]:>9,.0f} events/s; "
                  f"{result.rows_applied:,} applied; {load()}", flush=True)
    for label in runs:
        print(f"  {label:<30} {fmt(times[label])}; split (last run): "
              + ", ".join(f"{k} {v:.1f}s" for k, v in phases[label].items()))
    one, two, driver = times.values()
    print(f"  {'spark engine: local[2] vs local[1] throughput':<58} {min(one) / min(two):>8.2f}x   target >= 1.6x")
    print(f"  {'spark engine vs driver engine (local[2]) time':<58} {ratio(two, driver):>8}")
    lake.spark = get_spark("local[*]", packages=[kafka_source_package()])


def bench_snapshot(args, lake: Lake) -> None:
    """`ticdc-delta snapshot` of a Dumpling export vs Spark's own CSV reader appending the same rows."""
    from testbed.dumpling import write_export
    from tests.workloads import item, items_feed
    from ticdc_delta.jobs import config as config_module
    from ticdc_delta.jobs.snapshot import SnapshotLoader

    rows = args.snapshot_rows
    section(f"snapshot: a Dumpling export of {rows:,} rows (files of 50,000), loaded into a new table")
    feed = items_feed()
    with feed.transaction() as txn:
        for i in range(rows):
            txn.insert("shop", "items", item(i, price=f"{i % 1000}.25"))
    exports = {kind: lake.work / f"export-{kind}" for kind in ("csv", "sql")}
    for kind, folder in exports.items():
        write_export(feed, folder, fmt=kind, rows_per_file=50_000)
    spark = lake.spark

    def load(kind: str) -> Callable[[], None]:
        def run() -> None:
            config = config_module.from_mapping({"kafka": {"bootstrap_servers": lake.broker.bootstrap_servers,
                                                           "topics": ["unused"], "group_id": "snapshot"},
                                                 "target": {"path": lake.path(f"snapshot-{kind}")}})
            SnapshotLoader(config, spark, str(exports[kind])).load()
        return run

    def spark_csv() -> None:
        files = sorted(str(f) for f in exports["csv"].glob("shop.items.*.csv"))
        frame = spark.read.csv(files, header=True, nullValue="\\N", escape="\\").selectExpr(
            "CAST(id AS INT) id", "name", "CAST(price AS DECIMAL(10,2)) price", "CAST(updated AS TIMESTAMP) updated")
        frame.write.format("delta").save(lake.path("spark-csv"))

    times = interleaved({"csv": load("csv"), "sql": load("sql"), "spark-csv": spark_csv}, args.repeats)
    print(f"  snapshot of the CSV export         {fmt(times['csv'])}   {rows / min(times['csv']):>9,.0f} rows/s")
    print(f"  snapshot of the SQL export         {fmt(times['sql'])}   {rows / min(times['sql']):>9,.0f} rows/s")
    print(f"  Spark's CSV reader + Delta append  {fmt(times['spark-csv'])}   {rows / min(times['spark-csv']):>9,.0f} rows/s")
    row("snapshot (CSV) vs Spark's CSV reader and a plain append", times["csv"], times["spark-csv"], "<= 3x")


def bench_history(args, lake: Lake) -> None:
    """What a history table adds to a batch: its MERGE of every state, beside the table's of net changes."""
    from ticdc_delta.apply.applier import Applier
    from ticdc_delta.apply.base.session import SqlSession
    from ticdc_delta.apply.changes.history import HistoryChoice
    from ticdc_delta.apply.own_tables.tombstones import Tombstones
    from ticdc_delta.apply.places.locator import PathLocator
    from ticdc_delta.apply.writers.delta_writer import DeltaWriter
    from ticdc_delta.schema_cache.events import Op, Position, RowChange, TableName
    from ticdc_delta.schema_cache.simple.table_schema import parse_table_schema

    size, keys = 100_000, 5_000
    section(f"history: a batch of {2 * keys:,} changes ({keys:,} keys, two commitTs each) into a {size:,}-row table")
    codec = parse_table_schema(streams.SCHEMA)
    table = TableName(*streams.TABLE)
    batch_ts = [1 << 50]

    def values(key: int, name: str) -> tuple:
        return codec.row({"id": str(key), "name": name, "amount": "1.00", "qty": "1", "at": "2026-02-01 00:00:00",
                          "ts": {"location": "UTC", "value": "2026-02-01 00:00:00"}, "note": "n"})

    appliers = {}
    for label, history in (("without", HistoryChoice()), ("with", HistoryChoice((f"{table.database}.*",)))):
        sql, locator = SqlSession(lake.spark), PathLocator(lake.path(f"history-{label}"))
        appliers[label] = Applier(DeltaWriter(sql, locator), Tombstones(sql, locator), history=history)
        rows = [RowChange(table, batch_ts[0], Op.INSERT, None, values(k, "initial"), codec.schema, Position("t", 0, k))
                for k in range(size)]
        appliers[label].apply(rows, {"t": batch_ts[0]})

    def apply_batch(label: str) -> None:
        start = batch_ts[0] = batch_ts[0] + 2
        rows = []
        for i in range(keys):
            key = (i * 7919) % size
            for ts in (start - 1, start):
                image = values(key, f"changed-{ts}")
                rows.append(RowChange(table, ts, Op.UPDATE, image, image, codec.schema, Position("t", 0, len(rows))))
        appliers[label].apply(rows, {"t": start})

    times = interleaved({"without": lambda: apply_batch("without"), "with": lambda: apply_batch("with")}, args.repeats)
    print(f"  without history  {fmt(times['without'])}")
    print(f"  with history     {fmt(times['with'])}   (+{min(times['with']) - min(times['without']):.2f} s a batch)")
    row("a batch with a history table vs without", times["with"], times["without"], "<= 2x (one more MERGE)")


# --- main ------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--handwritten-events", type=int, default=200_000)
    parser.add_argument("--memory-events", type=int, default=1_000_000)
    parser.add_argument("--engine-events", type=int, default=1_000_000, help="row events of the engines section")
    parser.add_argument("--engine-repeats", type=int, default=1, help="runs per configuration in the engines section")
    parser.add_argument("--snapshot-rows", type=int, default=200_000, help="rows of the snapshot section's export")
    parser.add_argument("--txn-merges", type=int, default=10, help="MERGEs timed for the per-transaction row")
    parser.add_argument(
        "--spark-conf", action="append", default=[], metavar="KEY=VALUE",
        help="a Spark setting for the memory section's job runs (repeatable), e.g. spark.driver.memory=1g",
    )
    parser.add_argument("--features-files", type=int, default=8, help="data files per table in the features section")
    parser.add_argument("--size-rows", default="10000,1000000,10000000",
                        help="table-size: the table sizes a 100-row change is merged into by each writer")
    parser.add_argument("--size-files", type=int, default=200, help="table-size: data files per table of those")
    merge_anatomy.add_arguments(parser)
    tables.add_arguments(parser)
    cluster.add_arguments(parser)
    yarn.add_arguments(parser)
    freshness.add_arguments(parser)
    short_runs.add_arguments(parser)
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated: {', '.join(SECTIONS)}")
    args = parser.parse_args()
    args.spark_conf = dict(item.split("=", 1) for item in args.spark_conf)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(only) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown section {unknown[0]!r}; allowed: {', '.join(SECTIONS)}")
    if "tables" in only and (problem := tables.argument_error(args)):
        parser.error(problem)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("py4j").setLevel(logging.ERROR)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, {load()}; repeats {args.repeats}")
    if "decode" in only:
        bench_decode(args)
    spark_sections = [s for s in only if s != "decode"]
    if not spark_sections:
        return 0
    from testbed.spark_packages import use_resolvable_kafka_source
    from ticdc_delta.jobs.session import kafka_source_package

    use_resolvable_kafka_source()
    with tempfile.TemporaryDirectory(prefix="ticdc-bench-") as work:
        lake = Lake(Path(work), packages=(kafka_source_package(),) if {"handwritten", "engines", "tables", "freshness", "cluster", "yarn"} & set(only) else ())
        try:
            for name in spark_sections:
                {"e2e": bench_e2e, "handwritten": bench_handwritten, "table-size": bench_table_size, "features": bench_features,
                 "merge-anatomy": merge_anatomy.bench_merge_anatomy,
                 "memory": bench_memory, "engines": bench_engines, "snapshot": bench_snapshot,
                 "history": bench_history, "tables": tables.bench_tables, "cluster": cluster.bench_cluster, "yarn": yarn.bench_yarn,
                 "freshness": freshness.bench_freshness, "short-runs": short_runs.bench_short_runs}[name](args, lake)
        finally:
            lake.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
