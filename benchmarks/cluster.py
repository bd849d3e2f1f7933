"""The cluster section of the benchmark (`bench.py --only cluster`): the Spark engine submitted to a standalone
cluster on this machine against `local[2]`, the same stream, and a worker killed in the middle of a batch.

The cluster (`testbed.spark_cluster`): a master and `--cluster-workers` workers of one core each, every one a JVM
of its own started from pyspark's `spark-class`; the job is `spark-submit --master spark://...` in client deploy
mode (the driver in the submitting process, as `spark-submit` runs it from an edge node or a scheduler), its
primary resource the product's `jobs/spark_submit.py`, the Spark engine with `run.driver_decode_max_messages =
0` (every message decoded on the executors). `local[2]` is the same command with `--master local[2]`: two task
slots in the driver's JVM, the cores the cluster's two workers have. Per run: the job's wall time (every fixed
cost: spark-submit's JVM, executors' start, the packages) and its batch (the metrics record's `batch_seconds`),
alternating the masters `--repeats` times; the tables compared with the stream's model after every run.

Then, on the cluster: the same stream again, worker 0 and everything it started (its executor, their Python
workers) killed `--cluster-kill-after` seconds after the batch began, as a host fails; the job must finish
(Spark runs the lost tasks again on the other worker) and the tables equal the model. Printed: its exit
status, the tasks that failed with their executor and how many ran again (from the Spark event log). Last, the
driver killed the same way (spark-submit's JVM and the job's Python process): a second submission must
resume and the tables equal the model.
"""

from __future__ import annotations

import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from benchmarks import streams
from benchmarks.measure import section
from benchmarks.tables import check_tables, job_run, merged, one_row_each
from testbed.spark_cluster import submit_command, submit_environment, task_ends

ROOT = Path(__file__).resolve().parent.parent
_PARTITIONS = 3


def add_arguments(parser) -> None:
    parser.add_argument("--cluster-events", type=int, default=60_000, help="cluster: row events of each run")
    parser.add_argument("--cluster-tables", type=int, default=20, help="cluster: tables the row events are spread over")
    parser.add_argument("--cluster-workers", type=int, default=2, help="cluster: workers (one core each)")
    parser.add_argument("--cluster-kill-after", type=float, default=10.0,
                        help="cluster: seconds into the batch that a worker is killed (0: no kill run)")


def bench_cluster(args, lake) -> None:
    import pyspark

    from testbed.spark_cluster import StandaloneCluster
    from ticdc_delta.jobs.paths import cache_dir
    from ticdc_delta.jobs.session import share_ivy_cache

    count, tables = args.cluster_events, args.cluster_tables
    section(f"cluster: the Spark engine (executors decode every message), {count:,} row events over {tables} tables, "
            f"{_PARTITIONS} partitions, spark-submit in client mode: {args.cluster_workers} one-core workers vs local[2]")
    ivy = cache_dir() / "ivy" / f"spark-submit-{pyspark.__version__}"
    share_ivy_cache(ivy)
    with tempfile.TemporaryDirectory(dir=lake.work) as scratch:
        work = Path(scratch)
        with StandaloneCluster(work / "cluster", workers=args.cluster_workers) as cluster:
            masters = {"local[2]": "local[2]", "cluster": cluster.url}
            runs: dict[str, list[dict]] = {name: [] for name in masters}
            for repeat in range(args.repeats):
                for name, master in masters.items():
                    run, ends = _measured(lake, work, f"{name.strip('[]2')}-{repeat}", master, ivy, count, tables, repeat)
                    runs[name].append(run)
                    decoders = Counter(e["executor"] for e in ends if e["description"].startswith("ticdc-delta: decode"))
                    print(f"  {name:<8} job {run['wall']:6.1f}s, batch {run['batch']:6.1f}s "
                          f"({count / run['batch']:7,.0f} row events/s); decode tasks by executor: "
                          f"{dict(sorted(decoders.items()))}; tables equal upstream", flush=True)
            for what in ("wall", "batch"):
                local, remote = (statistics.median(r[what] for r in runs[n]) for n in masters)
                print(f"  median {what}: local[2] {local:6.1f}s, cluster {remote:6.1f}s, cluster / local[2] {remote / local:4.2f}x")
            if args.cluster_kill_after > 0:
                _kill_run(lake, work, cluster, ivy, count, tables, args.cluster_kill_after)


def _measured(lake, work: Path, label: str, master: str, ivy: Path, count: int, tables: int, seed: int,
              during=None, kills_driver: bool = False) -> tuple[dict, list[dict]]:
    """A run creating the tables, then the measured run of `count` row events (`during(events folder)` beside
    it, in a thread; `kills_driver`: it kills the job, and a second submission follows), the tables checked:
    the last run's figures and its event log's task ends."""
    topic, target = f"cluster-{label}", work / f"lake-{label}"
    first = one_row_each(tables)
    stream = streams.build(count, max(count // 10, tables), tables=tables, partitions=_PARTITIONS, seed=12 + seed,
                           first_commit_ts=streams.FIRST_COMMIT_TS << 1)
    lake.publish(topic, first)
    settings = {"driver_decode_max_messages": 0}

    def run(events: Path) -> dict:
        events.mkdir()
        # (the checkout's primary resource; the driver's and executors' Python this virtualenv's, whose
        # editable install makes the checkout importable there)
        launcher = submit_command(master, str(ROOT / "jobs" / "spark_submit.py"), python=sys.executable, events=events,
                                  ivy=ivy, conf={"spark.executor.memory": "1g", "spark.driver.memory": "2g"})
        return job_run(lake, topic, topic, target, "spark", 8, work, settings=settings, launcher=launcher,
                       env=submit_environment(sys.executable))

    run(work / f"events-{label}-create")
    lake.publish(topic, stream)
    events = work / f"events-{label}"
    watcher = threading.Thread(target=during, args=(events,), daemon=True) if during else None
    if watcher:
        watcher.start()
    try:
        figures = run(events)
    except RuntimeError as err:
        if not kills_driver:
            raise
        print(f"    the killed job: {str(err).splitlines()[0]}", flush=True)
        events = work / f"events-{label}-again"
        figures = run(events)
    if watcher:
        watcher.join()
    check_tables(lake.spark, target, merged(first, stream))
    return figures, task_ends(events)


def _kill_run(lake, work: Path, cluster, ivy: Path, count: int, tables: int, after: float) -> None:
    killed: list[float] = []

    def kill_when_decoding(events: Path) -> None:
        if _decoding_began(events, after):
            cluster.kill_worker(0)
            killed.append(time.monotonic())

    run, ends = _measured(lake, work, "kill", cluster.url, ivy, count, tables, 99, during=kill_when_decoding)
    failed = Counter((e["executor"], e["reason"]) for e in ends if e["reason"] != "Success")
    by_executor = Counter(e["executor"] for e in ends if e["reason"] == "Success")
    print(f"  worker 0 killed {after:.0f}s into the decoding job{'' if killed else ' (never: no decoding job seen)'}: "
          f"the job exited 0 in {run['wall']:.1f}s (batch {run['batch']:.1f}s); tasks that failed "
          f"{dict(failed)}; succeeded by executor {dict(sorted(by_executor.items()))}; tables equal upstream", flush=True)
    cluster.start_worker(0)
    cluster.wait_for_workers(len(cluster.workers))

    def kill_driver_when_decoding(events: Path) -> None:
        if _decoding_began(events, after):
            for pid in _processes_with(str(work / "cluster-driver-kill.toml")):  # spark-submit's JVM and the Python driver
                os.kill(pid, signal.SIGKILL)

    run, ends = _measured(lake, work, "driver-kill", cluster.url, ivy, count, tables, 98,
                          during=kill_driver_when_decoding, kills_driver=True)
    print(f"  the driver (spark-submit's JVM and its Python) killed {after:.0f}s into the decoding job: the next "
          f"submission exited 0 in {run['wall']:.1f}s (batch {run['batch']:.1f}s); tables equal upstream", flush=True)


def _decoding_began(events: Path, after: float) -> bool:
    """True `after` seconds once the event log in `events` shows the product's decoding job started."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        logs = list(events.glob("*")) if events.exists() else []
        if logs and '"spark.job.description":"ticdc-delta: decode' in logs[0].read_text(errors="replace"):
            time.sleep(after)
            return True
        time.sleep(0.2)
    return False


def _processes_with(argument: str) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if argument.encode() in cmdline.read_bytes().split(b"\0"):
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found
