"""Debezium's MariaDB connector, run by its embedded engine, writing into the local Kafka broker (tests only).

`testbed/debezium_capture/` holds a small Java program (pom.xml + one class): Debezium's
embedded engine with the connector the properties name, and a plain Kafka producer writing
every event it delivers, in order, into one topic: key and value as Debezium's JSON
converter writes them (`{"schema", "payload"}`), the tombstone after each delete (null
value) and the connector's schema-change events (DDL with `tableChanges`) included. Maven
builds it once into the cache folder (its jars from Maven Central, `-Dmaven.repo.local` under
the cache, as testbed/local_kafka.py fetches the broker's); it runs as a child `java` process.

    with DebeziumCapture(mariadb, kafka.bootstrap_servers, "cdc", "shop", work_dir) as capture:
        ...  # the workload
        capture.drain()  # returns once everything up to now is in the topic
"""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

from testbed.mariadb import DEBEZIUM_PASSWORD, DEBEZIUM_USER, MariaDb
from testbed.processes import SERVER_JVM_OPTIONS, maven_environment, one_builder
from ticdc_delta.jobs.paths import cache_dir

log = logging.getLogger(__name__)

DEBEZIUM_VERSION = "3.5.0.Final"
_SOURCE = Path(__file__).resolve().parent / "debezium_capture"
_MAIN = "local.ticdcdelta.DebeziumCapture"
_DELIVERED = re.compile(r"^delivered (\S+) (\d+)@(\d+)$")


class CaptureSetupError(RuntimeError):
    """The capture program could not be built, or stopped before delivering what was asked."""


def _source_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in _SOURCE.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(_SOURCE)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


@one_builder("maven-m2")  # (its local repository is the broker's jars' too)
def build_capture() -> Path:
    """Build the capture program once (per source version); return the folder with `classes/` and `libs/`."""
    home = cache_dir() / f"debezium-capture-{DEBEZIUM_VERSION}-{_source_digest()}"
    done = home / ".complete"
    if done.exists():
        return home
    mvn = shutil.which("mvn")
    if mvn is None:
        raise CaptureSetupError("Maven (mvn) is needed to build the Debezium capture program")
    started = time.monotonic()
    log.info("building the Debezium %s capture program into %s", DEBEZIUM_VERSION, home)
    result = subprocess.run(
        [
            mvn,
            "-q",
            "-B",
            f"-Dmaven.repo.local={cache_dir() / 'm2'}",
            f"-Dcapture.build.dir={home}",
            "-f",
            str(_SOURCE / "pom.xml"),
            "compile",
            "dependency:copy-dependencies",
            f"-DoutputDirectory={home / 'libs'}",
            "-DincludeScope=runtime",
        ],
        capture_output=True,
        text=True,
        env=maven_environment(),
    )
    if result.returncode != 0:
        raise CaptureSetupError(f"mvn could not build the capture program:\n{result.stdout[-4000:]}{result.stderr[-4000:]}")
    done.touch()
    log.info("built the capture program in %.1fs", time.monotonic() - started)
    for stale in cache_dir().glob("debezium-capture-*"):  # builds of an older source: 41 MB each
        if stale != home:
            shutil.rmtree(stale, ignore_errors=True)
    return home


class DebeziumCapture:
    """Debezium's MariaDB connector capturing `database` of `mariadb` into `topic` (which must exist).

    The connector's options follow TiCDC's debezium comparison (decimals as doubles, binary
    strings as base64); the initial snapshot is taken, so rows that existed before `start()`
    arrive too (op "r"). Offsets and schema history are kept in files under `work_dir`.
    """

    def __init__(
        self,
        mariadb: MariaDb,
        bootstrap_servers: str,
        topic: str,
        database: str,
        work_dir: Path | str,
        *,
        prefix: str = "mariadb",
        options: dict[str, str] | None = None,
    ) -> None:
        self.mariadb = mariadb
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.database = database
        self.prefix = prefix
        self.work_dir = Path(work_dir)
        self._options = options or {}
        self._process: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None
        self._delivered: list[tuple[str, int, int]] = []
        self._changed = threading.Condition()

    def properties(self) -> dict[str, str]:
        work = self.work_dir
        return {
            "capture.bootstrap.servers": self.bootstrap_servers,
            "capture.topic": self.topic,
            "name": f"{self.prefix}-capture",
            "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
            "database.hostname": self.mariadb.host,
            "database.port": str(self.mariadb.port),
            "database.user": DEBEZIUM_USER,
            "database.password": DEBEZIUM_PASSWORD,
            "database.server.id": "5401",  # this client's id among the server's replicas
            "database.ssl.mode": "disable",
            "database.include.list": self.database,
            "topic.prefix": self.prefix,
            "snapshot.mode": "initial",
            "include.schema.changes": "true",
            "tombstones.on.delete": "true",
            "decimal.handling.mode": "double",
            "binary.handling.mode": "base64",
            "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
            "offset.storage.file.filename": str(work / "offsets.dat"),
            "offset.flush.interval.ms": "0",
            "schema.history.internal": "io.debezium.storage.file.history.FileSchemaHistory",
            "schema.history.internal.file.filename": str(work / "schema-history.dat"),
            # the JSON converter with schemas: {"schema", "payload"} keys and values; an explicit NULL
            # stays null (by default Kafka's JsonConverter writes the column's default in its place)
            "converter.schemas.enable": "true",
            "converter.replace.null.with.default": "false",
            **self._options,
        }

    def start(self) -> None:
        home = build_capture()
        java = shutil.which("java")
        if java is None:
            raise CaptureSetupError("a Java runtime (java, 17 or newer) is needed to run Debezium")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        config = self.work_dir / "capture.properties"
        config.write_text("".join(f"{k}={_escape(v)}\n" for k, v in self.properties().items()))
        errors = open(self.work_dir / "capture.log", "ab")
        self._process = subprocess.Popen(
            [java, *SERVER_JVM_OPTIONS, "-Xms64m", "-Xmx384m", "-cp", f"{home / 'classes'}:{home / 'libs'}/*", _MAIN, str(config)],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            start_new_session=True,
        )
        errors.close()
        self._reader = threading.Thread(target=self._read, name="debezium-capture-stdout", daemon=True)
        self._reader.start()
        log.info("Debezium capture of %s started (log: %s)", self.database, self.work_dir / "capture.log")

    def _read(self) -> None:
        with open(self.work_dir / "capture.out", "a") as out:
            for line in self._process.stdout:
                out.write(line)
                out.flush()
                match = _DELIVERED.match(line.strip())
                if match:
                    with self._changed:
                        self._delivered.append((match[1], int(match[2]), int(match[3])))
                        self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    @property
    def delivered(self) -> list[tuple[str, int, int]]:
        """(destination, partition, offset) of each event the broker has, in order."""
        with self._changed:
            return list(self._delivered)

    def wait_for(self, destination: str, count: int = 1, timeout: float = 120.0) -> None:
        """Until `count` events for `destination` (Debezium's topic name for a table) are in the topic."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while sum(d == destination for d, _, _ in self._delivered) < count:
                if self._process is None or self._process.poll() is not None:
                    raise CaptureSetupError(f"the capture stopped; see {self.work_dir}/capture.log and capture.out")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CaptureSetupError(
                        f"{destination} did not arrive within {timeout:g}s; see {self.work_dir}/capture.log"
                    )
                self._changed.wait(min(left, 1.0))

    def drain(self, marker_table: str = "capture_marker", timeout: float = 120.0) -> None:
        """Return once every change made before this call is in the topic.

        A row is inserted into `marker_table` (created if needed, in the captured database):
        the binlog is delivered in order, so once its event is in the topic so is everything before it.
        """
        self.mariadb.execute(
            f"CREATE TABLE IF NOT EXISTS `{marker_table}` (id VARCHAR(32) PRIMARY KEY)",
            f"INSERT INTO `{marker_table}` VALUES ('{uuid.uuid4().hex}')",
            database=self.database,
        )
        rows = self.mariadb.query(f"SELECT COUNT(*) FROM `{marker_table}`", database=self.database)[1][0][0]
        self.wait_for(f"{self.prefix}.{self.database}.{marker_table}", rows, timeout)

    def stop(self, timeout: float = 60.0) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._reader is not None:
            self._reader.join(10)

    def __enter__(self) -> DebeziumCapture:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _escape(value: str) -> str:
    """A value as java.util.Properties reads it back."""
    return value.replace("\\", "\\\\").replace("\n", "\\n")
