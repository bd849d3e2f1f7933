"""Tables swapped by one multi-table RENAME at one commitTs, through Kafka into Delta.

TiDB's `RENAME TABLE items TO items_old, items_new TO items` is one DDL; TiCDC sends one RENAME per
table, in order, all at its commitTs (`testbed.changefeed.Changefeed.rename_tables`). The second rename
takes the name the first freed. The crash points of such a batch are in tests/unit/test_renames_at_one_commit_ts.py.
"""

from __future__ import annotations

import pytest

from testbed.encoders.canal import CanalJsonWriter
from testbed.tables import column
from tests.support import assert_gone, assert_table, publish, run_job, table_version
from tests.workloads import ITEMS_DDL, item, items_feed

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.one_pair(
        "the applier's decisions on names and tombstones, the same Python on both pairs; the Delta renames and "
        "tombstones' statements run on both pairs in test_simple_pipeline",
        # On the oldest since 2026-11-27: the newest side ran about a minute longer (CI time).
        pair="oldest",
    ),
]

# Simple carries each table's structure with its DDL; canal-json only the statement (the rows tell the rest).
PROTOCOLS = {
    "simple-json": ({}, {}),
    "canal-json": ({"canal_writer": CanalJsonWriter(content_compatible=True)},
                   {"name": "canal-json", "enable_tidb_extension": True}),
}


# canal-json's on the newest since 2026-11-28, for the sides' balance (CI time: the oldest ran about a minute longer).
@pytest.mark.parametrize("protocol", [
    "simple-json",
    pytest.param("canal-json", marks=pytest.mark.one_pair(
        "the applier's decisions on names, the same Python on both pairs (the sides' balance)", pair="newest")),
])
def test_a_cut_over_and_a_trade_through_a_temporary_name_move_every_tables_rows(spark, kafka, tmp_path, unique, protocol):
    # Setup: items (4 rows) and items_new (rows 10..12, one updated); `RENAME TABLE items TO items_old,
    # items_new TO items` (a cut-over); rows into both names after it; then goods and parts trade names
    # through tmp (three renames at one commitTs) and each gets a row.
    # Expect: every table equals upstream (items holds items_new's rows, items_old the old items'); no
    # folder is left under items_new or tmp; a replay under a new group changes no table.
    options, protocol_section = PROTOCOLS[protocol]
    feed = items_feed(**options)
    feed.create_table("shop", "items_new", [column("id", "int", nullable=False), column("name", "varchar", length=64),
                                            column("price", "decimal", length=10, decimal=2),
                                            column("updated", "timestamp", decimal=6)], primary_key=["id"])
    for name in ("goods", "parts"):
        feed.create_table("shop", name, [column("id", "int", nullable=False), column("owner", "varchar", length=16)],
                          primary_key=["id"])
    with feed.transaction() as txn:
        for i in range(4):
            txn.insert("shop", "items", item(i))
        for i in range(10, 13):
            txn.insert("shop", "items_new", item(i))
        txn.insert("shop", "goods", {"id": 1, "owner": "goods"})
        txn.insert("shop", "parts", {"id": 1, "owner": "parts"})
    with feed.transaction() as txn:
        txn.update("shop", "items_new", [11], {"price": item(11, "9.50")["price"]})
    feed.rename_tables("shop", [("items", "items_old"), ("items_new", "items")])
    with feed.transaction() as txn:
        txn.insert("shop", "items", item(13))
        txn.delete("shop", "items_old", [0])
    feed.rename_tables("shop", [("goods", "tmp"), ("parts", "goods"), ("tmp", "parts")])
    with feed.transaction() as txn:
        txn.insert("shop", "goods", {"id": 2, "owner": "goods now"})
        txn.insert("shop", "parts", {"id": 2, "owner": "parts now"})
    topic, target = f"swap-{unique}", str(tmp_path)
    publish(kafka, topic, feed.messages)

    run_job(spark, kafka, topic, target, f"g-{unique}", protocol=protocol_section)

    assert_table(spark, target, feed, "shop", "items", ITEMS_DDL)
    assert_table(spark, target, feed, "shop", "items_old", ITEMS_DDL)
    for name in ("goods", "parts"):
        assert_table(spark, target, feed, "shop", name, "id INT, owner STRING")
    assert_gone(spark, target, "shop", "items_new")
    assert_gone(spark, target, "shop", "tmp")
    tables = ["items", "items_old", "goods", "parts"]
    versions = {t: table_version(spark, target, "shop", t) for t in tables}
    replay = run_job(spark, kafka, topic, target, f"replay-{unique}", protocol=protocol_section)
    assert replay.rows_applied == 0 and replay.schema_changes == 0
    assert {t: table_version(spark, target, "shop", t) for t in tables} == versions


def test_tombstones_of_an_earlier_release_get_the_new_column_and_keep_their_records(spark, tmp_path):
    # Setup: a tombstones table as releases before `held_through` wrote it, with one record.
    # Expect: it reads as removed at its commitTs, held-through unknown; the next record adds the column
    # and is read back with it, by this process and a new one.
    from ticdc_delta.apply.base.session import SqlSession
    from ticdc_delta.apply.own_tables.tombstones import Removal, Tombstones
    from ticdc_delta.apply.places.locator import PathLocator
    from ticdc_delta.schema_cache.events import TableName

    sql, locator = SqlSession(spark), PathLocator(str(tmp_path))
    name = locator.internal_sql_name("tombstones")
    locator.prepare_internal(sql)
    spark.sql(f"CREATE TABLE {name} (database STRING, table STRING, removed_ts BIGINT, reason STRING, "
              "recorded_at TIMESTAMP) USING DELTA")
    spark.sql(f"INSERT INTO {name} VALUES ('shop', 'old', 7, 'dropped', current_timestamp())")
    tombstones = Tombstones(sql, locator)
    assert tombstones.removal(TableName("shop", "old")) == Removal(7, None)

    tombstones.record(TableName("shop", "t"), 20, "renamed to t_old", held_through=11)

    assert "held_through" in spark.table(name).columns
    for reader in (tombstones, Tombstones(sql, locator)):
        assert reader.removal(TableName("shop", "t")) == Removal(20, 11)
        assert reader.removal(TableName("shop", "old")) == Removal(7, None)
