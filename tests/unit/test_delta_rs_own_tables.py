"""The product's own tables written by delta-rs (apply.own_tables.delta_rs), without Spark: creations that race,
and the lease's conditional UPDATE against rows named by every awkward string."""

from __future__ import annotations

import datetime as dt
import json
import threading

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from ticdc_delta.apply.own_tables.delta_rs import DeltaRsOwnTables

UTC = dt.timezone.utc
COLUMNS = (("consumer", "STRING"), ("revision", "BIGINT"), ("at", "TIMESTAMP"))
# Names as a Kafka group id may hold them: quotes, backslashes, a line break, 4-byte UTF-8, text that reads as SQL.
AWKWARD = ["plain", "it's", "back\\slash", "back\\", "new\nline", "𝄞 ü", "", "''", "\\'", "x' OR '1'='1", '"q"', "%_*"]


def _log_actions(path: str, version: int) -> list[str]:
    with open(f"{path}/_delta_log/{version:020d}.json") as commit:
        return [next(iter(json.loads(line))) for line in commit if line.strip()]


def test_two_writers_creating_one_own_table_at_once_make_one_creation_and_both_rows(tmp_path):
    # Setup: two threads append a row each to the same missing own table at once, each creating it where missing;
    # twelve rounds, so that both find it missing in several of them (delta-rs 1.6 committed the loser's creation at
    # version 1 then, a second table id and metadata, in about half of the rounds).
    # Expect: both appends taken, both rows there, and a creation (protocol and metadata) at version 0 only.
    own = DeltaRsOwnTables()
    for round_ in range(12):
        path = str(tmp_path / f"t{round_}")
        taken = {}

        def append(who: int, path: str = path, taken: dict = taken) -> None:
            row = (f"writer {who}", who, dt.datetime(2026, 1, 1, tzinfo=UTC))
            taken[who] = own.append(path, COLUMNS, [row], check_write=lambda: None,
                                    create_with={"delta.checkpointInterval": "10"})

        threads = [threading.Thread(target=append, args=(who,)) for who in (1, 2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        table = DeltaTable(path)
        assert taken == {1: True, 2: True}
        assert sorted(table.to_pyarrow_table().column("consumer").to_pylist()) == ["writer 1", "writer 2"]
        later = [a for v in range(1, table.version() + 1) for a in _log_actions(path, v)]
        assert "metaData" not in later and "protocol" not in later, round_


def _lease_table(path: str) -> None:
    """One row per awkward consumer, each in a file of its own (an append each)."""
    for consumer in AWKWARD:
        write_deltalake(path, pa.table({
            "consumer": pa.array([consumer]), "revision": pa.array([1], pa.int64()),
            "at": pa.array([dt.datetime(2026, 1, 1, tzinfo=UTC)], pa.timestamp("us", "UTC")),
        }), mode="append")


def test_an_update_changes_exactly_the_row_its_values_name(tmp_path):
    # Setup: one row per awkward consumer name (a file each); each updated in turn by its name and revision.
    # Expect: each update changes that row alone (True), to the microsecond; another revision changes nothing.
    path = str(tmp_path / "leases")
    _lease_table(path)
    own = DeltaRsOwnTables()
    for at, consumer in enumerate(AWKWARD):
        when = dt.datetime(2026, 2, 1, 0, 0, at, 123457, tzinfo=UTC)
        assert own.update_one(path, {"consumer": consumer, "revision": 1}, {"revision": 2, "at": when}) is True
        assert own.update_one(path, {"consumer": consumer, "revision": 1}, {"revision": 3, "at": when}) is False
    rows = {r["consumer"]: (r["revision"], r["at"]) for r in DeltaTable(path).to_pyarrow_table().to_pylist()}
    assert rows == {c: (2, dt.datetime(2026, 2, 1, 0, 0, at, 123457, tzinfo=UTC)) for at, c in enumerate(AWKWARD)}


def test_an_update_from_a_read_another_commit_followed_changes_nothing(tmp_path):
    # Setup: a read of the table; then another writer's commit that changes another consumer's row only, in a
    # file of its own; then the update from the first read, whose row and file that commit left as they were.
    # Expect: the update is refused (False) and nothing of it committed: the lease decides again on a fresh read,
    # whatever delta-rs's conflict check would have let through (it let a second creation through, above).
    path = str(tmp_path / "leases")
    _lease_table(path)
    own = DeltaRsOwnTables()
    read_before = DeltaTable(path)
    assert own.update_one(path, {"consumer": "plain", "revision": 1}, {"revision": 2}) is True
    changed = own.update_read(read_before, path, path, {"consumer": "it's", "revision": 1}, {"revision": 2})
    assert changed is False
    assert DeltaTable(path).version() == len(AWKWARD)


def test_two_writers_creating_the_lease_table_at_once_each_learn_whether_their_commit_made_it(tmp_path):
    # Setup: two threads create the same missing table at once, each with its own first row; twelve rounds.
    # Expect: exactly one says it made the table (True), the other that another writer did (False); the table
    # holds the maker's row only, created at version 0 alone.
    own = DeltaRsOwnTables()
    for round_ in range(12):
        path = str(tmp_path / f"t{round_}")
        made = {}

        def create(who: int, path: str = path, made: dict = made) -> None:
            made[who] = own.create(path, COLUMNS, (f"writer {who}", who, dt.datetime(2026, 1, 1, tzinfo=UTC)),
                                   {"delta.checkpointInterval": "10"})

        threads = [threading.Thread(target=create, args=(who,)) for who in (1, 2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(made.values()) == [False, True], round_
        maker = next(who for who, value in made.items() if value)
        table = DeltaTable(path)
        assert table.version() == 0
        assert table.to_pyarrow_table().column("consumer").to_pylist() == [f"writer {maker}"]


def test_a_creation_that_committed_and_then_raised_stands_its_rows_once_and_the_lease_row_its_own(tmp_path, monkeypatch):
    # Setup: delta-rs's write commits an own table's creation, then raises (an I/O error after the commit); once for
    # an append creating the table, once for the lease table's creation with its row.
    # Expect: the append is taken with its rows once (not appended again as into a table another writer made), and
    # the creation is this call's (not another job's: the lease would have waited on its own row).
    import deltalake

    real = deltalake.write_deltalake

    def committed_then_raised(*args, **kwargs):
        real(*args, **kwargs)
        raise OSError("connection reset after the commit")

    monkeypatch.setattr(deltalake, "write_deltalake", committed_then_raised)
    own = DeltaRsOwnTables()
    row = ("one", 1, dt.datetime(2026, 1, 1, tzinfo=UTC))
    path = str(tmp_path / "appended")
    assert own.append(path, COLUMNS, [row], check_write=lambda: None, create_with={"delta.checkpointInterval": "10"})
    assert DeltaTable(path).to_pyarrow_table().column("consumer").to_pylist() == ["one"]
    assert own.create(str(tmp_path / "leases"), COLUMNS, row, {"delta.checkpointInterval": "10"}) is True
    assert DeltaTable(str(tmp_path / "leases")).to_pyarrow_table().num_rows == 1
