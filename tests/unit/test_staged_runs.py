"""The Spark engine's runs: deletes carrying their key alone share their neighbours' MERGE (`jobs.spark_engine.runs`)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests.recording_writer import RecordingWriter, Tombstones, insert
from ticdc_delta.apply.applier import Applier
from ticdc_delta.exceptions import ApplyError
from ticdc_delta.jobs.spark_engine.runs import Release, StagedRun, fold_key_deletes
from ticdc_delta.jobs.spark_engine.staging import _batch_images, _key_slots
from ticdc_delta.schema_cache.events import (
    Column,
    Ordering,
    Position,
    SchemaChange,
    SchemaChangeKind,
    TableName,
    TableSchema,
    TopicPartition,
)
from ticdc_delta.schema_cache.serialized import dump_row

ITEMS = TableName("shop", "items")
LOGS = TableName("shop", "logs")
FULL = TableSchema(ITEMS, (Column("id", "INT", False), Column("name", "STRING"), Column("qty", "INT")), ("id",))
KEY_ONLY = TableSchema(ITEMS, (Column("ID", "INT", False),), ("ID",))  # a canal-json DELETE's structure
WIDER = TableSchema(ITEMS, (*FULL.columns, Column("note", "STRING")), ("id",))
LOGS_SCHEMA = TableSchema(LOGS, (Column("id", "INT", False), Column("msg", "STRING")), ("id",))
FULL_VALUES = TableSchema(ITEMS, (Column("id", "INT"), Column("v", "INT")), ("id",))  # tests.recording_writer's rows
P0 = TopicPartition("t", 0)


def run(schema: TableSchema, ref: str, ts: int, offset: int, *, ops: dict, table: TableName = ITEMS) -> StagedRun:
    rows = sum(ops.values())
    return StagedRun(table, "t", schema, ref, (ts, 0, offset, 0), (ts, 0, offset + rows - 1, 0), ts, ts, rows, ops,
                     {P0: offset + rows})


def test_a_key_move_split_into_a_key_only_delete_and_an_insert_is_one_run():
    # Setup: at one commitTs an update (full structure), a key move's DELETE (key columns alone) and its
    #    INSERT (full structure); then rows of another table, and the items table's deletes at a later commitTs.
    # Expect: the three items runs are one, of the full structure with the key-only deletes folded in,
    #    spanning them all; its counts are theirs together; other tables' runs are untouched.
    events = [
        run(FULL, "f", 10, 0, ops={"UPDATE": 2}),
        run(KEY_ONLY, "k", 10, 2, ops={"DELETE": 1}),
        run(LOGS_SCHEMA, "l", 10, 3, ops={"INSERT": 1}, table=LOGS),
        run(FULL, "f", 10, 4, ops={"INSERT": 1}),
        run(KEY_ONLY, "k", 12, 5, ops={"DELETE": 3}),
    ]

    folded = fold_key_deletes(events)

    assert [type(e).__name__ for e in folded] == ["StagedRun", "StagedRun"]
    items, logs = folded
    assert logs == events[2]
    assert (items.ref, items.schema, items.other_refs) == ("f", FULL, (("k", KEY_ONLY),))
    assert (items.first, items.last) == (events[0].first, events[4].last)
    assert (items.min_commit_ts, items.commit_ts, items.rows) == (10, 12, 7)
    assert items.ops == {"UPDATE": 2, "DELETE": 4, "INSERT": 1} and items.offsets == {P0: 8}


def test_deletes_first_take_the_structure_of_the_rows_after_them():
    folded = fold_key_deletes([run(KEY_ONLY, "k", 10, 0, ops={"DELETE": 1}), run(FULL, "f", 10, 1, ops={"INSERT": 1})])
    assert len(folded) == 1 and folded[0].ref == "f" and folded[0].other_refs == (("k", KEY_ONLY),)


def test_a_schema_change_or_another_structure_with_values_ends_the_run():
    # Expect: runs across a DDL of the table (or a rename of it) stay apart; two structures with values
    #    (rows older than the table's, no DDL between) stay apart; deletes of another key stay apart.
    ddl = SchemaChange(ITEMS, 11, SchemaChangeKind.ALTER, WIDER, Position("t", 0, 3))
    renamed_away = SchemaChange(TableName("shop", "goods"), 11, SchemaChangeKind.RENAME, None, Position("t", 0, 3),
                                previous_name=ITEMS)
    other_key = TableSchema(ITEMS, (Column("name", "STRING", False),), ("name",))
    for between in (ddl, renamed_away):
        events = [run(FULL, "f", 10, 0, ops={"INSERT": 1}), between, run(KEY_ONLY, "k", 12, 4, ops={"DELETE": 1})]
        assert fold_key_deletes(events) == events
    events = [run(FULL, "f", 10, 0, ops={"INSERT": 1}), run(WIDER, "w", 10, 1, ops={"INSERT": 1})]
    assert fold_key_deletes(events) == events
    events = [run(FULL, "f", 10, 0, ops={"INSERT": 1}), run(other_key, "o", 10, 1, ops={"DELETE": 1})]
    assert fold_key_deletes(events) == events


def test_a_key_only_delete_image_holds_its_key_in_the_runs_columns_and_nulls_elsewhere():
    # Setup: the run's structure kept whole; a key-only delete's row (its key column named in other case).
    # Expect: its image has the key where the run's key column is, NULL in the others, and is a delete.
    keep = (0, 1, 2)
    slots = _key_slots(KEY_ONLY, FULL, keep)
    assert slots == (0, None, None)
    columns = {"commit_ts": [10], "partition": [0], "offset": [2], "seq": [0], "op": ["DELETE"],
               "before": [dump_row((7,))], "after": [dump_row(None)]}
    batch = _batch_images(pa, columns, slots, KEY_ONLY.key_indexes(), [pa.int32(), pa.string(), pa.int32()])
    image = batch.to_pydict()
    assert (image["c0"], image["c1"], image["c2"], image["ticdc_deleted"], image["upsert"]) == ([7], [None], [None], [True], [False])



def test_rows_of_one_structure_under_two_references_are_one_run_and_other_key_types_stay_apart():
    # Setup: at one commitTs rows of the full structure under two references (another schema version with the
    #    same columns), then deletes whose key is a BIGINT (the table's is INT: after a MODIFY, avro's
    #    tombstones carry their own key schema).
    # Expect: the first two are one run (a split would give the second's rows at that commitTs to a MERGE
    #    that takes them for applied); the deletes with another key type stay a run of their own.
    same_again = TableSchema(ITEMS, FULL.columns, ("id",), version=2)
    wide_key = TableSchema(ITEMS, (Column("id", "BIGINT", False),), ("id",))
    events = [run(FULL, "f", 10, 0, ops={"INSERT": 1}), run(same_again, "f2", 10, 1, ops={"UPDATE": 1}),
              run(wide_key, "w", 10, 2, ops={"DELETE": 1})]
    folded = fold_key_deletes(events)
    assert [(r.ref, r.other_refs, r.rows) for r in folded] == [("f", (("f2", same_again),), 2), ("w", (), 1)]


def test_a_staged_run_beginning_where_the_one_before_it_leaves_the_table_stops_the_batch():
    # Setup: two runs of one structure at commitTs 10 that were not folded (as staged by an older release),
    #    merged in turn: the first at its newest commitTs, 10, the second's source would then begin after 10.
    # Expect: ApplyError before either MERGE: the second's rows at 10 would be taken for applied.
    writer = RecordingWriter()
    Applier(writer, Tombstones()).apply([insert(ITEMS, 5, 1, FULL_VALUES)], {"t": 5})
    writer.calls.clear()
    first, second = run(FULL_VALUES, "f", 10, 0, ops={"INSERT": 1}), run(FULL_VALUES, "f2", 10, 1, ops={"INSERT": 1})
    with pytest.raises(ApplyError, match="two structures"):
        Applier(writer, Tombstones()).apply(Release([first, second], 0).for_applier(Ordering.COMMIT_TS), {"t": 10})
    assert not [c for c in writer.calls if c[0].startswith("merge")]


def test_a_small_releases_run_merges_its_rows_held_in_memory_as_the_driver_engine_does():
    # Setup: a release read into the driver (`StagingTable._held_rows`): the items table's rows at commitTs 9
    #    (an earlier run), then at 10 and 11 a run of the full structure with rows of the same structure under
    #    another reference and a key-only delete folded in, and rows of another table between them.
    # Expect: the run's changes are its own rows alone, in order, all in its structure (the key-only delete's
    #    key in the key column, NULL elsewhere); its MERGE source is rows held in memory: per key its net change
    #    since the table's point (10: the rows at 10 left out), as the driver engine's collapse gives them.
    from ticdc_delta.apply.changes.merge_source import SourceRows
    from ticdc_delta.apply.places.locator import PathLocator
    from ticdc_delta.apply.tables.points import AppliedPoint
    from ticdc_delta.jobs.spark_engine.runs import StagedChanges
    from ticdc_delta.jobs.spark_engine.staging import StagingTable

    staging = StagingTable(None, PathLocator("/nowhere"), "main", Ordering.COMMIT_TS, in_memory_rows=100)

    def row(table, ts, offset, ref, op, before, after):
        return {"commit_ts": ts, "partition": 0, "offset": offset, "seq": 0, "topic": "t", "database": table.database,
                "table": table.table, "schema_ref": ref, "op": op, "before": dump_row(before), "after": dump_row(after)}

    staging._held = {
        ITEMS: [row(ITEMS, 9, 0, "f", "INSERT", None, (1, "old", 1)),
                row(ITEMS, 10, 1, "f", "INSERT", None, (1, "a", 1)),
                row(ITEMS, 10, 2, "f", "INSERT", None, (2, "b", 2)),
                row(ITEMS, 11, 4, "f2", "UPDATE", (1, None, None), (1, "a2", 5)),
                row(ITEMS, 11, 5, "k", "DELETE", (2,), None),
                row(ITEMS, 11, 6, "f", "INSERT", None, (3, "c", 3))],
        LOGS: [row(LOGS, 10, 3, "l", "INSERT", None, (1, "x"))],
    }
    same_again = TableSchema(ITEMS, FULL.columns, ("id",), version=2)
    items = StagedRun(ITEMS, "t", FULL, "f", (10, 0, 1, 0), (11, 0, 6, 0), 11, 10, 5, {"INSERT": 3, "UPDATE": 1, "DELETE": 1},
                      {P0: 7}, staging, (("f2", same_again), ("k", KEY_ONLY)))

    changes = staging.held_changes(items)

    assert [(c.commit_ts, c.op.value, c.before, c.after) for c in changes] == [
        (10, "INSERT", None, (1, "a", 1)), (10, "INSERT", None, (2, "b", 2)),
        (11, "UPDATE", (1, None, None), (1, "a2", 5)), (11, "DELETE", (2, None, None), None),
        (11, "INSERT", None, (3, "c", 3))]
    assert all(c.schema is FULL for c in changes)
    source = StagedChanges(ITEMS, Ordering.COMMIT_TS, [items]).net_changes((0, 2), AppliedPoint(ts=10))
    assert isinstance(source, SourceRows) and sorted(source.rows) == [(1, 5, False), (2, None, True), (3, 3, False)]
    # Key 1's first change after 10 is an UPDATE: not every key is new. After 9, each key's first change is an
    # INSERT: the source says so (the applier may append it, `run.append_new_keys`).
    assert source.keys_new is False
    assert StagedChanges(ITEMS, Ordering.COMMIT_TS, [items]).net_changes((0, 2), AppliedPoint(ts=9)).keys_new is True
    # Its history source likewise: per key a close at its first commitTs after the point and its states after it.
    history = StagedChanges(ITEMS, Ordering.COMMIT_TS, [items]).history_rows((0, 2), AppliedPoint(ts=10))
    assert isinstance(history, SourceRows) and sorted(history.rows, key=repr) == sorted([
        (1, None, True, 11, None, False, None), (1, 5, False, 11, None, True, "UPDATE"),
        (2, None, True, 11, None, False, None), (3, None, True, 11, None, False, None),
        (3, 3, False, 11, None, True, "INSERT")], key=repr)
    # A release Spark merges (too large to hold): no rows held, the source is built by Spark.
    staging._forget_released_rows()
    assert staging.held_changes(items) is None
