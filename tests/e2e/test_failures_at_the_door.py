"""Failures outside the product's own errors end in one line naming cause and remedy, and a documented status:
9 for a target that cannot be used, 8 for Spark's JVM gone mid-run.

The target's failures call the command line in this process (`jobs.cli.exit_status`, what every launcher
runs) on the session's Spark; what a process sees of the status is tests/e2e/test_packaging.py's. A JVM that
dies needs a job process of its own.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.demo import demo_changefeed
from testbed.processes import job_environment
from tests.support import assert_table, publish, run_job
from tests.workloads import DEMO_TABLE_DDLS
from ticdc_delta.jobs import cli

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.one_pair("how the command line reports Spark's and Delta's errors: the same Python on both pairs"),
]

STORAGE = 9  # jobs/cli.py: the target's storage cannot be used
SPARK_GONE = 8  # jobs/cli.py: Spark's JVM did not start or stopped


def _run(tmp_path, kafka, unique, target, caplog) -> tuple[int, list[str]]:
    topic = f"door-{unique}"
    publish(kafka, topic, demo_changefeed(seed=3, changes=5).messages)
    config = tmp_path / "job.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{kafka.bootstrap_servers}"\ntopics = ["{topic}"]\ngroup_id = "g-{unique}"\n'
        f'[target]\npath = "{target}"\n'
    )
    with caplog.at_level(logging.INFO):
        status = cli.exit_status(["run", "--config", str(config)])
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR and r.name == "ticdc_delta"]
    assert all(r.exc_info is None for r in caplog.records if r.levelno > logging.DEBUG)  # no trace but at DEBUG
    return status, [r.getMessage() for r in errors]


def test_a_target_that_cannot_be_created_exits_9_in_one_line(spark, kafka, tmp_path, unique, caplog):
    # Setup: target.path below a file (a typo'd mount, a path that is not a folder): nothing can be made there.
    # Expect: exit 9, one error line saying the storage cannot be used and what to check; nothing written.
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where a folder is expected")
    status, errors = _run(tmp_path, kafka, unique, blocker / "lake", caplog)
    assert status == STORAGE, errors
    assert len(errors) == 1 and "target's storage cannot be used" in errors[0] and "check target.path" in errors[0]
    assert "\n" not in errors[0]


def test_a_folder_the_job_did_not_create_where_a_table_goes_exits_9_in_one_line(spark, kafka, tmp_path, unique, caplog):
    # Setup: a folder of other files at <target>/shop/customers, where the demo stream's first table goes.
    # Expect: exit 9, one line naming the cause (something not a Delta table is in the way); its files untouched.
    lake = tmp_path / "lake"
    squatter = lake / "shop" / "customers"
    squatter.mkdir(parents=True)
    (squatter / "export.csv").write_text("id,name\n1,someone else's\n")
    status, errors = _run(tmp_path, kafka, unique, lake, caplog)
    assert status == STORAGE, errors
    assert len(errors) == 1 and "where a table goes" in errors[0] and "\n" not in errors[0]
    assert (squatter / "export.csv").read_text() == "id,name\n1,someone else's\n"


def _java_child(pid: int) -> int | None:
    """The Java process `pid` started (PySpark's spark-submit execs the local driver's JVM), if any."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            name, fields = stat.read_text().split("(", 1)[1].rsplit(")", 1)
        except (OSError, IndexError, ValueError):
            continue
        if int(fields.split()[1]) == pid and name == "java":
            return int(stat.parent.name)
    return None


@pytest.mark.process
@pytest.mark.one_pair("how the command line reports a Spark JVM that died: the same Python on both pairs; on the oldest "
                      "side, which finishes sooner (CI time: about 30 s moved)", pair="oldest")
def test_a_spark_jvm_killed_mid_run_exits_8_in_one_line_and_the_next_run_resumes(spark, kafka, tmp_path, unique):
    """30-60 s in CI: a job process of its own, whose cold Spark JVM starts under the other side's load (Py4J's
    errors are only real where a JVM really dies), then a run in this process that applies the stream."""
    # Setup: the demo stream in batches of 10 messages; the job as a process; once it has logged its first
    # round, its Spark JVM (only that, not the Python process) is killed, as the kernel's OOM killer would.
    # Expect: the job exits 8 with one error line naming the JVM and the remedy (memory, then run again), no
    # traceback; a run after it takes the lease of the ended process over and the tables equal upstream.
    feed = demo_changefeed(seed=8, changes=120)
    topic, group, lake = f"jvm-{unique}", f"g-{unique}", tmp_path / "lake"
    publish(kafka, topic, feed.messages)
    config, log = tmp_path / "job.toml", tmp_path / "job.log"
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{kafka.bootstrap_servers}"\ntopics = ["{topic}"]\ngroup_id = "{group}"\n'
        f'[target]\npath = "{lake}"\n[run]\nmode = "until-idle"\nbatch_max_messages = 10\n[spark]\nmaster = "local[1]"\n'
    )
    with open(log, "wb") as out:
        job = subprocess.Popen([sys.executable, "-m", "ticdc_delta.jobs.cli", "run", "--config", str(config)], cwd=tmp_path,
                               stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=job_environment())
    try:
        deadline = time.monotonic() + 240
        while "round 1 " not in log.read_text() and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        jvm = _java_child(job.pid)
        assert jvm is not None and job.poll() is None, log.read_text()[-3000:]
        # A few hundred messages to read: the product starts its JVM with the quick compiler only.
        assert "-XX:TieredStopAtLevel=1" in Path(f"/proc/{jvm}/cmdline").read_bytes().decode().split("\0")
        os.kill(jvm, signal.SIGKILL)
        status = job.wait(timeout=120)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    output = log.read_text()
    errors = [line for line in output.splitlines() if " ERROR ticdc_delta: " in line]
    assert status == SPARK_GONE, output[-3000:]
    assert len(errors) == 1 and "Spark's JVM stopped answering" in errors[0] and "run the job again" in errors[0], errors
    assert "Traceback" not in output
    assert "(the JVM's quick compiler only)" in output

    run_job(spark, kafka, topic, str(lake), group)

    for table, ddl in DEMO_TABLE_DDLS.items():
        assert_table(spark, str(lake), feed, "shop", table, ddl)


@pytest.mark.both_pairs("Delta's CREATE refuses a location holding a log folder without a commit, on each Delta release")
def test_a_creation_cut_short_is_cleared_and_the_table_created(spark, kafka, tmp_path, unique):
    # Setup: where the demo's tables go, what a job (or its JVM) killed during the CREATE leaves: `_delta_log/`
    # holding the commit's temporary file only (seen when test above's kill landed there).
    # Expect: the run creates the tables there all the same (one warning each), equal to upstream.
    feed = demo_changefeed(seed=9, changes=40)
    topic, group, lake = f"cut-{unique}", f"g-{unique}", tmp_path / "lake"
    publish(kafka, topic, feed.messages)
    for table in DEMO_TABLE_DDLS:
        log_folder = lake / "shop" / table / "_delta_log"
        (log_folder / "_commits").mkdir(parents=True)
        (log_folder / ".00000000000000000000.json.cut-short.tmp").write_text('{"commitInfo":')

    run_job(spark, kafka, topic, str(lake), group)

    for table, ddl in DEMO_TABLE_DDLS.items():
        assert_table(spark, str(lake), feed, "shop", table, ddl)
