"""A table's history with the upstream commitTs each version applied, and the table as of a commitTs."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from chispa import assert_df_equality

from testbed.tables import column
from tests.support import publish, run_job
from tests.workloads import ITEMS_DDL, item, items_feed
from ticdc_delta.apply.progress import applied_history, read_as_of, upstream_time, version_as_of
from ticdc_delta.exceptions import ApplyError

pytestmark = [pytest.mark.e2e, pytest.mark.both_pairs(
    "DESCRIBE HISTORY and time travel as each Delta release records them"
)]


def test_versions_record_their_commit_ts_and_the_table_reads_as_of_one(spark, kafka, tmp_path, unique):
    # Setup: three runs of the job: inserts; ADD COLUMN and updates; a delete.
    # Expect: the history names each version's applied commitTs (the ALTER's own version among
    # them); reading as of a commitTs gives the rows (and columns) upstream had then, also for a
    # commitTs between two runs; a commitTs before the table existed is refused.
    feed = items_feed()
    topic, target, group = f"history-{unique}", str(tmp_path), f"g-{unique}"
    name = f"delta.`{target}/shop/items`"
    snapshots = []  # (label, feed's last commitTs, upstream rows, column names) after each run

    def run(label: str) -> None:
        publish(kafka, topic, feed.messages[len(published):])
        published.extend(feed.messages[len(published):])
        run_job(spark, kafka, topic, target, group)
        snapshots.append((label, feed.last_ts, feed.expected_rows("shop", "items"), feed.column_names("shop", "items")))

    published = []
    with feed.transaction() as txn:
        for i in range(5):
            txn.insert("shop", "items", item(i))
    run("inserts")
    alter_ts = feed.add_column("shop", "items", column("stock", "int"))
    with feed.transaction() as txn:
        txn.update("shop", "items", [1], {"stock": 10, "price": Decimal("5.00")})
    run("alter")
    with feed.transaction() as txn:
        txn.delete("shop", "items", [0])
    run("delete")

    history = applied_history(spark, name)
    assert [h.version for h in history] == sorted((h.version for h in history), reverse=True)
    applied = [h.applied_ts for h in history if h.complete]
    assert applied == sorted(applied, reverse=True) and applied[0] == snapshots[-1][1]
    assert alter_ts in applied
    assert next(h for h in history if h.applied_ts == alter_ts).operation == "ADD COLUMNS"
    for label, ts, rows, columns in snapshots:
        ddl = ITEMS_DDL + (", stock INT" if "stock" in columns else "")
        expected = spark.createDataFrame(rows, ddl)
        assert_df_equality(read_as_of(spark, name, ts), expected, ignore_row_order=True, ignore_nullable=True)
        # Between this run's last commitTs and the next run's first one: the same rows.
        assert version_as_of(spark, name, ts + 1).applied_ts <= ts + 1, label
    first_ts = snapshots[0][1]
    assert version_as_of(spark, name, first_ts - (10 << 18)) is None
    with pytest.raises(ApplyError, match="no version"):
        read_as_of(spark, name, first_ts - (10 << 18))


def test_upstream_time_reads_the_physical_part_of_a_tso():
    # A TiDB TSO is milliseconds since the epoch shifted left by 18 bits, plus a logical counter.
    assert upstream_time((1_700_000_000_123 << 18) + 5) == dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.timezone.utc)
