"""`ticdc-delta snapshot`: a Dumpling export loaded as the tables' start, then the stream applied above its TSO.

Exports are written in Dumpling's layout and encoding (testbed/dumpling.py) from the same upstream
model the stream tests use; the job then runs on a topic that still holds changes from before the
TSO (they must be skipped) and changes after it, including a DDL.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from chispa import assert_df_equality

from testbed.dumpling import write_export
from testbed.tables import column
from tests.decoding import COLUMNS, ROW
from tests.support import assert_table, job_config, publish, run_job, table_frame
from tests.workloads import ITEMS_DDL, item, items_feed
from ticdc_delta.apply.base.session import SqlSession
from ticdc_delta.apply.places.locator import PathLocator
from ticdc_delta.apply.progress import applied_history
from ticdc_delta.apply.writers.delta_writer import DeltaWriter
from ticdc_delta.exceptions import ApplyError
from ticdc_delta.jobs import cli
from ticdc_delta.jobs.snapshot import ExportFormat, SnapshotLoader
from ticdc_delta.schema_cache.dumpling.create_table import parse_create_table
from ticdc_delta.schema_cache.events import TableName

pytestmark = [pytest.mark.e2e]


def _upstream(feed):
    """Changes before the export (the topic keeps them from the second transaction on), the export's TSO
    is the feed's last commitTs when `export` is called, then changes and a DDL after it."""
    feed.create_table("shop", "all_types", COLUMNS, primary_key=["id"])
    with feed.transaction() as txn:
        for i in range(10):
            txn.insert("shop", "items", item(i))
        txn.insert("shop", "all_types", ROW)
        txn.insert("shop", "all_types", {"id": 1, "name": "line\nbreak, \"quoted\" \\ 'it'", "raw": b"\r\n\x00\\\""})
    kept_from = len(feed.messages)  # the topic's retention removed what came before
    feed.bootstrap("shop", "items")
    feed.bootstrap("shop", "all_types")
    with feed.transaction() as txn:
        txn.update("shop", "items", [1], {"price": Decimal("2.00")})
        txn.delete("shop", "items", [2])
    with feed.transaction() as txn:
        txn.update("shop", "items", [3], {"name": "renamed before"})
    return kept_from, 3  # row changes before the TSO the topic holds


def _after(feed):
    with feed.transaction() as txn:
        txn.update("shop", "items", [1], {"price": Decimal("3.00")})  # changed before and after the TSO
        txn.insert("shop", "items", item(20))
        txn.delete("shop", "items", [0])
        txn.update("shop", "all_types", [1], {"name": "after"})
    feed.add_column("shop", "items", column("stock", "int"))
    with feed.transaction() as txn:
        txn.update("shop", "items", [3], {"stock": 5})
        txn.insert("shop", "items", {**item(21), "stock": 7})


@pytest.mark.parametrize("fmt, escape_backslash, compress", [
    pytest.param("csv", True, False, id="csv", marks=pytest.mark.both_pairs(
        "Spark's text source (bytes kept, _metadata), mapInArrow and CREATE OR REPLACE on each release")),
    pytest.param("sql", False, True, id="sql-gzip-no-escapes"),
])
def test_snapshot_then_stream_gives_the_upstream_tables(spark, kafka, tmp_path, unique, fmt, escape_backslash, compress):
    # Setup: two tables (one of every type, values with quotes, newlines, backslashes and NUL); the
    # export at TSO after three transactions (in 4-row files), the topic holding the last two of them,
    # a BOOTSTRAP, then changes after the TSO (one to a row also changed before it) and ADD COLUMN.
    # `ticdc-delta snapshot`, then the job; then `snapshot` again.
    # Expect: both tables equal upstream, the types table (CSV) equal to the same table materialized from
    # the whole stream alone (the same Spark types and values); the 3 row changes at or before the TSO
    # skipped as replays; every version after the snapshot's applied above the TSO; the second
    # `snapshot` leaves every table as it is.
    feed = items_feed()
    kept_from, replays = _upstream(feed)
    tso = write_export(feed, tmp_path / "export", fmt=fmt, rows_per_file=4, escape_backslash=escape_backslash,
                       compress=compress)
    _after(feed)
    topic, full_topic, target, group = f"snap-{unique}", f"snap-full-{unique}", str(tmp_path / "lake"), f"g-{unique}"
    publish(kafka, topic, feed.messages[kept_from:])
    flags = ["--bootstrap-servers", kafka.bootstrap_servers, "--topics", topic, "--group-id", group, "--target-path", target]
    no_escapes = [] if escape_backslash else ["--no-escape-backslash"]

    assert cli.exit_status(["snapshot", *flags, "--from", str(tmp_path / "export"), *no_escapes]) == 0
    result = run_job(spark, kafka, topic, target, group)

    assert_table(spark, target, feed, "shop", "items", ITEMS_DDL + ", stock INT")
    if fmt == "csv":  # the types table as the whole stream alone makes it (the SQL form's values: the unit tests)
        publish(kafka, full_topic, feed.messages)
        run_job(spark, kafka, full_topic, str(tmp_path / "streamed"), f"full-{unique}")
        assert_df_equality(table_frame(spark, target, "shop", "all_types"),
                           table_frame(spark, str(tmp_path / "streamed"), "shop", "all_types"), ignore_row_order=True)
    assert result.replays_skipped == replays
    name = PathLocator(target).sql_name(TableName("shop", "items"))
    history = applied_history(spark, name)
    snapshot_version = next(h for h in history if h.note and h.note.get("snapshotTs") == tso).version
    assert all(h.applied_ts > tso for h in history if h.version > snapshot_version and h.applied_ts is not None)
    versions = {t: len(applied_history(spark, PathLocator(target).sql_name(TableName("shop", t)))) for t in ("items", "all_types")}

    assert cli.exit_status(["snapshot", *flags, "--from", str(tmp_path / "export"), *no_escapes]) == 0

    assert {t: len(applied_history(spark, PathLocator(target).sql_name(TableName("shop", t)))) for t in versions} == versions


@pytest.mark.one_pair("the loader's own decisions; its Spark statements run on both pairs in the test above")
def test_an_interrupted_load_is_refused_by_the_job_and_finished_by_running_snapshot_again(spark, kafka, tmp_path, unique):
    # Setup: an export loaded; then the items table replaced as a crashed re-load leaves it (the
    # replacement committed with its loading mark, the rows not); a stream after the TSO.
    # Expect: the job refuses the table, naming the snapshot; `snapshot` again loads it (the other
    # table, applied through the TSO, is left as it is); the job then applies the stream: upstream.
    feed = items_feed()
    _upstream(feed)
    tso = write_export(feed, tmp_path / "export")
    mark = len(feed.messages)
    feed.bootstrap("shop", "items")  # a changefeed started at the TSO sends them first
    feed.bootstrap("shop", "all_types")
    _after(feed)
    topic, target, group = f"snap-{unique}", str(tmp_path / "lake"), f"g-{unique}"
    publish(kafka, topic, feed.messages[mark:])
    config = job_config(kafka, topic, target, group)
    SnapshotLoader(config, spark, str(tmp_path / "export")).load()
    items = TableName("shop", "items")
    structure = parse_create_table((tmp_path / "export" / "shop.items-schema.sql").read_text(), "shop").schema
    DeltaWriter(SqlSession(spark), PathLocator(target)).create(items, structure, None, replace=True,
                                                              note={"snapshotLoading": tso})
    assert table_frame(spark, target, "shop", "items").count() == 0

    with pytest.raises(ApplyError, match=f"snapshot load at TSO {tso} replaced it and did not finish"):
        run_job(spark, kafka, topic, target, group)
    outcomes = SnapshotLoader(config, spark, str(tmp_path / "export"), ExportFormat()).load()
    run_job(spark, kafka, topic, target, group)

    assert {o.table: o.action for o in outcomes} == {"shop.all_types": "skipped", "shop.items": "loaded"}
    assert_table(spark, target, feed, "shop", "items", ITEMS_DDL + ", stock INT")

