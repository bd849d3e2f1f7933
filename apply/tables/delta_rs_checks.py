"""Where a MERGE by delta-rs would leave a table that some reader answers differently from the one Spark's
MERGE leaves: then the MERGE is Spark's. Decided per table and per MERGE, from the table's protocol, its
properties, its files' statistics and the rows to merge.

"The same" means the same for every reader (docs/operations.md, "Small MERGEs by delta-rs"): rows,
protocol, properties, the idempotent-write pair, and the statistics readers skip files by. delta-rs 1.6
records some values' statistics inexactly, and some values in a way a reader misjudges; a MERGE rewrites
the files of the rows it changes, so what the table already holds counts as much as the rows:

- DECIMAL bounds go through a 64-bit float (an integer above 2^53 is rounded, one above 2^63 is clamped,
  a value whose unscaled integer has more than 15 digits is rounded), and one nearer to zero than 0.00001
  is written in exponent form, which delta-rs's own pyarrow reader takes as unknown and then skips the file
  (where Spark writes it plain down to 0.000001). Exact: integers up to 2^53, other values whose unscaled
  integer (the value times 10^scale) has at most 15 digits and, at a scale above 5, none nearer to zero than
  0.00001. Any value between a file's bounds may become a bound of the file a MERGE rewrites it into.
- FLOAT/DOUBLE bounds leave NaN out (Spark's take it as the greatest value, so a file holding one would be
  skipped by `> x`), and record infinities as unknown (which delta-rs's own reader then skips).
- A DATE before 1582-10-15 or TIMESTAMP before 1900 in a file another writer made is refused by Spark 3.5
  (it cannot tell their calendar; SPARK-31404); a TIMESTAMP after 2262-04-11 in a file Spark wrote (INT96)
  is misread by delta-rs as nanoseconds.
- A file without statistics (collection turned off, CONVERT TO DELTA, another tool) tells nothing of
  what it holds: such a table stays with Spark.

Each check returns None where delta-rs writes what Spark would, or the reason it does not.
"""

from __future__ import annotations

import bisect
import datetime as dt
import math
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal

from ticdc_delta.schema_cache.events import TableSchema

# --- protocol and properties -----------------------------------------------------------------------------

# Table features delta-rs writes as Spark does. Legacy writer versions 3-4 (CHECK constraints, change data
# feed, generated columns), 6 (identity columns) and any other feature (row tracking, domain metadata,
# checkpoint protection, in-commit timestamps, ...) are Spark's.
_WRITER_FEATURES = frozenset({"appendOnly", "invariants", "timestampNtz"})
_READER_FEATURES = frozenset({"timestampNtz"})

# Table properties (an allow-list: anything else is Spark's): those that only say how long the log and
# removed files are kept, how the log is checkpointed, how large files are and which columns get statistics,
# which delta-rs honours as Spark does or which do not change what a reader sees; then those allowed only at
# the value that leaves off what delta-rs does not do as Spark does (Spark rewrites a symlink manifest after
# each commit, writes change data, refuses updates to an append-only table, ...).
_ANY_VALUE = frozenset({
    "delta.checkpointInterval", "delta.checkpointRetentionDuration", "delta.checkpoint.writeStatsAsJson",
    "delta.checkpoint.writeStatsAsStruct", "delta.logRetentionDuration", "delta.deletedFileRetentionDuration",
    "delta.enableExpiredLogCleanup", "delta.dataSkippingNumIndexedCols", "delta.targetFileSize",
    "delta.randomizeFilePrefixes", "delta.randomPrefixLength", "delta.minReaderVersion", "delta.minWriterVersion",
})
_ONLY_VALUE = {
    "delta.columnMapping.mode": "none",
    "delta.enableDeletionVectors": "false",
    "delta.enableChangeDataFeed": "false",
    "delta.enableTypeWidening": "false",
    "delta.enableRowTracking": "false",
    "delta.enableInCommitTimestamps": "false",
    "delta.appendOnly": "false",
    "delta.compatibility.symlinkFormatManifest.enabled": "false",
    "delta.checkpointPolicy": "classic",
    "delta.isolationLevel": "Serializable",
}
_FEATURE_PROPERTY = "delta.feature."


def protocol_refusal(protocol) -> str | None:
    """Whether the table's protocol asks for more than delta-rs writes as Spark does."""
    if protocol.min_reader_version not in (1, 3) or protocol.min_writer_version not in (1, 2, 7):
        return f"protocol ({protocol.min_reader_version}, {protocol.min_writer_version})"
    extra = (set(protocol.writer_features or ()) - _WRITER_FEATURES) | (
        set(protocol.reader_features or ()) - _READER_FEATURES)
    return f"table features {', '.join(sorted(extra))}" if extra else None


def properties_refusal(configuration: Mapping[str, str]) -> str | None:
    """Whether a table property asks for something delta-rs does not do as Spark does.

    Keys outside Delta's `delta.` namespace are notes no Delta writer acts on (an owner, a comment) and are allowed.
    """
    for key, value in configuration.items():
        if not key.startswith("delta.") or key in _ANY_VALUE:
            continue
        if key == "delta.dataSkippingStatsColumns" and "`" not in value:
            continue  # (delta-rs matches plain names as Spark does; quoted ones it does not parse)
        if key.startswith(_FEATURE_PROPERTY) and key[len(_FEATURE_PROPERTY):] in _WRITER_FEATURES:
            continue
        if key in _ONLY_VALUE and str(value).strip().lower() == _ONLY_VALUE[key].lower():
            continue
        return f"table property {key} = {value}"
    return None


# --- values ----------------------------------------------------------------------------------------------

# The earliest value of each type Spark 3.5 reads from a Parquet file without Spark's calendar mark.
_EARLIEST = {
    "DATE": dt.date(1582, 10, 15),
    "TIMESTAMP": dt.datetime(1900, 1, 1, tzinfo=dt.timezone.utc),
    "TIMESTAMP_NTZ": dt.datetime(1900, 1, 1),
}
# Spark writes TIMESTAMP as INT96 (its default) and delta-rs reads INT96 as nanoseconds.
_LATEST_SPARK_TIMESTAMP = dt.datetime(2262, 4, 11, tzinfo=dt.timezone.utc)
_FLOATING = frozenset({"FLOAT", "DOUBLE"})
_DECIMAL = re.compile(r"DECIMAL\((\d+),(\d+)\)")
# What a 64-bit float holds and prints exactly (module docstring).
_EXACT_INTEGER = 2**53
_EXACT_UNSCALED = 10**15
_PLAIN_SCALE = 5
_SMALLEST_PLAIN = Decimal(1).scaleb(-_PLAIN_SCALE)


def _decimal_scale(spark_type: str) -> int | None:
    match = _DECIMAL.fullmatch(spark_type)
    return None if match is None else int(match.group(2))


def _exact_decimal(value: Decimal, scale: int) -> bool:
    if scale == 0:
        return abs(value) <= _EXACT_INTEGER
    return abs(value.scaleb(scale)) < _EXACT_UNSCALED and (scale <= _PLAIN_SCALE or value == 0 or abs(value) >= _SMALLEST_PLAIN)


def _exact_decimal_range(low: Decimal, high: Decimal, scale: int) -> bool:
    """Whether every value from `low` to `high` has exact statistics (a MERGE may leave any of them a bound)."""
    if not (_exact_decimal(low, scale) and _exact_decimal(high, scale)):
        return False
    tiny_inside = low < _SMALLEST_PLAIN and high > -_SMALLEST_PLAIN and not (low == high == 0)
    return scale <= _PLAIN_SCALE or not tiny_inside


def _finite(value: float) -> bool:
    return not (math.isnan(value) or math.isinf(value))


def _value_refusal(spark_type: str, value) -> str | None:
    """Why one value (of a row, or a file's bound) keeps the table with Spark, or None."""
    earliest = _EARLIEST.get(spark_type)
    if earliest is not None and value < earliest:
        return f"a {spark_type} before {earliest.isoformat()}"
    if spark_type in _FLOATING and not _finite(value):
        return f"a {spark_type} of {value}"
    scale = _decimal_scale(spark_type)
    if scale is not None and not _exact_decimal(value, scale):
        return f"a {spark_type} of {value}, whose statistics delta-rs rounds"
    return None


def _guarded(schema: TableSchema) -> list[tuple[int, str, str]]:
    """(position, name, type) of the columns whose values decide who merges."""
    return [(i, c.name, c.spark_type) for i, c in enumerate(schema.columns)
            if c.spark_type in _EARLIEST or c.spark_type in _FLOATING or _DECIMAL.fullmatch(c.spark_type)]


def rows_refusal(schema: TableSchema, rows: Sequence[tuple]) -> str | None:
    """Whether the rows hold a value delta-rs does not write, or record, as Spark does."""
    for i, name, spark_type in _guarded(schema):
        for row in rows:
            if row[i] is not None:
                why = _value_refusal(spark_type, row[i])
                if why:
                    return f"column {name!r} holds {why}"
    return None


def files_refusal(schema: TableSchema, files) -> str | None:
    """Whether the table's files (delta-rs's `get_add_actions(flatten=True)` as a pyarrow Table) may hold a value
    delta-rs does not rewrite, or record, as Spark does; a file without the statistics to tell is such a file."""
    if files.num_rows == 0:
        return None
    present = set(files.schema.names)
    records = files.column("num_records").to_pylist() if "num_records" in present else [None] * files.num_rows
    if any(count is None for count in records):
        return "a file without statistics"
    unknown = [None] * files.num_rows

    def column(kind: str, name: str) -> list:
        key = f"{kind}.{name}"
        return files.column(key).to_pylist() if key in present else unknown

    for _, name, spark_type in _guarded(schema):
        scale = _decimal_scale(spark_type)
        bounds = zip(records, column("min", name), column("max", name), column("null_count", name), strict=True)
        for count, low, high, nulls in bounds:
            if nulls is not None and nulls == count:
                continue  # only NULLs in this file
            if nulls is None or low is None or high is None:
                return f"column {name!r} has a file without its statistics"
            why = _value_refusal(spark_type, low) or _value_refusal(spark_type, high)
            if why is None and spark_type == "TIMESTAMP" and high > _LATEST_SPARK_TIMESTAMP:
                why = f"a TIMESTAMP after {_LATEST_SPARK_TIMESTAMP.date().isoformat()}"
            if why is None and scale is not None and not _exact_decimal_range(low, high, scale):
                why = f"{spark_type} values from {low} to {high}, some of whose statistics delta-rs rounds"
            if why:
                return f"column {name!r} may hold {why}"
    return None


def floating(schema: TableSchema) -> list:
    """The FLOAT and DOUBLE columns of `schema`."""
    return [c for c in schema.columns if c.spark_type in _FLOATING]


def bytes_to_read(schema: TableSchema, files, rows: Sequence[tuple]) -> int:
    """The size of the table's files (add actions) whose bounds of the first key column hold one of the rows' keys
    (or that have no bounds): what a write replacing those keys' rows reads."""
    if files.num_rows == 0:
        return 0
    present = set(files.schema.names)
    sizes = files.column("size_bytes").to_pylist()
    key = schema.key[0]
    position = schema.column_names().index(key)
    keys = sorted({row[position] for row in rows})
    unknown = [None] * files.num_rows
    lows = files.column(f"min.{key}").to_pylist() if f"min.{key}" in present else unknown
    highs = files.column(f"max.{key}").to_pylist() if f"max.{key}" in present else unknown
    total = 0
    for size, low, high in zip(sizes, lows, highs, strict=True):
        if low is None or high is None:
            total += size
            continue
        first = bisect.bisect_left(keys, low)
        if first < len(keys) and keys[first] <= high:
            total += size
    return total
