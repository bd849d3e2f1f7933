"""The fault script's growth section: the checkpoint table after many batches, with its retention and compaction.

    .venv/bin/python benchmarks/faults.py --only growth [--growth-batches N] [--growth-keep K] [--growth-cleanup-every E]
        [--growth-workdir DIR | --growth-resume DIR/ticdc-growth-...] [--target s3 [--s3-fast-listing off]]

Saves `--growth-batches` checkpoints through the product's own `CheckpointStore` on a local Spark + Delta
session, as the job does after each batch: save, then clean up when the batch number says so
(`checkpoint.keep`, `checkpoint.cleanup_every`; the product's defaults unless given). The batches are
spread round-robin over `--growth-consumers` consumer groups sharing the table, each checkpoint with
offsets of 6 partitions and a decoder state of `--growth-state-bytes` random bytes (a schema cache of a
few tables; random, so compression does not flatter it).

Prints along the way (every `--growth-sample-every` saves) and at the end: rows in the table (in all and
per consumer), data files in the current snapshot, files and bytes on disk under the table's folder,
the `_delta_log` folder's files and bytes, seconds per save (mean, first and last tenth) and the mean
cost of a cleanup (per step, and spread over the saves). Fails (returns False) when a consumer holds more
rows than keep + cleanup_every, or the snapshot more data files than cleanup_every x consumers + 1 (one
file per save since the last cleanup, which compacts every consumer's), or, with
`--growth-file-retention-seconds 0`, a data file on disk is not in the snapshot (a stray file no cleanup
removes), at any sample or at the end.

10,000 saves take longer than a working session on a 2-core machine (each save lists the table's
`_delta_log` on a local file system, which grows by four files a save for a day or two: see docs/performance.md).
With `--target s3` the table is on a local S3-compatible server (moto, reached through s3a), with Delta's
fast listing of `_delta_log` (`spark.hadoop.delta.enableFastS3AListFrom`) on unless `--s3-fast-listing off`.
A local run stopped part-way leaves its table in `--growth-workdir`; `--growth-resume` continues that table
from each consumer's newest checkpoint up to `--growth-batches` saves in all, keeping the table (the
figures then count the saves of the whole table, the timings those of this run).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

PARTITIONS = 6


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ticdc_delta.jobs.config import CheckpointConfig

    defaults = CheckpointConfig()
    group = parser.add_argument_group("growth")
    group.add_argument("--growth-batches", type=int, default=10_000, help="checkpoints saved in all (default 10,000)")
    group.add_argument("--growth-consumers", type=int, default=2, help="consumer groups sharing the table (default 2)")
    group.add_argument("--growth-keep", type=int, default=defaults.keep, help="checkpoint.keep (default: the product's)")
    group.add_argument(
        "--growth-cleanup-every", type=int, default=defaults.cleanup_every, help="checkpoint.cleanup_every (default: the product's)"
    )
    group.add_argument("--growth-state-bytes", type=int, default=4096, help="decoder state per checkpoint (default 4096)")
    group.add_argument(
        "--growth-file-retention-seconds",
        type=int,
        default=None,
        help="delta.deletedFileRetentionDuration of the table (default: the product's)",
    )
    group.add_argument("--growth-sample-every", type=int, default=500, help="saves between two looks at the table")
    group.add_argument("--growth-workdir", type=Path, default=None, help="where the table goes (default: a temp dir)")
    group.add_argument(
        "--growth-resume", type=Path, default=None, help="a stopped run's folder (ticdc-growth-...): continue its table"
    )


# --- what is measured -----------------------------------------------------------------------


@dataclass
class Timings:
    saves: list[float] = field(default_factory=list)
    cleanups: list[float] = field(default_factory=list)
    steps: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))


@dataclass(frozen=True)
class Look:
    """The table at one moment."""

    rows: dict[str, int]
    live_files: int  # data files of the current snapshot
    data_files: int  # data files (parquet) on disk, used or not
    data_bytes: int
    local_checksums: int  # Hadoop's hidden `.<file>.crc` beside each file: local file systems only
    log_files: int  # everything in _delta_log (local checksums included)
    log_bytes: int
    log_kinds: dict[str, int]
    total_files: int  # everything under the table's folder
    total_bytes: int


def _log_kind(name: str) -> str:
    if name.startswith(".") and name.endswith(".crc"):
        return "local checksum"
    if ".checkpoint" in name:
        return "checkpoint"
    if name.endswith(".json"):
        return "commit"
    if name.endswith(".crc"):
        return "version checksum"
    return "other"


def local_files(folder: Path) -> Callable[[], dict[str, int]]:
    """Every file under `folder` (path relative to it -> bytes)."""
    return lambda: {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def s3_files(server, bucket: str, folder: str) -> Callable[[], dict[str, int]]:
    """Every object under `folder` of `bucket` on `server` (a testbed.s3_server.S3Server): key after the
    folder -> bytes; s3a's empty "folder/" markers are not files."""
    prefix = folder.rstrip("/") + "/"
    return lambda: {key.removeprefix(prefix): size for key, size in server.sizes(bucket, prefix).items()
                    if not key.endswith("/")}


def look(sql, name: str, files: Callable[[], dict[str, int]]) -> Look:
    rows = {r["consumer"]: r["n"] for r in sql.sql(f"SELECT consumer, count(*) AS n FROM {name} GROUP BY consumer").collect()}
    live = sql.sql(f"DESCRIBE DETAIL {name}").collect()[0]["numFiles"]
    everything = files()
    data = {path: size for path, size in everything.items() if "/" not in path and path.endswith(".parquet")}
    log = {path: size for path, size in everything.items() if path.startswith("_delta_log/")}
    kinds: dict[str, int] = defaultdict(int)
    for path in log:
        kinds[_log_kind(path.rsplit("/", 1)[-1])] += 1
    return Look(
        rows=dict(sorted(rows.items())),
        live_files=live,
        data_files=len(data),
        data_bytes=sum(data.values()),
        local_checksums=sum(1 for path in everything if "/" not in path and path.startswith(".") and path.endswith(".crc")),
        log_files=len(log),
        log_bytes=sum(log.values()),
        log_kinds=dict(sorted(kinds.items())),
        total_files=len(everything),
        total_bytes=sum(everything.values()),
    )


def describe(look_: Look) -> str:
    per_consumer = ", ".join(f"{c} {n:,}" for c, n in look_.rows.items())
    return (
        f"rows {sum(look_.rows.values()):,} ({per_consumer}); data files: {look_.live_files:,} in the snapshot, "
        f"{look_.data_files:,} on disk ({look_.data_bytes / 1024:,.0f} KiB; and {look_.local_checksums:,} local checksums); "
        f"_delta_log {look_.log_files:,} files, {look_.log_bytes / 1024:,.0f} KiB ("
        + ", ".join(f"{kind} {n:,}" for kind, n in look_.log_kinds.items())
        + f"); in all {look_.total_files:,} files, {look_.total_bytes / 1024:,.0f} KiB"
    )


def bounded(look_: Look, retention, consumers: int) -> list[str]:
    """What exceeds the bounds the retention promises (empty when nothing does)."""
    keep, every = retention.keep, retention.cleanup_every
    problems = [f"{c}: {n:,} rows > keep + cleanup_every = {keep + every:,}" for c, n in look_.rows.items() if n > keep + every]
    if look_.live_files > every * consumers + 1:
        problems.append(f"{look_.live_files:,} data files in the snapshot > cleanup_every x consumers + 1")
    # Files leave the snapshot only in cleanups, each ending with a VACUUM when nothing need wait:
    # then any file on disk beyond the snapshot's was never in it (a stray the cleanup cannot find).
    if retention.file_seconds == 0 and look_.data_files != look_.live_files:
        problems.append(f"{look_.data_files:,} data files on disk, {look_.live_files:,} in the snapshot")
    return problems


# --- the run --------------------------------------------------------------------------------


def _checkpoint(consumer: str, batch: int, state: bytes):
    from ticdc_delta.apply.own_tables.checkpoint import Checkpoint
    from ticdc_delta.schema_cache.events import TopicPartition

    offsets = {TopicPartition("growth", p): batch * 100 + p for p in range(PARTITIONS)}
    watermarks = {tp: batch << 18 for tp in offsets}
    return Checkpoint(consumer, batch, offsets, watermarks, state)


def _save_all(args, store, retention, sql, name: str, files, consumers: list[str]) -> tuple[Timings, list[str]]:
    timings, problems = Timings(), []
    # Each consumer's batches are numbered 1, 2, ... and saved round-robin: a resumed table's newest
    # checkpoints say how many were saved.
    batches = dict.fromkeys(consumers, 0)
    if args.growth_resume is not None:
        for consumer in consumers:
            newest = store.load(consumer)
            batches[consumer] = newest.batch if newest is not None else 0
    done = sum(batches.values())
    if done:
        print(f"resuming after {done:,} saves: {batches}", flush=True)
    started = time.perf_counter()
    for n in range(done + 1, args.growth_batches + 1):
        consumer = consumers[(n - 1) % len(consumers)]
        batches[consumer] += 1
        batch = batches[consumer]
        began = time.perf_counter()
        # A fresh random state per save: nothing compresses, within a row or across rows.
        store.save(_checkpoint(consumer, batch, os.urandom(args.growth_state_bytes)))
        timings.saves.append(time.perf_counter() - began)
        if store.cleanup_due(batch):
            began = time.perf_counter()
            report = store.clean_up(consumer, batch)
            timings.cleanups.append(time.perf_counter() - began)
            for step, seconds in (report.seconds if report else {}).items():
                timings.steps[step].append(seconds)
        if n % args.growth_sample_every == 0:
            now = look(sql, name, files)
            problems += bounded(now, retention, len(consumers))
            print(f"  ... {n:,} saves, {time.perf_counter() - started:,.0f} s: {describe(now)}", flush=True)
    return timings, problems


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _report_times(timings: Timings, saves: int) -> None:
    if not saves:
        return
    tenth = max(1, len(timings.saves) // 10)
    print(
        f"seconds per save: mean {_mean(timings.saves):.3f} (first tenth {_mean(timings.saves[:tenth]):.3f}, "
        f"last tenth {_mean(timings.saves[-tenth:]):.3f}, median {statistics.median(timings.saves):.3f})",
        flush=True,
    )
    steps = ", ".join(f"{step} {_mean(values):.2f}" for step, values in timings.steps.items())
    vacuums = sum(1 for v in timings.steps.get("vacuum", []) if v > 0.05)
    print(
        f"cleanups: {len(timings.cleanups):,}, mean {_mean(timings.cleanups):.2f} s ({steps}; VACUUM ran in {vacuums}); "
        f"spread over the saves {sum(timings.cleanups) / max(1, saves):.3f} s per save",
        flush=True,
    )
    total = sum(timings.saves) + sum(timings.cleanups)
    print(f"total {total:,.0f} s for {saves:,} saves: {total / max(1, saves):.3f} s per save, cleanups included", flush=True)


def run(args: argparse.Namespace) -> bool:
    from ticdc_delta.apply.base.session import SqlSession
    from ticdc_delta.apply.own_tables.checkpoint import CheckpointStore, Retention
    from ticdc_delta.apply.places.locator import PathLocator
    from ticdc_delta.jobs.session import get_spark

    consumers = [f"growth-{i}" for i in range(1, args.growth_consumers + 1)]
    chosen = {} if args.growth_file_retention_seconds is None else {"file_seconds": args.growth_file_retention_seconds}
    retention = Retention(args.growth_keep, args.growth_cleanup_every, **chosen)
    print(
        f"{args.growth_batches:,} checkpoints over {len(consumers)} consumers, {args.growth_state_bytes:,}-byte decoder "
        f"state; keep {retention.keep}, cleanup every {retention.cleanup_every} batches, files no longer used deleted "
        f"after {retention.file_seconds} s",
        flush=True,
    )
    with contextlib.ExitStack() as stack:
        if args.target == "s3":
            if args.growth_resume is not None:
                raise SystemExit("--growth-resume: a local folder's table only (the S3 server keeps objects in memory)")
            from testbed.s3_server import S3Server, s3_spark_conf
            from ticdc_delta.jobs.session import hadoop_aws_package

            server = stack.enter_context(S3Server())
            server.create_bucket("growth")  # (a bucket per section: Hadoop caches a bucket's file system per JVM)
            spark = get_spark("local[*]", s3_spark_conf(server, args.s3_fast_listing == "on"), [hadoop_aws_package()])
            workdir = f"s3a://growth/ticdc-growth-{uuid.uuid4().hex[:8]}"
            files = s3_files(server, "growth", workdir.removeprefix("s3a://growth/") + "/_ticdc/checkpoints")
            print(f"on S3 ({server.endpoint}), Delta's fast listing {args.s3_fast_listing}", flush=True)
        else:
            spark = get_spark("local[*]")
            if args.growth_resume is not None:
                if not (args.growth_resume / "_ticdc" / "checkpoints" / "_delta_log").is_dir():
                    raise SystemExit(f"--growth-resume: no checkpoint table in {args.growth_resume}")
                workdir = str(args.growth_resume)
            else:
                workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="ticdc-growth-", dir=args.growth_workdir))
            files = local_files(Path(workdir) / "_ticdc" / "checkpoints")
        sql = SqlSession(spark)
        print(f"the table's folder: {workdir}", flush=True)
        locator = PathLocator(workdir)
        store = CheckpointStore(sql, locator, retention)
        name = locator.internal_sql_name("checkpoints")
        timings, problems = _save_all(args, store, retention, sql, name, files, consumers)
        final = look(sql, name, files)
        problems += bounded(final, retention, len(consumers))
        newest = {c: store.load(c).batch for c in consumers}
    print(f"at the end: {describe(final)}", flush=True)
    print(f"newest checkpoint per consumer: {newest}", flush=True)
    _report_times(timings, len(timings.saves))
    for problem in dict.fromkeys(problems):
        print(f"  unbounded: {problem}", flush=True)
    print(f"growth: {'FAILED' if problems else 'ok'}", flush=True)
    return not problems
