"""The job through a SASL_SSL (SCRAM) listener and a registry over https with basic auth, as a real process.

The run that reads the stream takes both passwords from environment variables (`{ env = "NAME" }` in its
file, as a Databricks secret scope or a Kubernetes secret would give them); the refused runs write them in
the file.

A broker of its own (testbed.local_kafka with a SASL_SSL listener, certificates from a throwaway CA made
with openssl) and the registry emulator serving https. The job runs as `python -m ticdc_delta.jobs.cli --log-level
DEBUG run` with librdkafka's debug logging on too, so that every line the process writes can be scanned
for the two passwords; so are the files it wrote under the target and the string columns of every Delta
table there. Refused credentials must stop the job at once (exit 7), naming authentication, not the secret.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.fault_kills import write_config
from testbed.demo import demo_changefeed
from testbed.encoders.ticdc_avro import TiCDCAvroWriter
from testbed.local_kafka import LocalKafka, SaslSslListener
from testbed.processes import job_environment
from testbed.tls import LocalCa
from tests.readers import delta_tables_under
from tests.registry_server import FakeSchemaRegistry
from tests.support import TEST_SESSION_CONF, assert_table, publish

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.process,
    pytest.mark.one_pair(
        "a broker of its own and three job processes (a Spark JVM each); TLS, SASL and the registry client are "
        "librdkafka's and confluent-kafka's, the same on every Python/Spark pair (on the oldest since 2026-12-06: "
        "the sides' balance, after the oldest side's cluster test was cut by half)",
        pair="oldest",
    ),
]

CUSTOMERS = "id INT, name STRING, balance DECIMAL(12,2), signed_up TIMESTAMP, tier STRING"
ORDERS = "order_no DECIMAL(20,0), customer_id INT, amount DECIMAL(10,2), status STRING, placed_at TIMESTAMP_NTZ, note STRING"
# Distinctive, so that finding one anywhere is a leak and not a coincidence.
SASL_USER, SASL_PASSWORD = "cdc-reader", "saslPw-7f3c91d2e5"
REGISTRY_USER, REGISTRY_PASSWORD = "schema-reader", "registryPw-4b8e06a1c9"
# Also as a Basic auth header carries them (base64 of user:password), should a request be logged.
SECRETS = (
    SASL_PASSWORD,
    REGISTRY_PASSWORD,
    base64.b64encode(f"{REGISTRY_USER}:{REGISTRY_PASSWORD}".encode()).decode(),
    base64.b64encode(f"{SASL_USER}:{SASL_PASSWORD}".encode()).decode(),
)
REFUSED = 7  # jobs/cli.py: Kafka or the registry refused the job's credentials
# The variables the referencing run's environment holds the secrets in.
BY_REFERENCE = {"TEST_SASL_PASSWORD": SASL_PASSWORD, "TEST_REGISTRY_USER_INFO": f"{REGISTRY_USER}:{REGISTRY_PASSWORD}"}


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return LocalCa(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def secure_kafka(tmp_path_factory, ca):
    listener = SaslSslListener(ca.keystore(ca.issue("broker")), {SASL_USER: SASL_PASSWORD})
    broker = LocalKafka(tmp_path_factory.mktemp("secure-kafka"), sasl_ssl=listener)
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def secure_registry(ca):
    registry = FakeSchemaRegistry(user_info=f"{REGISTRY_USER}:{REGISTRY_PASSWORD}", tls=ca.issue("registry"))
    registry.start()
    yield registry
    registry.stop()


@pytest.fixture(scope="module")
def feed(secure_kafka, secure_registry, ca):
    """The demo stream as TiCDC's avro protocol, its schemas registered over https with basic auth."""
    writer = TiCDCAvroWriter(
        secure_registry.url,
        enable_tidb_extension=True,
        timestamp_zone="Asia/Tokyo",
        registry_config={
            "basic.auth.user.info": f"{REGISTRY_USER}:{REGISTRY_PASSWORD}",
            "ssl.ca.location": str(ca.certificate),
        },
    )
    changefeed = demo_changefeed(seed=13, changes=120, avro_writer=writer, topic_prefix="secure")
    publish(secure_kafka, "unused", changefeed.messages)  # produced through the PLAINTEXT listener
    return changefeed


def _job_config(tmp_path: Path, kafka, registry, ca, feed, *, sasl_password=SASL_PASSWORD,
                registry_password=REGISTRY_PASSWORD, group="secure", by_reference=False) -> Path:
    registry_user_info = f"{REGISTRY_USER}:{registry_password}"
    if by_reference:
        sasl_password, registry_user_info = ({"env": name} for name in BY_REFERENCE)
    return write_config(tmp_path / f"{group}.toml", {
        "kafka": {"bootstrap_servers": kafka.sasl_ssl_bootstrap_servers, "topics": feed.topics(), "group_id": group},
        "kafka.properties": {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": SASL_USER,
            "sasl.password": sasl_password,
            "ssl.ca.location": str(ca.certificate),
            # librdkafka's own debug log too: the most a user could turn on.
            "debug": "all",
        },
        "protocol": {"name": "avro", "enable_tidb_extension": True, "timestamp_zone": "Asia/Tokyo"},
        "registry": {
            "url": registry.url,
            "basic_auth_user_info": registry_user_info,
            "ssl_ca_location": str(ca.certificate),
        },
        "target": {"path": str(tmp_path / "lake")},
        "run": {"mode": "until-idle", "batch_max_seconds": 2.0, "idle_timeout_seconds": 15.0},
        "spark": {"master": "local[1]"},
        "spark.conf": {"spark.sql.shuffle.partitions": "1", "spark.ui.enabled": "false", **TEST_SESSION_CONF},
    })


def _run(config: Path, seconds: float = 600, environment: dict | None = None) -> tuple[int, str, float]:
    """`ticdc-delta --log-level DEBUG run`: (exit status, everything it wrote, wall seconds)."""
    started = time.monotonic()
    job = subprocess.Popen(
        [sys.executable, "-m", "ticdc_delta.jobs.cli", "--log-level", "DEBUG", "run", "--config", str(config)],
        cwd=config.parent,  # (a folder of its own: the run must leave no spark-warehouse/ in it)
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its Spark JVM in its group, killed with it if it hangs
        env={**job_environment(), **(environment or {})},
    )
    try:
        output, _ = job.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        output, _ = job.communicate()
        raise AssertionError(f"the job ran for more than {seconds}s:\n{output.decode(errors='replace')[-5000:]}") from None
    return job.returncode, output.decode(errors="replace"), time.monotonic() - started


def _leaks(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


def _scan_files(root: Path) -> dict[str, list[str]]:
    """Every file under `root` (Delta logs, checkpoints, parquet, ...), read as bytes."""
    found = {}
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            leaked = [s for s in SECRETS if s.encode() in data]
            if leaked:
                found[str(path)] = leaked
    return found


def _scan_tables(spark, root: Path) -> dict[str, list[str]]:
    """The string and binary values of every Delta table under `root` (parquet may compress a secret)."""
    found = {}
    for table in delta_tables_under(root):
        frame = spark.read.format("delta").load(str(table))
        columns = [f.name for f in frame.schema.fields if f.dataType.typeName() in ("string", "binary")]
        if not columns:
            continue
        for row in frame.select(*[f"`{c}`" for c in columns]).collect():
            for value in row:
                text = value.decode(errors="replace") if isinstance(value, (bytes, bytearray)) else str(value)
                leaked = _leaks(text)
                if leaked:
                    found.setdefault(str(table), []).extend(leaked)
    return found


def test_sasl_ssl_and_https_registry_run_leaks_no_secret(spark, secure_kafka, secure_registry, ca, feed, tmp_path):
    """80-160 s in CI (157 s on 2026-11-28): the job is a process of its own (what it writes, librdkafka's debug
    log included, is what is scanned for secrets), a cold Spark JVM logging at DEBUG, over a broker of this
    module's own."""
    # Setup: the avro stream read through the SASL_SSL listener (SCRAM-SHA-512 over TLS, the broker's
    # certificate checked against the test CA), its schemas from the registry over https with basic auth.
    # Expect: tables equal upstream; neither password in any line the process wrote (DEBUG, and librdkafka's
    # debug log) nor in any file or Delta value under the target. Both passwords are given by reference
    # (environment variables): the logged configuration shows the references.
    config = _job_config(tmp_path, secure_kafka, secure_registry, ca, feed, by_reference=True)
    assert _leaks(config.read_text()) == []
    requests = len(secure_registry.requests)

    status, output, seconds = _run(config, environment=BY_REFERENCE)

    assert status == 0, output[-5000:]
    print(f"job over SASL_SSL + https registry: {seconds:.1f}s, {len(output.splitlines())} log lines")
    assert not (config.parent / "spark-warehouse").exists()  # nothing left in the folder it was started from
    assert len(secure_registry.requests) > requests  # schemas were read over https
    assert "sasl.password" in output  # the effective configuration was logged (redacted) and scanned
    assert '"sasl.password": {"env": "TEST_SASL_PASSWORD"}' in output
    assert '"basic_auth_user_info": {"env": "TEST_REGISTRY_USER_INFO"}' in output
    target = tmp_path / "lake"
    assert_table(spark, str(target), feed, "shop", "customers", CUSTOMERS)
    assert_table(spark, str(target), feed, "shop", "orders", ORDERS)
    assert {line for line in output.splitlines() if _leaks(line)} == set()
    assert _scan_files(target) == {}
    assert _scan_tables(spark, target) == {}


@pytest.mark.parametrize("refused", ["kafka", "registry"])
def test_refused_credentials_stop_the_job_at_once(secure_kafka, secure_registry, ca, feed, tmp_path, refused):
    # Setup: a wrong SASL password (or registry password); kafka.unreachable_timeout_seconds and
    # registry.max_wait_seconds keep their 300 s defaults.
    # Expect: exit 7 before Spark starts, the message naming authentication, neither password anywhere.
    wrong = "wrongPw-0a1b2c3d4e"
    config = _job_config(
        tmp_path, secure_kafka, secure_registry, ca, feed, group=f"refused-{refused}",
        **({"sasl_password": wrong} if refused == "kafka" else {"registry_password": wrong}),
    )

    status, output, seconds = _run(config, seconds=280)

    assert status == REFUSED, output[-5000:]
    errors = [line for line in output.splitlines() if " ERROR ticdc_delta" in line]
    assert len(errors) == 1 and "authentication failed" in errors[0], errors
    print(f"refused by {refused}: exit {status} after {seconds:.1f}s")
    # Neither waited for as an outage nor retried (the limits are 300 s), and found before Spark started
    # (jobs/preflight.py): no minute spent on a JVM and the product's tables first.
    assert "waiting for it up to" not in output and "retrying schema id" not in output
    assert "starting local Spark" not in output and seconds < 60
    assert ("Kafka at" if refused == "kafka" else "schema registry at") in errors[0]
    assert wrong not in output and _leaks(output) == []
