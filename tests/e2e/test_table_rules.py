"""The `[[tables]]` rules on the real broker and real Delta tables: which upstream tables are materialized and
under which names, a RENAME following the routed name, the routes kept across runs, a rule change that would
move a table refused at start. The rules' own checks and every refusal: tests/unit/test_routing.py."""

from __future__ import annotations

import pytest

from testbed.tables import column
from tests.support import assert_table, job_config, located_path, publish, run_job
from tests.workloads import ITEMS_DDL, item, items_feed
from ticdc_delta.exceptions import ConfigError
from ticdc_delta.jobs.pipeline import Pipeline

pytestmark = pytest.mark.e2e

RULES = [
    {"match": "shop.audit_*", "skip": True},
    {"match": "shop.*", "target": "raw_{database}.t_{table}", "partition_by": ["name"],
     "properties": {"delta.enableChangeDataFeed": True, "delta.checkpointInterval": 5}},
    {"match": "crm.leads", "cluster_by": ["who"], "comment": "it's \\ {database}.{table}"},  # (quotes and backslashes kept)
]
LEADS_DDL = "id INT, who STRING"
ITEMS_LATER_DDL = "id INT, name STRING, updated TIMESTAMP"  # after its DROP COLUMN price


def _detail(spark, target: str, database: str, table: str) -> dict:
    return spark.sql(f"DESCRIBE DETAIL delta.`{located_path(spark, target, database, table)}`").collect()[0].asDict()


@pytest.mark.both_pairs("CREATE TABLE with PARTITIONED BY, CLUSTER BY, COMMENT and properties, and a rewrite's partitioning "
                        "and ALTER TABLE ... CLUSTER BY, on each Delta")
def test_tables_land_where_the_rules_say_a_rename_follows_and_a_moving_rule_is_refused(spark, kafka, tmp_path, unique):
    # Setup: shop.items and shop.orders (routed to raw_shop.t_*), shop.audit_log (skipped) and crm.leads (a rule
    # with only a layout: its own name) with rows; then shop.orders renamed upstream to shop.orders_v2 and
    # shop.items' price dropped, and more rows; one run. Then a start whose rules would put the shop tables
    # elsewhere. (The driver engine: the Spark engine's staged changes are routed by the same code,
    # tests/unit/test_routing.py; the CI time of a variant of its own.)
    topic, target, group = f"rules-{unique}", str(tmp_path), f"g-{unique}"
    feed = items_feed()
    feed.create_table("shop", "orders", [column("id", "int", nullable=False), column("name", "varchar", length=64),
                                         column("price", "decimal", length=10, decimal=2),
                                         column("updated", "timestamp", decimal=6)], primary_key=["id"])
    feed.create_table("shop", "audit_log", [column("id", "int", nullable=False), column("who", "varchar", length=32)],
                      primary_key=["id"])
    feed.create_table("crm", "leads", [column("id", "int", nullable=False), column("who", "varchar", length=32)],
                      primary_key=["id"])
    for i in range(6):
        with feed.transaction() as txn:
            txn.insert("shop", "items", item(i))
            txn.insert("shop", "orders", item(100 + i))
            txn.insert("shop", "audit_log", {"id": i, "who": f"a{i}"})
            txn.insert("crm", "leads", {"id": i, "who": f"l{i}"})
    feed.rename_table("shop", "orders", "shop", "orders_v2")
    feed.drop_column("shop", "items", "price")  # (no column mapping under `compatible`: a rewrite of the table)
    for i in range(6, 9):
        with feed.transaction() as txn:
            txn.insert("shop", "orders_v2", item(100 + i))
            txn.update("shop", "items", [i - 6], {"name": "changed"})
            txn.insert("shop", "audit_log", {"id": i, "who": f"a{i}"})
    publish(kafka, topic, feed.messages)
    run_job(spark, kafka, topic, target, group, tables=RULES)
    # Expect: each table under its routed name (the renamed one under its new name's route, in its folder), no
    # table for the skipped one, the others under their own names, equal to upstream; each created with its
    # rule's layout and comment, kept through the rewrite the dropped column made. The start with other rules
    # is refused by the routes the run's checkpoint saved, and writes nothing.
    assert_table(spark, target, feed, "raw_shop", "t_items", ITEMS_LATER_DDL, rows=feed.expected_rows("shop", "items"))
    assert_table(spark, target, feed, "raw_shop", "t_orders_v2", ITEMS_DDL, rows=feed.expected_rows("shop", "orders_v2"))
    assert_table(spark, target, feed, "crm", "leads", LEADS_DDL)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("_")) == ["crm", "raw_shop"]
    items, leads = _detail(spark, target, "raw_shop", "t_items"), _detail(spark, target, "crm", "leads")
    assert items["partitionColumns"] == ["name"] and items["description"] == (
        "TiDB table shop.items, materialized by ticdc-delta")
    assert {k: items["properties"].get(k) for k in ("delta.enableChangeDataFeed", "delta.checkpointInterval")} == {
        "delta.enableChangeDataFeed": "true", "delta.checkpointInterval": "5"}
    assert leads["clusteringColumns"] == ["who"] and leads["description"] == "it's \\ crm.leads"
    moved = job_config(kafka, topic, target, group, tables=[RULES[0], {"match": "shop.*", "target": "lake.{table}"}])
    with pytest.raises(ConfigError, match=r"tables: shop\.items is materialized as raw_shop\.t_items and the rules now "
                                          r"route it to lake\.items"):
        Pipeline.from_config(moved, spark).run()
    assert not (tmp_path / "lake").exists()


@pytest.mark.spark_only_tables("table_features = 'full': column mapping and deletion vectors, which delta-rs 1.6 refuses")
def test_a_partition_or_clustering_column_dropped_upstream_under_the_full_layout_rewrites_the_table(
        spark, kafka, tmp_path, unique):
    # Setup: target.table_features = "full" (column mapping: drops in place); rules partitioning shop.items by
    # `name` and clustering crm.leads by `who`, with rows; then upstream drops those very columns, and more rows.
    # Expect: one run applies it all, each table equal upstream, without the column and its layout (Delta refuses
    # ALTER TABLE DROP COLUMNS on either: the job failed that DDL at every restart; it now rewrites the table, as
    # under "compatible").
    topic, target = f"laid-{unique}", str(tmp_path)
    feed = items_feed()
    feed.create_table("crm", "leads", [column("id", "int", nullable=False), column("who", "varchar", length=32),
                                       column("note", "varchar", length=32)], primary_key=["id"])
    for i in range(4):
        with feed.transaction() as txn:
            txn.insert("shop", "items", item(i))
            txn.insert("crm", "leads", {"id": i, "who": f"l{i}", "note": "n"})
    feed.drop_column("shop", "items", "name")
    feed.drop_column("crm", "leads", "who")
    with feed.transaction() as txn:
        txn.update("shop", "items", [0], {"price": item(9)["price"]})
        txn.insert("crm", "leads", {"id": 9, "note": "after"})
    publish(kafka, topic, feed.messages)
    rules = [{"match": "shop.items", "partition_by": ["name"]}, {"match": "crm.leads", "cluster_by": ["who"]}]
    run_job(spark, kafka, topic, target, f"g-{unique}", tables=rules, target={"table_features": "full"})
    assert_table(spark, target, feed, "shop", "items", "id INT, price DECIMAL(10,2), updated TIMESTAMP")
    assert_table(spark, target, feed, "crm", "leads", "id INT, note STRING")
    assert _detail(spark, target, "shop", "items")["partitionColumns"] == []
    assert not _detail(spark, target, "crm", "leads").get("clusteringColumns")
