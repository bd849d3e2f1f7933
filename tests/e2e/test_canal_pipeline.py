"""End to end: TiCDC's canal-json protocol through Kafka into Delta, incl. large-message handling."""

from __future__ import annotations

import pytest

from testbed.demo import demo_changefeed
from testbed.encoders.canal import CanalJsonWriter
from tests.support import assert_table, publish, run_job, table_version
from tests.workloads import DDL_EVOLUTION_TABLES, ddl_evolution, items_feed, key_moves_and_deletes

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
CANAL = {"name": "canal-json", "enable_tidb_extension": True, "timestamp_zone": "Europe/Paris"}


# snappy differs from lz4 only in the decompressor: tests/unit/test_canal_json.py decodes both. Messages
# neither compressed nor claim-checked: the DDL test below (a variant without compression here was cut on
# 2026-11-27, CI time: the same decoding, less of it).
def test_canal_stream_into_delta(spark, kafka, tmp_path, unique):
    # Setup: the demo stream as canal-json with the TiDB extension and content-compatible
    # types, TIMESTAMPs in the server's zone, values compressed with lz4, and messages over
    # 400 bytes claim-checked to a folder.
    # Expect: tables equal upstream; a replay under a new group changes nothing.
    claims = tmp_path / "claims"
    claims.mkdir()
    writer = CanalJsonWriter(
        content_compatible=True, location="Europe/Paris", compression="lz4", claim_check_dir=claims,
        claim_check_over_bytes=400,
    )
    feed = demo_changefeed(seed=41, changes=150, canal_writer=writer)
    topic, target = f"canal-{unique}", str(tmp_path / "delta")
    publish(kafka, topic, feed.messages)
    protocol = {**CANAL, "large_message_compression": "lz4", "claim_check_root": str(claims)}
    assert any(claims.iterdir()), "some messages should have been claim-checked"

    run_job(spark, kafka, topic, target, f"g-{unique}", protocol=protocol)

    for table, ddl in DEMO_TABLES.items():
        assert_table(spark, target, feed, "shop", table, ddl)
    versions = {t: table_version(spark, target, "shop", t) for t in DEMO_TABLES}
    replay = run_job(spark, kafka, topic, target, f"replay-{unique}", protocol=protocol)
    assert replay.rows_applied == 0
    assert {t: table_version(spark, target, "shop", t) for t in DEMO_TABLES} == versions


def test_canal_ddl_evolution(spark, kafka, tmp_path, unique, engine="driver"):
    """The driver engine only since 2026-11-28 (CI time: 90 s of the oldest side, its first end-to-end test):
    canal-json's decoding on the Spark engine's executors is tests/unit/test_staged_decoding.py's (every
    protocol's worker decoder against the driver's), and that engine's run of a DDL stream is Simple's DDL test."""
    # DDL carries only its statement: structures come from the rows after each DDL (columns
    # dropped, added, widened); the statement tells renames. Defaults are not carried. DELETEs
    # name their key columns alone (delete-only-output-handle-key-columns), also in a
    # transaction moving a key and updating rows (two structures of a table at one commitTs).
    writer = CanalJsonWriter(content_compatible=True, delete_only_handle_key_columns=True)
    feed = key_moves_and_deletes(ddl_evolution(items_feed(canal_writer=writer), carries_defaults=False))
    topic, target = f"canalddl-{unique}", str(tmp_path)
    publish(kafka, topic, feed.messages)

    run_job(spark, kafka, topic, target, f"g-{unique}", protocol={**CANAL, "timestamp_zone": "UTC"}, engine=engine)

    for (database, table), ddl in DDL_EVOLUTION_TABLES.items():
        assert_table(spark, target, feed, database, table, ddl)
