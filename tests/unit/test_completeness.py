"""Completeness across topics (`apply.ordering.completeness`), as TiCDC's router sends a topic per table: a DDL to the
topic of the table's old name, watermarks only to the topics of the tables replicated now."""

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

OLD, NEW, OTHER = TableName("db", "old"), TableName("db", "new"), TableName("db", "other")


def row(ts: int, topic: str, partition: int, offset: int, table: TableName) -> RowChange:
    return RowChange(table, ts, Op.INSERT, None, (ts,), TableSchema(table, (), ("id",)), Position(topic, partition, offset))


def mark(ts: int, topic: str, partition: int, offset: int) -> Watermark:
    return Watermark(ts, Position(topic, partition, offset))


def ddl(ts: int, topic: str, partition: int, offset: int, table: TableName, kind=SchemaChangeKind.ALTER,
        previous: TableName | None = None) -> SchemaChange:
    return SchemaChange(table, ts, kind, None, Position(topic, partition, offset), previous_name=previous)


def released(gate: WatermarkGate) -> list[tuple[str, int]]:
    return [(type(e).__name__, e.commit_ts) for e in gate.release().events]


def test_a_rename_on_the_old_topic_comes_before_the_new_topics_rows_whatever_is_read_first():
    # Setup: topic t_old carries db.old (2 partitions), t_new db.new (its rows after the RENAME at 20), t_other a
    # third table. The new topic's rows (25) and watermark (30) are read before the RENAME's copies.
    # Expect: nothing of t_new's goes before the RENAME: at first only t_other's row at 15 (t_old's watermark 18
    # bounds all); once both RENAME copies are read, t_old gets no watermark again (a RENAME away): a look finds it
    # read to its end, and the RENAME, then the rows at 25, are released.
    gate = WatermarkGate({"t_old": [0, 1], "t_new": [0], "t_other": [0]})
    for event in (row(10, "t_old", 0, 0, OLD), mark(18, "t_old", 0, 1), mark(18, "t_old", 1, 0),
                  row(15, "t_other", 0, 0, OTHER), row(25, "t_new", 0, 0, NEW), row(26, "t_other", 0, 1, OTHER),
                  mark(30, "t_new", 0, 1), mark(30, "t_other", 0, 2)):
        gate.add(event)
    assert released(gate) == [("RowChange", 10), ("RowChange", 15)]
    assert gate.completeness.looks_wanted() == {}  # (t_old's watermarks come: it waits for them)
    rename = ddl(20, "t_old", 0, 2, NEW, SchemaChangeKind.RENAME, previous=OLD)
    gate.add(rename)
    gate.add(rename._replace(position=Position("t_old", 1, 1)))
    assert released(gate) == []  # (a DDL copy says nothing of the partition's other rows)
    wanted = gate.completeness.looks_wanted()
    assert set(wanted) == {TP("t_old", 0), TP("t_old", 1)} and set(wanted.values()) == {30}
    gate.completeness.looked({TP("t_old", 0): 3, TP("t_old", 1): 2}, wanted)
    gate.completeness.read_up_to({TP("t_old", 0): 3, TP("t_old", 1): 2, TP("t_new", 0): 2, TP("t_other", 0): 3})
    assert released(gate) == [("SchemaChange", 20), ("RowChange", 25), ("RowChange", 26)]


def test_a_look_promises_only_once_read_up_to_the_end_offset_it_found():
    # Setup: topic b lags: a look finds its end at offset 5 while it is read up to 2.
    # Expect: a's row waits until b is read up to 5; b's own rows before then are released with it.
    gate = WatermarkGate({"a": [0], "b": [0]})
    gate.add(row(7, "a", 0, 0, OLD))
    gate.add(mark(9, "a", 0, 1))
    wanted = gate.completeness.looks_wanted()
    gate.completeness.looked({TP("b", 0): 5}, wanted)
    gate.completeness.read_up_to({TP("a", 0): 2, TP("b", 0): 2})
    assert released(gate) == []
    assert gate.completeness.looks_wanted() == {}  # the look made already promises as much
    gate.add(row(3, "b", 0, 4, OTHER))
    gate.completeness.read_up_to({TP("a", 0): 2, TP("b", 0): 5})
    assert released(gate) == [("RowChange", 3), ("RowChange", 7)]


def test_a_ddl_copy_says_nothing_of_its_partitions_other_rows():
    # Setup: topic a carries db.old and db.other; a DDL of db.old at 20 on its one partition.
    # Expect: the partition is not complete through 20 by it (TiCDC blocks only the DDL's table while it writes it:
    # another table's earlier row may still follow); nor on a topic of one table.
    for first in (OTHER, OLD):
        gate = WatermarkGate({"a": [0]})
        gate.add(row(5, "a", 0, 0, first))
        gate.add(ddl(20, "a", 0, 1, OLD))
        assert gate.completeness.limit() == 0


def test_canal_ddl_on_partition_0_then_no_watermark_completes_the_siblings_once_read_to_their_end_offsets():
    # Setup: canal-json (DDL to partition 0 only); a DROP at 20 on a topic of one table with 2 partitions, whose
    # partition 1 has a row at 15 not yet read, and no watermark after the DROP there; another topic's watermark
    # reaches 25 (TiCDC sends its checkpoint on, to the tables it still replicates).
    # Expect: the dropped table's topic is looked at; read up to the end offsets found, the row then the DROP.
    gate = WatermarkGate({"a": [0, 1], "b": [0]})
    for event in (mark(10, "a", 0, 0), mark(10, "a", 1, 0), ddl(20, "a", 0, 1, OLD, SchemaChangeKind.DROP),
                  mark(25, "b", 0, 0)):
        gate.add(event)
    wanted = gate.completeness.looks_wanted()
    assert wanted == {TP("a", 0): 25, TP("a", 1): 25}
    gate.completeness.looked({TP("a", 0): 2, TP("a", 1): 2}, wanted)
    gate.completeness.read_up_to({TP("a", 0): 2, TP("a", 1): 1, TP("b", 0): 1})
    assert released(gate) == []
    gate.add(row(15, "a", 1, 1, OLD))
    gate.completeness.read_up_to({TP("a", 0): 2, TP("a", 1): 2, TP("b", 0): 1})
    assert released(gate) == [("RowChange", 15), ("SchemaChange", 20)]


def test_topics_by_pattern_release_no_further_than_the_newest_watermark_read_before_they_were_listed():
    # Setup: topics found by pattern; the topics listed (at the run's start) after a watermark of 10 was read;
    # then rows and watermarks up to 30.
    # Expect: the release stops at 10 (a topic created since may hold a DDL below 30) until the topics are listed
    # again after the watermarks of 30 were read.
    from ticdc_delta.apply.ordering.completeness import Completeness

    gate = WatermarkGate({"a": [0]}, completeness=Completeness({"a": [0]}, capped=True))
    gate.add(mark(10, "a", 0, 0))
    gate.completeness.listed(gate.completeness.newest())
    for event in (row(5, "a", 0, 1, OLD), row(20, "a", 0, 2, OLD), mark(30, "a", 0, 3)):
        gate.add(event)
    assert gate.completeness.needs_listing()
    assert released(gate) == [("RowChange", 5)]
    gate.completeness.listed(gate.completeness.newest())
    assert not gate.completeness.needs_listing()
    assert released(gate) == [("RowChange", 20)]


def test_restart_state_is_the_watermarks_read_not_what_looks_said():
    gate = WatermarkGate({"a": [0], "b": [0]})
    for event in (mark(10, "a", 0, 0), row(5, "a", 0, 1, OLD), ddl(20, "a", 0, 2, OLD, SchemaChangeKind.DROP),
                  mark(30, "b", 0, 0)):
        gate.add(event)
    wanted = gate.completeness.looks_wanted()
    gate.completeness.looked({TP("a", 0): 3}, wanted)
    gate.completeness.read_up_to({TP("a", 0): 3, TP("b", 0): 1})
    assert gate.completeness.limit() == 30
    assert gate.safe_watermarks({TP("a", 0): 3, TP("b", 0): 1}) == {TP("a", 0): 10, TP("b", 0): 30}


def test_a_topic_that_falls_silent_is_named_once_unless_its_table_was_dropped():
    # Setup: topics a (db.old), b (db.other) and c (db.new); watermarks keep coming on b only, round after round;
    # c's table was dropped (a DDL the job applied).
    # Expect: a named once, after 3 rounds; c, whose table the DROP took away, never.
    from ticdc_delta.apply.ordering.completeness import Completeness

    completeness = Completeness({"a": [0], "b": [0], "c": [0]}, silent_rounds=3)
    for topic, table in (("a", OLD), ("b", OTHER), ("c", NEW)):
        completeness.table_seen(topic, table)
        completeness.watermark(mark(1, topic, 0, 0))
    completeness.removed(ddl(5, "c", 0, 1, NEW, SchemaChangeKind.DROP))
    named = []
    for ts in range(10, 80, 10):
        completeness.watermark(mark(ts, "b", 0, ts))
        named += completeness.round_ended()
    assert named == [("a", 1, 30)]
