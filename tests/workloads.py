"""Upstream workloads shared by the end-to-end tests of several protocols."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from testbed.changefeed import Changefeed
from testbed.tables import column

UTC = dt.timezone.utc
ITEMS_DDL = "id INT, name STRING, price DECIMAL(10,2), updated TIMESTAMP"
# The tables ddl_evolution leaves, with their Spark types.
DDL_EVOLUTION_TABLES = {
    ("archive", "items_2025"): "id INT, title STRING, price DECIMAL(10,2), stock BIGINT, note STRING",
    ("shop", "logs"): "id INT, msg STRING",
    ("shop", "tmp"): "id INT, v DOUBLE",
}


def items_feed(partitions: int = 3, **options) -> Changefeed:
    feed = Changefeed(partitions, **options)
    feed.create_table(
        "shop",
        "items",
        [
            column("id", "int", nullable=False),
            column("name", "varchar", length=64),
            column("price", "decimal", length=10, decimal=2),
            column("updated", "timestamp", decimal=6),
        ],
        primary_key=["id"],
    )
    return feed


def item(i: int, price: str = "1.00") -> dict:
    return {
        "id": i,
        "name": f"item {i}",
        "price": Decimal(price),
        "updated": dt.datetime(2026, 3, 1, 12, 0, i % 60, 123456, tzinfo=UTC),
    }


def ddl_evolution(feed: Changefeed, *, carries_defaults: bool = True) -> Changefeed:
    """On `items_feed`: ADD COLUMN with and without default, DROP COLUMN, RENAME COLUMN,
    MODIFY COLUMN (int -> bigint), RENAME TABLE; a second table truncated; a third dropped
    and re-created; rows before and after each.

    `carries_defaults` False: the protocol cannot tell column defaults (canal-json, open
    protocol), so rows that existed before ADD COLUMN ... DEFAULT are expected to read NULL.
    """
    feed.create_table("shop", "logs", [column("id", "int", nullable=False), column("msg", "text")], primary_key=["id"])
    feed.create_table("shop", "tmp", [column("id", "int", nullable=False)], primary_key=["id"])
    with feed.transaction() as txn:
        for i in range(6):
            txn.insert("shop", "items", item(i))
            txn.insert("shop", "logs", {"id": i, "msg": f"log {i}"})
            txn.insert("shop", "tmp", {"id": i})
    feed.add_column(
        "shop", "items", column("stock", "int", default="7"), existing_rows_value=7 if carries_defaults else None
    )
    feed.add_column("shop", "items", column("note", "varchar", length=20))
    with feed.transaction() as txn:
        txn.insert("shop", "items", {**item(6), "stock": 1, "note": "new"})
    feed.drop_column("shop", "items", "updated")
    feed.rename_column("shop", "items", "name", "title")
    feed.modify_column("shop", "items", column("stock", "bigint"))
    with feed.transaction() as txn:
        txn.update("shop", "items", [2], {"stock": 2**40, "title": "big"})
    feed.rename_table("shop", "items", "archive", "items_2025")
    feed.truncate_table("shop", "logs")
    feed.drop_table("shop", "tmp")
    feed.create_table("shop", "tmp", [column("id", "int", nullable=False), column("v", "double")], primary_key=["id"])
    with feed.transaction() as txn:
        txn.insert("archive", "items_2025", {"id": 7, "title": "after rename", "price": Decimal("3.00"), "stock": 3})
        txn.insert("shop", "logs", {"id": 100, "msg": "after truncate"})
        txn.insert("shop", "tmp", {"id": 1, "v": 0.5})
    return feed


def key_moves_and_deletes(feed: Changefeed) -> Changefeed:
    """After `ddl_evolution`: in one transaction a row of archive.items_2025 updated, one moved to another key
    (a DELETE and an INSERT at one commitTs) and one deleted, and a row of shop.logs deleted; in the next,
    the moved row moved back. With deletes naming their key alone (TiCDC's
    delete-only-output-handle-key-columns), one commitTs holds rows of two structures of a table."""
    with feed.transaction() as txn:
        txn.update("archive", "items_2025", [1], {"title": "one"})
        txn.update("archive", "items_2025", [2], {"id": 20})
        txn.delete("archive", "items_2025", [3])
        txn.delete("shop", "logs", [100])
    with feed.transaction() as txn:
        txn.update("archive", "items_2025", [20], {"id": 2, "title": "back"})
    return feed


# The demo stream's tables (testbed/demo.py) as Spark types.
DEMO_TABLE_DDLS = {
    "customers": "id INT, name STRING, balance DECIMAL(12,2), signed_up TIMESTAMP, tier STRING",
    "orders": "order_no DECIMAL(20,0), customer_id INT, amount DECIMAL(10,2), status STRING, placed_at TIMESTAMP_NTZ, note STRING",
}
