"""The watermark gate: completeness per topic, DDL barrier, offsets, restart state."""

from __future__ import annotations

from ticdc_delta.apply.ordering.gate import WatermarkGate
from ticdc_delta.schema_cache.events import (
    Op,
    Position,
    RowChange,
    SchemaChange,
    SchemaChangeKind,
    TableName,
    TableSchema,
    Watermark,
)
from ticdc_delta.schema_cache.events import TopicPartition as TP

T = TableName("db", "t")
SCHEMA = TableSchema(T, (), ("id",))


def row(ts: int, partition: int, offset: int, topic: str = "a", table: TableName = T) -> RowChange:
    return RowChange(table, ts, Op.INSERT, None, (ts,), SCHEMA, Position(topic, partition, offset))


def mark(ts: int, partition: int, offset: int, topic: str = "a") -> Watermark:
    return Watermark(ts, Position(topic, partition, offset))


def ddl(ts: int, partition: int, offset: int, topic: str = "a") -> SchemaChange:
    return SchemaChange(T, ts, SchemaChangeKind.ALTER, SCHEMA, Position(topic, partition, offset))


def test_nothing_is_released_until_every_partition_passed_the_commit_ts():
    # Setup: rows on p0 and p1 out of commitTs order; watermark 20 only on p0.
    # Expect: nothing released (p1 has no watermark); once p1 reaches 15, exactly the rows <= 15.
    gate = WatermarkGate({"a": [0, 1]})
    for event in (row(12, 1, 0), row(10, 0, 0), row(18, 0, 1), mark(20, 0, 2)):
        gate.add(event)
    assert gate.release().events == []
    gate.add(mark(15, 1, 1))
    assert [e.commit_ts for e in gate.release().events] == [10, 12]
    assert len(gate) == 1
    gate.add(mark(20, 1, 2))
    assert [e.commit_ts for e in gate.release().events] == [18]


def test_release_orders_by_commit_ts_then_arrival():
    gate = WatermarkGate({"a": [0, 1]})
    first, second, third = row(7, 1, 0), row(7, 0, 0), row(5, 0, 1)
    for event in (first, second, third, mark(9, 0, 2), mark(9, 1, 1)):
        gate.add(event)
    assert gate.release().events == [third, first, second]


def test_lower_watermark_is_a_replay_and_ignored():
    gate = WatermarkGate({"a": [0]})
    gate.add(mark(50, 0, 0))
    gate.add(mark(30, 0, 1))
    assert gate.topic_watermark("a") == 50


def test_a_topic_waits_for_the_others_until_a_look_finds_them_read_to_their_end():
    # Setup: topics a and b; b has a row at 5 and no watermark; a's row at 5 and watermark 10.
    # Expect: nothing is released (b may still carry a DDL before a's row); once a look finds b read to its end
    # (after a's watermark was read), both rows are released, in arrival order.
    gate = WatermarkGate({"a": [0], "b": [0]})
    other = TableName("db", "other")
    gate.add(row(5, 0, 0, topic="a"))
    gate.add(row(5, 0, 0, topic="b", table=other))
    gate.add(mark(10, 0, 1, topic="a"))
    assert gate.release().events == []
    wanted = gate.completeness.looks_wanted()
    assert wanted == {TP("b", 0): 10}
    gate.completeness.looked({TP("b", 0): 1}, wanted)
    gate.completeness.read_up_to({TP("a", 0): 2, TP("b", 0): 1})
    assert [e.position.topic for e in gate.release().events] == ["a", "b"]


def test_ddl_copies_from_every_partition_become_one_event_after_earlier_rows():
    # Setup: a DDL at 20 arrives on both partitions; a row at 19 arrives after the first copy.
    # Expect: one DDL, released after the row at 19 once both partitions passed 20.
    gate = WatermarkGate({"a": [0, 1]})
    for event in (ddl(20, 0, 0), row(19, 1, 0), ddl(20, 1, 1), row(21, 0, 1), mark(20, 0, 2), mark(20, 1, 2)):
        gate.add(event)
    released = gate.release().events
    assert [type(e).__name__ for e in released] == ["RowChange", "SchemaChange"]
    assert [e.commit_ts for e in released] == [19, 20]


def test_holds_keep_a_table_behind_its_parked_messages():
    gate = WatermarkGate({"a": [0]})
    for event in (row(5, 0, 0), row(8, 0, 1), mark(10, 0, 2)):
        gate.add(event)
    assert [e.commit_ts for e in gate.release({T: 8}).events] == [5]
    assert [e.commit_ts for e in gate.release({}).events] == [8]


def test_pending_offsets_are_the_lowest_buffered_per_partition():
    gate = WatermarkGate({"a": [0, 1]})
    for event in (row(5, 0, 3), row(6, 0, 4), row(7, 1, 9)):
        gate.add(event)
    assert gate.pending_offsets() == {TP("a", 0): 3, TP("a", 1): 9}


def test_safe_watermarks_only_count_watermarks_before_the_committed_offset():
    # Setup: p0 watermarks at offsets 1 (ts 10) and 5 (ts 20); committed offset 4.
    # Expect: only ts 10 is safe to restart from; after committing 6, ts 20.
    gate = WatermarkGate({"a": [0]})
    gate.add(mark(10, 0, 1))
    gate.add(mark(20, 0, 5))
    assert gate.safe_watermarks({TP("a", 0): 4}) == {TP("a", 0): 10}
    assert gate.safe_watermarks({TP("a", 0): 6}) == {TP("a", 0): 20}


def test_restored_watermarks_gate_like_observed_ones_and_are_saved_again():
    gate = WatermarkGate({"a": [0, 1]})
    gate.restore({TP("a", 0): 30, TP("a", 1): 25})
    gate.add(row(24, 1, 100))
    assert [e.commit_ts for e in gate.release().events] == [24]
    assert gate.safe_watermarks({TP("a", 0): 50, TP("a", 1): 101}) == {TP("a", 0): 30, TP("a", 1): 25}


def test_a_bounded_release_ends_at_a_commit_ts_and_says_how_far_it_reaches():
    # Setup: five rows at 5, 6, 6, 6, 9, all complete (watermark 10); releases of at most 2.
    # Expect: 5 and all three 6s (a commitTs is never split), applied points through 6; then 9,
    # through the watermark.
    gate = WatermarkGate({"a": [0]})
    for i, ts in enumerate((5, 6, 6, 6, 9)):
        gate.add(row(ts, 0, i))
    gate.add(mark(10, 0, 9))
    first = gate.release(max_events=2)
    assert [e.commit_ts for e in first.events] == [5, 6, 6, 6] and first.more and first.through == {"a": 6}
    second = gate.release(max_events=2)
    assert [e.commit_ts for e in second.events] == [9] and not second.more and second.through == {"a": 10}


def test_events_beyond_the_memory_budget_wait_on_disk_and_come_back_in_order(tmp_path):
    # Setup: partition 1's watermark lags; 40 rows arrive out of commitTs order with room for 8 in
    # memory. Expect: the newest spill to a file under the configured directory; offsets stay held
    # at the lowest waiting offset; once partition 1 catches up every row comes back exactly once,
    # in (commitTs, arrival) order, in bounded slices; the spill file is removed on close.
    gate = WatermarkGate({"a": [0, 1]}, max_in_memory=8, spill_dir=str(tmp_path))
    rows = [row(100 - (i * 7) % 40, i % 2, i) for i in range(40)]
    for event in rows:
        gate.add(event)
    gate.add(mark(200, 0, 100))
    assert len(gate) == 40 and list(tmp_path.iterdir())
    assert gate.release().events == []
    assert gate.pending_offsets() == {TP("a", 0): 0, TP("a", 1): 1}
    gate.add(mark(200, 1, 100))
    released = []
    while True:
        part = gate.release(max_events=10)
        released += part.events
        if not part.more:
            break
    expected = sorted(rows, key=lambda e: (e.commit_ts, rows.index(e)))
    assert released == expected and len(gate) == 0 and gate.pending_offsets() == {}
    gate.close()
    assert not list(tmp_path.iterdir())


def test_waiting_events_are_taken_out_in_release_order_from_memory_and_disk(tmp_path):
    # Setup: 20 rows out of commitTs order with room for 4 in memory (the rest spilled), partition 1 lagging;
    # rows up to 60 released. Expect: `take_waiting` returns every row not released, in (commitTs, arrival)
    # order, from memory and disk alike, and leaves the gate empty: nothing pending, nothing released after.
    gate = WatermarkGate({"a": [0, 1]}, max_in_memory=4, spill_dir=str(tmp_path))
    rows = [row(100 - (i * 7) % 20 * 3, i % 2, i) for i in range(20)]
    for event in rows:
        gate.add(event)
    gate.add(mark(60, 0, 100))
    gate.add(mark(60, 1, 100))
    released = gate.release().events
    assert released and all(e.commit_ts <= 60 for e in released)
    waiting = gate.take_waiting()
    assert waiting == sorted((e for e in rows if e.commit_ts > 60), key=lambda e: (e.commit_ts, rows.index(e)))
    assert len(gate) == 0 and gate.pending_offsets() == {}
    gate.add(mark(500, 0, 101))
    gate.add(mark(500, 1, 101))
    assert gate.release().events == []
    gate.close()
