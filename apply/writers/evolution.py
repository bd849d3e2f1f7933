"""Planning a Delta schema change from upstream structures.

Given the Delta table's columns and the table structure after a DDL, decide
what to do: rename, drop, add (at the upstream position), change type (widen
in place where Delta's type widening allows, else rewrite the table), and
which added columns need their default written into the rows that existed
before (as TiDB shows them).

The DDL text is never executed. Column renames are the one thing structures
cannot tell apart from a drop plus an add (no protocol carries column ids),
so the statement is read for RENAME COLUMN / CHANGE clauses, and a rename is
done only when the structures agree: the old name disappeared and the new
one appeared.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ticdc_delta.schema_cache.events import Column, TableSchema


@dataclass(frozen=True)
class EvolutionPlan:
    renames: list[tuple[str, str]] = field(default_factory=list)
    drops: list[str] = field(default_factory=list)
    adds: list[tuple[Column, str | None]] = field(default_factory=list)  # column, predecessor
    widenings: list[tuple[str, str]] = field(default_factory=list)  # column, new type
    rewrite: list[tuple[str, str]] = field(default_factory=list)  # column, new type (not widenable)
    backfill: list[Column] = field(default_factory=list)

    def __bool__(self) -> bool:
        return any((self.renames, self.drops, self.adds, self.widenings, self.rewrite, self.backfill))


def normalized_type(spark_type: str) -> str:
    return spark_type.replace(" ", "").lower()


# --- type widening Delta can do in place (Delta 4 type widening) ---------------------

_INTEGER_RANK = {"tinyint": 1, "smallint": 2, "int": 3, "bigint": 4}
_INTEGER_DIGITS = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 20}
_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)")


def is_widening(old: str, new: str) -> bool:
    """Whether Delta can change a column from `old` to `new` without a rewrite."""
    old, new = normalized_type(old), normalized_type(new)
    if old in _INTEGER_RANK and new in _INTEGER_RANK:
        return _INTEGER_RANK[new] > _INTEGER_RANK[old]
    if old == "float" and new == "double":
        return True
    new_decimal = _DECIMAL.fullmatch(new)
    if old in _INTEGER_RANK and new_decimal:
        precision, scale = map(int, new_decimal.groups())
        return precision - scale >= _INTEGER_DIGITS[old]
    old_decimal = _DECIMAL.fullmatch(old)
    if old_decimal and new_decimal:
        p1, s1 = map(int, old_decimal.groups())
        p2, s2 = map(int, new_decimal.groups())
        return s2 >= s1 and p2 - s2 >= p1 - s1 and (p2, s2) != (p1, s1)
    return False


# --- renames named by the statement ---------------------------------------------------

_IDENTIFIER = r"(`(?:[^`]|``)+`|[^\s,`()]+)"
_RENAME_CLAUSE = re.compile(rf"\bRENAME\s+COLUMN\s+{_IDENTIFIER}\s+TO\s+{_IDENTIFIER}", re.IGNORECASE)
_CHANGE_CLAUSE = re.compile(rf"\bCHANGE\s+(?:COLUMN\s+)?{_IDENTIFIER}\s+{_IDENTIFIER}", re.IGNORECASE)


def _unquote(identifier: str) -> str:
    if identifier.startswith("`"):
        return identifier[1:-1].replace("``", "`")
    return identifier


def renames_in_statement(statement: str) -> list[tuple[str, str]]:
    """(old, new) column names of RENAME COLUMN and CHANGE [COLUMN] clauses."""
    pairs = [(m.group(1), m.group(2)) for m in _RENAME_CLAUSE.finditer(statement)]
    pairs += [(m.group(1), m.group(2)) for m in _CHANGE_CLAUSE.finditer(statement)]
    return [(_unquote(old), _unquote(new)) for old, new in pairs if _unquote(old).lower() != _unquote(new).lower()]


# --- the plan ---------------------------------------------------------------------------


def plan(current: Sequence[tuple[str, str]], target: TableSchema, statement: str = "") -> EvolutionPlan:
    """What turns a Delta table with columns `current` into `target`."""
    current_types = {name.lower(): (name, typ) for name, typ in current}
    target_names = {c.name.lower() for c in target.columns}
    renames = [
        (current_types[old.lower()][0], new)
        for old, new in renames_in_statement(statement)
        if old.lower() in current_types and old.lower() not in target_names and new.lower() in target_names
        and new.lower() not in current_types
    ]
    after_renames = dict(current_types)
    for old, new in renames:
        after_renames[new.lower()] = (new, after_renames.pop(old.lower())[1])

    drops = [name for key, (name, _) in after_renames.items() if key not in target_names]
    adds, widenings, rewrite = [], [], []
    predecessor = None
    for column in target.columns:
        existing = after_renames.get(column.name.lower())
        if existing is None:
            adds.append((column, predecessor))
        elif normalized_type(existing[1]) != normalized_type(column.spark_type):
            change = (existing[0], column.spark_type)
            (widenings if is_widening(existing[1], column.spark_type) else rewrite).append(change)
        predecessor = column.name

    backfill = [c for c, _ in adds if c.default is not None]
    return EvolutionPlan(renames, drops, adds, widenings, rewrite, backfill)
