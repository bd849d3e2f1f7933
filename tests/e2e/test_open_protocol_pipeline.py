"""End to end: TiCDC Open Protocol (batched rows, resolved events) through Kafka into Delta."""

from __future__ import annotations

from decimal import Decimal

import pytest

from testbed.demo import demo_changefeed
from testbed.encoders.open_protocol import OpenProtocolWriter
from tests.support import assert_table, publish, run_job, table_version
from tests.workloads import ddl_evolution, items_feed, key_moves_and_deletes

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.one_pair(
        "this protocol's decoding is the same Python on both pairs, and the Delta operations its events become (MERGE, schema evolution, rewrites) run on both pairs in test_simple_pipeline and test_ddl_kinds",
        pair="newest",
    ),
]

# What Open Protocol cannot carry (docs/protocols.md): DECIMAL precision (exact text), ENUM members (index).
DEMO_TABLES = {
    "customers": "id INT, name STRING, balance STRING, signed_up TIMESTAMP, tier STRING",
    "orders": "order_no DECIMAL(20,0), customer_id INT, amount STRING, status STRING, "
    "placed_at TIMESTAMP_NTZ, note STRING",
}
DDL_TABLES = {
    ("archive", "items_2025"): "id INT, title STRING, price STRING, stock BIGINT, note STRING",
    ("shop", "logs"): "id INT, msg STRING",
    ("shop", "tmp"): "id INT, v DOUBLE",
}


def as_open_protocol_carries(feed, database: str, table: str) -> list[tuple]:
    """The upstream rows as Open Protocol can deliver them."""
    columns = feed.columns(database, table)

    def carried(column: dict, value):
        data_type = column["dataType"]
        if value is None:
            return None
        if data_type["mysqlType"] == "decimal":
            return str(Decimal(str(value)).quantize(Decimal(1).scaleb(-int(data_type.get("decimal") or 0))))
        if data_type["mysqlType"] == "enum":
            return str(data_type["elements"].index(value) + 1)
        return value

    return [tuple(carried(c, v) for c, v in zip(columns, row, strict=True)) for row in feed.expected_rows(database, table)]


# Uncompressed values are the same path without the decompressor (the rest of tests/unit/test_open_protocol.py).
@pytest.mark.parametrize("compression", ["snappy"])
def test_open_protocol_stream_into_delta(spark, kafka, tmp_path, unique, compression):
    claims = tmp_path / "claims"
    claims.mkdir()
    writer = OpenProtocolWriter(
        location="America/Chicago", compression=compression, max_batch_size=4,
        claim_check_dir=claims if compression != "none" else None, claim_check_over_bytes=500,
    )
    feed = demo_changefeed(seed=43, changes=150, open_writer=writer)
    topic, target = f"open-{unique}", str(tmp_path / "delta")
    publish(kafka, topic, feed.messages)
    protocol = {"name": "open-protocol", "timestamp_zone": "America/Chicago",
                "large_message_compression": compression, "claim_check_root": str(claims)}

    run_job(spark, kafka, topic, target, f"g-{unique}", protocol=protocol)

    for table, ddl in DEMO_TABLES.items():
        assert_table(spark, target, feed, "shop", table, ddl, rows=as_open_protocol_carries(feed, "shop", table))
    versions = {t: table_version(spark, target, "shop", t) for t in DEMO_TABLES}
    replay = run_job(spark, kafka, topic, target, f"replay-{unique}", protocol=protocol)
    assert replay.rows_applied == 0
    assert {t: table_version(spark, target, "shop", t) for t in DEMO_TABLES} == versions


def test_open_protocol_ddl_evolution(spark, kafka, tmp_path, unique, engine="driver"):
    """The driver engine only since 2026-11-27 (CI time: 30 s of the oldest side): the Spark engine's run of a
    protocol's DDL (its staged decoding in Python workers, the same decoder) is Simple's DDL test; every
    protocol's worker decoder is checked against the driver's in tests/unit/test_staged_decoding.py."""
    # DELETEs name their key columns alone (delete-only-output-handle-key-columns), also in a transaction
    # moving a key and updating rows (two structures of a table at one commitTs).
    writer = OpenProtocolWriter(delete_only_handle_key_columns=True)
    feed = key_moves_and_deletes(ddl_evolution(items_feed(open_writer=writer), carries_defaults=False))
    topic, target = f"openddl-{unique}", str(tmp_path)
    publish(kafka, topic, feed.messages)

    run_job(spark, kafka, topic, target, f"g-{unique}", protocol={"name": "open-protocol"}, engine=engine)

    for (database, table), ddl in DDL_TABLES.items():
        assert_table(spark, target, feed, database, table, ddl, rows=as_open_protocol_carries(feed, database, table))
