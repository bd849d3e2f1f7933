"""Collapsing a table's row changes to the net change per key."""

from __future__ import annotations

import pytest

from ticdc_delta.apply.changes.collapse import NetChange, collapse, collapse_run
from ticdc_delta.schema_cache.events import Column, Op, Position, RowChange, TableName, TableSchema

T = TableName("db", "t")
SCHEMA = TableSchema(T, (Column("id", "INT"), Column("v", "STRING")), ("id",))


def change(ts: int, op: Op, before=None, after=None, offset: int = 0) -> RowChange:
    return RowChange(T, ts, op, before, after, SCHEMA, Position("a", 0, offset))


@pytest.mark.parametrize(
    "label, rows, expected",
    [
        ("insert", [change(1, Op.INSERT, after=(1, "a"))], {(1,): NetChange(False, (1, "a"))}),
        (
            "insert then updates: last image wins",
            [
                change(1, Op.INSERT, after=(1, "a")),
                change(2, Op.UPDATE, (1, "a"), (1, "b")),
                change(3, Op.UPDATE, (1, "b"), (1, "c")),
            ],
            {(1,): NetChange(False, (1, "c"))},
        ),
        (
            "delete wins over earlier insert",
            [change(1, Op.INSERT, after=(1, "a")), change(2, Op.DELETE, before=(1, "a"))],
            {(1,): NetChange(True, (1, "a"))},
        ),
        (
            "delete then re-insert: row exists",
            [change(1, Op.DELETE, before=(1, "a")), change(2, Op.INSERT, after=(1, "z"))],
            {(1,): NetChange(False, (1, "z"))},
        ),
        (
            "key-changing update as one UPDATE moves the row",
            [change(5, Op.UPDATE, (1, "a"), (2, "a"))],
            {(1,): NetChange(True, (1, "a")), (2,): NetChange(False, (2, "a"))},
        ),
        (
            "key change split as DELETE + INSERT at one commitTs",
            [change(5, Op.DELETE, before=(1, "a")), change(5, Op.INSERT, after=(2, "a"))],
            {(1,): NetChange(True, (1, "a")), (2,): NetChange(False, (2, "a"))},
        ),
        (
            "same key DELETE + INSERT at one commitTs in either arrival order: the row exists",
            [change(5, Op.INSERT, after=(1, "new")), change(5, Op.DELETE, before=(1, "old"))],
            {(1,): NetChange(False, (1, "new"))},
        ),
        (
            "update out of arrival order by commitTs",
            [change(9, Op.UPDATE, (1, "b"), (1, "late")), change(4, Op.UPDATE, (1, "a"), (1, "early"))],
            {(1,): NetChange(False, (1, "late"))},
        ),
        (
            # TiDB reports one final change per row of a transaction: swapping
            # the keys of two rows yields two key-changing UPDATEs at one commitTs.
            "swap of two keys in one transaction, as UPDATEs",
            [change(5, Op.UPDATE, (1, "a"), (2, "a")), change(5, Op.UPDATE, (2, "b"), (1, "b"))],
            {(1,): NetChange(False, (1, "b")), (2,): NetChange(False, (2, "a"))},
        ),
        (
            "swap of two keys in one transaction, split into DELETE + INSERT",
            [
                change(5, Op.DELETE, before=(1, "a")),
                change(5, Op.INSERT, after=(2, "a")),
                change(5, Op.DELETE, before=(2, "b")),
                change(5, Op.INSERT, after=(1, "b")),
            ],
            {(1,): NetChange(False, (1, "b")), (2,): NetChange(False, (2, "a"))},
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_collapse(label, rows, expected):
    result = collapse(rows)
    by_key = {(c.values[0],): c for c in result}
    assert by_key == expected
    assert len(result) == len(by_key), "a MERGE source must hold one row per key"


def test_composite_keys():
    schema = TableSchema(T, (Column("a", "INT"), Column("b", "STRING"), Column("v", "INT")), ("b", "a"))
    rows = [
        RowChange(T, 1, Op.INSERT, None, (1, "x", 10), schema, Position("a", 0, 0)),
        RowChange(T, 2, Op.INSERT, None, (1, "y", 20), schema, Position("a", 0, 1)),
        RowChange(T, 3, Op.UPDATE, (1, "x", 10), (1, "x", 11), schema, Position("a", 0, 2)),
    ]
    assert sorted(c.values for c in collapse(rows)) == [(1, "x", 11), (1, "y", 20)]


def test_empty_batch():
    assert collapse([]) == []


def test_arrival_order_for_offset_ordered_protocols():
    # Avro: no commitTs on tombstones (0), a key's changes in offset order.
    rows = [
        change(0, Op.UPSERT, after=(1, "a")),
        change(0, Op.DELETE, before=(1, None)),
        change(0, Op.UPSERT, after=(2, "b")),
        change(0, Op.UPSERT, after=(2, "c")),
    ]
    by_key = {c.values[0]: c for c in collapse(rows, by_commit_ts=False)}
    assert by_key == {1: NetChange(True, (1, None)), 2: NetChange(False, (2, "c"))}


@pytest.mark.parametrize(
    "label, rows, new",
    [
        ("inserts of distinct keys", [change(1, Op.INSERT, after=(1, "a")), change(2, Op.INSERT, after=(2, "b"))], True),
        (
            "inserted, updated, deleted and inserted again within the run",
            [
                change(1, Op.INSERT, after=(1, "a")),
                change(2, Op.UPDATE, (1, "a"), (1, "b")),
                change(3, Op.DELETE, before=(1, "b")),
                change(4, Op.INSERT, after=(1, "c")),
            ],
            True,
        ),
        ("a redelivered insert", [change(1, Op.INSERT, after=(1, "a")), change(1, Op.INSERT, after=(1, "a"))], True),
        ("out of arrival order", [change(3, Op.DELETE, before=(1, "a")), change(2, Op.INSERT, after=(1, "a"))], True),
        ("an update of a key not inserted here", [change(1, Op.INSERT, after=(1, "a")), change(2, Op.UPDATE, (2, "x"), (2, "b"))], False),
        ("a delete of a key not inserted here", [change(1, Op.INSERT, after=(1, "a")), change(2, Op.DELETE, before=(2, "x"))], False),
        ("an upsert (insert or update)", [change(1, Op.UPSERT, after=(1, "a"))], False),
        (
            "one key's split update, INSERT half first: the key existed",
            [change(5, Op.INSERT, after=(1, "new")), change(5, Op.DELETE, before=(1, "old"))],
            False,
        ),
        (
            "a key change split as DELETE + INSERT: the old key existed",
            [change(5, Op.INSERT, after=(2, "a")), change(5, Op.DELETE, before=(1, "a"))],
            False,
        ),
        ("a key-changing UPDATE", [change(1, Op.INSERT, after=(1, "a")), change(2, Op.UPDATE, (1, "a"), (2, "a"))], False),
    ],
)
def test_a_run_is_known_to_bring_only_new_keys_when_each_key_begins_with_an_insert(label, rows, new):
    assert collapse_run(rows)[1] is new, label
    assert collapse_run(rows)[0] == collapse(rows)
    assert collapse_run(rows, by_commit_ts=False)[1] is False  # arrival order: never known
