"""Failures a user causes with the target end in one line naming cause and remedy, and exit status 9.

The command line is called in this process (`jobs.cli.exit_status`, what every launcher runs) on the
session's Spark; what a process sees of the status is tests/e2e/test_packaging.py's.
"""

from __future__ import annotations

import logging

import pytest

from jobs import cli
from testbed.demo import demo_changefeed
from tests.support import publish

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.one_pair("how the command line reports Spark's and Delta's errors: the same Python on both pairs"),
]

STORAGE = 9  # jobs/cli.py: the target's storage cannot be used


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
