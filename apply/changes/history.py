"""SCD type 2 history tables: every state a row had, each with the commitTs range it held.

A table chosen for history (`[history] tables`) gets a second Delta table, its history, in the
database named with a suffix (`shop.orders` -> `shop_history.orders`): the table's columns, then

- `valid_from_commit_ts`: the commitTs of the change that gave the row this state;
- `valid_to_commit_ts`: the commitTs of the next change of its key (NULL while current);
- `is_current`: whether it is the key's state now;
- `op`: what began the state: INSERT, UPDATE, or SNAPSHOT (rows the table held when its history
  began, valid from the table's applied commitTs).

A DELETE, TRUNCATE or DROP TABLE only closes states. Each batch adds one MERGE per history table,
whose source is every state of every key the batch touched (per key and commitTs, where the table
gets only the net change): the key's first change in the batch closes its current state, and each
state the batch gives it is inserted with its validity. The history records its own applied point,
so a crash between the table's MERGE and the history's feeds the batch to the history alone.

Structure follows the table (renames, adds, type changes), except that a column dropped upstream
stays in the history with the values it had (NULL in later states), and a default added with a
column is written into current states only: closed ones predate the column.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass

from ticdc_delta.exceptions import ApplyError
from ticdc_delta.schema_cache.events import Column, Op, RowChange, TableName, TableSchema

VALID_FROM = "valid_from_commit_ts"
VALID_TO = "valid_to_commit_ts"
IS_CURRENT = "is_current"
OP = "op"
COLUMNS = (
    Column(VALID_FROM, "BIGINT"),
    Column(VALID_TO, "BIGINT"),
    Column(IS_CURRENT, "BOOLEAN"),
    Column(OP, "STRING"),
)
NAMES = frozenset(c.name for c in COLUMNS)
SNAPSHOT = "SNAPSHOT"

# The MERGE source's columns after the table's c0.. (see `DeltaWriter.merge_history`).
SOURCE_COLUMNS = ("h_close BOOLEAN", "h_from BIGINT", "h_to BIGINT", "h_current BOOLEAN", "h_op STRING")


@dataclass(frozen=True)
class HistoryChoice:
    """Which tables keep history (`db.table` names or shell patterns such as `shop.*`), and where."""

    patterns: tuple[str, ...] = ()
    database_suffix: str = "_history"

    def wants(self, table: TableName) -> bool:
        if table.database.endswith(self.database_suffix):
            return False  # a history table itself
        name = f"{table.database}.{table.table}"
        return any(fnmatch.fnmatchcase(name, p) for p in self.patterns)

    def history_of(self, table: TableName) -> TableName:
        return TableName(table.database + self.database_suffix, table.table)

    def __bool__(self) -> bool:
        return bool(self.patterns)


def history_schema(schema: TableSchema) -> TableSchema:
    """The history table's structure for a table structure: its columns, then the history's own."""
    clash = [c.name for c in schema.columns if c.name.lower() in NAMES]
    if clash:
        raise ApplyError(
            f"{schema.name}: column {clash[0]!r} has the name of a history column "
            f"({', '.join(sorted(NAMES))}); keep no history for this table"
        )
    return TableSchema(schema.name, schema.columns + COLUMNS, schema.key, schema.table_id, schema.version)


def history_source(rows: Sequence[RowChange], schema: TableSchema) -> list[tuple]:
    """The MERGE source for `rows` (one structure, `schema`): per key, a close of its current state
    at its first commitTs here, and each state it takes, valid until its next change.

    At one commitTs an upsert of a key beats a delete of it (a split UPDATE), as in `apply.changes.collapse`.
    Rows are in commitTs order (the gate's).
    """
    key_positions = schema.key_indexes()
    width = len(schema.columns)
    # key -> [(commitTs, image or None for deleted, op)], one entry per commitTs
    states: dict[tuple, list[list]] = {}

    def record(key: tuple, ts: int, image: tuple | None, op: str) -> None:
        timeline = states.setdefault(key, [])
        if timeline and timeline[-1][0] == ts:
            last = timeline[-1]
            if image is None and last[1] is not None:
                return  # the delete half of a split update: the upsert stands
            # A later change in the same transaction; an insert stays the state's beginning.
            last[1], last[2] = image, (last[2] if last[2] == Op.INSERT.value and image is not None else op)
            return
        timeline.append([ts, image, op])

    for row in sorted(rows, key=lambda r: r.commit_ts):
        if row.op is Op.DELETE:
            record(tuple(row.before[i] for i in key_positions), row.commit_ts, None, Op.DELETE.value)
            continue
        new_key = tuple(row.after[i] for i in key_positions)
        if row.op is Op.UPDATE:
            old_key = tuple(row.before[i] for i in key_positions)
            if old_key != new_key:
                record(old_key, row.commit_ts, None, Op.DELETE.value)
        op = Op.INSERT.value if row.op is Op.INSERT else Op.UPDATE.value
        record(new_key, row.commit_ts, row.after, op)

    source: list[tuple] = []
    for key, timeline in states.items():
        closing = [None] * width
        for position, value in zip(key_positions, key, strict=True):
            closing[position] = value
        source.append((*closing, True, timeline[0][0], None, False, None))
        for i, (ts, image, op) in enumerate(timeline):
            if image is None:
                continue
            until = timeline[i + 1][0] if i + 1 < len(timeline) else None
            source.append((*image, False, ts, until, until is None, op))
    return source


# --- statements (names quoted by the caller's `quote`; values only from DataFrames or the product) ---


def merge_sql(name: str, names: Sequence[str], key: Sequence[str], values: Sequence[str], source: str, quote) -> str:
    """One MERGE: close rows (`h_close`) end the key's current state; the others are inserted.

    `names`: the history table's column names for the table's columns (c0..), `key` among them;
    `values`: the source expression of each."""
    on = " AND ".join(f"t.{quote(k)} = s.c{names.index(k)}" for k in key)
    targets = ", ".join([*(quote(n) for n in names), *(quote(c.name) for c in COLUMNS)])
    inserted = ", ".join([*values, "s.h_from", "s.h_to", "s.h_current", "s.h_op"])
    return (
        f"MERGE INTO {name} AS t USING {source} AS s ON s.h_close AND t.{quote(IS_CURRENT)} AND {on} "
        f"WHEN MATCHED THEN UPDATE SET t.{quote(VALID_TO)} = s.h_from, t.{quote(IS_CURRENT)} = false "
        f"WHEN NOT MATCHED AND NOT s.h_close THEN INSERT ({targets}) VALUES ({inserted})"
    )


def close_sql(name: str, commit_ts: int, quote) -> str:
    """Every current state ends at `commit_ts` (TRUNCATE, DROP TABLE, a table re-created)."""
    return (
        f"UPDATE {name} SET {quote(VALID_TO)} = {int(commit_ts)}, {quote(IS_CURRENT)} = false "
        f"WHERE {quote(IS_CURRENT)}"
    )


def seed_sql(name: str, columns: Sequence[tuple[str, str]], valid_from: int | None, table: str, quote) -> str:
    """The table's rows appended to its new, empty history as current states. `columns`: (the table's
    column, the history's name for it)."""
    start = "NULL" if valid_from is None else str(int(valid_from))
    targets = [*(quote(target) for _, target in columns), *(quote(c.name) for c in COLUMNS)]
    values = [*(quote(source) for source, _ in columns), start, "NULL", "true", f"'{SNAPSHOT}'"]
    return f"INSERT INTO {name} ({', '.join(targets)}) SELECT {', '.join(values)} FROM {table}"
