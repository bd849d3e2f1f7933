"""kill -9 at arbitrary moments, restart, and end with exactly the upstream tables."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.demo import demo_changefeed
from tests.support import assert_table, publish, run_job

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
CUSTOMERS = "id INT, name STRING, balance DECIMAL(12,2), signed_up TIMESTAMP, tier STRING"
ORDERS = "order_no DECIMAL(20,0), customer_id INT, amount DECIMAL(10,2), status STRING, placed_at TIMESTAMP_NTZ, note STRING"


def _checkpoints_saved(target: Path) -> int:
    log = target / "_ticdc" / "checkpoints" / "_delta_log"
    return len(list(log.glob("*.json"))) if log.is_dir() else 0


def _run_until_killed(config: Path, target: Path, kill_after_checkpoints: int, log: Path) -> bool:
    """Start the job in its own process group; SIGKILL the whole group (Python and
    Spark's JVM) once `kill_after_checkpoints` checkpoint commits exist.
    Returns False if the job finished before that."""
    with open(log, "ab") as out:
        job = subprocess.Popen(
            [sys.executable, "-m", "jobs.cli", "run", "--config", str(config)],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            if job.poll() is not None:
                return False
            if _checkpoints_saved(target) >= kill_after_checkpoints:
                os.killpg(job.pid, signal.SIGKILL)
                return True
            time.sleep(0.2)
        raise AssertionError(f"the job made no progress; see {log}")
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()


def test_kill_9_mid_run_then_restart_gives_the_uninterrupted_result(spark, kafka, tmp_path, unique):
    # Setup: the demo stream (DDL, key changes, two tables) read in small batches by a
    # separate process that is killed with SIGKILL twice, at different checkpoints.
    # Expect: a final run ends with exactly the upstream tables: nothing lost, nothing doubled.
    feed = demo_changefeed(seed=9, changes=300)
    topic, group, target = f"crash-{unique}", f"g-{unique}", tmp_path / "delta"
    publish(kafka, topic, feed.messages)
    config = tmp_path / "job.toml"
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
[spark]
master = "local[1]"
"""
    )
    killed = [
        _run_until_killed(config, target, kill_after, tmp_path / "job.log") for kill_after in (3, 7)
    ]
    assert any(killed), "the job finished before it could be killed; make the stream longer"

    run_job(spark, kafka, topic, str(target), group)

    assert_table(spark, str(target), feed, "shop", "customers", CUSTOMERS)
    assert_table(spark, str(target), feed, "shop", "orders", ORDERS)
