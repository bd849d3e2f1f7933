"""The applier's decisions for history tables after crashes, against a recording stand-in for the Delta writer.

The SQL each decision becomes runs in tests/e2e/test_history_tables.py; here the question is only which
statements the applier asks for, and with which applied points, when the job restarts part-way.
"""

from __future__ import annotations

from tests.recording_writer import Crash, RecordingWriter, Tombstones, insert, structure
from ticdc_delta.apply.applier import Applier
from ticdc_delta.apply.changes.history import HistoryChoice
from ticdc_delta.apply.tables.points import AppliedPoint
from ticdc_delta.exceptions import ApplyError
from ticdc_delta.schema_cache.events import Op, Position, RowChange, SchemaChange, SchemaChangeKind, TableName

ITEMS, GOODS = TableName("shop", "items"), TableName("shop", "goods")
ITEMS_HISTORY, GOODS_HISTORY = TableName("shop_history", "items"), TableName("shop_history", "goods")


def applier(writer, tombstones):
    return Applier(writer, tombstones, history=HistoryChoice(("shop.*",)))


def test_a_crash_between_the_historys_merge_and_the_tables_replays_the_batch_into_the_table_alone():
    writer, tombstones = RecordingWriter(), Tombstones()
    applier(writer, tombstones).apply([insert(ITEMS, 10, 1)], {"t": 10})
    writer.crash_on = ("merge", 1)  # the table's MERGE commits, then the job dies before its checkpoint
    batch = [insert(ITEMS, 11, 2), insert(ITEMS, 12, 3)]
    writer.tables[ITEMS]["point"] = AppliedPoint(ts=10)
    try:
        applier(writer, tombstones).apply(batch, {"t": 12})
    except Crash:
        pass
    assert writer.tables[ITEMS_HISTORY]["point"] == AppliedPoint(ts=12)
    writer.calls.clear()
    applier(writer, tombstones).apply(batch, {"t": 12})  # the replay after the restart
    assert not [c for c in writer.calls if c[0].startswith("merge")], "both hold it: the crash followed both MERGEs"

    writer.tables[ITEMS]["point"] = AppliedPoint(ts=10)  # as if it had died before the table's MERGE
    applier(writer, tombstones).apply(batch, {"t": 12})
    assert [(c[0], c[1]) for c in writer.calls if c[0].startswith("merge")] == [("merge", ITEMS)]


def test_a_crash_after_a_tables_rename_and_its_historys_leaves_no_history_under_the_old_name():
    # Setup: items applied through 11 with its history; a batch with a row at 12, RENAME TABLE items TO goods
    # at 20 and a row of goods at 21; the job dies right after the history's rename (before its checkpoint),
    # then replays the batch.
    writer, tombstones = RecordingWriter(), Tombstones()
    applier(writer, tombstones).apply([insert(ITEMS, 10, 1), insert(ITEMS, 11, 2)], {"t": 11})
    rename = SchemaChange(GOODS, 20, SchemaChangeKind.RENAME, structure(GOODS, "id", "v"), Position("t", 0, 20),
                          "RENAME TABLE items TO goods", ITEMS)
    batch = [insert(ITEMS, 12, 4), rename, insert(GOODS, 21, 3)]
    tombstones_of_tables = {}

    class TableTombstones(Tombstones):
        def record(self, table, commit_ts, why, held_through=None):
            super().record(table, commit_ts, why, held_through)
            tombstones_of_tables[table] = commit_ts

    tombstones = TableTombstones()
    writer.crash_on = ("rename", 2)
    try:
        applier(writer, tombstones).apply(batch, {"t": 21})
    except Crash:
        pass
    assert ITEMS_HISTORY in tombstones_of_tables and GOODS_HISTORY in writer.tables
    writer.calls.clear()
    applier(writer, tombstones).apply(batch, {"t": 21})
    # Expect: the old name's row is a replay for its history too (its tombstone); nothing is created or
    # begun under either name; goods' row goes to both.
    assert ITEMS_HISTORY not in writer.tables and ITEMS not in writer.tables
    assert not [c for c in writer.calls if c[0] in ("create", "begin")], writer.calls
    assert {(c[0], c[1]) for c in writer.calls if c[0].startswith("merge")} == {
        ("merge", GOODS), ("merge_history", GOODS_HISTORY)}


def test_deletes_carrying_their_key_alone_share_a_merge_with_full_rows_of_their_commit_ts():
    # Setup: open-protocol's delete-only-output-handle-key-columns: deletes' structure is the key alone.
    # One transaction (commitTs 9) deletes two keys and inserts two, interleaved; the table keeps no history.
    writer = RecordingWriter()
    keys_only = structure(ITEMS, "id")
    delete = lambda key: RowChange(ITEMS, 9, Op.DELETE, (key,), None, keys_only, Position("t", 0, key))  # noqa: E731
    rows = [insert(ITEMS, 8, 3), delete(1), insert(ITEMS, 9, 4), delete(2), insert(ITEMS, 9, 5)]
    Applier(writer, Tombstones()).apply(rows, {"t": 9})
    # Expect: one MERGE (two of one commitTs would share their applied point, and Delta skips the second).
    merges = [c for c in writer.calls if c[0] == "merge"]
    assert merges == [("merge", ITEMS, AppliedPoint(ts=9), 5)]


def test_a_ddl_without_structure_gives_the_history_the_next_rows_structure_with_the_ddls_renames():
    # Setup: canal-json / open-protocol: ALTER ... RENAME COLUMN v TO w arrives without structure; the next
    # row shows (id, w).
    writer, tombstones = RecordingWriter(), Tombstones()
    applier(writer, tombstones).apply([insert(ITEMS, 10, 1)], {"t": 10})
    alter = SchemaChange(ITEMS, 20, SchemaChangeKind.ALTER, None, Position("t", 0, 20),
                         "ALTER TABLE items RENAME COLUMN v TO w", None)
    renamed = structure(ITEMS, "id", "w")
    writer.evolved.clear()
    applier(writer, tombstones).apply([alter, insert(ITEMS, 21, 2, renamed)], {"t": 21})
    # Expect: the history evolves to (id, w) + its own columns reading the rename from the DDL text, keeping
    # columns the rows lack, as the table takes the structure with the same text.
    history = [(columns, options) for table, columns, options in writer.evolved if table == ITEMS_HISTORY]
    assert history and history[-1][0][:2] == ["id", "w"]
    assert history[-1][1].statement == alter.statement and history[-1][1].keep_dropped
    table = [options for name, _, options in writer.evolved if name == ITEMS]
    assert table and table[-1].statement == alter.statement


def test_rows_of_one_commit_ts_in_two_structures_with_values_stop_the_batch_instead_of_losing_changes():
    # Setup: items applied through 5; then at commitTs 9 rows of (id, v), (id, v, w), (id, v) again: each
    #    structure change closes a MERGE at 8, so the third part's MERGE would carry the point the second's
    #    has, and Delta would skip it (how a decoder that gave one commitTs two structures lost changes).
    # Expect: ApplyError before that MERGE, naming the table; no MERGE is written at a point already held.
    writer = RecordingWriter()
    Applier(writer, Tombstones()).apply([insert(ITEMS, 5, 1)], {"t": 5})
    wider = structure(ITEMS, "id", "v", "w")
    rows = [insert(ITEMS, 9, 2), RowChange(ITEMS, 9, Op.INSERT, None, (3, 9, 0), wider, Position("t", 0, 10)),
            insert(ITEMS, 9, 4)]
    writer.calls.clear()
    try:
        Applier(writer, Tombstones()).apply(rows, {"t": 9})
    except ApplyError as err:
        assert "shop.items" in str(err) and "two structures" in str(err)
    else:
        raise AssertionError("the batch was applied")
    points = [c[2] for c in writer.calls if c[0] == "merge"]
    assert len(points) == len(set(points)), points
