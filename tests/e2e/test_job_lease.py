"""One job per consumer: two jobs started at once, and a holder paused past its lease, as real processes.

A killed holder taken over at once is checked by every restart of tests/e2e/test_crash_recovery.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from apply.locator import PathLocator
from apply.progress import applied_history
from schema_cache.events import TableName
from testbed.demo import demo_changefeed
from testbed.processes import job_environment
from tests.support import TEST_SESSION_CONF, assert_table, publish

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.one_pair(
        "two job processes per test (a Spark JVM each); the lease's statements are the MERGE and reads every other test "
        "runs on both pairs, and tests/unit/test_lease.py covers its decisions",
        pair="oldest",
    ),
]

ROOT = Path(__file__).resolve().parents[2]
CUSTOMERS = "id INT, name STRING, balance DECIMAL(12,2), signed_up TIMESTAMP, tier STRING"
ORDERS = "order_no DECIMAL(20,0), customer_id INT, amount DECIMAL(10,2), status STRING, placed_at TIMESTAMP_NTZ, note STRING"
LEASE_HELD = 5  # jobs/cli.py: another job runs this consumer
# The paused holder's lease: short enough that the test waits little for its expiry, long enough that a
# renewal on a loaded machine (seen: 19 s while CI ran both pairs) does not let it lapse before the pause.
LEASE_SECONDS = 45


def _config(tmp_path: Path, kafka, topic: str, group: str, target: Path, lease_seconds: float = LEASE_SECONDS) -> Path:
    config = tmp_path / "job.toml"
    conf = "\n".join(f'"{key}" = "{value}"' for key, value in TEST_SESSION_CONF.items())
    config.write_text(
        f"""
[kafka]
bootstrap_servers = "{kafka.bootstrap_servers}"
topics = ["{topic}"]
group_id = "{group}"
[target]
path = "{target}"
[run]
mode = "until-idle"
batch_max_messages = 40
lease_seconds = {lease_seconds}
[spark]
master = "local[1]"
[spark.conf]
{conf}
"""
    )
    return config


def _start(config: Path, log: Path) -> subprocess.Popen:
    """`ticdc-delta run` in a process group of its own (its Spark JVM included)."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "jobs.cli", "run", "--config", str(config)],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=job_environment(),
        )


def _finish(job: subprocess.Popen, seconds: float = 600) -> int:
    try:
        return job.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        raise AssertionError("a job ran for too long") from None


def _wait_for(condition, what: str, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _checkpoints_saved(target: Path) -> int:
    """Checkpoint rows saved: the checkpoint table's commits after the one creating it."""
    log = target / "_ticdc" / "checkpoints" / "_delta_log"
    return max(0, len(list(log.glob("*.json"))) - 1) if log.is_dir() else 0


def _lease_row(spark, target: Path, consumer: str):
    rows = spark.sql(f"SELECT * FROM delta.`{target}/_ticdc/leases` WHERE consumer = '{consumer}'").collect()
    assert len(rows) == 1
    return rows[0]


def _assert_applied_once(spark, target: Path) -> None:
    """Each upstream commitTs was committed to a table by one Delta version at most: no change applied twice."""
    for table in ("customers", "orders"):
        history = applied_history(spark, PathLocator(str(target)).sql_name(TableName("shop", table)))
        per_ts = Counter(v.applied_ts for v in history if v.applied_ts is not None)
        assert [ts for ts, n in per_ts.items() if n > 1] == [], table


def test_two_jobs_started_at_once_one_runs_and_the_other_exits_5_without_writing(spark, kafka, tmp_path, unique):
    # Setup: the demo stream (two tables, a DDL) and two `ticdc-delta run` processes with the same
    # configuration (consumer group, target) started at the same moment.
    # Expect: exactly one applies the stream (exit 0); the other waits for the lease, sees it
    # renewed, and exits 5 naming the other job, having applied nothing; the tables equal upstream,
    # each commitTs applied once; the lease was taken once (epoch 1) and released.
    feed = demo_changefeed(seed=11, changes=150)
    topic, group, target = f"twice-{unique}", f"g-{unique}", tmp_path / "delta"
    publish(kafka, topic, feed.messages)
    # Nothing here waits for an expiry. The winner must renew (every quarter of the lease, 10 s) before it
    # finishes, or the other would see the lease released, rightly take it and find nothing to do: its run
    # takes 20 s and more. A renewal on a loaded machine (seen: 15 s) must not let the 40 s lease lapse.
    config = _config(tmp_path, kafka, topic, group, target, lease_seconds=40)
    logs = [tmp_path / "job-a.log", tmp_path / "job-b.log"]

    jobs = [_start(config, log) for log in logs]
    statuses = [_finish(job) for job in jobs]

    assert sorted(statuses) == [0, LEASE_HELD], f"exit statuses {statuses}; see {logs}"
    loser = logs[statuses.index(LEASE_HELD)].read_text()
    assert "is being run by another job" in loser and "renewed its lease while this job waited" in loser
    # It never held the lease, so it never read a checkpoint nor applied a batch.
    assert "took its lease" not in loser and "took it over" not in loser and "resuming" not in loser
    assert "round 1 (checkpoint" not in loser  # the line each batch logs
    winner = logs[statuses.index(0)].read_text()
    assert "took its lease (epoch 1" in winner and "round 1 (checkpoint" in winner  # what the loser's log must lack
    assert_table(spark, str(target), feed, "shop", "customers", CUSTOMERS)
    assert_table(spark, str(target), feed, "shop", "orders", ORDERS)
    _assert_applied_once(spark, target)
    lease = _lease_row(spark, target, group)
    assert lease["epoch"] == 1 and lease["owner"] is None


def test_a_paused_holder_is_taken_over_after_its_lease_expires_and_stops_when_it_resumes(spark, kafka, tmp_path, unique):
    # Setup: job A applies the demo stream in small batches; after two checkpoints its whole process
    # group (Python and Spark's JVM) is stopped with SIGSTOP, as a long GC pause or a frozen VM
    # would. Job B starts on the same configuration. Once B has taken the lease over, A continues.
    # Expect: B takes the lease over once it has expired (A's process still exists) (epoch 2),
    # applies the rest and exits 0; A finds its lease gone at its next write and exits 5 without
    # writing; the tables equal upstream, each commitTs applied once.
    feed = demo_changefeed(seed=12, changes=150)
    topic, group, target = f"paused-{unique}", f"g-{unique}", tmp_path / "delta"
    publish(kafka, topic, feed.messages)
    config = _config(tmp_path, kafka, topic, group, target)
    log_a, log_b = tmp_path / "job-a.log", tmp_path / "job-b.log"

    a = _start(config, log_a)
    try:
        _wait_for(lambda: _checkpoints_saved(target) >= 2 or a.poll() is not None, "job A's second checkpoint")
        assert a.poll() is None, f"job A finished before it could be paused; see {log_a}"
        os.killpg(a.pid, signal.SIGSTOP)
        b = _start(config, log_b)
        _wait_for(lambda: "took it over (epoch 2)" in log_b.read_text() or b.poll() is not None, "job B's takeover")
    finally:
        os.killpg(a.pid, signal.SIGCONT)
    status_a, status_b = _finish(a), _finish(b)

    assert status_b == 0, f"see {log_b}"
    assert status_a == LEASE_HELD, f"see {log_a}"
    text_b = log_b.read_text()
    # B took over at the expiry (having waited for it if it started before): A's process still
    # existed, so B could not know that A would not write again.
    assert "expired at" in text_b and "process has ended" not in text_b
    assert "lost the lease (epoch 1), now held by" in log_a.read_text()
    assert_table(spark, str(target), feed, "shop", "customers", CUSTOMERS)
    assert_table(spark, str(target), feed, "shop", "orders", ORDERS)
    _assert_applied_once(spark, target)
    lease = _lease_row(spark, target, group)
    assert lease["epoch"] == 2 and lease["owner"] is None
