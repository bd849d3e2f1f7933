"""A Spark standalone cluster on this machine: a master and workers, each a JVM of its own, started from the
launcher pyspark ships (`bin/spark-class`), so a job submitted to it runs as on a real cluster: executors in
other processes than the driver, each with Python workers of its own, lost and replaced when a worker dies.

    with StandaloneCluster(folder, workers=2) as cluster:
        subprocess.run([spark_submit, "--master", cluster.url, ...])
        cluster.kill_worker(0)

Everything is stopped by process group when the block ends: a worker's executors and their Python workers
are its children, and a host that fails takes them all.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from testbed.ports import free_port
from testbed.processes import SERVER_JVM_OPTIONS

_START_SECONDS = 120


def spark_home() -> Path:
    """pyspark's own installation: its jars and bin/ are a Spark distribution's."""
    import pyspark

    return Path(pyspark.__file__).parent


class StandaloneCluster:
    """`workers` workers of `cores` cores and `memory` each, their files under `folder`."""

    def __init__(self, folder: Path, *, workers: int = 2, cores: int = 1, memory: str = "2g") -> None:
        self.folder, self.cores, self.memory = folder, cores, memory
        self.port, self.ui_port = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.master: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen | None] = [None] * workers

    def __enter__(self) -> StandaloneCluster:
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            self.master = self._daemon("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                       "--port", str(self.port), "--webui-port", str(self.ui_port))
            for index in range(len(self.workers)):
                self.start_worker(index)
            self.wait_for_workers(len(self.workers))
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _daemon(self, name: str, main_class: str, *arguments: str) -> subprocess.Popen:
        # The daemons do light work after a start of class loading: the servers' JVM options. Their own
        # heap stays small; executors get the application's spark.executor.memory.
        env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_DAEMON_MEMORY": "512m",
               "SPARK_DAEMON_JAVA_OPTS": " ".join(SERVER_JVM_OPTIONS), "SPARK_NO_DAEMONIZE": "1"}
        env.pop("PYTHONPATH", None)
        log = open(self.folder / f"{name}.log", "ab")
        try:
            return subprocess.Popen([str(spark_home() / "bin" / "spark-class"), main_class, *arguments], env=env,
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        finally:
            log.close()

    def start_worker(self, index: int) -> None:
        """Worker `index` (again, after a kill): a JVM whose executors run in its work folder."""
        work = self.folder / f"worker-{index}"
        work.mkdir(exist_ok=True)
        self.workers[index] = self._daemon(
            f"worker-{index}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
            "--webui-port", str(free_port()), "--cores", str(self.cores), "--memory", self.memory,
            "--work-dir", str(work), self.url)

    def state(self) -> dict:
        """The master's own account (its web UI's JSON): workers, applications, drivers."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as response:
            return json.load(response)

    def wait_for_workers(self, count: int) -> None:
        deadline = time.monotonic() + _START_SECONDS
        while True:
            for process in (self.master, *self.workers):
                if process is not None and process.poll() is not None:
                    raise RuntimeError(f"a Spark daemon exited with {process.returncode}: see {self.folder}/*.log")
            try:
                alive = sum(w.get("state") == "ALIVE" for w in self.state().get("workers", []))
            except OSError:
                alive = 0
            if alive >= count:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{alive} of {count} Spark workers registered in {_START_SECONDS} s: see {self.folder}")
            time.sleep(0.5)

    def kill_worker(self, index: int) -> None:
        """Worker `index` and everything it started (executors, their Python workers) killed at once, as a
        host that fails: no shutdown hook runs."""
        process = self.workers[index]
        if process is not None:
            _kill_group(process)
            self.workers[index] = None

    def stop(self) -> None:
        for process in (*self.workers, self.master):
            if process is not None:
                _kill_group(process, signal.SIGTERM)
        self.workers, self.master = [None] * len(self.workers), None


def _kill_group(process: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    if sig != signal.SIGKILL:  # what a stopped worker's executors left running
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def submit_command(master: str, resource: str, *, python: str, events: Path, ivy: Path,
                   conf: dict[str, str] | None = None, deploy: list[str] | None = None) -> list[str]:
    """spark-submit of `resource` (the product's primary resource) to `master`: Delta and the Kafka source as
    --packages (Ivy under `ivy`), `python` for the driver's and the executors' Python workers, the event log in
    `events` as single plain files (`task_ends`; Spark 4 rolls and compresses them by default), no UI, and
    `conf`; `deploy` the options before the resource (client mode where they name no other: `--deploy-mode
    cluster`, `--archives`, `--files`)."""
    from ticdc_delta.jobs.session import delta_package, kafka_source_package

    settings = {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.jars.ivy": str(ivy),
        "spark.pyspark.python": python,
        "spark.eventLog.enabled": "true", "spark.eventLog.dir": str(events),
        "spark.eventLog.rolling.enabled": "false", "spark.eventLog.compress": "false",
        "spark.ui.enabled": "false",
        **(conf or {}),
    }
    command = [str(spark_home() / "bin" / "spark-submit"), "--master", master,
               "--packages", f"{delta_package()},{kafka_source_package()}"]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    return [*command, *(deploy or []), resource]


def submit_environment(python: str) -> dict[str, str]:
    """This process's environment for spark-submit: `python` as the driver's, nothing of this process's own
    Spark gateway or import path inherited."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET")}
    return {**env, "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python}


def task_ends(events: Path) -> list[dict]:
    """Every task end of the Spark event logs in `events` (`spark.eventLog.dir`): the executor that ran it ("driver"
    in local mode), its host, its end reason ("Success", "ExecutorLostFailure", ...), its job's description.
    The logs are single uncompressed files (`spark.eventLog.rolling.enabled` and `spark.eventLog.compress` false)."""
    ends = []
    for log in sorted(p for p in events.iterdir() if p.is_file()):
        descriptions: dict[int, str] = {}  # stage id -> its job's description
        for line in log.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:  # (the last line of a log still being written)
                continue
            kind = event.get("Event")
            if kind == "SparkListenerJobStart":
                description = (event.get("Properties") or {}).get("spark.job.description") or ""
                for stage in event.get("Stage IDs", []):
                    descriptions[stage] = description
            elif kind == "SparkListenerTaskEnd":
                info = event["Task Info"]
                ends.append({"executor": info["Executor ID"], "host": info["Host"],
                             "reason": event["Task End Reason"]["Reason"],
                             "description": descriptions.get(event["Stage ID"], "")})
    return ends
