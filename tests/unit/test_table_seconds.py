"""Each table's time in a batch (`ApplySummary.table_seconds`, the metrics table's `table_seconds`): the wall
time of its work, under the table whose change asked for it.

Against a recording stand-in for the Delta writer whose MERGEs take a set time (tests/recording_writer.py).
"""

from __future__ import annotations

import time

from tests.recording_writer import RecordingWriter, Tombstones, insert, structure
from ticdc_delta.apply.applier import Applier
from ticdc_delta.apply.tables.points import AppliedPoint
from ticdc_delta.schema_cache.events import Position, SchemaChange, SchemaChangeKind, TableName

SLOW, FAST, OLD = TableName("shop", "slow"), TableName("shop", "fast"), TableName("shop", "old")
MERGE_SECONDS = 0.2


class SlowMerges(RecordingWriter):
    """MERGEs into `slow` tables take MERGE_SECONDS; others none."""

    def __init__(self, *slow: TableName) -> None:
        super().__init__()
        self.slow = set(slow)
        for table in (SLOW, FAST, OLD):
            self.tables[table] = {"point": AppliedPoint(ts=10), "columns": ["id", "v"]}

    def merge(self, table, schema, source, point, **options):
        if table in self.slow:
            time.sleep(MERGE_SECONDS)
        super().merge(table, schema, source, point, **options)


def test_each_touched_table_has_the_time_its_merges_took():
    # Setup: one batch of inserts into two tables, MERGEs into one of them slow.
    # Expect: both tables timed (their first reads and MERGEs), the slow one at least its MERGE's time, the
    # other far less.
    writer = SlowMerges(SLOW)
    summary = Applier(writer, Tombstones()).apply([insert(SLOW, 11, 1), insert(FAST, 12, 2)], {"t": 12})
    assert set(summary.table_seconds) == {SLOW, FAST}
    assert summary.table_seconds[SLOW] >= MERGE_SECONDS
    assert summary.table_seconds[FAST] < MERGE_SECONDS / 2


def test_a_rename_counts_the_old_names_merge_under_the_new_name():
    # Setup: a row of `old`, then `old` renamed to `slow` (the rename merges `old`'s pending row first, as part
    # of the rename), then a row of `slow`; every MERGE slow.
    # Expect: both MERGEs' time under `slow` (the rename's, then its rows'), `old` only its first read; two
    # MERGEs' worth in all (none counted twice).
    writer = SlowMerges(SLOW, OLD)
    rename = SchemaChange(SLOW, 12, SchemaChangeKind.RENAME, structure(SLOW, "id", "v"), Position("t", 0, 12),
                          "RENAME TABLE old TO slow", OLD)
    del writer.tables[SLOW]  # (the rename's target name is free)
    summary = Applier(writer, Tombstones()).apply([insert(OLD, 11, 1), rename, insert(SLOW, 13, 2)], {"t": 13})
    merges = [call[1] for call in writer.calls if call[0] == "merge"]
    assert merges == [OLD, SLOW]
    assert 2 * MERGE_SECONDS <= summary.table_seconds[SLOW] < 3 * MERGE_SECONDS
    assert summary.table_seconds[OLD] < MERGE_SECONDS / 2
    assert sum(summary.table_seconds.values()) < 3 * MERGE_SECONDS
