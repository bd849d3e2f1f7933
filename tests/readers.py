"""Delta tables read back with delta-rs (`deltalake`), an independent reader, and compared with Spark's read.

Under `target.table_features = "compatible"` every table the job writes must open in delta-rs and hold
what Spark reads. Values are normalized along the table's Spark schema before they are compared:
TIMESTAMP (an instant) as microseconds since the epoch (Spark hands out local wall-clock times, delta-rs
UTC ones), binary as bytes, NaN as one token, structs by field name, maps with their entries sorted;
decimals, dates, TIMESTAMP_NTZ (a wall-clock time, no zone), strings and numbers as they come.
"""

from __future__ import annotations

import datetime as dt
import math
import os
from collections.abc import Iterable
from pathlib import Path

_LOG = "_delta_log"


def delta_tables_under(root: Path) -> Iterable[Path]:
    """Directories under `root` holding a Delta table (a `_delta_log` with at least one commit)."""
    for directory, subdirectories, _files in os.walk(root):
        if _LOG in subdirectories:
            subdirectories.clear()  # a table's own folders hold no other table
            if log_state(Path(directory)):
                yield Path(directory)


def log_state(table: Path) -> str:
    """The table's newest commit file name ('' when it has none): changes with every commit."""
    try:
        commits = [n for n in os.listdir(table / _LOG) if n.endswith(".json") and n[:-5].isdigit()]
    except FileNotFoundError:
        return ""
    return max(commits, default="")


def _epoch_micros(value: dt.datetime) -> int:
    # A naive value is the local wall-clock time PySpark made of the instant (fold-aware).
    return int(value.replace(microsecond=0).timestamp()) * 1_000_000 + value.microsecond


def _normalized(value, data_type):
    """`value` of Spark type `data_type`, from either reader, in one comparable form."""
    from pyspark.sql import types

    if value is None:
        return None
    if isinstance(data_type, types.StructType):
        get = value.__getitem__  # a Row (Spark) or a dict (pyarrow), both by field name
        return tuple(_normalized(get(f.name), f.dataType) for f in data_type.fields)
    if isinstance(data_type, types.ArrayType):
        return tuple(_normalized(v, data_type.elementType) for v in value)
    if isinstance(data_type, types.MapType):
        entries = value.items() if isinstance(value, dict) else value  # pyarrow: a list of (key, value)
        pairs = ((_normalized(k, data_type.keyType), _normalized(v, data_type.valueType)) for k, v in entries)
        return tuple(sorted(pairs, key=repr))
    if isinstance(data_type, types.TimestampType) and isinstance(value, dt.datetime):
        return _epoch_micros(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return value


def _sort_key(row: tuple) -> str:
    return repr(row)


def spark_read(spark, table: Path):
    """The table's Spark schema, and its rows as Spark reads them (normalized, sorted)."""
    from pyspark.sql import functions
    from pyspark.sql.types import TimestampType

    frame = spark.read.format("delta").load(str(table))
    schema = frame.schema
    # Top-level instants leave Spark as epoch microseconds: exact, whatever the local time zone.
    columns = [
        functions.unix_micros(functions.col(f"`{f.name.replace('`', '``')}`")).alias(f.name)
        if isinstance(f.dataType, TimestampType)
        else functions.col(f"`{f.name.replace('`', '``')}`")
        for f in schema.fields
    ]
    rows = [
        tuple(_normalized(v, f.dataType) for v, f in zip(r, schema.fields, strict=True))
        for r in frame.select(*columns).collect()
    ]
    return schema, sorted(rows, key=_sort_key)


def delta_rs_read(table: Path | str, schema, storage_options: dict | None = None) -> tuple[list[str], list[tuple]]:
    """Column names and rows as delta-rs reads the table (through pyarrow, as pandas users do); an s3a://
    table (Hadoop's scheme) at its s3:// URL, with `storage_options`."""
    from deltalake import DeltaTable

    uri = str(table).replace("s3a://", "s3://", 1) if str(table).startswith("s3a://") else str(table)
    data = DeltaTable(uri, storage_options=storage_options).to_pyarrow_table()
    types_by_name = {f.name: f.dataType for f in schema.fields}
    rows = []
    for row in data.to_pylist():
        rows.append(tuple(_normalized(v, types_by_name.get(name)) for name, v in row.items()))
    return data.column_names, sorted(rows, key=_sort_key)


def assert_delta_rs_reads_as_spark(spark, table: Path | str, storage_options: dict | None = None) -> None:
    """delta-rs opens the table and reads the same columns and rows as Spark."""
    schema, spark_rows = spark_read(spark, table)
    spark_columns = [f.name for f in schema.fields]
    columns, rows = delta_rs_read(table, schema, storage_options)
    assert columns == spark_columns, f"{table}: delta-rs reads columns {columns}, Spark {spark_columns}"
    if rows != spark_rows:
        only_spark = [r for r in spark_rows if r not in rows][:3]
        only_delta_rs = [r for r in rows if r not in spark_rows][:3]
        raise AssertionError(
            f"{table}: delta-rs reads {len(rows)} rows, Spark {len(spark_rows)}; "
            f"only in Spark's read (first 3): {only_spark}; only in delta-rs's: {only_delta_rs}"
        )
