"""Simple protocol: the JSON and Avro encodings decode to identical events."""

from __future__ import annotations

import dataclasses
import datetime as dt
from decimal import Decimal

import pytest

from testbed.encoders.simple import SimpleAvroWriter, SimpleJsonWriter, unsigned_bigint
from testbed.tables import column, table_schema, timestamp
from ticdc_delta.exceptions import DecodeError
from ticdc_delta.schema_cache.events import RawMessage, RowChange, SchemaChange, Watermark
from ticdc_delta.schema_cache.simple import avro
from ticdc_delta.schema_cache.simple.decoder import SimpleDecoder
from ticdc_delta.schema_cache.simple.options import SimpleOptions
from ticdc_delta.schema_cache.types import TypeOptions

ALL_TYPES = table_schema(
    "d",
    "all_types",
    table_id=7,
    version=100,
    columns=[
        column("id", "bigint", nullable=False, unsigned=True),
        column("i8", "tinyint"),
        column("u16", "smallint", unsigned=True),
        column("i24", "mediumint"),
        column("u32", "int", unsigned=True),
        column("i64", "bigint"),
        column("dec", "decimal", length=30, decimal=10),
        column("dec65", "decimal", length=65, decimal=30),
        column("f", "float"),
        column("d", "double"),
        column("day", "date"),
        column("dt", "datetime", decimal=6),
        column("ts", "timestamp", decimal=6),
        column("t", "time", decimal=3),
        column("y", "year"),
        column("bits", "bit", length=64, default=5),
        column("e", "enum", elements=["a", "b", "c"], default="b"),
        column("s", "set", elements=["x", "y", "z"]),
        column("vc", "varchar", default="hi"),
        column("txt", "longtext"),
        column("vb", "varbinary"),
        column("bl", "blob"),
        column("js", "json"),
    ],
    primary_key=["id"],
)
ROW = {
    "id": 18446744073709551615,
    "i8": -128,
    "u16": 65535,
    "i24": -8388608,
    "u32": 4294967295,
    "i64": -9223372036854775808,
    "dec": Decimal("-12345678901234567890.0123456789"),
    "dec65": "99999999999999999999999999999999999.999999999999999999999999999999",
    "f": 1.5,
    "d": 2.718281828459045,
    "day": "1000-01-01",
    "dt": "9999-12-31 23:59:59.999999",
    "ts": timestamp("2038-01-19 03:14:07.999999", "Europe/Berlin"),
    "t": "-838:59:59.000",
    "y": 2155,
    "bits": 18446744073709551615,
    "e": 3,
    "s": 6,
    "vc": "ünï 😀 \u0000",
    "txt": "",
    "vb": b"\x00\xff\x00",
    "bl": b"",
    "js": '{"k": [1, null, "v"]}',
}
NULLS = {name: None for name in ROW} | {"id": 1}


def stream(writer: SimpleJsonWriter) -> list[bytes]:
    return [
        writer.bootstrap(ALL_TYPES),
        writer.ddl("CREATE", ALL_TYPES, 90, "CREATE TABLE all_types (...)"),
        writer.insert(ALL_TYPES, 110, ROW),
        writer.insert(ALL_TYPES, 111, NULLS),
        writer.update(ALL_TYPES, 112, ROW, {**ROW, "i8": 127, "e": 1}),
        writer.delete(ALL_TYPES, 113, NULLS),
        writer.watermark(113),
    ]


def decode_all(decoder: SimpleDecoder, values: list[bytes]) -> list:
    events = []
    for offset, value in enumerate(values):
        events.extend(decoder.decode(RawMessage("t", 0, offset, None, value)))
    return events


def test_json_and_avro_yield_identical_events():
    # Setup: the same upstream changes over every supported type, encoded both ways.
    # Expect: the decoded events are equal, value for value.
    from_json = decode_all(SimpleDecoder(SimpleOptions(encoding="json")), stream(SimpleJsonWriter(build_ts_ms=1)))
    from_avro = decode_all(SimpleDecoder(SimpleOptions(encoding="avro")), stream(SimpleAvroWriter(build_ts_ms=1)))
    assert [type(e) for e in from_json] == [SchemaChange, RowChange, RowChange, RowChange, RowChange, Watermark]
    assert from_avro == from_json
    inserted = dict(zip(from_json[1].schema.column_names(), from_json[1].after, strict=True))
    assert inserted["id"] == Decimal("18446744073709551615")
    assert inserted["bits"] == Decimal("18446744073709551615")
    assert inserted["ts"] == dt.datetime(2038, 1, 19, 2, 14, 7, 999999, tzinfo=dt.timezone.utc)
    assert (inserted["e"], inserted["s"]) == ("c", "y,z")
    assert inserted["vb"] == b"\x00\xff\x00" and inserted["vc"] == "ünï 😀 \u0000"
    assert inserted["dec65"] == ROW["dec65"]
    defaults = {c.name: c.default for c in from_json[1].schema.columns if c.default is not None}
    assert defaults == {"bits": Decimal(5), "e": "b", "vc": "hi"}


def test_avro_messages_are_the_message_branch_of_the_top_level_union():
    # TiCDC writes every Simple Avro message as union branch 11 (`Message`): zigzag 11 = 0x16.
    for value in stream(SimpleAvroWriter(build_ts_ms=1)):
        assert value[0] == 0x16


def test_avro_unsigned_bigint_above_two_to_the_63_is_restored():
    payload = unsigned_bigint(2**63 + 5)
    assert payload[1]["value"] < 0  # on the wire: two's complement in a signed long
    value = SimpleAvroWriter().insert(ALL_TYPES, 1, {"id": 2**63 + 5})
    assert avro.unsigned_bigint(avro.read(value)["data"]["id"]) == str(2**63 + 5)
    decoder = SimpleDecoder(SimpleOptions(encoding="avro"))
    decoder.decode(RawMessage("t", 0, 0, None, SimpleAvroWriter().bootstrap(ALL_TYPES)))
    (row,) = decoder.decode(RawMessage("t", 0, 1, None, value))
    assert row.after[row.schema.column_names().index("id")] == Decimal(2**63 + 5)


def test_avro_bit_default_as_raw_bytes():
    # Avro carries a BIT default as the literal's bytes, JSON as a number.
    schema = dict(ALL_TYPES, columns=[column("id", "int", nullable=False), column("b", "bit", length=16, default="\x01\x02")])
    decoder = SimpleDecoder(SimpleOptions(encoding="avro"))
    decode_all(decoder, [SimpleAvroWriter().bootstrap(schema)])
    (row,) = decode_all(decoder, [SimpleAvroWriter().insert(schema, 5, {"id": 1, "b": 3})])
    assert row.schema.columns[1].default == 0x0102


def test_garbage_is_a_decode_error_in_both_encodings():
    for encoding, value in (("avro", b"\x16\x99"), ("avro", b"\x02junk"), ("json", b"\x16\x99")):
        with pytest.raises(DecodeError, match="offset 3"):
            SimpleDecoder(SimpleOptions(encoding=encoding)).decode(RawMessage("t", 0, 3, None, value))


@pytest.mark.parametrize(
    "option, value, column_name, spark_type, expected",
    [
        ("bigint_unsigned", "string", "id", "STRING", "18446744073709551615"),
        ("wide_decimal", "double", "dec65", "DOUBLE", 1e35),
        ("datetime", "timestamp_utc", "dt", "TIMESTAMP", dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.timezone.utc)),
        ("datetime", "string", "dt", "STRING", "9999-12-31 23:59:59.999999"),
        ("time", "microseconds", "t", "BIGINT", -(838 * 3600 + 59 * 60 + 59) * 1_000_000),
        ("bit", "binary", "bits", "BINARY", b"\xff" * 8),
        ("json", "variant", "js", "VARIANT", '{"k": [1, null, "v"]}'),
    ],
)
def test_type_options(option, value, column_name, spark_type, expected):
    options = dataclasses.replace(TypeOptions(), **{option: value})
    decoder = SimpleDecoder(types=options)
    writer = SimpleJsonWriter()
    (change, row) = decode_all(decoder, stream(writer)[1:3])
    got = dict(zip(row.schema.column_names(), row.after, strict=True))[column_name]
    assert {c.name: c.spark_type for c in row.schema.columns}[column_name] == spark_type
    assert got == pytest.approx(expected) if isinstance(expected, float) else got == expected


def test_zero_date_error_option_makes_it_bad_input():
    decoder = SimpleDecoder(types=TypeOptions(zero_date="error"))
    writer = SimpleJsonWriter()
    decode_all(decoder, [writer.bootstrap(ALL_TYPES)])
    with pytest.raises(DecodeError, match="zero date '0000-00-00'"):
        decode_all(decoder, [writer.insert(ALL_TYPES, 5, {**NULLS, "day": "0000-00-00"})])
