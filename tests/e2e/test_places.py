"""A place has one meaning: a target path is where Spark's Hadoop configuration puts it, for every writer and reader
(`jobs.runtime.settle`), whatever the file system, store or schedule."""

from __future__ import annotations

import logging
import shutil
import uuid
from pathlib import Path

import pytest

from tests.support import assert_table, job_config, publish
from tests.workloads import ITEMS_DDL, item, items_feed
from ticdc_delta.jobs.pipeline import Pipeline

pytestmark = pytest.mark.e2e


def test_a_path_without_a_scheme_is_where_the_default_file_system_puts_it_for_every_writer(spark, kafka, tmp_path,
                                                                                           caplog):
    # Setup: a session whose default file system is Hadoop's viewfs, mounting `/<name>` on a folder elsewhere on
    # this disk (as HDFS on YARN or DBFS on Databricks would hold a path without a scheme); the default writer
    # (delta-rs for small MERGEs and the product's own tables where the target is on the local file system).
    # Two runs of a stream, rows published between them.
    # Expect: every table, the product's own included (checkpoints, the lease, the registry), in the mounted
    # folder, none on the driver's local disk at `/<name>` (where delta-rs would have put them: the second run
    # then failed, "Path does not exist: .../_ticdc/leases"); the table equals upstream after each run; the
    # qualified place said once.
    name = "lake" + uuid.uuid4().hex[:8]
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    session = spark.newSession()  # (the test session's own default file system stays the local one)
    session.conf.set("fs.defaultFS", f"viewfs://{name}/")
    session.conf.set(f"fs.viewfs.mounttable.{name}.link./{name}", f"file://{mounted}")
    session.conf.set(f"fs.viewfs.mounttable.{name}.linkFallback", "file:///")
    feed = items_feed()
    topic = f"places-{name}"
    config = job_config(kafka, topic, f"/{name}/tidb", f"g-{name}")
    caplog.set_level(logging.INFO, logger="ticdc_delta.jobs.runtime")
    try:
        for wave in range(2):
            sent = len(feed.messages)
            for i in range(wave * 10, wave * 10 + 10):
                with feed.transaction() as txn:
                    txn.insert("shop", "items", item(i))
            publish(kafka, topic, feed.messages[sent:])
            assert Pipeline.from_config(config, session).run().rows_applied == 10
            assert not Path(f"/{name}").exists()
            assert_table(session, f"/{name}/tidb", feed, "shop", "items", ITEMS_DDL)
        own = sorted(p.name for p in (mounted / "tidb" / "_ticdc").iterdir())
        assert {"checkpoints", "leases", "tables"} <= set(own), own
        said = [r.getMessage() for r in caplog.records if "to this session's Hadoop configuration" in r.getMessage()]
        assert said == [f"target.path /{name}/tidb is viewfs://{name}/{name}/tidb to this session's Hadoop "
                        "configuration: Spark writes every table there (delta-rs writes the local file system only)"]
    finally:
        shutil.rmtree(f"/{name}", ignore_errors=True)  # (what a failure left on this disk)
