"""Several tables renamed by one DDL, at one commitTs: TiDB's `RENAME TABLE a TO b, c TO d`, which TiCDC sends
as one RENAME per table, in order, all at the DDL's commitTs. A swap frees a name and renames into it at the
same commitTs, so the freed name's tombstone must not make the second rename look like a replay.

Against a recording stand-in for the Delta writer (tests/recording_writer.py), through every crash point of
the batch: the job dies after each rename or structure change, restarts and replays the batch.
"""

from __future__ import annotations

import pytest

from tests.recording_writer import Crash, RecordingWriter, Tombstones, insert, structure
from ticdc_delta.apply.applier import Applier
from ticdc_delta.apply.changes.history import HistoryChoice
from ticdc_delta.apply.tables.points import AppliedPoint
from ticdc_delta.schema_cache.events import Position, SchemaChange, SchemaChangeKind, TableName

SWAP_TS = 20


def name(table: str) -> TableName:
    return TableName("shop", table)


def rename(old: str, new: str, offset: int) -> SchemaChange:
    return SchemaChange(name(new), SWAP_TS, SchemaChangeKind.RENAME, structure(name(new), "id", "v"),
                        Position("t", 0, offset), f"RENAME TABLE {old} TO {new}", name(old))


def with_tables(*tables: str) -> RecordingWriter:
    """A writer holding `tables`, each applied through 10 and tagged with its name (its rows' origin)."""
    writer = RecordingWriter()
    for table in tables:
        writer.tables[name(table)] = {"point": AppliedPoint(ts=10), "columns": ["id", "v"], "origin": table}
    return writer


def origins(writer: RecordingWriter) -> dict[str, str | None]:
    """Which table's rows each name holds now (None: created by the job, not renamed from an upstream table)."""
    return {t.table: entry.get("origin") for t, entry in writer.tables.items() if t.database == "shop"}


def run_until_done(writer: RecordingWriter, tombstones: Tombstones, batch, crash_on, history=None) -> int:
    """The batch applied by a job that dies at `crash_on`, then by restarts until one finishes; how many died."""
    writer.crash_on = crash_on
    died = 0
    while True:
        try:
            Applier(writer, tombstones, history=history).apply(batch, {"t": batch[-1].commit_ts})
            return died
        except Crash:
            died += 1


SWAPS = {
    # gh-ost's cut-over and the like: the new table takes the name, the old one is kept aside.
    "cut-over": (("t", "t_new"), [rename("t", "t_old", 1), rename("t_new", "t", 2)], {"t": "t_new", "t_old": "t"}),
    # two tables trade names through a temporary one.
    "trade": (("a", "b"), [rename("a", "tmp", 1), rename("b", "a", 2), rename("tmp", "b", 3)], {"a": "b", "b": "a"}),
}
CRASH_POINTS = [None] + [(call, n) for call in ("rename", "evolve") for n in (1, 2, 3)]


@pytest.mark.parametrize("crash_on", CRASH_POINTS, ids=lambda c: "no crash" if c is None else f"after {c[0]} {c[1]}")
@pytest.mark.parametrize("swap", SWAPS)
def test_a_swap_at_one_commit_ts_moves_every_tables_rows_once_through_any_crash(swap, crash_on):
    # Setup: the tables applied through 10; a batch with the swap's renames at 20 and a row of each final
    # name at 21; the job dies after the n-th rename or structure change (if it gets that far) and restarts.
    tables, renames, expected = SWAPS[swap]
    writer, tombstones = with_tables(*tables), Tombstones()
    batch = [*renames, *(insert(name(t), SWAP_TS + 1, 99) for t in sorted(expected))]
    run_until_done(writer, tombstones, batch, crash_on)
    # Expect: each name holds the rows of the table renamed into it, none was created empty, no temporary
    # name is left; each final name got its row once; a replay of the whole batch then does nothing.
    assert origins(writer) == expected
    merges = [c[1].table for c in writer.calls if c[0] == "merge"]
    assert sorted(merges) == sorted(expected), writer.calls
    writer.calls.clear()
    Applier(writer, tombstones).apply(batch, {"t": SWAP_TS + 1})
    assert writer.calls == []


@pytest.mark.parametrize("crash_on", [None] + [(call, n) for call in ("rename", "evolve") for n in (1, 2, 3, 4)],
                         ids=lambda c: "no crash" if c is None else f"after {c[0]} {c[1]}")
def test_a_swap_renames_the_histories_with_their_tables_through_any_crash(crash_on):
    # Setup: the cut-over swap of two tables that keep histories (both applied through 11 with theirs);
    # the job dies after the n-th rename or structure change (tables' and histories' counted together).
    writer, tombstones = with_tables("t", "t_new"), Tombstones()
    choice = HistoryChoice(("shop.*",))
    Applier(writer, tombstones, history=choice).apply([insert(name("t"), 11, 1), insert(name("t_new"), 11, 2)],
                                                       {"t": 11})
    for table in ("t", "t_new"):
        writer.tables[TableName("shop_history", table)]["origin"] = table
    batch = [rename("t", "t_old", 1), rename("t_new", "t", 2), insert(name("t"), 21, 3)]
    writer.calls.clear()
    run_until_done(writer, tombstones, batch, crash_on, history=choice)
    # Expect: each history moved with its table; the row at 21 went into t and into t's history (t_new's
    # before), once each; a replay of the whole batch then does nothing.
    histories = {t.table: e.get("origin") for t, e in writer.tables.items() if t.database == "shop_history"}
    assert histories == {"t": "t_new", "t_old": "t"}
    assert origins(writer) == {"t": "t_new", "t_old": "t"}
    merges = [c[:3] for c in writer.calls if c[0].startswith("merge")]
    assert merges == [("merge_history", TableName("shop_history", "t"), AppliedPoint(ts=21)),
                      ("merge", name("t"), AppliedPoint(ts=21))]
    writer.calls.clear()
    Applier(writer, tombstones, history=choice).apply(batch, {"t": 21})
    assert writer.calls == []
