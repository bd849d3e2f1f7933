"""Which dead letters a replay writes, skips or refuses (apply.replay.plan_replay), from decoded events.

The tables' state is given as values here; writing and re-reading Kafka are covered end to end
in tests/e2e/test_dead_letter_replay.py.
"""

from __future__ import annotations

from ticdc_delta.apply.changes.collapse import NetChange
from ticdc_delta.apply.replay import Scan, plan_replay, still_held
from ticdc_delta.apply.tables.points import AppliedPoint, TableProgress
from ticdc_delta.schema_cache.events import (
    Column,
    Op,
    Ordering,
    Position,
    RowChange,
    SchemaChange,
    SchemaChangeKind,
    TableName,
    TableSchema,
    TopicPartition,
    Watermark,
)

T = TableName("shop", "items")
SCHEMA = TableSchema(T, (Column("id", "INT"), Column("name", "STRING")), ("id",))


class Tables:
    """A table's applied point and columns, as DeltaWriter would read them."""

    def __init__(self, point=AppliedPoint(ts=1_000), columns=("id", "name"), exists=True):
        self._progress = TableProgress(exists, point)
        self._columns = [(c, "string") for c in columns]

    def progress(self, table):
        return self._progress

    def columns(self, table):
        return self._columns


def pos(partition, offset):
    return Position("t", partition, offset)


def upsert(ts, key, name, at, op=Op.UPDATE):
    before = (key, None) if op is Op.UPDATE else None
    return RowChange(T, ts, op, before, (key, name), SCHEMA, at)


def delete(ts, key, at):
    return RowChange(T, ts, Op.DELETE, (key, None), None, SCHEMA, at)


def decide(dead, events, *, tables=None, ordering=Ordering.COMMIT_TS, complete=0, **scan):
    read = frozenset([e.position for e in events] + list(dead))
    plan = plan_replay(
        dead, Scan(events, read, **scan), ordering=ordering, tables=tables or Tables(), complete_through={"t": complete}
    )
    return plan, {d.position: (d.outcome, d.detail) for d in plan.decisions}


def test_the_dead_letter_with_the_latest_change_of_its_key_is_written_and_older_ones_are_superseded():
    a, b, c = pos(0, 5), pos(0, 9), pos(1, 3)
    events = [upsert(100, 1, "old", a), upsert(200, 1, "new", b), upsert(150, 2, "two", c)]
    plan, outcomes = decide([a, b], events)
    assert outcomes[a][0] == "superseded" and "later dead letter" in outcomes[a][1]
    assert outcomes[b][0] == "applied"
    (table,) = plan.tables
    assert table.changes == {(1,): NetChange(False, (1, "new"))} and table.positions == {b}


def test_a_later_change_the_job_applied_decides_the_row():
    # A naive replay would put "long" over the row re-inserted later.
    dead_update, dead_delete, reinsert = pos(0, 5), pos(0, 6), pos(2, 1)
    events = [upsert(100, 2, "long", dead_update), delete(110, 2, dead_delete), upsert(120, 2, "again", reinsert, Op.INSERT)]
    plan, outcomes = decide([dead_update, dead_delete], events)
    assert [o for o, _ in outcomes.values()] == ["superseded", "superseded"]
    assert "the later change at t[2]@1 (commitTs 120)" in outcomes[dead_update][1]
    assert plan.tables == []


def test_at_one_commit_ts_the_insert_half_of_a_split_update_beats_the_delete_wherever_each_arrived():
    # DELETE(old key) + INSERT(new key) at one commitTs; another transaction's INSERT of the old key
    # cannot share it, so only the split's halves meet here: the insert stands.
    dead_insert, applied_delete = pos(0, 4), pos(1, 7)
    events = [upsert(100, 3, "moved here", dead_insert, Op.INSERT), delete(100, 3, applied_delete)]
    _, outcomes = decide([dead_insert], events)
    assert outcomes[dead_insert][0] == "applied"
    _, outcomes = decide([applied_delete], events)
    assert outcomes[applied_delete][0] == "superseded"


def test_a_resend_after_its_partition_passed_its_watermark_is_refused():
    mark, resend = pos(0, 3), pos(0, 8)
    events = [Watermark(150, mark), upsert(100, 1, "x", resend)]
    _, outcomes = decide([resend], events)
    assert outcomes[resend][0] == "refused" and "a resend" in outcomes[resend][1]
    _, outcomes = decide([resend], [upsert(100, 1, "x", resend)], start_watermarks={TopicPartition("t", 0): 100})
    assert "a resend" in outcomes[resend][1]


def test_not_yet_applied_through_its_commit_ts_waits_for_the_job():
    dead = pos(0, 5)
    events = [upsert(2_000, 1, "x", dead)]
    _, outcomes = decide([dead], events, complete=1_500)
    assert outcomes[dead][0] == "refused" and "run the job first" in outcomes[dead][1]
    plan, outcomes = decide([dead], events, complete=2_000)
    assert outcomes[dead][0] == "applied" and plan.tables[0].through_ts == 2_000


def test_schema_changes_after_it_refuse_or_supersede():
    dead, ddl = pos(0, 5), pos(0, 9)
    alter = SchemaChange(T, 300, SchemaChangeKind.ALTER, SCHEMA, ddl)
    truncate = SchemaChange(T, 300, SchemaChangeKind.TRUNCATE, SCHEMA, ddl)
    _, outcomes = decide([dead], [upsert(100, 1, "x", dead), alter])
    assert outcomes[dead][0] == "refused" and "structure changed after it (ALTER" in outcomes[dead][1]
    _, outcomes = decide([dead], [upsert(100, 1, "x", dead), truncate])
    assert outcomes[dead] == ("superseded", "key 1: the table was truncated at commitTs 300, after it")
    _, outcomes = decide([ddl], [alter])
    assert outcomes[ddl][0] == "refused" and "a schema change" in outcomes[ddl][1]


def test_watermarks_need_nothing_and_undecodable_messages_refuse():
    mark, dead, broken = pos(0, 1), pos(0, 2), pos(1, 1)
    _, outcomes = decide([mark], [Watermark(50, mark)])
    assert outcomes[mark][0] == "no-change"
    _, outcomes = decide([dead], [], failures={dead: "not JSON"})
    assert outcomes[dead] == ("refused", "still cannot be decoded: not JSON")
    blocker = f"message {broken}, which the job decoded, does not decode under this configuration"
    _, outcomes = decide([dead], [upsert(100, 1, "x", dead)], blockers=[blocker])
    assert outcomes[dead] == ("refused", blocker)


def test_a_table_whose_columns_differ_from_the_change_is_refused():
    dead = pos(0, 5)
    _, outcomes = decide([dead], [upsert(100, 1, "x", dead)], tables=Tables(columns=("id", "name", "stock")))
    assert outcomes[dead][0] == "refused" and "are not the table's" in outcomes[dead][1]
    _, outcomes = decide([dead], [upsert(100, 1, "x", dead)], tables=Tables(exists=False))
    assert "does not exist" in outcomes[dead][1]


def test_offset_order_compares_within_a_partition_and_refuses_a_key_seen_on_two():
    first, later, elsewhere = pos(0, 5), pos(0, 9), pos(1, 2)
    offsets = Tables(point=AppliedPoint.at_offsets({TopicPartition("t", 0): 20, TopicPartition("t", 1): 20}))
    events = [upsert(0, 1, "a", first, Op.UPSERT), upsert(0, 1, "b", later, Op.UPSERT)]
    _, outcomes = decide([first, later], events, tables=offsets, ordering=Ordering.OFFSET)
    assert outcomes[first][0] == "superseded" and outcomes[later][0] == "applied"
    events.append(upsert(0, 1, "c", elsewhere, Op.UPSERT))
    _, outcomes = decide([later], events, tables=offsets, ordering=Ordering.OFFSET)
    assert outcomes[later][0] == "refused" and "more than one partition" in outcomes[later][1]
    not_yet = Tables(point=AppliedPoint.at_offsets({TopicPartition("t", 0): 9}))
    _, outcomes = decide([later], events[:2], tables=not_yet, ordering=Ordering.OFFSET)
    assert "run the job first" in outcomes[later][1]


def test_one_message_changing_a_key_twice_writes_its_final_image():
    # The open protocol batches row events: one dead letter may insert a key and update it again.
    message = pos(0, 5)
    events = [upsert(100, 1, "first", message, Op.INSERT), upsert(200, 1, "final", message)]
    plan, outcomes = decide([message], events)
    assert outcomes[message][0] == "applied"
    (table,) = plan.tables
    assert table.changes == {(1,): NetChange(False, (1, "final"))} and table.through_ts == 200


def test_a_table_the_job_still_held_for_rows_waiting_for_their_schema_is_named():
    # A message of items parked at t[0]@7 while re-reading: held while the latest checkpoint has not
    # passed it on its partition; released once it has.
    parked = {pos(0, 7): T, pos(1, 2): TableName("shop", "logs")}
    held = still_held(parked, {TopicPartition("t", 0): 7, TopicPartition("t", 1): 40})
    assert list(held) == [T] and "t[0]@7" in held[T] and "run the job until it has" in held[T]
    assert still_held(parked, {TopicPartition("t", 0): 8, TopicPartition("t", 1): 3}) == {}
    assert set(still_held(parked, None)) == {T, TableName("shop", "logs")}
    dead = pos(0, 9)
    _, outcomes = decide([dead], [upsert(100, 1, "x", dead)], waiting=held, complete=100)
    assert outcomes[dead][0] == "refused" and "waited for its structure" in outcomes[dead][1]
