"""TiCDC's debezium protocol: values, structure sources, DDL, watermarks, ordering."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest

from schema_cache.debezium.decoder import parse_table_ids
from schema_cache.events import (
    Op,
    Ordering,
    RawMessage,
    RowChange,
    SchemaChange,
    SchemaChangeKind,
    TableName,
    Watermark,
)
from schema_cache.exceptions import DecodeError
from schema_cache.simple.decoder import SimpleDecoder
from testbed.changefeed import Changefeed
from testbed.encoders.debezium import DebeziumWriter
from testbed.tables import column
from tests.decoding import ROW, debezium_decoder, decode, rows, workload


@pytest.mark.parametrize("with_schema", [True, False], ids=["schema", "disable-schema"])
def test_same_rows_as_simple_where_debezium_carries_the_information(with_schema):
    # Setup: one workload over every supported type, through Simple JSON and through Debezium.
    # Expect: identical row changes, value for value (DECIMAL survives here: 12 digits fit a
    # double), and identical Spark types once the CREATE's description is known.
    simple = decode(SimpleDecoder(), workload(Changefeed()))
    dbz_feed = workload(Changefeed(debezium_writer=DebeziumWriter(with_schema=with_schema)))
    debezium = decode(debezium_decoder(), dbz_feed)
    assert rows(debezium) == rows(simple)
    simple_types = [c.spark_type for c in next(e for e in simple if isinstance(e, RowChange)).schema.columns]
    dbz_types = [c.spark_type for c in next(e for e in debezium if isinstance(e, RowChange)).schema.columns]
    assert dbz_types == simple_types
    assert sum(isinstance(e, Watermark) for e in debezium) == sum(isinstance(e, Watermark) for e in simple)


def test_inline_schema_alone_without_ddl_or_extension():
    # A consumer that starts mid-stream (no CREATE seen) without the TiDB extension:
    # types come from the Connect schema alone.
    feed = workload(Changefeed(debezium_writer=DebeziumWriter(enable_tidb_extension=False)))
    feed.messages[:] = [m for m in feed.messages if m.kind == "DML"]
    decoder = debezium_decoder(enable_tidb_extension=False, allow_offset_ordering=True)
    assert decoder.ordering is Ordering.OFFSET
    (first, *_) = [e for e in decode(decoder, feed) if isinstance(e, RowChange)]
    types = {c.name: c.spark_type for c in first.schema.columns}
    values = dict(zip(first.schema.column_names(), first.after, strict=True))
    # What the Connect schema cannot tell (README): DECIMAL is a double, BIGINT UNSIGNED an
    # int64 (so 2^64-1 reads -1), TINYINT an int16, binary strings text (base64).
    assert types["price"] == "DOUBLE" and values["price"] == pytest.approx(-123456789.125)
    assert types["id"] == "BIGINT" and values["id"] == -1
    assert types["i8"] == "SMALLINT" and types["raw"] == "STRING"
    # Temporal values and names come out right regardless.
    assert values["at6"] == ROW["at6"] and values["ts"] == ROW["ts"] and values["day"] == dt.date(1000, 1, 1)
    assert (values["size"], values["tags"], values["flag"], values["bits"]) == ("m,l", "a,c", 1, 0xABC)


def test_rows_before_any_description_wait_when_schemas_are_disabled():
    feed = workload(Changefeed(debezium_writer=DebeziumWriter(with_schema=False)))
    ddl = [m for m in feed.messages if m.kind == "DDL"]
    dml = [m for m in feed.messages if m.kind == "DML"]
    decoder = debezium_decoder()
    assert decode(decoder, _only(dml)) == []
    assert len(decoder.parked()) == len(dml)
    released = decode(decoder, _only(ddl[:1]))
    assert [type(e).__name__ for e in released].count("RowChange") == len(dml)
    assert decoder.parked() == []


def _only(messages) -> Changefeed:
    feed = Changefeed()
    feed.messages[:] = messages
    return feed


def test_ddl_kinds_from_table_changes():
    feed = Changefeed(debezium_writer=DebeziumWriter())
    feed.create_table("shop", "t", [column("id", "int", nullable=False), column("v", "int")], primary_key=["id"])
    feed.add_column("shop", "t", column("w", "varchar", default="x"))
    feed.rename_table("shop", "t", "arch", "t2")
    feed.truncate_table("arch", "t2")
    feed.drop_table("arch", "t2")
    feed.messages[:] = [m for m in feed.messages if m.partition == 0]
    changes = [e for e in decode(debezium_decoder(), feed) if isinstance(e, SchemaChange)]
    assert [(c.kind, c.table.table) for c in changes] == [
        (SchemaChangeKind.CREATE, "t"),
        (SchemaChangeKind.ALTER, "t"),
        (SchemaChangeKind.RENAME, "t2"),
        (SchemaChangeKind.TRUNCATE, "t2"),
        (SchemaChangeKind.DROP, "t2"),
    ]
    assert changes[1].schema.columns[-1].default == "x"
    assert changes[2].previous_name == TableName("shop", "t")
    assert changes[4].schema is None


def test_database_ddl_is_skipped_and_watermarks_decode():
    writer = DebeziumWriter()
    _, value = writer.watermark(12345)
    assert debezium_decoder().decode(RawMessage("cdc", 1, 7, None, value)) == [
        Watermark(12345, RawMessage("cdc", 1, 7, None, None).position)
    ]
    database_ddl = json.dumps({"payload": {"source": {"db": "shop", "table": "", "commit_ts": 5},
                                           "ddl": "CREATE DATABASE shop", "tableChanges": []}}).encode()
    assert debezium_decoder().decode(RawMessage("cdc", 0, 0, None, database_ddl)) == []


def test_delete_without_before_uses_the_key():
    feed = workload(Changefeed(debezium_writer=DebeziumWriter()))
    message = next(m for m in feed.messages if b'"op":"d"' in m.value)
    body = json.loads(message.value)
    del body["payload"]["before"]
    decoder = debezium_decoder()
    decode(decoder, _only([m for m in feed.messages if m.kind == "DDL"][:1]))
    (deleted,) = decoder.decode(RawMessage("cdc", 0, 99, message.key, json.dumps(body).encode()))
    assert deleted.op is Op.DELETE and deleted.before[0] == Decimal(1)


@pytest.mark.parametrize(
    "value, reason",
    [(b"nope", "not JSON"), (None, "sends no tombstones"), (b'{"payload":{"op":"x"}}', "unknown op 'x'")],
)
def test_bad_messages(value, reason):
    with pytest.raises(DecodeError, match=reason):
        debezium_decoder().decode(RawMessage("cdc", 0, 3, None, value))


@pytest.mark.parametrize(
    "text, ids",
    [
        ('"db"."t"', [TableName("db", "t")]),
        ('"a"."old","b"."new"', [TableName("a", "old"), TableName("b", "new")]),
        ('"we""ird"."t,1"', [TableName('we"ird', "t,1")]),
    ],
)
def test_parse_table_ids(text, ids):
    assert parse_table_ids(text) == ids
