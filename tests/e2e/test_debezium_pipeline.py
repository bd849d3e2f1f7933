"""End to end: TiCDC's debezium protocol through Kafka into Delta, against upstream and against Simple."""

from __future__ import annotations

import pytest

from testbed.demo import demo_changefeed
from testbed.encoders.debezium import DebeziumWriter
from tests.support import assert_table, publish, run_job, table_version
from tests.workloads import DDL_EVOLUTION_TABLES, ddl_evolution, items_feed

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.one_pair(
        "this protocol's decoding is the same Python on both pairs, and the Delta operations its events become (MERGE, schema evolution, rewrites) run on both pairs in test_simple_pipeline and test_ddl_kinds",
        pair="newest",
    ),
]

DEMO_TABLES = {
    "customers": "id INT, name STRING, balance DECIMAL(12,2), signed_up TIMESTAMP, tier STRING",
    "orders": "order_no DECIMAL(20,0), customer_id INT, amount DECIMAL(10,2), status STRING, "
    "placed_at TIMESTAMP_NTZ, note STRING",
}


# Without the schema part (`debezium-disable-schema`) was a third variant until 2026-11-28 (CI time: 20 s): the
# rows then take their structure from the DDL events' table descriptions, and tests/unit/test_debezium.py decodes
# that form of the whole workload to the same rows as Simple's (also behind many DDLs, across restarts).
@pytest.mark.parametrize(
    "with_schema, extension",
    [(True, True), (True, False)],
    ids=["schema+extension", "schema-no-extension(offset order)"],
)
def test_debezium_stream_into_delta(spark, kafka, tmp_path, unique, with_schema, extension):
    # Setup: the demo stream (two tables, ADD COLUMN, key changes split into d + c) as TiCDC's
    # debezium protocol. Expect: tables equal upstream; a replay under a new group changes nothing.
    # (The protocol's acceptance check, its tables equal to Simple JSON's of the same workload, was a test of
    # its own until 2026-11-27: both are compared here and in test_simple_pipeline with the same upstream
    # model and Spark types, so it followed from them; cut for CI time.)
    writer = DebeziumWriter(with_schema=with_schema, enable_tidb_extension=extension)
    feed = demo_changefeed(seed=31, changes=200, debezium_writer=writer)
    topic, target = f"dbz-{unique}", str(tmp_path)
    publish(kafka, topic, feed.messages)
    protocol = {"name": "debezium", "enable_tidb_extension": extension, "allow_offset_ordering": not extension}

    run_job(spark, kafka, topic, target, f"g-{unique}", protocol=protocol)

    for table, ddl in DEMO_TABLES.items():
        assert_table(spark, target, feed, "shop", table, ddl)
    versions = {t: table_version(spark, target, "shop", t) for t in DEMO_TABLES}
    replay = run_job(spark, kafka, topic, target, f"replay-{unique}", protocol=protocol)
    assert replay.rows_applied == 0 and replay.schema_changes == 0
    assert {t: table_version(spark, target, "shop", t) for t in DEMO_TABLES} == versions


def test_debezium_ddl_evolution(spark, kafka, tmp_path, unique, engine="driver"):
    """The driver engine only since 2026-11-28 (CI time: 32 s of the oldest side): debezium's decoding on the
    Spark engine's executors is tests/unit/test_staged_decoding.py's, and that engine's run of a DDL stream is
    Simple's DDL test."""
    # ADD/DROP/RENAME/MODIFY COLUMN, RENAME TABLE (id old,new), TRUNCATE (no tableChanges),
    # DROP TABLE (table null), re-create: all from tableChanges, never from the DDL text.
    feed = ddl_evolution(items_feed(debezium_writer=DebeziumWriter()))
    topic, target = f"dbzddl-{unique}", str(tmp_path)
    publish(kafka, topic, feed.messages)

    run_job(spark, kafka, topic, target, f"g-{unique}", protocol={"name": "debezium", "enable_tidb_extension": True}, engine=engine)

    for (database, table), ddl in DDL_EVOLUTION_TABLES.items():
        assert_table(spark, target, feed, database, table, ddl)
