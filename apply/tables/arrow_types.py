"""The Arrow form of the product's column types, for MERGE sources built by mapInArrow (the Spark engine's
staged rows, a snapshot's data files)."""

from __future__ import annotations

import re

from ticdc_delta.exceptions import ApplyError

# Spark types a MERGE source carries as another type (the statement converts them: apply.writers.delta_writer).
_SOURCE_TYPES = {"VARIANT": "STRING"}


def source_type(spark_type: str) -> str:
    return _SOURCE_TYPES.get(spark_type, spark_type)


def arrow_type(pa, spark_type: str):
    """The Arrow type Spark reads as `spark_type` (the product's column types only)."""
    spark_type = source_type(spark_type)
    fixed = {
        "BOOLEAN": pa.bool_(), "TINYINT": pa.int8(), "SMALLINT": pa.int16(), "INT": pa.int32(), "BIGINT": pa.int64(),
        "FLOAT": pa.float32(), "DOUBLE": pa.float64(), "STRING": pa.string(), "BINARY": pa.binary(),
        "DATE": pa.date32(), "TIMESTAMP": pa.timestamp("us", tz="UTC"), "TIMESTAMP_NTZ": pa.timestamp("us"),
    }
    if spark_type in fixed:
        return fixed[spark_type]
    decimal = re.fullmatch(r"DECIMAL\((\d+),(\d+)\)", spark_type)
    if decimal:
        return pa.decimal128(int(decimal.group(1)), int(decimal.group(2)))
    raise ApplyError(f"no Arrow form for column type {spark_type}")
