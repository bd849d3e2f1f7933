"""Table renames read from DDL statements, for protocols whose DDL carries nothing else.

Canal-JSON and Open Protocol DDL carry the statement and (at most) the new
table name. Moving a renamed table needs the old name, so the statement is
read for RENAME TABLE / ALTER TABLE ... RENAME clauses. It is never executed.
"""

from __future__ import annotations

import re

from ticdc_delta.schema_cache.events import TableName

# A name starts where no other name character or backquote stands before it, and is at most 64
# characters long (MySQL's identifier limit; a quoted one counts a doubled backquote once). Without
# both, a long run of name characters made the search try every start with every length: quadratic,
# minutes for a 100 KB statement from a hostile or corrupt message.
_NAME = r"(?<![A-Za-z0-9_$`])(?:`(?:[^`]|``){1,64}`|[A-Za-z0-9_$]{1,64})"
_QUALIFIED = rf"({_NAME})(?:\s*\.\s*({_NAME}))?"
_RENAME_TABLES = re.compile(r"\bRENAME\s+TABLES?\s+(.*)", re.IGNORECASE | re.DOTALL)
_RENAME_PAIR = re.compile(rf"{_QUALIFIED}\s+TO\s+{_QUALIFIED}", re.IGNORECASE)
_ALTER_RENAME = re.compile(rf"\bALTER\s+TABLE\s+{_QUALIFIED}\s+RENAME\s+(?:TO\s+|AS\s+)?{_QUALIFIED}", re.IGNORECASE)


def _unquote(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def _rename_pairs(statement: str):
    renames = _RENAME_TABLES.search(statement)
    if renames is not None:
        yield from _RENAME_PAIR.finditer(renames.group(1))  # RENAME TABLE a TO b, c TO d
    yield from _ALTER_RENAME.finditer(statement)


def renamed_from(statement: str, database: str, new: TableName) -> TableName | None:
    """The old name in a RENAME statement whose new name is `new`, if the statement says so.

    Canal-json DDL carries only the statement and the new name; the old name is
    needed to move the table, so it is read from the statement (never executed).
    """
    for match in _rename_pairs(statement):
        a, b, c, d = match.groups()
        old = TableName(_unquote(a), _unquote(b)) if b else TableName(database, _unquote(a))
        target = TableName(_unquote(c), _unquote(d)) if d else TableName(database, _unquote(c))
        if target == new:
            return old
    return None
