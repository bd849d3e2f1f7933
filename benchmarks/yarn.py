"""The YARN section of the benchmark (`bench.py --only yarn`): the product submitted as a cluster user submits it,
in YARN's cluster deploy mode (the driver itself in the application master's container), with nothing of it
installed on the nodes. docs/running.md's recipe, run as written there:

- the product and its Python dependencies travel as a packed environment (`--archives env.tar.gz#env`: a
  virtualenv of Python 3.12 holding the built wheel, pandas and pyarrow, Spark bringing pyspark), its Python the
  driver's and the executors' (`spark.pyspark.python=./env/bin/python`);
- the configuration file travels with `--files job.toml` and is read as `--config job.toml` in the driver's
  container; the primary resource is the wheel's `jobs/spark_submit.py`;
- Delta and Kafka's Spark source come as `--packages`.

The cluster is Hadoop's mini YARN cluster (`testbed.yarn_cluster`: a ResourceManager and two NodeManagers); the
job the Spark engine with `run.driver_decode_max_messages = 0`. Runs, the tables compared with the stream's
model after each:

1. a first submission creating the tables, then the measured one: spark-submit's wall time (every fixed
   cost: localizing the archive, the containers' start, the packages), the batch (the driver's metrics line
   in its container's log), the decode tasks by executor (Spark's event log);
2. the driver's container killed `--yarn-kill-after` seconds into the decoding job, as its node fails: YARN starts
   a second attempt of the application master (`spark.yarn.maxAppAttempts`, 2 here), which resumes from the
   checkpoint; spark-submit's exit status and the tables;
3. a configuration naming an unset environment variable: the product's exit 2 seen as YARN and spark-submit
   report it (the one line in the driver's container log, the diagnostics, spark-submit's status).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tarfile
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from benchmarks import streams
from benchmarks.cluster import _decoding_began
from benchmarks.measure import section
from benchmarks.tables import check_tables, job_config, merged, one_row_each
from testbed.spark_cluster import submit_command, submit_environment, task_ends

_PARTITIONS = 3
_APPLICATION = re.compile(r"(application_\d+_\d+)")


def add_arguments(parser) -> None:
    parser.add_argument("--yarn-events", type=int, default=60_000, help="yarn: row events of the measured run")
    parser.add_argument("--yarn-tables", type=int, default=20, help="yarn: tables the row events are spread over")
    parser.add_argument("--yarn-kill-after", type=float, default=10.0,
                        help="yarn: seconds into the decoding job that the driver's container is killed (0: no kill run)")


def bench_yarn(args, lake) -> None:
    import pyspark

    from testbed.yarn_cluster import YarnCluster
    from tests.installed import build_wheel, runtime_venv
    from ticdc_delta.jobs.paths import cache_dir
    from ticdc_delta.jobs.session import share_ivy_cache

    count, tables = args.yarn_events, args.yarn_tables
    section(f"yarn: cluster deploy mode on a mini YARN cluster (2 NodeManagers), the product in a packed environment "
            f"(--archives), its configuration by --files; the Spark engine, {count:,} row events over {tables} tables")
    ivy = cache_dir() / "ivy" / f"spark-submit-{pyspark.__version__}"
    share_ivy_cache(ivy)
    with tempfile.TemporaryDirectory(dir=lake.work) as scratch:
        work = Path(scratch)
        began = time.perf_counter()
        (work / "wheel-source").mkdir()
        wheel = build_wheel(work / "wheel-source", work / "dist")
        python = runtime_venv(wheel, work / "env")
        archive = _packed(work / "env", work / "env.tar.gz")
        spark_jars = _spark_jars(work / "spark-jars.zip")
        resource = subprocess.run([str(python), "-m", "ticdc_delta.jobs.spark_submit", "--path"], check=True,
                                  capture_output=True, text=True, cwd=work).stdout.strip()
        print(f"  wheel, environment and archive ({archive.stat().st_size / 2**20:.0f} MiB) in "
              f"{time.perf_counter() - began:.1f}s", flush=True)
        began = time.perf_counter()
        with YarnCluster(work / "yarn") as yarn:
            print(f"  the mini YARN cluster up in {time.perf_counter() - began:.1f}s", flush=True)

            def submit(label: str, config: Path, events: Path) -> tuple[int, float, str]:
                events.mkdir()
                command = submit_command(
                    "yarn", resource, python="./env/bin/python", events=events, ivy=ivy,
                    deploy=["--deploy-mode", "cluster", "--archives", f"{archive}#env", "--files", str(config)],
                    conf={"spark.yarn.archive": spark_jars.as_uri(), "spark.executor.instances": "2", "spark.executor.cores": "1", "spark.executor.memory": "1g",
                          "spark.driver.memory": "1g", "spark.yarn.maxAppAttempts": "2"})
                started = time.perf_counter()
                done = subprocess.run([*command, "run", "--config", config.name, "--until-idle"], capture_output=True,
                                      text=True, env={**submit_environment("./env/bin/python"), **yarn.client_environment()})
                wall = time.perf_counter() - started
                (work / f"{label}.submit.log").write_text(done.stdout + done.stderr)
                found = _APPLICATION.search(done.stdout + done.stderr)
                return done.returncode, wall, found[1] if found else ""

            if count > 0:
                _measured(lake, yarn, submit, work, tables, count)
            if count > 0 and args.yarn_kill_after > 0:
                _driver_killed(args, lake, yarn, submit, work, tables, count)
            _unset_variable(lake, yarn, submit, work)


def _created_then_published(lake, yarn, submit, work: Path, label: str, tables: int, count: int, seed: int):
    """A submission creating `tables` tables (one row each) in `work/lake-<label>`, then `count` row events
    published: (the configuration, the model of the tables after both)."""
    topic, target = f"yarn-{label}", work / f"lake-{label}"
    first = one_row_each(tables)
    lake.publish(topic, first)
    config = _config(lake, topic, target, work, f"{label}.toml")
    status, _, app = submit(f"{label}-create", config, work / f"events-{label}-create")
    _require(status, yarn, app, "the creating run")
    stream = streams.build(count, max(count // 10, tables), tables=tables, partitions=_PARTITIONS, seed=seed,
                           first_commit_ts=streams.FIRST_COMMIT_TS << 1)
    lake.publish(topic, stream)
    return config, target, merged(first, stream)


def _measured(lake, yarn, submit, work: Path, tables: int, count: int) -> None:
    config, target, model = _created_then_published(lake, yarn, submit, work, "measured", tables, count, 31)
    status, wall, app = submit("measured", config, work / "events-measured")
    _require(status, yarn, app, "the measured run")
    check_tables(lake.spark, target, model)
    batch = _batch_seconds(yarn, app)
    decoders = _decoders(work / "events-measured")
    print(f"  cluster deploy mode: spark-submit exited 0 in {wall:.1f}s, batch {batch:.1f}s "
          f"({count / batch:,.0f} row events/s); decode tasks by executor {decoders}; the driver in "
          f"{_driver_container(yarn, app)}; tables equal upstream", flush=True)


def _driver_killed(args, lake, yarn, submit, work: Path, tables: int, count: int) -> None:
    config, target, model = _created_then_published(lake, yarn, submit, work, "killed", tables, count, 32)
    events = work / "events-killed"
    killed: list[str] = []

    def kill_when_decoding() -> None:
        if _decoding_began(events, args.yarn_kill_after):
            # the application master's container (its JVM, the Python driver it started), as its node fails
            for pid in _pids_with(b"org.apache.spark.deploy.yarn.ApplicationMaster"):
                killed.append(str(pid))
                os.killpg(os.getpgid(pid), signal.SIGKILL)

    watcher = threading.Thread(target=kill_when_decoding, daemon=True)
    watcher.start()
    status, wall, app = submit("killed", config, events)
    watcher.join()
    _require(status, yarn, app, "the run whose driver was killed")
    check_tables(lake.spark, target, model)
    attempts = len({p.name.split("_")[3] for p in yarn.container_logs(app).values()})
    print(f"  the driver's container killed {args.yarn_kill_after:.0f}s into the decoding job "
          f"({'application master ' + ', '.join(killed) if killed else 'never: no decoding job seen'}): YARN ran "
          f"{attempts} attempt(s); spark-submit exited {status} in {wall:.1f}s; tables equal upstream", flush=True)


def _unset_variable(lake, yarn, submit, work: Path) -> None:
    config = _config(lake, "yarn-unset", work / "lake-unset", work, "unset.toml",
                     password_variable="TICDC_DELTA_BENCH_UNSET_VARIABLE")
    status, wall, app = submit("unset", config, work / "events-unset")
    driver = next(iter(yarn.container_logs(app).values()), None)
    line = next((ln for ln in _log_lines(driver) if "TICDC_DELTA_BENCH" in ln), "(not found)") if driver else "(no container log)"
    submitted = (work / "unset.submit.log").read_text().splitlines()
    said = [ln.strip() for ln in submitted if "diagnostics:" in ln and "N/A" not in ln and "waiting for AM" not in ln]
    failed = [ln.strip() for ln in submitted if "finished with failed status" in ln]
    attempts = len({p.name.split("_")[3] for p in yarn.container_logs(app).values()})
    print(f"  a configuration naming an unset variable: spark-submit exited {status} in {wall:.1f}s after {attempts} "
          f"attempt(s); the driver's log: {line.strip()!r}; YARN's {said[-1] if said else '(no diagnostics)'!r}; "
          f"spark-submit's {failed[-1] if failed else '(no failure line)'!r}", flush=True)


def _config(lake, topic: str, target: Path, work: Path, name: str, password_variable: str = "") -> Path:
    config = job_config(lake, topic, topic, target, work, engine="spark", driver_decode_max_messages=0,
                        batch_max_messages=10_000_000, batch_max_seconds=600, apply_concurrency=8)
    if password_variable:  # (a secret by reference, as docs/configuration.md gives one)
        reference = f'[kafka]\nproperties."sasl.password" = {{ env = "{password_variable}" }}'
        config.write_text(config.read_text().replace("[kafka]", reference, 1))
    return config.rename(work / name)


def _packed(venv: Path, archive: Path) -> Path:
    """`venv` as a tar.gz whose top level is the environment's own folders (bin/, lib/, pyvenv.cfg), as YARN
    unpacks `--archives x.tar.gz#env` into `env/`. Its bin/python stays the link to the Python it was made
    from: that Python must be at the same path on every node (as venv-pack's archives need too)."""
    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
        for path in sorted(venv.iterdir()):
            tar.add(path, arcname=path.name)
    return archive


def _spark_jars(zipped: Path) -> Path:
    """Spark's jars in one uncompressed zip, for `spark.yarn.archive`: without it spark-submit zips and uploads
    them (about 300 MB) for every application."""
    import zipfile

    from testbed.spark_cluster import spark_home

    with zipfile.ZipFile(zipped, "w", zipfile.ZIP_STORED) as archive:
        for jar in sorted((spark_home() / "jars").glob("*.jar")):
            archive.write(jar, jar.name)
    return zipped


def _require(status: int, yarn, app: str, what: str) -> None:
    if status != 0:
        logs = yarn.container_logs(app) if app else {}
        raise RuntimeError(f"{what} exited {status} ({app or 'no application'}); container logs: {list(logs.values())}")


def _batch_seconds(yarn, app: str) -> float:
    """The batch seconds of the driver's metrics lines (its container's log), summed."""
    total = 0.0
    for folder in yarn.container_logs(app).values():
        for line in _log_lines(folder):
            if " ticdc_delta.metrics: " in line:
                total += json.loads(line.split(" ticdc_delta.metrics: ", 1)[1])["batch_seconds"]
    return total


def _log_lines(container: Path) -> list[str]:
    """A container's log lines (the product logs to the driver's stdout, Spark to its stderr)."""
    return [line for name in ("stdout", "stderr") if (container / name).exists()
            for line in (container / name).read_text(errors="replace").splitlines()]


def _decoders(events: Path) -> dict[str, int]:
    ends = task_ends(events)
    return dict(sorted(Counter(e["executor"] for e in ends if e["description"].startswith("ticdc-delta: decode")).items()))


def _driver_container(yarn, app: str) -> str:
    containers = list(yarn.container_logs(app))
    return f"container {containers[0]} of {len(containers)}" if containers else "(no container log)"


def _pids_with(text: bytes) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return [pid for pid in found if pid != os.getpid()]
