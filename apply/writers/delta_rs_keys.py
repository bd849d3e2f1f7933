"""The predicate naming a batch's keys, for delta-rs's write that replaces their rows (apply.writers.delta_rs).

delta-rs takes a predicate as SQL text only (DataFusion's parser). The keys are upstream values, so they reach
it only as literals this module writes from typed values: integers, decimals and dates in their canonical text
inside a CAST to the column's type, strings as standard SQL string literals (quotes doubled; DataFusion reads a
backslash as itself). Names are quoted identifiers (double quotes doubled). Keys of any other type, a NULL key
(none is possible for a primary or NOT NULL unique key, but the rows say so, not the schema), and composite keys
of more rows than `COMPOSITE_MAX_ROWS` (their predicate is a tree of ORs, slower to plan than Spark's MERGE
past that) are left to Spark's MERGE.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from decimal import Decimal

from ticdc_delta.schema_cache.events import TableSchema

COMPOSITE_MAX_ROWS = 1_000
_INTEGERS = frozenset({"TINYINT", "SMALLINT", "INT", "BIGINT"})
_DECIMAL = re.compile(r"DECIMAL\(\d+,\d+\)")


def identifier(name: str) -> str:
    """A SQL identifier for delta-rs's expression parser (DataFusion): double quotes, doubled inside."""
    return '"' + name.replace('"', '""') + '"'


def _literal(spark_type: str, value) -> str:
    if spark_type in _INTEGERS and isinstance(value, int) and not isinstance(value, bool):
        return f"CAST('{value:d}' AS {spark_type})"
    if _DECIMAL.fullmatch(spark_type) and isinstance(value, Decimal) and value.is_finite():
        return f"CAST('{value:f}' AS {spark_type})"
    if spark_type == "DATE" and isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return f"CAST('{value.isoformat()}' AS DATE)"
    if spark_type == "STRING" and isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    raise ValueError(f"no literal of {spark_type} for delta-rs")


def _keyable(spark_type: str) -> bool:
    return spark_type in _INTEGERS or spark_type in ("DATE", "STRING") or bool(_DECIMAL.fullmatch(spark_type))


def keys_refusal(schema: TableSchema, rows: Sequence[tuple]) -> str | None:
    """Why the keys of `rows` cannot be named to delta-rs (module docstring), or None."""
    positions = [schema.column_names().index(k) for k in schema.key]
    if not positions:
        return "no key"
    for i in positions:
        column = schema.columns[i]
        if not _keyable(column.spark_type):
            return f"a key column of type {column.spark_type}"
        if any(row[i] is None for row in rows):
            return f"a NULL in key column {column.name!r}"
    if len(positions) > 1 and len(rows) > COMPOSITE_MAX_ROWS:
        return f"{len(rows)} rows of a composite key (at most {COMPOSITE_MAX_ROWS})"
    return None


def keys_predicate(schema: TableSchema, rows: Sequence[tuple]) -> str:
    """The predicate true exactly for the rows whose key is one of `rows`' (`keys_refusal` said None)."""
    names = schema.column_names()
    keys = [(identifier(k), schema.columns[names.index(k)].spark_type, names.index(k)) for k in schema.key]
    if len(keys) == 1:
        name, spark_type, i = keys[0]
        literals = dict.fromkeys(_literal(spark_type, row[i]) for row in rows)
        return f"{name} IN ({', '.join(literals)})"
    terms = ["(" + " AND ".join(f"{name} = {_literal(spark_type, row[i])}" for name, spark_type, i in keys) + ")"
             for row in rows]
    return _balanced_or(terms)


def _balanced_or(terms: Sequence[str]) -> str:
    # A tree of depth log2(n), not a chain of n: the parser and planner recurse along it.
    if len(terms) == 1:
        return terms[0]
    middle = len(terms) // 2
    return f"({_balanced_or(terms[:middle])} OR {_balanced_or(terms[middle:])})"
