"""Filtered reads of two Delta tables compared, reader by reader: what each answers to the same predicates.

A reader skips files by their statistics (Delta's `add` statistics, Parquet's own), so two tables holding the
same rows can still answer a filtered read differently when one writer recorded a bound inexactly. The
predicates are equalities and ranges on each given value, and NULL tests, per column. The readers:

- Spark (the test session, with Delta's data skipping and Parquet filter pushdown as configured: on by
  default), a query per predicate;
- delta-rs through its pyarrow dataset (as pandas and Polars users read: fragments pruned by the `add`
  statistics delta-rs turns into expressions);
- delta-rs's DataFusion query engine (`QueryBuilder`), for the types whose SQL literals it takes as Spark does.
"""

from __future__ import annotations

import datetime as dt
import math
import operator
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

OPERATORS = ("=", "<", ">", "<=", ">=")


@dataclass(frozen=True)
class Predicate:
    column: str
    spark_type: str
    operator: str  # one of OPERATORS, or "IS NULL" / "IS NOT NULL" (value None)
    value: object = None

    def __str__(self) -> str:
        return f"{self.column} {self.operator} {'' if self.value is None else repr(self.value)}".strip()


def predicates(columns: Mapping[str, str], values: Mapping[str, Iterable]) -> list[Predicate]:
    """Every operator on every value of `values` (column -> values), and the NULL tests, per column of `columns`
    (name -> Spark type)."""
    found = []
    for name, spark_type in columns.items():
        found += [Predicate(name, spark_type, "IS NULL"), Predicate(name, spark_type, "IS NOT NULL")]
        seen = []
        for value in values.get(name, ()):
            if value is None or any(_same(value, v) for v in seen):
                continue
            seen.append(value)
            operators = ("=",) if spark_type in ("BINARY", "BOOLEAN") else OPERATORS
            found += [Predicate(name, spark_type, op, value) for op in operators]
    return found


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return type(a) is type(b) and a == b


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def spark_literal(spark_type: str, value) -> str:
    """`value` as a Spark SQL literal of `spark_type` (constant-folded: data skipping sees it)."""
    if spark_type in ("FLOAT", "DOUBLE"):
        text = "NaN" if math.isnan(value) else ("Infinity" if value == math.inf else
                                                 "-Infinity" if value == -math.inf else repr(value))
        return f"CAST('{text}' AS {spark_type})"
    if spark_type == "DATE":
        return f"DATE'{value.isoformat()}'"
    if spark_type == "TIMESTAMP":
        return f"TIMESTAMP'{value.astimezone(dt.timezone.utc).replace(tzinfo=None).isoformat(sep=' ')}Z'"
    if spark_type == "TIMESTAMP_NTZ":
        return f"TIMESTAMP_NTZ'{value.isoformat(sep=' ')}'"
    if spark_type == "STRING":
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if spark_type == "BINARY":
        return f"X'{value.hex()}'"
    if spark_type == "BOOLEAN":
        return "TRUE" if value else "FALSE"
    return f"CAST('{value}' AS {spark_type})"


def _spark_condition(p: Predicate) -> str:
    if p.value is None:
        return f"{_quote(p.column)} {p.operator}"
    return f"{_quote(p.column)} {p.operator} {spark_literal(p.spark_type, p.value)}"


def spark_counts(spark, path: str, found: Sequence[Predicate]) -> list[int]:
    """How many rows Spark reads from the table at `path` under each predicate: a query each, four at a time (a
    query of a small table is mostly the driver's planning and Delta's file skipping)."""
    def count(p: Predicate) -> int:
        return spark.sql(f"SELECT count(*) FROM delta.`{path}` WHERE {_spark_condition(p)}").collect()[0][0]

    with ThreadPoolExecutor(4, thread_name_prefix="filtered-read") as pool:
        return list(pool.map(count, found))


def _pyarrow_condition(pa, ds, schema, p: Predicate):
    field = ds.field(p.column)
    if p.operator == "IS NULL":
        return field.is_null()
    if p.operator == "IS NOT NULL":
        return field.is_valid()
    value = pa.scalar(p.value, type=schema.field(p.column).type)
    return {"=": field == value, "<": field < value, ">": field > value, "<=": field <= value,
            ">=": field >= value}[p.operator]


def delta_rs_counts(path: str, found: Sequence[Predicate]) -> list[int]:
    """How many rows delta-rs's pyarrow dataset reads from the table at `path` under each predicate."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    dataset = DeltaTable(path).to_pyarrow_dataset()
    return [dataset.count_rows(filter=_pyarrow_condition(pa, ds, dataset.schema, p)) for p in found]


def pyarrow_answers(path: str, found: Sequence[Predicate]) -> list[int]:
    """What each predicate holds for in the table's rows by pyarrow's semantics, no file skipped: the whole table
    read, then filtered in memory."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    rows = ds.dataset(DeltaTable(path).to_pyarrow_table())
    return [rows.count_rows(filter=_pyarrow_condition(pa, ds, rows.schema, p)) for p in found]


# DataFusion takes these types' literals as Spark does (its DECIMAL and timestamp literals differ in form).
_DATAFUSION_TYPES = frozenset({"TINYINT", "SMALLINT", "INT", "BIGINT", "DOUBLE", "STRING", "DATE"})


def _datafusion_condition(p: Predicate) -> str | None:
    column = '"' + p.column.replace('"', '""') + '"'
    if p.value is None:
        return f"{column} {p.operator}"
    if p.spark_type not in _DATAFUSION_TYPES:
        return None
    if p.spark_type == "DOUBLE":
        text = "NaN" if math.isnan(p.value) else ("inf" if p.value == math.inf else
                                                   "-inf" if p.value == -math.inf else repr(p.value))
        literal = f"CAST('{text}' AS DOUBLE)"
    elif p.spark_type == "STRING":
        literal = "'" + p.value.replace("'", "''") + "'"
    elif p.spark_type == "DATE":
        literal = f"DATE '{p.value.isoformat()}'"
    else:
        literal = f"CAST({p.value} AS BIGINT)"
    return f"{column} {p.operator} {literal}"


def datafusion_counts(path: str, found: Sequence[Predicate]) -> list[int | None]:
    """How many rows delta-rs's DataFusion engine reads under each predicate (None: not asked, its literal differs)."""
    from deltalake import DeltaTable, QueryBuilder

    builder = QueryBuilder().register("t", DeltaTable(path))
    counts = []
    for p in found:
        condition = _datafusion_condition(p)
        if condition is None:
            counts.append(None)
            continue
        batches = builder.execute(f"SELECT count(*) AS n FROM t WHERE {condition}").read_all()
        counts.append(batches.column(0)[0].as_py())
    return counts


def _spark_order(spark_type: str, value):
    """A key ordering values of `spark_type` as Spark compares them: NaN above every number and equal to itself,
    -0.0 equal to 0.0, strings by their UTF-8 bytes."""
    if spark_type in ("FLOAT", "DOUBLE"):
        return (1, 0.0) if math.isnan(value) else (0, value)
    if spark_type == "STRING":
        return value.encode("utf-8")
    return value


_COMPARISONS = {"=": operator.eq, "<": operator.lt, ">": operator.gt, "<=": operator.le, ">=": operator.ge}


def spark_answers(rows: Iterable[Sequence], names: Sequence[str], found: Sequence[Predicate]) -> list[int]:
    """How many of `rows` (tuples of the columns `names`) each predicate holds for, by Spark's semantics: what
    Spark answers from a table holding them (its own MERGE's, checked by the tests of this module's users)."""
    rows = list(rows)
    answers = []
    for p in found:
        position = names.index(p.column)
        values = [row[position] for row in rows]
        if p.operator in ("IS NULL", "IS NOT NULL"):
            answers.append(sum((v is None) == (p.operator == "IS NULL") for v in values))
            continue
        compare = _COMPARISONS[p.operator]
        wanted = _spark_order(p.spark_type, p.value)
        answers.append(sum(v is not None and compare(_spark_order(p.spark_type, v), wanted) for v in values))
    return answers


def for_spark(found: Sequence[Predicate]) -> list[Predicate]:
    """The predicates Spark is asked (each is a query of about 0.2 s): the NULL tests, every equality, and per
    column `<` its least value and `>` its greatest (NaN the greatest), which cross every file's bounds."""
    chosen = []
    by_column: dict[str, list[Predicate]] = {}
    for p in found:
        if p.operator in ("IS NULL", "IS NOT NULL", "="):
            chosen.append(p)
        else:
            by_column.setdefault(p.column, []).append(p)
    for ranges in by_column.values():
        key = lambda p: _spark_order(p.spark_type, p.value)  # noqa: E731
        chosen.append(min((p for p in ranges if p.operator == "<"), key=key))
        chosen.append(max((p for p in ranges if p.operator == ">"), key=key))
    return chosen


def differences(spark, ours: str, theirs: str, found: Sequence[Predicate], rows: Iterable[Sequence],
                names: Sequence[str], *, ask_spark: bool = True) -> tuple[list[str], list[str]]:
    """The (reader, predicate)s whose answer from the table at `ours` is not the one the reader gives from the
    table at `theirs` (Spark's MERGE wrote it): Spark's, against what its semantics give from `rows` (the
    tables' rows, columns `names`; unless not `ask_spark`); DataFusion's and pyarrow's, against their answers from `theirs`. Where
    pyarrow's answer from either is not what the rows hold by its semantics (the whole table read, then
    filtered), the second list says so: its misreadings of the files Spark wrote, which the one table
    holds too (both answers wrong alike) or only the other (ours right)."""
    found = list(found)
    lines, misread = [], []
    asked = for_spark(found) if ask_spark else []
    for p, a, b in zip(asked, spark_counts(spark, ours, asked), spark_answers(rows, names, asked), strict=True):
        if a != b:
            lines.append(f"Spark: {p}: {a} rows, {b} held")
    for p, a, b in zip(found, datafusion_counts(ours, found), datafusion_counts(theirs, found), strict=True):
        if a != b:
            lines.append(f"delta-rs (DataFusion): {p}: {a} rows, {b} from the table Spark merged")
    truth = pyarrow_answers(theirs, found)
    for p, a, b, held in zip(found, delta_rs_counts(ours, found), delta_rs_counts(theirs, found), truth, strict=True):
        if a == b and b != held:
            misread.append(f"delta-rs (pyarrow): {p}: {a} rows from both tables, {held} held")
        elif a != b and a == held:
            misread.append(f"delta-rs (pyarrow): {p}: {b} rows from the table Spark merged, {held} held")
        elif a != b:
            lines.append(f"delta-rs (pyarrow): {p}: {a} rows, {held} held ({b} from the table Spark merged)")
    return lines, misread
