"""The Simple protocol decoder and its schema cache, on the spec's own examples."""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pytest

from testbed.encoders.simple import SimpleJsonWriter
from testbed.tables import column, table_schema, timestamp
from ticdc_delta.exceptions import ConfigError, DecodeError, SchemaNotFoundError
from ticdc_delta.schema_cache.events import (
    Op,
    RawMessage,
    RowChange,
    SchemaChange,
    SchemaChangeKind,
    TableName,
    Watermark,
)
from ticdc_delta.schema_cache.protocols import create_decoder, protocol_options
from ticdc_delta.schema_cache.simple.decoder import SimpleDecoder
from ticdc_delta.schema_cache.simple.options import SimpleOptions

FIXTURES = Path(__file__).parent.parent / "fixtures" / "simple"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def message(value: bytes | None, offset: int = 0, partition: int = 0, topic: str = "t") -> RawMessage:
    return RawMessage(topic=topic, partition=partition, offset=offset, key=None, value=value)


def test_spec_examples_decode_to_typed_events():
    # Setup: the spec's BOOTSTRAP, then its INSERT/UPDATE/DELETE/WATERMARK.
    # Expect: rows typed per column (int, str, float), ops and commitTs kept.
    decoder = SimpleDecoder()
    assert decoder.decode(message(fixture("spec_bootstrap.json"))) == []

    (insert,) = decoder.decode(message(fixture("spec_insert.json"), 1))
    assert isinstance(insert, RowChange)
    assert insert.table == TableName("simple", "user")
    assert insert.op is Op.INSERT and insert.before is None
    assert insert.after == (1, "John Doe", 25, 90.5)
    assert insert.commit_ts == 447984084414103554
    assert insert.schema.key == ("id",)
    assert [c.spark_type for c in insert.schema.columns] == ["INT", "STRING", "INT", "FLOAT"]

    (update,) = decoder.decode(message(fixture("spec_update.json"), 2))
    assert update.op is Op.UPDATE
    # The old image only identifies the row: its key.
    assert update.before == (1, None, None, None) and update.after == (1, "John Doe", 25, 95.0)

    (delete,) = decoder.decode(message(fixture("spec_delete.json"), 3))
    assert delete.op is Op.DELETE and delete.after is None and delete.before[0] == 1

    (mark,) = decoder.decode(message(fixture("spec_watermark.json"), 4))
    assert mark == Watermark(447984124732375041, message(None, 4).position)


def test_ddl_yields_schema_change_with_new_structure():
    # Setup: the spec's ALTER ADD COLUMN createTime TIMESTAMP.
    # Expect: an ALTER schema change whose schema has the new column as TIMESTAMP.
    decoder = SimpleDecoder()
    (change,) = decoder.decode(message(fixture("spec_ddl_alter.json")))
    assert isinstance(change, SchemaChange)
    assert change.kind is SchemaChangeKind.ALTER
    assert change.table == TableName("simple", "user")
    assert change.schema.column_names() == ("id", "name", "age", "score", "createTime")
    assert change.schema.columns[-1].spark_type == "TIMESTAMP"
    assert change.statement.startswith("ALTER TABLE")


def test_dml_before_its_schema_is_parked_then_released_in_order():
    # Setup: two INSERTs arrive before any BOOTSTRAP/DDL (consumer started mid-stream).
    # Expect: nothing decoded, both parked; the BOOTSTRAP releases them in arrival order.
    decoder = SimpleDecoder()
    first = json.loads(fixture("spec_insert.json"))
    second = {**first, "commitTs": first["commitTs"] + 1, "data": {**first["data"], "id": "2"}}
    assert decoder.decode(message(json.dumps(first).encode(), 10)) == []
    assert decoder.decode(message(json.dumps(second).encode(), 11)) == []
    assert [p.position.offset for p in decoder.parked()] == [10, 11]

    released = decoder.decode(message(fixture("spec_bootstrap.json"), 12))
    assert [e.after[0] for e in released] == [1, 2]
    assert [e.position.offset for e in released] == [10, 11]
    assert decoder.parked() == []


def test_dml_of_another_schema_version_stays_parked():
    # Setup: an INSERT written under a newer schemaVersion than the BOOTSTRAP describes.
    # Expect: it stays parked (schemas are matched by exact version, not by table).
    decoder = SimpleDecoder()
    decoder.decode(message(fixture("spec_bootstrap.json")))
    newer = json.loads(fixture("spec_insert.json"))
    newer["schemaVersion"] += 1
    assert decoder.decode(message(json.dumps(newer).encode(), 5)) == []
    assert len(decoder.parked()) == 1


def test_parked_message_times_out_as_typed_error():
    # Setup: a parked INSERT and a clock past the schema wait.
    # Expect: take_errors returns a SchemaNotFoundError naming the message; it is no longer parked.
    now = [100.0]
    decoder = SimpleDecoder(SimpleOptions(schema_wait_seconds=30), clock=lambda: now[0])
    decoder.decode(message(fixture("spec_insert.json"), 7, partition=2, topic="orders"))
    assert decoder.take_errors() == []
    now[0] += 31
    (error,) = decoder.take_errors()
    assert isinstance(error, SchemaNotFoundError)
    assert (error.position.topic, error.position.partition, error.position.offset) == ("orders", 2, 7)
    assert "orders partition 2 offset 7" in str(error)
    assert error.value == fixture("spec_insert.json")
    assert decoder.parked() == []


def test_released_message_that_fails_is_reported_not_lost():
    # Setup: a parked INSERT whose value does not fit its column; then its BOOTSTRAP.
    # Expect: the BOOTSTRAP decodes fine; the failure surfaces from take_errors with the INSERT's offset.
    decoder = SimpleDecoder()
    bad = json.loads(fixture("spec_insert.json"))
    bad["data"]["age"] = "twenty"
    decoder.decode(message(json.dumps(bad).encode(), 3))
    assert decoder.decode(message(fixture("spec_bootstrap.json"), 4)) == []
    (error,) = decoder.take_errors()
    assert error.position.offset == 3 and "age" in error.reason


def test_schema_cache_survives_state_round_trip():
    # Setup: a decoder that learned the schema, saved and restored into a fresh one.
    # Expect: the fresh decoder decodes DML at once, without parking.
    learned = SimpleDecoder()
    learned.decode(message(fixture("spec_bootstrap.json")))
    fresh = SimpleDecoder()
    fresh.restore(learned.state())
    (insert,) = fresh.decode(message(fixture("spec_insert.json")))
    assert insert.after == (1, "John Doe", 25, 90.5)


@pytest.mark.parametrize(
    "label, value, reason",
    [
        ("not json", b"{oops", "not JSON"),
        ("tombstone", None, "empty message value"),
        ("array", b"[1]", "must be a JSON object"),
        ("future version", b'{"version":2,"type":"WATERMARK","commitTs":1}', "unsupported Simple protocol version 2"),
        ("unknown type", b'{"version":1,"type":"NOPE","commitTs":1}', "unknown message type 'NOPE'"),
        ("missing field", b'{"version":1,"type":"WATERMARK"}', "KeyError"),
    ],
)
def test_bad_messages_raise_decode_error_with_position(label, value, reason):
    decoder = SimpleDecoder()
    with pytest.raises(DecodeError, match=reason) as caught:
        decoder.decode(message(value, offset=42, partition=1, topic="cdc"))
    assert caught.value.position.offset == 42
    assert "cdc partition 1 offset 42" in str(caught.value)
    assert caught.value.value == value


def test_large_message_reference_is_rejected_not_applied_partially():
    # Setup: a DML that carries only its handle key (TiCDC's large-message handling).
    # Expect: a DecodeError, never a row with the other columns missing.
    decoder = SimpleDecoder()
    decoder.decode(message(fixture("spec_bootstrap.json")))
    body = json.loads(fixture("spec_insert.json"))
    body["handleKeyOnly"] = True
    with pytest.raises(DecodeError, match="handle-key-only"):
        decoder.decode(message(json.dumps(body).encode()))


def test_rows_of_a_table_without_handle_key_are_bad_input():
    writer = SimpleJsonWriter()
    schema = table_schema("d", "nokey", table_id=1, version=5, columns=[column("a", "int")])
    decoder = SimpleDecoder()
    decoder.decode(message(writer.bootstrap(schema)))
    with pytest.raises(DecodeError, match="no primary key and no NOT NULL unique key"):
        decoder.decode(message(writer.insert(schema, 10, {"a": 1})))


def test_not_null_unique_key_is_the_handle_key_when_there_is_no_primary_key():
    schema = table_schema(
        "d",
        "uk",
        table_id=1,
        version=5,
        columns=[column("a", "int"), column("code", "varchar", nullable=False), column("b", "int")],
        unique_keys=[["a"], ["code"]],  # `a` is nullable, so it cannot identify rows
    )
    decoder = SimpleDecoder()
    decoder.decode(message(SimpleJsonWriter().bootstrap(schema)))
    (row,) = decoder.decode(message(SimpleJsonWriter().insert(schema, 10, {"a": None, "code": "x", "b": 2})))
    assert row.schema.key == ("code",)


def test_values_are_converted_per_column_type():
    # Setup: one row over the skeleton's types, encoded as TiCDC's Simple JSON encodes them.
    # Expect: each value in the Python type Spark expects for its column, exactly.
    columns = [
        column("id", "bigint", nullable=False, unsigned=True),
        column("tiny_u", "tinyint", unsigned=True),
        column("small", "smallint"),
        column("medium_u", "mediumint", unsigned=True),
        column("int_u", "int", unsigned=True),
        column("dec", "decimal", length=20, decimal=6),
        column("wide_dec", "decimal", length=65, decimal=30),
        column("f", "float"),
        column("d", "double"),
        column("day", "date"),
        column("dt", "datetime", decimal=6),
        column("ts", "timestamp", decimal=3),
        column("ts_zone", "timestamp"),
        column("name", "varchar"),
        column("bin", "varbinary"),
        column("blob", "blob"),
        column("doc", "json"),
        column("zero_day", "date"),
    ]
    schema = table_schema("d", "types", table_id=1, version=3, columns=columns, primary_key=["id"])
    row = {
        "id": "18446744073709551615",
        "tiny_u": "255",
        "small": "-32768",
        "medium_u": "16777215",
        "int_u": "4294967295",
        "dec": "-12345678901234.123456",
        "wide_dec": "12345678901234567890123456789012345.123456789012345678901234567890",
        "f": "3.4028235e+38",
        "d": "-1.7976931348623157e+308",
        "day": "2024-02-29",
        "dt": "9999-12-31 23:59:59.999999",
        "ts": timestamp("2024-01-02 03:04:05.678", "UTC"),
        "ts_zone": timestamp("2024-01-02 08:00:00", "Asia/Shanghai"),
        "name": "ünïcødé 😀",
        "bin": base64.b64encode(b"\x00\x01\xff").decode(),
        "blob": base64.b64encode(b"").decode(),
        "doc": '{"a": [1, 2]}',
        "zero_day": "0000-00-00",
    }
    decoder = SimpleDecoder()
    writer = SimpleJsonWriter()
    decoder.decode(message(writer.bootstrap(schema)))
    (change,) = decoder.decode(message(writer.insert(schema, 9, row)))
    values = dict(zip(change.schema.column_names(), change.after, strict=True))
    types = {c.name: c.spark_type for c in change.schema.columns}
    assert values["id"] == Decimal("18446744073709551615") and types["id"] == "DECIMAL(20,0)"
    assert values["tiny_u"] == 255 and types["tiny_u"] == "SMALLINT"
    assert values["small"] == -32768 and types["small"] == "SMALLINT"
    assert values["medium_u"] == 16777215 and types["medium_u"] == "INT"
    assert values["int_u"] == 4294967295 and types["int_u"] == "BIGINT"
    assert values["dec"] == Decimal("-12345678901234.123456") and types["dec"] == "DECIMAL(20,6)"
    assert values["wide_dec"] == row["wide_dec"] and types["wide_dec"] == "STRING"
    assert values["f"] == 3.4028235e38 and types["f"] == "FLOAT"
    assert values["d"] == -1.7976931348623157e308
    assert values["day"] == dt.date(2024, 2, 29) and types["day"] == "DATE"
    assert values["dt"] == dt.datetime(9999, 12, 31, 23, 59, 59, 999999) and types["dt"] == "TIMESTAMP_NTZ"
    assert values["ts"] == dt.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=dt.timezone.utc)
    assert values["ts_zone"] == dt.datetime(2024, 1, 2, 0, 0, 0, tzinfo=dt.timezone.utc)  # Shanghai is UTC+8
    assert types["ts"] == "TIMESTAMP"
    assert values["name"] == "ünïcødé 😀"
    assert values["bin"] == b"\x00\x01\xff" and types["bin"] == "BINARY"
    assert values["blob"] == b""
    assert values["doc"] == '{"a": [1, 2]}' and types["doc"] == "STRING"
    assert values["zero_day"] is None


def test_create_decoder_rejects_unknown_protocol_and_encoding():
    with pytest.raises(ConfigError, match=r"protocol.name: 'canal' is not allowed; allowed: avro, canal-json, debezium, open-protocol, simple"):
        create_decoder("canal")
    with pytest.raises(ConfigError, match=r"protocol.encoding: 'protobuf' is not allowed; allowed: json, avro"):
        create_decoder(protocol_options("simple", {"encoding": "protobuf"}))
    assert isinstance(create_decoder(protocol_options("simple", {"encoding": "avro"})), SimpleDecoder)


# Unqualified, the old name is in the session's database (d here), which the message does not carry.
@pytest.mark.parametrize("statement", ["RENAME TABLE d.old TO d2.new", "RENAME TABLE old TO d2.new"],
                         ids=["qualified", "unqualified"])
def test_rename_table_names_the_previous_table_by_its_table_id(statement):
    writer = SimpleJsonWriter()
    before = table_schema("d", "old", table_id=42, version=5, columns=[column("id", "int", nullable=False)], primary_key=["id"])
    after = {**before, "schema": "d2", "table": "new"}  # TiDB keeps the id and the schema version
    decoder = SimpleDecoder()
    decoder.decode(message(writer.ddl("CREATE", before, 5, "CREATE TABLE old (id int primary key)")))
    (change,) = decoder.decode(message(writer.ddl("RENAME", after, 9, statement)))
    assert change.kind is SchemaChangeKind.RENAME
    assert (change.table, change.previous_name) == (TableName("d2", "new"), TableName("d", "old"))
    (row,) = decoder.decode(message(writer.insert(after, 10, {"id": 1})))
    assert row.table == TableName("d2", "new")


@pytest.mark.parametrize("renamed_version", [5, 7], ids=["version-kept", "version-bumped"])
def test_rename_table_names_the_previous_table_after_a_restore_that_already_knows_the_new_name(renamed_version):
    # Setup: a checkpoint's schema cache saved after the RENAME was decoded but before it was applied
    # (it waited behind the watermark), restored into a fresh decoder that decodes the RENAME again;
    # then the RENAME's copy from another partition.
    # Expect: both name the old table (found by a kill test: the job re-created the renamed table empty).
    writer = SimpleJsonWriter()
    before = table_schema("d", "old", table_id=42, version=5, columns=[column("id", "int", nullable=False)], primary_key=["id"])
    after = {**before, "schema": "d2", "table": "new", "version": renamed_version}
    rename = writer.ddl("RENAME", after, 9, "RENAME TABLE d.old TO d2.new")
    first = SimpleDecoder()
    first.decode(message(writer.ddl("CREATE", before, 5, "CREATE TABLE old (id int primary key)")))
    first.decode(message(rename, offset=1))
    restored = SimpleDecoder()
    restored.restore(first.state())

    for partition in (0, 1):
        (change,) = restored.decode(message(rename, offset=1, partition=partition))
        assert (change.table, change.previous_name) == (TableName("d2", "new"), TableName("d", "old"))


@pytest.mark.parametrize("renamed_version", [5, 7], ids=["version-kept", "version-bumped"])
def test_a_trade_of_names_through_a_temporary_one_names_each_renames_previous_table(renamed_version):
    # Setup: RENAME TABLE a TO tmp, b TO a, tmp TO b: one DDL, which TiCDC sends as three RENAMEs at one
    # commitTs, each with its own clause; table 1 has had two other names (a, tmp) at the same version
    # when it becomes b.
    # Expect: each RENAME names the table it renames (the last one tmp, not a).
    writer = SimpleJsonWriter()
    decoder = SimpleDecoder()
    schemas = {}
    for table_id, name in ((1, "a"), (2, "b")):
        schemas[table_id] = table_schema("d", name, table_id=table_id, version=5,
                                         columns=[column("id", "int", nullable=False)], primary_key=["id"])
        decoder.decode(message(writer.ddl("CREATE", schemas[table_id], 5, f"CREATE TABLE {name} (id int primary key)")))
    renames = [(1, "a", "tmp"), (2, "b", "a"), (1, "tmp", "b")]
    for offset, (table_id, old, new) in enumerate(renames, start=1):
        after = {**schemas[table_id], "table": new, "version": renamed_version}
        (change,) = decoder.decode(message(writer.ddl("RENAME", after, 9, f"RENAME TABLE `d`.`{old}` TO `d`.`{new}`"),
                                           offset=offset))
        assert (change.table, change.previous_name) == (TableName("d", new), TableName("d", old))


def test_unique_index_gives_a_keyless_table_its_handle_key():
    # Setup: a table without keys, then CREATE UNIQUE INDEX on a NOT NULL column (CINDEX).
    # Expect: rows before are bad input; rows after carry the new handle key.
    writer = SimpleJsonWriter()
    columns = [column("code", "varchar", nullable=False), column("v", "int")]
    keyless = table_schema("d", "t", table_id=3, version=5, columns=columns)
    keyed = table_schema("d", "t", table_id=3, version=8, columns=columns, unique_keys=[["code"]])
    decoder = SimpleDecoder()
    decoder.decode(message(writer.ddl("CREATE", keyless, 5, "CREATE TABLE t (...)")))
    with pytest.raises(DecodeError):
        decoder.decode(message(writer.insert(keyless, 6, {"code": "a", "v": 1})))
    (change,) = decoder.decode(message(writer.ddl("CINDEX", keyed, 8, "CREATE UNIQUE INDEX u ON t (code)")))
    assert change.kind is SchemaChangeKind.INDEX
    (row,) = decoder.decode(message(writer.insert(keyed, 9, {"code": "a", "v": 1})))
    assert row.schema.key == ("code",)


def test_database_level_ddl_carries_no_table_and_is_skipped(caplog):
    decoder = SimpleDecoder()
    assert decoder.decode(message(SimpleJsonWriter().ddl("QUERY", None, 5, "CREATE DATABASE shop"))) == []
    assert "CREATE DATABASE shop" in caplog.text
