"""A real single-node Apache Kafka broker (KRaft) on loopback, for the demo and tests.

The broker jars (org.apache.kafka:kafka_2.13 and its runtime dependencies)
come from Maven Central through Maven's dependency plugin into the cache
folder; the broker runs as a child `java` process.

Optionally (`SaslSslListener`) the broker also listens with SASL_SSL on a second loopback
port: TLS with a certificate from `testbed.tls` and SCRAM credentials created when the KRaft
log dir is formatted. The PLAINTEXT listener stays what tests produce to and the broker uses
itself.

Command line: ``python -m testbed.local_kafka [--data-dir DIR] [--port N]`` runs
one in the foreground until interrupted.
"""

from __future__ import annotations

import argparse
import base64
import logging
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from testbed.ports import free_port
from testbed.processes import SERVER_JVM_OPTIONS, maven_environment, one_builder
from testbed.tls import Pkcs12Keystore
from ticdc_delta.jobs.log_lines import LOG_FORMAT
from ticdc_delta.jobs.paths import cache_dir

log = logging.getLogger(__name__)

KAFKA_VERSION = "4.3.1"
SCALA_VERSION = "2.13"
# The slf4j binding for the log4j2 version Kafka itself depends on.
LOG4J_VERSION = "2.25.4"

_POM = f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>ticdc-delta.local</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_{SCALA_VERSION}</artifactId>
      <version>{KAFKA_VERSION}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>{LOG4J_VERSION}</version>
    </dependency>
  </dependencies>
</project>
"""

_LOG4J = """rootLogger.level = info
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
"""


class KafkaSetupError(RuntimeError):
    """The local broker could not be fetched or started."""


@one_builder("maven-m2")  # (its local repository is the Debezium capture's too)
def fetch_broker_jars() -> Path:
    """Download the broker's jars once; return the folder holding them."""
    home = cache_dir() / f"kafka-{KAFKA_VERSION}"
    libs = home / "libs"
    done = home / ".complete"
    if done.exists():
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaSetupError("Maven (mvn) is needed to fetch the Kafka broker jars from Maven Central")
    home.mkdir(parents=True, exist_ok=True)
    (home / "pom.xml").write_text(_POM)
    log.info("fetching Kafka %s broker jars from Maven Central into %s", KAFKA_VERSION, libs)
    result = subprocess.run(
        [
            mvn,
            "-q",
            "-B",
            f"-Dmaven.repo.local={cache_dir() / 'm2'}",
            "-f",
            str(home / "pom.xml"),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={libs}",
            "-DincludeScope=runtime",
        ],
        capture_output=True,
        text=True,
        env=maven_environment(),
    )
    if result.returncode != 0:
        raise KafkaSetupError(f"mvn could not fetch the Kafka jars:\n{result.stdout[-4000:]}{result.stderr[-4000:]}")
    done.touch()
    return libs


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass(frozen=True)
class SaslSslListener:
    """An extra listener speaking SASL_SSL: TLS with `keystore`'s certificate, SCRAM logins of `users`."""

    keystore: Pkcs12Keystore
    users: Mapping[str, str]  # user name -> password (plain letters, digits and -_.: the storage tool parses them)
    mechanism: str = "SCRAM-SHA-512"  # or SCRAM-SHA-256
    port: int | None = None

    def broker_properties(self) -> dict[str, str]:
        jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        return {
            "sasl.enabled.mechanisms": self.mechanism,
            f"listener.name.sasl_ssl.{self.mechanism.lower()}.sasl.jaas.config": jaas,
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(self.keystore.path),
            "ssl.keystore.password": self.keystore.password,
            "ssl.key.password": self.keystore.password,
        }

    def format_arguments(self) -> list[str]:
        """The storage tool's arguments creating the SCRAM credentials (KRaft keeps them in its metadata)."""
        return [
            arg for user, password in self.users.items()
            for arg in ("--add-scram", f"{self.mechanism}=[name={user},password={password}]")
        ]


class LocalKafka:
    """One broker+controller node; `start()` returns once it serves metadata."""

    def __init__(self, data_dir: Path | str, port: int | None = None, sasl_ssl: SaslSslListener | None = None) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.port = port or free_port()
        self._controller_port = free_port(besides=(self.port,))
        self._sasl_ssl = sasl_ssl
        self.sasl_ssl_port = (sasl_ssl.port or free_port(besides=(self.port, self._controller_port))) if sasl_ssl else None
        self._process: subprocess.Popen | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_ssl_bootstrap_servers(self) -> str:
        """The SASL_SSL listener's address (its certificate names 127.0.0.1 and localhost)."""
        if self.sasl_ssl_port is None:
            raise KafkaSetupError("this broker has no SASL_SSL listener")
        return f"127.0.0.1:{self.sasl_ssl_port}"

    def _java(self) -> str:
        java = shutil.which("java")
        if java is None:
            raise KafkaSetupError("a Java runtime (java, 17 or newer) is needed to run the Kafka broker")
        return java

    def _write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        properties = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self._controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self._controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir / "log"),
            "auto.create.topics.enable": "false",
            "num.partitions": "1",
            # Single node: internal topics with one replica and one partition
            # start fast and need nothing else.
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        if self._sasl_ssl is not None:
            sasl_ssl = f"SASL_SSL://127.0.0.1:{self.sasl_ssl_port}"
            properties["listeners"] += f",{sasl_ssl}"
            properties["advertised.listeners"] += f",{sasl_ssl}"
            properties["listener.security.protocol.map"] += ",SASL_SSL:SASL_SSL"
            properties["inter.broker.listener.name"] = "PLAINTEXT"
            properties.update(self._sasl_ssl.broker_properties())
        path = self.data_dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        (self.data_dir / "log4j2.properties").write_text(_LOG4J)
        return path

    def _java_command(self, libs: Path, main: str, *args: str) -> list[str]:
        return [
            self._java(),
            *SERVER_JVM_OPTIONS,
            "-Xms256m",
            "-Xmx512m",
            f"-Dkafka.logs.dir={self.data_dir}",
            f"-Dlog4j2.configurationFile=file:{self.data_dir / 'log4j2.properties'}",
            "-cp",
            f"{libs}/*",
            main,
            *args,
        ]

    def start(self, timeout: float = 90.0) -> str:
        libs = fetch_broker_jars()
        config = self._write_config()
        if not (self.data_dir / "log" / "meta.properties").exists():
            cluster_id = "-"
            while cluster_id.startswith("-"):  # the tool would take a leading "-" for an option (1 in 64)
                cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            formatted = subprocess.run(
                self._java_command(libs, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(config),
                                   *(self._sasl_ssl.format_arguments() if self._sasl_ssl else ())),
                capture_output=True,
                text=True,
            )
            if formatted.returncode != 0:
                raise KafkaSetupError(f"formatting the KRaft log dir failed:\n{formatted.stdout}{formatted.stderr}")
        output = open(self.data_dir / "broker.out", "ab")
        self._process = subprocess.Popen(
            self._java_command(libs, "kafka.Kafka", str(config)),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C in the terminal reaches us, and we stop it in order
        )
        output.close()
        self._wait_ready(timeout)
        (self.data_dir / "bootstrap.servers").write_text(self.bootstrap_servers)
        log.info("Kafka %s broker ready at %s (data in %s)", KAFKA_VERSION, self.bootstrap_servers, self.data_dir)
        return self.bootstrap_servers

    def _wait_ready(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise KafkaSetupError(
                    f"the broker exited with code {self._process.returncode}; see {self.data_dir / 'broker.out'} "
                    f"and {self.data_dir / 'server.log'}"
                )
            if _port_open(self.port):
                try:
                    metadata = AdminClient({"bootstrap.servers": self.bootstrap_servers}).list_topics(timeout=5)
                    if metadata.brokers:
                        return
                except Exception:  # noqa: BLE001 - not ready yet; retried until the deadline
                    pass
            time.sleep(0.5)
        self.stop()
        raise KafkaSetupError(f"the broker did not become ready within {timeout:g}s; see {self.data_dir}")

    def stop(self, timeout: float = 30.0) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> LocalKafka:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.local_kafka", description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=str(cache_dir() / "local-kafka"))
    parser.add_argument("--port", type=int, default=9092)
    parser.add_argument("--fetch-only", action="store_true", help="download the jars and exit")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    if args.fetch_only:
        print(fetch_broker_jars())
        return 0
    broker = LocalKafka(args.data_dir, args.port)
    broker.start()
    print(f"Kafka broker at {broker.bootstrap_servers}; Ctrl-C stops it", flush=True)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop the broker on TERM too
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
