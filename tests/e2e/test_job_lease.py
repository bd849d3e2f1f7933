"""One job per consumer: two jobs started at once, then the winner paused past its lease, as real processes
(and a third job, in the test's own process, taking the lease over).

A killed holder taken over at once is checked by every restart of tests/e2e/test_crash_recovery.py.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from testbed.demo import demo_changefeed
from testbed.processes import job_lines_to, short_lived_jvm, wheel_task_command
from tests.support import TEST_SESSION_CONF, assert_table, publish
from ticdc_delta.apply.places.locator import PathLocator
from ticdc_delta.apply.progress import applied_history
from ticdc_delta.jobs.config import load
from ticdc_delta.jobs.pipeline import Pipeline
from ticdc_delta.schema_cache.events import TableName

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.process,
    pytest.mark.one_pair(
        "two job processes (a Spark JVM each) of Python 3.12 with Spark 3.5 (Databricks Runtime 16.x) on the oldest "
        "pair; the lease's statements are the MERGE and reads every other test runs on both pairs, and "
        "tests/unit/test_lease.py covers its decisions",
        pair="oldest",
    ),
]

CUSTOMERS = "id INT, name STRING, balance DECIMAL(12,2), signed_up TIMESTAMP, tier STRING"
ORDERS = "order_no DECIMAL(20,0), customer_id INT, amount DECIMAL(10,2), status STRING, placed_at TIMESTAMP_NTZ, note STRING"
LEASE_HELD = 5  # jobs/cli.py: another job runs this consumer
# The paused holder's lease: short enough that the test waits little for its expiry, long enough that a
# renewal on a loaded machine does not let it lapse before the pause. 45 s while renewals were Spark statements
# (seen: 19 s while CI ran both pairs); the jobs' renewals are delta-rs's since 2026-12-07 (local target, the
# wheel's `local` extra), a small commit of their own.
LEASE_SECONDS = 30


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
batch_max_messages = 20
lease_seconds = {lease_seconds}
[spark]
master = "local[1]"
[spark.conf]
{conf}
"""
    )
    return config


def _start(python: Path, config: Path, log: Path) -> subprocess.Popen:
    """`ticdc-delta run` of the wheel installed in `python`'s virtualenv, called as a Databricks wheel task
    calls the entry point (its exit status is what the test reads), in a process group of its own (its Spark
    JVM included), from the configuration's folder (not the checkout, whose packages would shadow the wheel's)."""
    # (Neither this process's PYTHONPATH nor the Python its Spark's workers run: the job's are its own.)
    env = short_lived_jvm({k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")})
    with open(log, "ab") as out:
        return subprocess.Popen(
            wheel_task_command(python, "run", "--config", str(config)),
            cwd=config.parent,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
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


def _run_c_until_done(spark, config: Path, log: Path, then_resume: subprocess.Popen) -> bool:
    """Job C, in this process on the tests' session (a JVM start less; the lease's decisions are the same
    Python), its lines in `log`: once it has taken the lease over, `then_resume`'s process group continues.
    Whether it took the lease over before it ended (it ends normally, or raises)."""
    took_over = threading.Event()

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "took it over (epoch 2)" in record.getMessage() and not took_over.is_set():
                took_over.set()
                os.killpg(then_resume.pid, signal.SIGCONT)

    with job_lines_to(log, Watch()):
        Pipeline.from_config(load(str(config)), spark).run()
    return took_over.is_set()


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


def test_two_jobs_at_once_one_exits_5_and_a_paused_holder_is_taken_over_after_its_lease_expires(
    spark, kafka, tmp_path, unique, runtime_python_with_spark
):
    """One scenario, two job processes (a Spark JVM each) and a job in this process (CI time: a JVM start less
    each): about two minutes, most of it the paused holder's lease running out (LEASE_SECONDS) and two JVM
    starts."""
    # Jobs A and B are the installed wheel's driver engine on Python 3.12 with this pair's Spark and Delta: on
    # the oldest pair, Databricks Runtime 16.x's pair (its Spark engine: tests/e2e/test_packaging.py). Job C
    # runs in this process (the checkout's code on the tests' Spark session): what a lease holder's process
    # is, paused or ended, is seen from outside it either way.
    # Setup: the demo stream (two tables, a DDL) in small batches; jobs A and B with the same configuration
    # (consumer group, target) started at the same moment. Once the loser has exited and the winner has
    # saved two checkpoints, the winner's whole process group (Python and Spark's JVM) is stopped with
    # SIGSTOP, as a long GC pause or a frozen VM would; job C starts on the same configuration; once C has
    # taken the lease over, the winner continues (SIGCONT, sent as C logs its takeover).
    # Expect: exactly one of A and B takes the lease (epoch 1); the other waits, sees it renewed, and exits 5
    # naming the other job, having applied nothing. C takes the lease over once it has expired (the paused
    # winner's process still exists) (epoch 2), applies the rest and ends normally; the winner finds its lease gone
    # at its next write and exits 5 without writing. The tables equal upstream, each commitTs applied once;
    # the lease ends released at epoch 2.
    feed = demo_changefeed(seed=12, changes=150)
    topic, group, target = f"lease-{unique}", f"g-{unique}", tmp_path / "delta"
    publish(kafka, topic, feed.messages)
    config = _config(tmp_path, kafka, topic, group, target)
    logs = {name: tmp_path / f"job-{name}.log" for name in "abc"}

    jobs = {name: _start(runtime_python_with_spark, config, logs[name]) for name in "ab"}
    try:
        _wait_for(lambda: any(job.poll() is not None for job in jobs.values()), "one of the two jobs to exit")
        (loser,) = [name for name, job in jobs.items() if job.poll() is not None]
        (winner,) = [name for name in jobs if name != loser]
        assert jobs[loser].returncode == LEASE_HELD, f"exit status {jobs[loser].returncode}; see {logs[loser]}"
        _wait_for(lambda: _checkpoints_saved(target) >= 2 or jobs[winner].poll() is not None, "the winner's second checkpoint")
        assert jobs[winner].poll() is None, f"the winner finished before it could be paused; see {logs[winner]}"
        os.killpg(jobs[winner].pid, signal.SIGSTOP)
        took_over = _run_c_until_done(spark, config, logs["c"], then_resume=jobs[winner])
    except BaseException:
        for job in jobs.values():  # nothing left running behind a failed test
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
        raise
    finally:
        for job in jobs.values():
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGCONT)
    statuses = {name: _finish(job) for name, job in jobs.items()}

    assert took_over, f"job C ended without taking the lease over; see {logs['c']}"
    assert statuses == {loser: LEASE_HELD, winner: LEASE_HELD}, f"exit statuses {statuses}; see {logs}"
    lost = logs[loser].read_text()
    assert "is being run by another job" in lost and "renewed its lease while this job waited" in lost
    # It never held the lease, so it never read a checkpoint nor applied a batch.
    assert "took its lease" not in lost and "took it over" not in lost and "resuming" not in lost
    assert "round 1 (checkpoint" not in lost  # the line each batch logs
    paused = logs[winner].read_text()
    assert "took its lease (epoch 1" in paused and "round 1 (checkpoint" in paused  # what the loser's log must lack
    assert "lost the lease (epoch 1), now held by" in paused
    # C took over at the expiry (having waited for it if it started before): the winner's process still
    # existed, so C could not know that it would not write again.
    took_over = logs["c"].read_text()
    assert "expired at" in took_over and "process has ended" not in took_over
    assert_table(spark, str(target), feed, "shop", "customers", CUSTOMERS)
    assert_table(spark, str(target), feed, "shop", "orders", ORDERS)
    _assert_applied_once(spark, target)
    lease = _lease_row(spark, target, group)
    assert lease["epoch"] == 2 and lease["owner"] is None
