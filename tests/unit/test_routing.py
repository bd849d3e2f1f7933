"""The `[[tables]]` rules (apply.places.routing): which upstream tables are materialized and under which names.

The rules' checks, the routes taken and saved with checkpoints, and a batch applied through them by the
applier against the recording stand-in for the Delta writer (tests/recording_writer.py). Real Kafka topics
and Delta tables: tests/e2e/test_table_rules.py.
"""

from __future__ import annotations

import json
import logging

import pytest

from tests.recording_writer import RecordingWriter, Tombstones, insert, structure
from ticdc_delta.apply.applier import Applier
from ticdc_delta.apply.places.routing import Routes, rules_of
from ticdc_delta.exceptions import ConfigError
from ticdc_delta.jobs.config import from_mapping
from ticdc_delta.jobs.spark_engine.runs import StagedChanges, StagedRun
from ticdc_delta.schema_cache.events import Ordering, Position, SchemaChange, SchemaChangeKind, TableName


def name(text: str) -> TableName:
    database, table = text.split(".", 1)
    return TableName(database, table)


RULES = [
    {"match": "shop.audit_*", "skip": True},
    {"match": ["shop.*", "crm.customers"], "target": "raw_{database}.t_{table}"},
    {"match": "*.*_tmp", "skip": True},
]


@pytest.mark.parametrize("entry, error", [
    ({"match": "shop.*", "taget": "x.{table}"}, "tables[1].taget: unknown key; allowed: match, target, skip, properties, "
                                                "partition_by, cluster_by, comment"),
    ({"target": "x.{table}"}, "tables[1].match: is required"),
    ({"match": []}, "tables[1].match: must be"),
    ({"match": "shop.*", "target": "{table}"}, "must be a database part, one `.` and a table part"),
    ({"match": "shop.*", "target": "a.b.{table}"}, "must be a database part, one `.` and a table part"),
    ({"match": "shop.*", "target": " .{table}"}, "must be a database part"),
    ({"match": "shop.*", "target": "x.{schema}"}, "tables[1].target: 'x.{schema}': only {database} and {table} may be put in, without a format, got {schema}"),
    ({"match": "shop.*", "target": "x.{table!r}"}, "only {database} and {table}"),
    ({"match": "shop.*", "target": "x.{table"}, "write a literal brace as {{ or }}"),
    ({"match": "shop.*", "target": "x.{table}", "skip": True}, "tables[1]: `skip` and `target` together"),
    ({"match": "shop.*", "skip": "yes"}, "tables[1].skip: must be true or false"),
    ({"match": "shop.*", "properties": {"delta.enableDeletionVectors": "true"}},
     "tables[1].properties.delta.enableDeletionVectors: table features are target.table_features's"),
    ({"match": "shop.*", "properties": {"delta.feature.v2Checkpoint": "supported"}}, "are target.table_features's"),
    ({"match": "shop.*", "properties": {"a": [1]}}, "tables[1].properties.a: must be a string, number or boolean"),
    ({"match": "shop.*", "partition_by": ["a"], "cluster_by": ["b"]}, "`partition_by` and `cluster_by` together"),
    ({"match": "shop.*", "partition_by": [1]}, "tables[1].partition_by: must be a list of column names"),
    ({"match": "shop.*", "comment": "from {db}"}, "tables[1].comment: 'from {db}': only {database} and {table}"),
    ({"match": "shop.*", "skip": True, "cluster_by": ["a"]}, "a skipped table is not created; `skip` takes no layout"),
    # many upstream tables to one name, seen from the rule alone
    ({"match": "shop.orders_*", "target": "x.orders"}, "sends every table matching 'shop.orders_*' to one name; put {table}"),
    ({"match": "shop_*.orders", "target": "x.{table}"}, "put {database} in it"),
    ({"match": "*", "target": "x.{table}"}, "put {database} in it"),
])
def test_a_bad_rule_is_one_configuration_error_naming_it(entry, error):
    with pytest.raises(ConfigError) as caught:
        rules_of([{"match": "crm.*"}, entry][1:])
    assert error in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_tables_array_must_be_one_of_tables():
    with pytest.raises(ConfigError, match=r"tables: must be an array of tables \(\[\[tables\]\] entries\)"):
        from_mapping({"kafka": {"topics": ["t"]}, "target": {"path": "/x"}, "tables": {"match": "a.b"}})


def test_the_first_matching_rule_decides_and_a_table_no_rule_matches_keeps_its_name():
    routes = Routes(rules_of(RULES))
    assert routes.route(name("shop.audit_log")) is None
    assert routes.route(name("shop.orders")) == TableName("raw_shop", "t_orders")
    assert routes.route(name("shop.orders_tmp")) == TableName("raw_shop", "t_orders_tmp")  # rule 2 came first
    assert routes.route(name("crm.customers")) == TableName("raw_crm", "t_customers")
    assert routes.route(name("crm.leads_tmp")) is None
    assert routes.route(name("crm.leads")) == TableName("crm", "leads")
    # names are data: a `.` or braces in an upstream name are put in as they are
    assert routes.route(TableName("shop", "a.b{table}")) == TableName("raw_shop", "t_a.b{table}")


def test_two_tables_routed_to_one_name_are_refused_naming_both():
    routes = Routes(rules_of([{"match": "shop.orders", "target": "crm.orders"}]))
    assert routes.target(name("shop.orders")) == name("crm.orders")
    with pytest.raises(ConfigError, match=r"tables: crm\.orders and shop\.orders are both routed to crm\.orders"):
        routes.target(name("crm.orders"))


def test_targets_that_differ_only_by_case_are_one_table_unless_the_catalog_compares_case():
    # Setup: a.Orders -> x.Orders and b.orders -> x.orders (a catalog, by default, and a file system that ignores
    # case hold them as one table: a silent many-to-one).
    # Expect: refused naming both tables and both targets; where the catalog compares names with their case
    # (spark.sql.caseSensitive = true: `case_sensitive`), two tables.
    rules = rules_of([{"match": "a.*", "target": "x.{table}"}, {"match": "b.*", "target": "x.{table}"}])
    routes = Routes(rules)
    assert routes.target(name("a.Orders")) == name("x.Orders")
    with pytest.raises(ConfigError, match=r"tables: b\.orders and a\.Orders are both routed to x\.Orders and "
                                          r"x\.orders, one table where names ignore case;"):
        routes.target(name("b.orders"))
    both = Routes(rules, case_sensitive=True)
    assert [both.target(name(t)) for t in ("a.Orders", "b.orders")] == [name("x.Orders"), name("x.orders")]
    # A checkpoint's routes taken again meet the same check.
    with pytest.raises(ConfigError, match="one table where names ignore case"):
        Routes(rules).restore(json.dumps([["a", "Orders", "x", "Orders"], ["b", "orders", "x", "orders"]]), list)


def rename(old: str, new: str, offset: int, ts: int = 20) -> SchemaChange:
    return SchemaChange(name(new), ts, SchemaChangeKind.RENAME, structure(name(new), "id", "v"),
                        Position("t", 0, offset), f"RENAME TABLE {old} TO {new}", name(old))


def create(table: str, offset: int, ts: int = 10) -> SchemaChange:
    return SchemaChange(name(table), ts, SchemaChangeKind.CREATE, structure(name(table), "id", "v"),
                        Position("t", 0, offset), f"CREATE TABLE {table}")


def test_the_applier_writes_every_table_under_its_target_and_none_of_the_skipped_ones():
    # Setup: a batch creating four tables, a row in each, then a rename of a routed table.
    writer = RecordingWriter()
    batch = [create("shop.orders", 1), create("shop.audit_log", 2), create("crm.leads", 3), create("crm.x_tmp", 4),
             insert(name("shop.orders"), 11, 1), insert(name("shop.audit_log"), 11, 2), insert(name("crm.leads"), 11, 3),
             insert(name("crm.x_tmp"), 11, 4), rename("shop.orders", "shop.orders_v2", 9)]
    applier = Applier(writer, Tombstones(), routes=Routes(rules_of(RULES)))
    applier.apply(batch, {"t": 30})
    # Expect: the routed names only; the rename renamed the routed table; the skipped tables' rows went nowhere.
    assert sorted(map(str, writer.tables)) == ["crm.leads", "raw_shop.t_orders_v2"]
    renames = [(str(c[1]), str(c[2])) for c in writer.calls if c[0] == "rename"]
    assert renames == [("raw_shop.t_orders", "raw_shop.t_orders_v2")]
    merged = sorted(str(c[1]) for c in writer.calls if c[0] == "merge")
    assert merged == ["crm.leads", "raw_shop.t_orders"]


def test_a_rename_across_the_selection_is_refused_naming_both_names_and_where():
    applier = Applier(RecordingWriter(), Tombstones(), routes=Routes(rules_of(RULES)))
    with pytest.raises(ConfigError, match=r"shop\.orders renamed to shop\.audit_orders at t/0@5 crosses the rules' "
                                          r"selection"):
        applier.apply([create("shop.orders", 1), rename("shop.orders", "shop.audit_orders", 5)], {"t": 30})


def test_a_dropped_or_renamed_away_name_frees_its_target():
    routes = Routes(rules_of([{"match": "shop.orders", "target": "crm.orders"}]))
    drop = SchemaChange(name("shop.orders"), 20, SchemaChangeKind.DROP, None, Position("t", 0, 7), "DROP TABLE orders")
    routes.routed([create("shop.orders", 1), drop])
    assert routes.target(name("crm.orders")) == name("crm.orders")
    assert json.loads(routes.saved()) == [["crm", "orders", "crm", "orders"]]


def saved_after(rules, *tables: str) -> str:
    routes = Routes(rules_of(rules))
    for table in tables:
        routes.target(name(table))
    return routes.saved()


def test_routes_saved_with_a_checkpoint_are_taken_again_and_rules_may_grow_for_tables_not_seen():
    saved = saved_after(RULES, "shop.orders", "shop.audit_log", "crm.leads")
    grown = [{"match": "crm.leads_new", "target": "x.y"}, *RULES]
    routes = Routes(rules_of(grown))
    routes.restore(saved, lambda: pytest.fail("the registry is read only when a route moves"))
    assert json.loads(routes.saved()) == json.loads(saved)
    assert routes.target(name("crm.leads_new")) == name("x.y")


def test_a_rule_change_moving_a_table_already_routed_is_refused_at_start():
    saved = saved_after(RULES, "shop.orders")
    moved = [{"match": "shop.*", "target": "lake.{table}"}]
    with pytest.raises(ConfigError, match=r"tables: shop\.orders is materialized as raw_shop\.t_orders and the rules now "
                                          r"route it to lake\.orders: a table keeps its route once made; put back the rule"):
        Routes(rules_of(moved)).restore(saved, lambda: [name("raw_shop.t_orders")])
    # unless its new target is there already (loaded from a snapshot under the new name)
    routes = Routes(rules_of(moved))
    routes.restore(saved, lambda: [name("raw_shop.t_orders"), name("lake.orders")])
    assert routes.target(name("shop.orders")) == name("lake.orders")


def test_a_table_skipped_before_is_not_materialized_later_without_its_rows():
    saved = saved_after(RULES, "shop.audit_log")
    with pytest.raises(ConfigError, match=r"shop\.audit_log was skipped by earlier rules, so its changes until now are "
                                          r"in no table"):
        Routes(rules_of(RULES[1:])).restore(saved, lambda: [])


def test_a_table_skipped_from_now_on_is_told_once_and_stays_as_it_is(caplog):
    saved = saved_after(RULES, "crm.leads")
    routes = Routes(rules_of([{"match": "crm.leads", "skip": True}]))
    with caplog.at_level(logging.WARNING, "ticdc_delta.apply.places.routing"):
        routes.restore(saved, lambda: [])
    assert "crm.leads is skipped from now on; its table crm.leads stays as it is" in caplog.text
    assert routes.target(name("crm.leads")) is None


def test_rules_added_to_a_job_that_had_none_keep_the_tables_it_made_where_they_are():
    # A checkpoint without routes: every table in the registry was routed to its own name.
    rules = [{"match": "shop.*", "target": "raw_{database}.{table}"}]
    with pytest.raises(ConfigError, match=r"shop\.orders is materialized as shop\.orders and the rules now route it to "
                                          r"raw_shop\.orders"):
        Routes(rules_of(rules)).restore(None, lambda: [name("shop.orders")])
    routes = Routes(rules_of(rules))
    routes.restore(None, lambda: [name("crm.leads")])
    assert routes.target(name("shop.new")) == name("raw_shop.new")
    # rules removed later: the routes saved still hold (the job goes on saving them; one that moves is refused)
    again = Routes(())
    again.restore(saved_after([], "crm.leads"), lambda: [])
    assert again and again.target(name("crm.leads")) == name("crm.leads")
    with pytest.raises(ConfigError, match=r"shop\.new is materialized as raw_shop\.new and the rules now route it to "
                                          r"shop\.new"):
        Routes(()).restore(routes.saved(), lambda: [name("raw_shop.new")])


def test_the_configuration_takes_an_array_of_rules_and_logs_them():
    config = from_mapping({"kafka": {"topics": ["t"]}, "target": {"path": "/x"}, "tables": RULES})
    assert [r.key for r in config.tables] == ["tables[1]", "tables[2]", "tables[3]"]
    assert config.describe()["tables"][1] == {"match": ["shop.*", "crm.customers"], "target": "raw_{database}.t_{table}",
                                              "skip": False, "properties": {}, "partition_by": [], "cluster_by": [],
                                              "comment": "TiDB table {database}.{table}, materialized by ticdc-delta"}


def test_a_created_tables_layout_is_its_rules_with_the_upstream_name_in_its_comment():
    routes = Routes(rules_of([{"match": "shop.*", "target": "raw.{table}", "properties": {"delta.checkpointInterval": 5,
                                                                                          "delta.enableChangeDataFeed": True},
                               "partition_by": "region", "comment": "from {database}.{table}"}]))
    assert routes.target(name("shop.orders")) == name("raw.orders")
    layout = routes.layout(name("raw.orders"))
    assert (layout.rule, layout.upstream, layout.partition_by, layout.comment) == (
        "tables[1]", name("shop.orders"), ("region",), "from shop.orders")
    assert layout.properties == {"delta.checkpointInterval": "5", "delta.enableChangeDataFeed": "true"}
    # a table no rule matches: its own name, the default comment, nothing else
    assert routes.layout(name("crm.leads")).comment == "TiDB table crm.leads, materialized by ticdc-delta"


def test_the_spark_engines_staged_changes_are_routed_and_still_read_their_rows_by_the_upstream_name():
    # (The e2e test runs the driver engine; this is what differs for the Spark engine's batches.)
    schema = structure(name("shop.orders"), "id", "v")
    run = StagedRun(name("shop.orders"), "t", schema, "r", (10, 0, 1, 0), (10, 0, 2, 0), 10, 10, 2, {"INSERT": 2})
    skipped = StagedChanges(name("shop.audit_log"), Ordering.COMMIT_TS, [run])
    routed = Routes(rules_of(RULES)).routed([StagedChanges(name("shop.orders"), Ordering.COMMIT_TS, [run]), skipped])
    assert [(type(c), c.table, c.runs) for c in routed] == [(StagedChanges, name("raw_shop.t_orders"), [run])]
    assert routed[0].runs[0].table == name("shop.orders")  # where the staging table holds its rows
