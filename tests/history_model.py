"""The SCD type 2 history an upstream table should leave (`apply.changes.history`), kept beside the upstream model.

A workload calls `observe` after each transaction and the DDL methods as it applies DDL; `rows` is the
history table expected then. Updates must change a row's values (a state is a change seen upstream).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from testbed.changefeed import Changefeed
from testbed.tables import column

HISTORY_COLUMNS = ("valid_from_commit_ts", "valid_to_commit_ts", "is_current", "op")


class HistoryModel:
    def __init__(self, feed: Changefeed, database: str, table: str, key: str = "id") -> None:
        self._feed, self.name, self._key = feed, (database, table), key
        self.states: list[dict] = []  # each: the row's columns and the four history columns
        self._current: dict[object, dict] = {}  # key -> its current state
        self._seen: dict[object, dict] = {}  # key -> row, as of the last observation

    def _rows(self) -> dict[object, dict]:
        return {row[self._key]: row for row in self._feed.table_state(*self.name)[1]}

    def _close(self, key, commit_ts: int) -> None:
        state = self._current.pop(key)
        state.update(valid_to_commit_ts=commit_ts, is_current=False)

    def _begin(self, row: dict, commit_ts: int, op: str) -> None:
        state = {**row, "valid_from_commit_ts": commit_ts, "valid_to_commit_ts": None, "is_current": True, "op": op}
        self.states.append(state)
        self._current[row[self._key]] = state

    def begin_from_table(self, commit_ts: int) -> None:
        """History chosen for a table already applied through `commit_ts`: its rows are its first states."""
        self._seen = self._rows()
        for row in self._seen.values():
            self._begin(row, commit_ts, "SNAPSHOT")

    def observe(self, commit_ts: int) -> None:
        """After a transaction at `commit_ts`: each key whose row changed ends a state and may begin one."""
        rows = self._rows()
        for key in self._seen.keys() | rows.keys():
            before, after = self._seen.get(key), rows.get(key)
            if before == after:
                continue
            if key in self._current:
                self._close(key, commit_ts)
            if after is not None:
                self._begin(after, commit_ts, "UPDATE" if before is not None else "INSERT")
        self._seen = rows

    def added_column(self, name: str, value) -> None:
        """ADD COLUMN with a default: current states read it; closed ones predate the column."""
        for state in self._current.values():
            state[name] = value
        self._seen = self._rows()

    def renamed_column(self, old: str, new: str) -> None:
        for state in self.states:
            if old in state:
                state[new] = state.pop(old)
        self._seen = self._rows()

    def dropped_column(self) -> None:
        """The history keeps the column with the values it had."""
        self._seen = self._rows()

    def truncated(self, commit_ts: int) -> None:
        for key in list(self._current):
            self._close(key, commit_ts)
        self._seen = {}

    def renamed_table(self, database: str, table: str) -> None:
        self.name = (database, table)

    def rows(self, columns: Sequence[str]) -> list[tuple]:
        """The expected history table's rows as tuples of `columns`, sorted."""
        return sorted((tuple(state.get(c) for c in columns) for state in self.states), key=repr)


def random_changes(feed: Changefeed, model: HistoryModel, rng: random.Random, txns: int, counter, extra=dict) -> None:
    """`txns` transactions of the model's table, 3 of keys 1-12 each (inserted if absent, else deleted or updated
    with a new `qty` from `counter`), and an insert into `crm.notes` (which keeps no history)."""
    for _ in range(txns):
        with feed.transaction() as txn:
            live = {row["id"] for row in feed.table_state(*model.name)[1]}
            for key in rng.sample(range(1, 13), 3):
                values = {"qty": next(counter), **extra()}
                if key not in live:
                    txn.insert(*model.name, {"id": key, **values})
                elif rng.random() < 0.25:
                    txn.delete(*model.name, [key])
                else:
                    txn.update(*model.name, [key], values)
            txn.insert("crm", "notes", {"id": next(counter), "body": "x"})
        model.observe(feed.last_ts)


def history_workload(feed: Changefeed, rng: random.Random, txns: int = 6) -> HistoryModel:
    """`shop.items` (chosen for history) through inserts, updates, deletes, a key move, ADD COLUMN with a
    default, DROP COLUMN, RENAME COLUMN, TRUNCATE and RENAME TABLE, `txns` transactions between DDLs;
    `crm.notes` beside it (not chosen). Keys are changed several times a transaction apart."""
    feed.create_table("shop", "items", [column("id", "int", nullable=False), column("name", "varchar", length=32),
                                        column("qty", "int"), column("note", "varchar", length=16)], primary_key=["id"])
    feed.create_table("crm", "notes", [column("id", "int", nullable=False), column("body", "text")], primary_key=["id"])
    model = HistoryModel(feed, "shop", "items")
    counter = iter(range(10**6))

    def changes(n: int, extra=lambda: {}) -> None:
        random_changes(feed, model, rng, n, counter, extra)

    changes(txns, lambda: {"name": f"n{rng.randrange(99)}", "note": rng.choice([None, "a", "b"])})
    with feed.transaction() as txn:  # a key moved: the old key's state ends, the new one begins
        moved = min(row["id"] for row in feed.table_state(*model.name)[1])
        txn.update(*model.name, [moved], {"id": 100 + moved, "qty": next(counter)})
    model.observe(feed.last_ts)
    feed.add_column("shop", "items", column("stock", "int", default="5"), existing_rows_value=5)
    model.added_column("stock", 5)
    changes(txns, lambda: {"stock": rng.randrange(99)})
    feed.drop_column("shop", "items", "note")
    model.dropped_column()
    feed.rename_column("shop", "items", "name", "title")
    model.renamed_column("name", "title")
    changes(txns, lambda: {"title": f"t{rng.randrange(99)}"})
    model.truncated(feed.truncate_table("shop", "items"))
    changes(txns // 2 or 1)
    feed.rename_table("shop", "items", "shop", "goods")
    model.renamed_table("shop", "goods")
    changes(txns // 2 or 1)
    return model
