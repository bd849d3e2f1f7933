"""When the applier appends a table's changes instead of merging them (`run.append_new_keys`): only keys new to
a table that is upstream's as of a recorded commitTs, with a protocol whose INSERT says the key is new.

Against the recording stand-in for the Delta writer (tests/recording_writer.py); the append itself, its point
and a replay of it run on real Delta tables in tests/e2e/test_delta_writer.py.
"""

from __future__ import annotations

import pytest

from tests.recording_writer import RecordingWriter, Tombstones, insert, structure
from ticdc_delta.apply.applier import Applier
from ticdc_delta.apply.tables.points import AppliedPoint
from ticdc_delta.schema_cache.events import Op, Ordering, Position, RowChange, TableName, TopicPartition

T = TableName("shop", "t")


def writer_holding(point: AppliedPoint | None) -> RecordingWriter:
    writer = RecordingWriter()
    writer.tables[T] = {"point": point, "columns": ["id", "v"]}
    return writer


def update(ts: int, key: int) -> RowChange:
    return RowChange(T, ts, Op.UPDATE, (key, None), (key, ts), structure(T, "id", "v"), Position("t", 0, ts))


@pytest.mark.parametrize(
    "label, point, inserts_are_new, ordering, rows, appended",
    [
        ("new keys into a table at a commitTs", AppliedPoint(ts=10), True, Ordering.COMMIT_TS,
         [insert(T, 11, 1), insert(T, 12, 2)], True),
        ("a key the table may hold", AppliedPoint(ts=10), True, Ordering.COMMIT_TS, [insert(T, 11, 1), update(12, 5)], False),
        ("Open Protocol's INSERT (an update without old values looks alike)", AppliedPoint(ts=10), False,
         Ordering.COMMIT_TS, [insert(T, 11, 1)], False),
        ("a table without a recorded point (rows of its own)", None, True, Ordering.COMMIT_TS, [insert(T, 11, 1)], False),
        ("offset order", AppliedPoint.at_offsets({TopicPartition("t", 0): 5}), True, Ordering.OFFSET,
         [insert(T, 11, 1)], False),
        ("a point of offsets left by an offset-ordered protocol", AppliedPoint.at_offsets({TopicPartition("t", 0): 5}),
         True, Ordering.COMMIT_TS, [insert(T, 11, 1)], False),
    ],
)
def test_a_batch_is_appended_only_where_every_key_is_new_to_a_table_at_a_recorded_commit_ts(
    label, point, inserts_are_new, ordering, rows, appended
):
    writer = writer_holding(point)
    summary = Applier(writer, Tombstones(), ordering, inserts_are_new=inserts_are_new).apply(rows, {"t": 20})
    assert (writer.appended == [T], summary.appends) == (appended, int(appended)), label
    assert summary.merges == 1, label
