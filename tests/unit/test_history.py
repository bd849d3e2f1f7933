"""History tables: the MERGE source built from a batch's row changes, which tables keep history, the config."""

from __future__ import annotations

import pytest

from ticdc_delta.apply.changes.history import HistoryChoice, history_schema, history_source
from ticdc_delta.exceptions import ApplyError, ConfigError
from ticdc_delta.jobs import config
from ticdc_delta.schema_cache.events import Column, Op, Position, RowChange, TableName, TableSchema

T = TableName("db", "t")
SCHEMA = TableSchema(T, (Column("id", "INT"), Column("v", "STRING")), ("id",))
MINIMAL = {"kafka": {"topics": ["cdc"]}, "target": {"path": "/data/delta"}}


def change(ts: int, op: Op, before=None, after=None) -> RowChange:
    return RowChange(T, ts, op, before, after, SCHEMA, Position("a", 0, 0))


def close(key: int, ts: int) -> tuple:
    return (key, None, True, ts, None, False, None)


def state(key: int, v: str, start: int, end: int | None, op: str) -> tuple:
    return (key, v, False, start, end, end is None, op)


@pytest.mark.parametrize(
    "label, rows, expected",
    [
        ("an insert: a close (a no-op where the key has no state) and a current state",
         [change(1, Op.INSERT, after=(1, "a"))],
         [close(1, 1), state(1, "a", 1, None, "INSERT")]),
        ("updates in one batch: each state, closed by the next",
         [change(1, Op.INSERT, after=(1, "a")), change(2, Op.UPDATE, (1, None), (1, "b")),
          change(3, Op.UPDATE, (1, None), (1, "c"))],
         [close(1, 1), state(1, "a", 1, 2, "INSERT"), state(1, "b", 2, 3, "UPDATE"), state(1, "c", 3, None, "UPDATE")]),
        ("a delete only closes: the state before it ends there",
         [change(1, Op.UPDATE, (1, None), (1, "a")), change(2, Op.DELETE, before=(1, None)),
          change(3, Op.INSERT, after=(1, "z"))],
         [close(1, 1), state(1, "a", 1, 2, "UPDATE"), state(1, "z", 3, None, "INSERT")]),
        ("a lone delete: the key's current state is closed, nothing is inserted",
         [change(4, Op.DELETE, before=(1, None))],
         [close(1, 4)]),
        ("a split update (delete and insert of one key at one commitTs, either order): one state",
         [change(2, Op.INSERT, after=(1, "n")), change(2, Op.DELETE, before=(1, None))],
         [close(1, 2), state(1, "n", 2, None, "INSERT")]),
        ("an update moving the key: the old key closed, the new one begins",
         [change(5, Op.UPDATE, (1, None), (2, "m"))],
         [close(1, 5), close(2, 5), state(2, "m", 5, None, "UPDATE")]),
        ("an insert then an update in one transaction: one state, begun by the insert",
         [change(6, Op.INSERT, after=(3, "x")), change(6, Op.UPDATE, (3, None), (3, "y"))],
         [close(3, 6), state(3, "y", 6, None, "INSERT")]),
        ("rows out of commitTs order are put in order",
         [change(9, Op.UPDATE, (1, None), (1, "late")), change(8, Op.UPDATE, (1, None), (1, "early"))],
         [close(1, 8), state(1, "early", 8, 9, "UPDATE"), state(1, "late", 9, None, "UPDATE")]),
    ],
)
def test_history_source(label, rows, expected):
    # Setup: one batch's row changes of a table (id key, v).
    # Expect: per key one close at its first commitTs, then every state it took with its validity.
    assert sorted(history_source(rows, SCHEMA), key=repr) == sorted(expected, key=repr), label


def test_tables_keeping_history_are_chosen_by_name_or_pattern_and_history_tables_never_keep_their_own():
    choice = HistoryChoice(("shop.*", "crm.customers"), "_history")
    assert choice.wants(TableName("shop", "orders")) and choice.wants(TableName("crm", "customers"))
    assert not choice.wants(TableName("crm", "leads")) and not choice.wants(TableName("shopping", "x"))
    assert choice.history_of(TableName("shop", "orders")) == TableName("shop_history", "orders")
    assert not HistoryChoice(("*",)).wants(TableName("shop_history", "orders"))
    assert not HistoryChoice()


def test_a_table_with_a_column_named_like_a_history_column_is_refused():
    clashing = TableSchema(T, (Column("id", "INT"), Column("Is_Current", "BOOLEAN")), ("id",))
    with pytest.raises(ApplyError, match="Is_Current"):
        history_schema(clashing)
    assert [c.name for c in history_schema(SCHEMA).columns] == [
        "id", "v", "valid_from_commit_ts", "valid_to_commit_ts", "is_current", "op"]


def test_history_config_section():
    # Expect: off by default; tables and suffix taken and logged; bad values and the offset-ordered avro
    # protocol refused with the key named.
    assert not config.from_mapping(MINIMAL).history.choice()
    chosen = config.from_mapping({**MINIMAL, "history": {"tables": ["shop.*"], "database_suffix": "_scd"}})
    assert chosen.history.choice().history_of(TableName("shop", "a")) == TableName("shop_scd", "a")
    assert chosen.describe()["history"] == {"tables": ("shop.*",), "database_suffix": "_scd"}
    for bad in ({"tables": "shop.*"}, {"tables": ["orders"]}, {"database_suffix": ""}):
        with pytest.raises(ConfigError, match="history"):
            config.from_mapping({**MINIMAL, "history": bad})
    with pytest.raises(ConfigError, match="offset order"):
        config.from_mapping({**MINIMAL, "history": {"tables": ["a.b"]}, "protocol": {"name": "avro"},
                             "registry": {"url": "http://registry:8081"}})
