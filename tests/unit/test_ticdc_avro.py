"""TiCDC's avro protocol: Confluent framing, registry lookups, values, schema changes.

Messages are built as TiCDC's encoder builds them (testbed/encoders/ticdc_avro.py)
and registered through confluent-kafka's client over real HTTP: with the registry
emulator (tests/registry_server.py) and, end to end, with a real registry server
(Apicurio Registry, `schema_registry`); injected faults need the emulator.
"""

from __future__ import annotations

import datetime as dt
import struct
import threading
import time
from decimal import Decimal

import pytest

from testbed.encoders.ticdc_avro import TiCDCAvroWriter
from testbed.tables import column, table_schema
from tests.decoding import avro_decoder
from tests.registry_server import FakeSchemaRegistry
from ticdc_delta.exceptions import DecodeError, RegistryAuthenticationError, RegistryUnavailableError
from ticdc_delta.schema_cache.events import Op, Ordering, RawMessage, RowChange, SchemaChange, TableName, Watermark
from ticdc_delta.schema_cache.ticdc_avro.decoder import TiCDCAvroDecoder

UTC = dt.timezone.utc
COLUMNS = [
    column("id", "bigint", nullable=False, unsigned=True),
    column("small", "smallint", unsigned=True),
    column("n", "int", unsigned=True),
    column("price", "decimal", length=12, decimal=3),
    column("wide", "decimal", length=60, decimal=10),
    column("f", "float"),
    column("d", "double"),
    column("name", "varchar"),
    column("raw", "varbinary"),
    column("day", "date"),
    column("at", "datetime", decimal=3),
    column("ts", "timestamp", decimal=6),
    column("t", "time"),
    column("y", "year"),
    column("flags", "bit", length=12),
    column("size", "enum", elements=["s", "m, l"]),
    column("tags", "set", elements=["a", "b", "c"]),
    column("doc", "json"),
    column("my-col", "int"),
]
TABLE = table_schema("shop", "items", table_id=1, version=1, columns=COLUMNS, primary_key=["id"])
ROW = {
    "id": 2**63 + 7,
    "small": 65535,
    "n": 4294967295,
    "price": Decimal("-123456789.125"),
    "wide": Decimal("12345678901234567890123456789012345678901234567890.0123456789"),
    "f": 1.5,
    "d": -2.25,
    "name": "ünï",
    "raw": b"\x00\x01",
    "day": "2024-02-29",
    "at": dt.datetime(2024, 1, 2, 3, 4, 5, 678000),
    "ts": dt.datetime(2024, 6, 1, 12, 0, 0, 123456, tzinfo=UTC),
    "t": "-12:34:56",
    "y": 2024,
    "flags": 0xABC,
    "size": "m, l",
    "tags": "a,c",
    "doc": '{"k": 1}',
    "my-col": 5,
}
TOPIC = "tidb_shop_items"


def decoder_for(registry, **options) -> TiCDCAvroDecoder:
    return avro_decoder(registry.url, **options)


def message(key, value, offset=0, topic=TOPIC, partition=0) -> RawMessage:
    return RawMessage(topic, partition, offset, key, value)


@pytest.mark.parametrize("extension", [False, True], ids=["plain", "tidb-extension"])
def test_insert_update_and_tombstone_delete(schema_registry, extension):
    # Setup: INSERT, UPDATE and DELETE of one row as TiCDC's avro encoder sends them.
    # Expect: a schema change (first sight of the table), then INSERT/UPSERT rows with
    # every value typed, and a DELETE from the tombstone's key.
    writer = TiCDCAvroWriter(schema_registry.url, enable_tidb_extension=extension)
    decoder = decoder_for(schema_registry, enable_tidb_extension=extension)
    assert decoder.ordering is Ordering.OFFSET
    insert = writer.row(TOPIC, TABLE, "INSERT", 5 << 18, None, ROW)
    update = writer.row(TOPIC, TABLE, "UPDATE", 6 << 18, ROW, {**ROW, "name": "new"})
    delete = writer.row(TOPIC, TABLE, "DELETE", 7 << 18, ROW, None)
    assert delete[1] is None  # a tombstone

    change, inserted = decoder.decode(message(*insert, offset=0))
    (updated,) = decoder.decode(message(*update, offset=1))
    (deleted,) = decoder.decode(message(*delete, offset=2))

    assert isinstance(change, SchemaChange) and change.schema.name == TableName("shop", "items")
    assert inserted.op is (Op.INSERT if extension else Op.UPSERT)
    assert updated.op is (Op.UPDATE if extension else Op.UPSERT)  # _tidb_op "u" is an update
    if extension:
        assert updated.before == tuple(v if i in updated.schema.key_indexes() else None for i, v in enumerate(updated.after))
    assert inserted.commit_ts == (5 << 18 if extension else 0)
    values = dict(zip(inserted.schema.column_names(), inserted.after, strict=True))
    types = {c.name: c.spark_type for c in inserted.schema.columns}
    assert values["id"] == Decimal(2**63 + 7) and types["id"] == "DECIMAL(20,0)"
    assert (values["small"], types["small"]) == (65535, "INT")
    assert (values["n"], types["n"]) == (4294967295, "BIGINT")
    assert (values["price"], types["price"]) == (Decimal("-123456789.125"), "DECIMAL(12,3)")
    assert (values["wide"], types["wide"]) == (str(ROW["wide"]), "STRING")
    assert (values["f"], values["d"]) == (1.5, -2.25)
    assert (values["name"], values["raw"]) == ("ünï", b"\x00\x01")
    assert values["day"] == dt.date(2024, 2, 29)
    assert values["at"] == dt.datetime(2024, 1, 2, 3, 4, 5, 678000)
    assert values["ts"] == ROW["ts"]
    assert (values["t"], values["y"], values["flags"]) == ("-12:34:56", 2024, 0xABC)
    assert (values["size"], values["tags"], values["doc"]) == ("m, l", "a,c", '{"k": 1}')
    assert values["my_col"] == 5  # TiCDC sanitizes names: the original is not carried
    assert "_tidb_op" not in types and "_tidb_commit_ts" not in types
    assert deleted.op is Op.DELETE and deleted.before[0] == Decimal(2**63 + 7)
    assert deleted.commit_ts == 0 and deleted.schema is inserted.schema


def test_bigint_unsigned_and_decimal_string_modes(schema_registry):
    writer = TiCDCAvroWriter(schema_registry.url, decimal_mode="string", bigint_mode="string")
    decoder = decoder_for(schema_registry, avro_decimal_handling_mode="string", avro_bigint_unsigned_handling_mode="string")
    _, row = decoder.decode(message(*writer.row("tidb_shop_strings", TABLE, "INSERT", 1, None, ROW), topic="tidb_shop_strings"))
    values = dict(zip(row.schema.column_names(), row.after, strict=True))
    types = {c.name: c.spark_type for c in row.schema.columns}
    assert (values["id"], types["id"]) == (Decimal(2**63 + 7), "DECIMAL(20,0)")
    # string mode carries no precision: the exact text is kept
    assert (values["price"], types["price"]) == ("-123456789.125", "STRING")


def test_modes_must_match_the_changefeed(schema_registry):
    writer = TiCDCAvroWriter(schema_registry.url)  # precise decimals, long unsigned bigints
    with pytest.raises(DecodeError, match="DECIMAL encoded as precise but protocol.avro_decimal_handling_mode is 'string'"):
        decoder_for(schema_registry, avro_decimal_handling_mode="string").decode(message(*writer.row(TOPIC, TABLE, "INSERT", 1, None, ROW)))
    with pytest.raises(DecodeError, match="lacks TiDB extension fields but protocol.enable_tidb_extension is true"):
        decoder_for(schema_registry, enable_tidb_extension=True).decode(message(*writer.row(TOPIC, TABLE, "INSERT", 1, None, ROW)))


def test_newer_schema_id_is_a_schema_change_older_is_not(schema_registry):
    # Setup: rows under v1, then v2 (a column added), then a late v1 row (a lagging partition).
    # Expect: one schema change per newer structure, none for the late old row.
    v1 = table_schema("shop", "evolving", table_id=2, version=1, columns=COLUMNS[:3], primary_key=["id"])
    v2 = {**v1, "version": 2, "columns": COLUMNS[:4]}
    writer = TiCDCAvroWriter(schema_registry.url)
    decoder = decoder_for(schema_registry)
    topic = "tidb_shop_evolving"
    first = decoder.decode(message(*writer.row(topic, v1, "INSERT", 1, None, {"id": 1}), topic=topic))
    second = decoder.decode(message(*writer.row(topic, v2, "INSERT", 2, None, {"id": 2, "price": 1}), 1, topic=topic))
    late = decoder.decode(message(*writer.row(topic, v1, "INSERT", 3, None, {"id": 3}), 2, topic=topic, partition=1))
    assert [type(e).__name__ for e in first] == ["SchemaChange", "RowChange"]
    assert [type(e).__name__ for e in second] == ["SchemaChange", "RowChange"]
    assert second[0].schema.column_names() == ("id", "small", "n", "price")
    assert [type(e).__name__ for e in late] == ["RowChange"]
    assert late[0].schema.column_names() == ("id", "small", "n")

    restored = decoder_for(schema_registry)
    restored.restore(decoder.state())
    again = restored.decode(message(*writer.row(topic, v2, "INSERT", 4, None, {"id": 4}), 3, topic=topic))
    assert [type(e).__name__ for e in again] == ["RowChange"]


def test_unknown_schema_id_is_a_typed_decode_error(schema_registry):
    value = struct.pack(">bI", 0, 999_999) + b"\x00"
    with pytest.raises(DecodeError, match=f"{TOPIC} partition 3 offset 8: schema id 999999 is not in the registry"):
        decoder_for(schema_registry).decode(message(None, value, offset=8, partition=3))


@pytest.mark.parametrize(
    "value, reason",
    [(b"\x07abcdef", "not Confluent wire format"), (b"\x00\x00", "not Confluent wire format")],
)
def test_garbage_is_a_decode_error(schema_registry, value, reason):
    with pytest.raises(DecodeError, match=reason):
        decoder_for(schema_registry).decode(message(None, value))


def test_a_topic_with_two_tables_is_refused(schema_registry):
    other = table_schema("shop", "other", table_id=3, version=1, columns=COLUMNS[:2], primary_key=["id"])
    writer = TiCDCAvroWriter(schema_registry.url)
    decoder = decoder_for(schema_registry)
    decoder.decode(message(*writer.row(TOPIC, TABLE, "INSERT", 1, None, ROW)))
    with pytest.raises(DecodeError, match="carries rows of shop.items and shop.other; TiCDC's avro protocol needs one topic per table"):
        decoder.decode(message(*writer.row(TOPIC, other, "INSERT", 2, None, {"id": 1}), offset=1))


def test_ticdc_watermark_mode_markers(schema_registry):
    # avro-enable-watermark (TiCDC testing mode): 0x02 is a checkpoint (a watermark: it orders nothing for this
    # protocol, it tells a topic that falls silent), 0x01 DDL carries nothing needed; 0x03 is a delete with its
    # commitTs.
    writer = TiCDCAvroWriter(schema_registry.url)
    decoder = decoder_for(schema_registry)
    key, value = writer.row(TOPIC, TABLE, "INSERT", 1, None, ROW)
    decoder.decode(message(key, value))
    (mark,) = decoder.decode(message(None, b"\x02" + struct.pack(">Q", 10 << 18), 1))
    assert isinstance(mark, Watermark) and mark.commit_ts == 10 << 18
    assert decoder.decode(message(None, b'\x01{"query":"ALTER ..."}', 2)) == []
    (deleted,) = decoder.decode(message(key, b"\x03" + struct.pack(">Q", 11 << 18), 3))
    assert deleted.op is Op.DELETE and deleted.commit_ts == 11 << 18


def test_registry_unavailable_then_recovering_loses_nothing():
    # Setup: the registry goes down after the schemas were registered; a decoder with an
    # empty cache meets a row; the registry comes back 2 seconds later.
    # Expect: decode waits, retrying, and returns the row once the registry answers.
    registry = FakeSchemaRegistry()
    registry.start()
    try:
        key, value = TiCDCAvroWriter(registry.url).row(TOPIC, TABLE, "INSERT", 1, None, ROW)
        registry.stop()
        threading.Timer(2.0, registry.start).start()
        started = time.monotonic()
        events = avro_decoder(registry.url, max_wait_seconds=60).decode(
            message(key, value)
        )
        assert time.monotonic() - started >= 1.5
        assert isinstance(events[-1], RowChange) and events[-1].after[0] == Decimal(2**63 + 7)
    finally:
        registry.stop()


def test_registry_errors_are_retried_then_typed():
    registry = FakeSchemaRegistry()
    registry.start()
    try:
        key, value = TiCDCAvroWriter(registry.url).row(TOPIC, TABLE, "INSERT", 1, None, ROW)
        registry.failures_left = 3  # 503s, then answers
        assert decoder_for(registry).decode(message(key, value))[-1].after[0] == Decimal(2**63 + 7)
        registry.failures_left = 10_000
        with pytest.raises(RegistryUnavailableError, match="schema registry unavailable for 1s"):
            avro_decoder(registry.url, max_wait_seconds=1).decode(
                message(key, value)
            )
    finally:
        registry.stop()


def test_basic_auth_from_url_encoded_user_info():
    # TiCDC's docs: https://user:password@host with both parts URL-encoded.
    registry = FakeSchemaRegistry(user_info="us@er:p:ss")
    registry.start()
    try:
        authed = registry.url.replace("http://", "http://us%40er:p%3Ass@")
        key, value = TiCDCAvroWriter(authed).row(TOPIC, TABLE, "INSERT", 1, None, ROW)
        events = avro_decoder(authed).decode(message(key, value))
        assert events[-1].after[0] == Decimal(2**63 + 7)
        # Without credentials: refused at once, not retried, not a bad message.
        with pytest.raises(RegistryAuthenticationError, match="refused the job's credentials .*Unauthorized"):
            avro_decoder(registry.url).decode(message(key, value))
    finally:
        registry.stop()


def test_a_float_column_written_as_avro_float_as_ticdc_does(schema_registry):
    # Setup: a FLOAT column as TiCDC's encoder writes it (Avro `float`; its document says `double`,
    # which the stand-in encoder writes and the conformance fixtures cover), registered under the
    # topic's subjects; one row.
    # Expect: a FLOAT column and the value as a Python float.
    from tests.conformance import message_part, registering

    register = registering(schema_registry.url)
    column = {"name": "f", "type": {"connect.parameters": {"tidb_type": "FLOAT"}, "type": "float"}}
    key_field = {"name": "id", "type": {"connect.parameters": {"tidb_type": "INT"}, "type": "int"}}
    key_schema = {"type": "record", "name": "floats", "namespace": "default.shop", "fields": [key_field]}
    value_schema = {**key_schema, "fields": [key_field, column]}
    key = message_part({"$avro": {"subject": "tidb_shop_floats-key", "schema": key_schema, "datum": {"id": 1}}}, register)
    value = message_part(
        {"$avro": {"subject": "tidb_shop_floats-value", "schema": value_schema, "datum": {"id": 1, "f": 5.5}}}, register
    )
    events = decoder_for(schema_registry).decode(message(key, value, topic="tidb_shop_floats"))
    row = events[-1]
    assert isinstance(row, RowChange) and row.after == (1, 5.5)
    assert [c.spark_type for c in row.schema.columns] == ["INT", "FLOAT"]
