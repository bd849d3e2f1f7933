"""A YARN cluster on this machine: Hadoop's own mini cluster (a ResourceManager and NodeManagers, as Hadoop's
tests run YARN), so that spark-submit's `--master yarn` runs as on a real one: in cluster deploy mode the driver
runs in the application master's container, executors in containers of their own, every file the job gets
(`--archives`, `--files`, the primary resource) localized into a container's working folder.

    with YarnCluster(folder) as yarn:
        subprocess.run([spark_submit, "--master", "yarn", ...], env={**os.environ, **yarn.client_environment()})
        yarn.container_logs(application_id)

The jars come from Maven Central through Maven (`testbed/yarn_cluster/pom.xml`, built once into the cache
folder, about 100 MB); the cluster is one JVM started from the command-line class Hadoop ships for it
(MiniHadoopClusterManager), in its own process group, stopped with everything it started.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from testbed.ports import free_port
from testbed.processes import SERVER_JVM_OPTIONS, maven_environment, one_builder
from ticdc_delta.jobs.paths import cache_dir

_POM = Path(__file__).resolve().parent / "yarn_cluster" / "pom.xml"
_MAIN = "org.apache.hadoop.mapreduce.MiniHadoopClusterManager"
_START_SECONDS = 180
_STARTED = " - Started MiniMRCluster"
_NODE_REGISTERED = "registerNodeManager"
# Hadoop 3.4 on Java 17 reflects into these (its own start scripts open them the same way).
_OPENS = [f"--add-opens=java.base/{package}=ALL-UNNAMED"
          for package in ("java.lang", "java.lang.reflect", "java.util", "java.io", "java.net", "java.nio", "sun.nio.ch")]


@one_builder("maven-m2")
def yarn_libs() -> Path:
    """The mini cluster's jars, fetched once (per pom) into a folder of the cache."""
    digest = hashlib.sha256(_POM.read_bytes()).hexdigest()[:12]
    libs = cache_dir() / f"yarn-mini-cluster-{digest}"
    if (libs / ".complete").exists():
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("Maven (mvn) is needed to fetch Hadoop's mini YARN cluster")
    done = subprocess.run([mvn, "-q", "-B", f"-Dmaven.repo.local={cache_dir() / 'm2'}", "-f", str(_POM),
                           "dependency:copy-dependencies", f"-DoutputDirectory={libs}"],
                          capture_output=True, text=True, env=maven_environment())
    if done.returncode != 0:
        raise RuntimeError(f"mvn could not fetch the mini YARN cluster:\n{done.stdout[-4000:]}{done.stderr[-4000:]}")
    (libs / ".complete").touch()
    return libs


class YarnCluster:
    """A ResourceManager and `nodes` NodeManagers (4 GiB and 8 vcores each, the mini cluster's own), every
    port on 127.0.0.1 a free one, files
    (containers' working folders and logs) under `folder`."""

    def __init__(self, folder: Path, *, nodes: int = 2) -> None:
        self.folder, self.nodes = folder, nodes
        self.conf_dir = folder / "conf"
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> YarnCluster:
        libs = yarn_libs()
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        settings = {
            "yarn.resourcemanager.scheduler.address": f"127.0.0.1:{free_port()}",
            "yarn.resourcemanager.resource-tracker.address": f"127.0.0.1:{free_port()}",
            "yarn.resourcemanager.admin.address": f"127.0.0.1:{free_port()}",
            "yarn.resourcemanager.webapp.address": f"127.0.0.1:{free_port()}",
            "yarn.resourcemanager.webapp.https.address": f"127.0.0.1:{free_port()}",
            "mapreduce.jobhistory.webapp.address": f"127.0.0.1:{free_port()}",
            "mapreduce.jobhistory.webapp.https.address": f"127.0.0.1:{free_port()}",
            "mapreduce.jobhistory.admin.address": f"127.0.0.1:{free_port()}",
            # (this machine's memory is what it is: containers are measured by Spark's own limits)
            "yarn.nodemanager.vmem-check-enabled": "false",
            "yarn.nodemanager.pmem-check-enabled": "false",
            "yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage": "99.5",
            # (a finished application's containers and logs stay, to be read)
            "yarn.nodemanager.delete.debug-delay-sec": "3600",
        }
        command = ["java", *SERVER_JVM_OPTIONS, *_OPENS, "-Xmx1g", "-cp", f"{libs}/*", _MAIN, "-nodfs",
                   "-nodemanagers", str(self.nodes), "-rmport", str(free_port()), "-jhsport", str(free_port()),
                   "-writeConfig", str(self.conf_dir / "yarn-site.xml")]
        for key, value in settings.items():
            command += ["-D", f"{key}={value}"]
        log = open(self.folder / "yarn.log", "ab")
        try:
            # (its working folder is where it keeps every node's files: target/test/data/...)
            self.process = subprocess.Popen(command, cwd=self.folder, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            log.close()
        try:
            self._wait_for_nodes()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _wait_for_nodes(self) -> None:
        # (the mini cluster serves no REST API: its log says when every node has registered and it is up)
        deadline = time.monotonic() + _START_SECONDS
        log = self.folder / "yarn.log"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the mini YARN cluster exited with {self.process.returncode}: see {log}")
            text = log.read_text(errors="replace")
            if _STARTED in text and text.count(_NODE_REGISTERED) >= self.nodes:
                return
            time.sleep(0.5)
        raise RuntimeError(f"the mini YARN cluster did not start in {_START_SECONDS} s: see {log}")

    def client_environment(self) -> dict[str, str]:
        """What spark-submit needs to find this ResourceManager (HADOOP_CONF_DIR with its yarn-site.xml)."""
        return {"HADOOP_CONF_DIR": str(self.conf_dir), "YARN_CONF_DIR": str(self.conf_dir)}

    def container_logs(self, application_id: str) -> dict[str, Path]:
        """{container id: its log folder (stdout, stderr)} of an application, the first container its master's."""
        # (a node has several log folders; a container's logs are in one of them, the others may hold its name)
        found = {p.name: p for p in self.folder.glob(f"target/**/*logDir*/{application_id}/container_*")
                 if (p / "stdout").exists() or (p / "stderr").exists()}
        return dict(sorted(found.items()))

    def stop(self) -> None:
        if self.process is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.process.wait(timeout=20)
                if sig == signal.SIGTERM:  # what the nodes' containers left running
                    os.killpg(self.process.pid, signal.SIGKILL)
                break
            except (subprocess.TimeoutExpired, ProcessLookupError):
                continue
        self.process = None
        _kill_sessions_of(str(self.folder))


def _kill_sessions_of(folder: str) -> None:
    """Every process in the session of a process whose command line names `folder`: a NodeManager starts each
    container in a session of its own (setsid), which outlives the cluster's process group when a node dies."""
    sessions = set()
    processes: dict[int, int] = {}  # pid -> its session
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            pid = int(stat.parent.name)
            session = int(stat.read_text().rsplit(")", 1)[1].split()[3])
            processes[pid] = session
            if folder.encode() in (stat.parent / "cmdline").read_bytes() and session != os.getsid(0):
                sessions.add(session)
        except (OSError, ValueError, IndexError):
            continue
    for pid, session in processes.items():
        if session in sessions:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
