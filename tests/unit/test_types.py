"""The TiDB type -> Spark type table and the text-form value conversions."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from ticdc_delta.exceptions import ValueConversionError
from ticdc_delta.schema_cache.types import TiDBType, default_value, spark_type, text_converter, timestamp_in_zone


@pytest.mark.parametrize(
    "tidb, expected",
    [
        (TiDBType("tinyint"), "TINYINT"),
        (TiDBType("tinyint", unsigned=True), "SMALLINT"),
        (TiDBType("smallint"), "SMALLINT"),
        (TiDBType("smallint", unsigned=True), "INT"),
        (TiDBType("mediumint"), "INT"),
        (TiDBType("mediumint", unsigned=True), "INT"),
        (TiDBType("int"), "INT"),
        (TiDBType("int", unsigned=True), "BIGINT"),
        (TiDBType("bigint"), "BIGINT"),
        (TiDBType("bigint", unsigned=True), "DECIMAL(20,0)"),
        (TiDBType("decimal", length=10, scale=2), "DECIMAL(10,2)"),
        (TiDBType("decimal", length=38, scale=10), "DECIMAL(38,10)"),
        (TiDBType("decimal", length=65, scale=30), "STRING"),
        (TiDBType("decimal"), "DECIMAL(10,0)"),
        (TiDBType("float"), "FLOAT"),
        (TiDBType("double"), "DOUBLE"),
        (TiDBType("date"), "DATE"),
        (TiDBType("datetime", scale=6), "TIMESTAMP_NTZ"),
        (TiDBType("timestamp"), "TIMESTAMP"),
        (TiDBType("time"), "STRING"),
        (TiDBType("year"), "SMALLINT"),
        (TiDBType("varchar"), "STRING"),
        (TiDBType("char"), "STRING"),
        (TiDBType("longtext"), "STRING"),
        (TiDBType("varchar", binary=True), "BINARY"),
        (TiDBType("binary"), "BINARY"),
        (TiDBType("varbinary"), "BINARY"),
        (TiDBType("blob"), "BINARY"),
        (TiDBType("longblob"), "BINARY"),
        (TiDBType("json"), "STRING"),
        (TiDBType("enum", elements=("a",)), "STRING"),
        (TiDBType("set", elements=("a",)), "STRING"),
        (TiDBType("bit", length=1), "BIGINT"),
        (TiDBType("bit", length=63), "BIGINT"),
        (TiDBType("bit", length=64), "DECIMAL(20,0)"),
    ],
    ids=lambda v: v.describe() if isinstance(v, TiDBType) else v,
)
def test_spark_type_mapping(tidb, expected):
    assert spark_type(tidb) == expected


def test_unknown_type_is_a_typed_error():
    with pytest.raises(ValueConversionError, match="unsupported column type 'geography'"):
        spark_type(TiDBType("geography"))


@pytest.mark.parametrize(
    "tidb, text, expected",
    [
        (TiDBType("tinyint"), "-128", -128),
        (TiDBType("bigint"), "-9223372036854775808", -9223372036854775808),
        (TiDBType("bigint", unsigned=True), "18446744073709551615", Decimal("18446744073709551615")),
        (TiDBType("decimal", length=65, scale=30), "-0.000000000000000000000000000001", "-0.000000000000000000000000000001"),
        (TiDBType("decimal", length=5, scale=2), "-999.99", Decimal("-999.99")),
        (TiDBType("datetime"), "1000-01-01 00:00:00", dt.datetime(1000, 1, 1)),
        (TiDBType("datetime", scale=3), "2024-05-06 07:08:09.5", dt.datetime(2024, 5, 6, 7, 8, 9, 500000)),
        (TiDBType("datetime"), "0000-00-00 00:00:00", None),
        (TiDBType("date"), "2020-00-15", None),
        (TiDBType("time", scale=6), "-838:59:59.000000", "-838:59:59.000000"),
        (TiDBType("year"), "2155", 2155),
        (TiDBType("enum", elements=("small", "large")), "2", "large"),
        (TiDBType("enum", elements=("small", "large")), "0", ""),
        (TiDBType("set", elements=("a", "b", "c")), "5", "a,c"),
        (TiDBType("set", elements=("a", "b", "c")), "0", ""),
        (TiDBType("bit", length=64), "18446744073709551615", Decimal("18446744073709551615")),
        (TiDBType("bit", length=8), "255", 255),
    ],
    ids=lambda v: v.describe() if isinstance(v, TiDBType) else str(v),
)
def test_text_conversion(tidb, text, expected):
    assert text_converter(tidb)(text) == expected


@pytest.mark.parametrize(
    "tidb, text, error",
    [
        (TiDBType("enum", elements=("a",)), "3", "enum index 3 outside 1 members"),
        (TiDBType("set", elements=("a", "b")), "4", "set bitmask 4 has bits beyond 2 members"),
        (TiDBType("decimal", length=10, scale=2), "NaN", "not a finite decimal"),
    ],
)
def test_values_outside_the_column_definition_are_errors(tidb, text, error):
    with pytest.raises(ValueConversionError, match=error):
        text_converter(tidb)(text)


def test_timestamp_wall_clock_in_a_zone_becomes_the_utc_instant():
    # New York is UTC-5 in January and UTC-4 in July.
    assert timestamp_in_zone("2024-01-15 12:00:00", "America/New_York") == dt.datetime(
        2024, 1, 15, 17, tzinfo=dt.timezone.utc
    )
    assert timestamp_in_zone("2024-07-15 12:00:00", "America/New_York") == dt.datetime(
        2024, 7, 15, 16, tzinfo=dt.timezone.utc
    )
    with pytest.raises(ValueConversionError, match="unknown time zone 'Mars/Base'"):
        timestamp_in_zone("2024-01-01 00:00:00", "Mars/Base")


@pytest.mark.parametrize(
    "tidb, raw, expected",
    [
        (TiDBType("int"), "42", 42),
        (TiDBType("varchar"), "abc", "abc"),
        (TiDBType("enum", elements=("x", "y")), "y", "y"),
        (TiDBType("bit", length=8), 5, 5),
        (TiDBType("timestamp"), "CURRENT_TIMESTAMP", None),
        (TiDBType("datetime", scale=3), "CURRENT_TIMESTAMP(3)", None),
        (TiDBType("int"), None, None),
    ],
)
def test_default_values(tidb, raw, expected):
    assert default_value(tidb, raw) == expected
