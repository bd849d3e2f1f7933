"""TiCDC's debezium protocol: values, structure sources, DDL, watermarks, ordering."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pytest

from testbed.changefeed import Changefeed
from testbed.encoders.debezium import DebeziumWriter
from testbed.tables import column
from tests.decoding import ROW, debezium_decoder, decode, rows, workload
from ticdc_delta.exceptions import DecodeError
from ticdc_delta.schema_cache.debezium.decoder import parse_table_ids
from ticdc_delta.schema_cache.events import (
    Op,
    Ordering,
    RawMessage,
    RowChange,
    SchemaChange,
    SchemaChangeKind,
    TableName,
    Watermark,
)
from ticdc_delta.schema_cache.simple.decoder import SimpleDecoder


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
    # What the Connect schema cannot tell (docs/protocols.md): DECIMAL is a double, BIGINT UNSIGNED an
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
    [(b"nope", "not JSON"), (None, "without a key"), (b'{"payload":{"op":"x"}}', "unknown op 'x'")],
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


# --- Debezium's own MariaDB connector (tests/fixtures/debezium_mariadb: real captured messages) ---

_MARIADB_FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "debezium_mariadb" / "capture.jsonl"


def _captured() -> dict[int, RawMessage]:
    messages = {}
    for line in _MARIADB_FIXTURE.read_text().splitlines():
        m = json.loads(line)
        key, value = (None if m[k] is None else m[k].encode() for k in ("key", "value"))
        messages[m["offset"]] = RawMessage("mariadb", 0, m["offset"], key, value)
    return messages


def _real_decoder():
    return debezium_decoder(enable_tidb_extension=False, allow_offset_ordering=True)


def _decode_real(decoder, *offsets: int) -> list:
    captured = _captured()
    return [event for offset in offsets for event in decoder.decode(captured[offset])]


def test_real_mariadb_messages_carry_no_commit_ts_so_only_offset_order_reads_them():
    # The connector's source block has binlog file/pos/gtid, ts_us/ts_ns, but no commit_ts.
    (create,) = _decode_real(_real_decoder(), 9)
    assert create.kind is SchemaChangeKind.CREATE and create.commit_ts == 0
    with pytest.raises(DecodeError, match="no source.commit_ts .*'mariadb'"):
        debezium_decoder().decode(_captured()[9])


def test_real_mariadb_type_names_carry_unsigned():
    # typeName is "TINYINT UNSIGNED", "BIGINT UNSIGNED" (TiCDC: "TINYINT", UNSIGNED in typeExpression only).
    (create,) = _decode_real(_real_decoder(), 9)
    types = {c.name: c.spark_type for c in create.schema.columns}
    assert (types["ti"], types["tu"], types["su"], types["iu"], types["bu"]) == (
        "TINYINT", "SMALLINT", "INT", "BIGINT", "DECIMAL(20,0)"
    )
    assert types["d"] == "DECIMAL(12,3)" and types["bo"] == "TINYINT"


def test_real_mariadb_snapshot_reads_are_inserts():
    # The initial snapshot sends op "r" (TiCDC never does): inserts, values through the DDL's types.
    _, row = _decode_real(_real_decoder(), 9, 14)
    assert row.op is Op.INSERT and row.commit_ts == 0
    values = dict(zip(row.schema.column_names(), row.after, strict=True))
    assert values["bu"] == Decimal(2**64 - 2) and values["iu"] == 4294967294 and values["tu"] == 201
    assert values["d"] == Decimal("-123456789.001") and values["bo"] == 1 and values["legacy"] == "old1"


def test_real_mariadb_texts_binary_and_bits():
    _, row = _decode_real(_real_decoder(), 12, 21)
    values = dict(zip(row.schema.column_names(), row.after, strict=True))
    assert values["id"] == Decimal(2**63 + 1)  # BIGINT UNSIGNED key, sent as a negative int64
    assert values["bn"] == b"\x01\x00\x01\x00" and values["vb"] == b"\x00\x01\xff" and values["bl"] == b"\x00"
    assert (values["e"], values["s"], values["b1"], values["b12"]) == ("medium", "", 1, 37)
    assert values["v"] == "välue 1 ✓" and json.loads(values["j"])["tags"] == ["a", "b"]


def test_real_mariadb_timestamp_fraction_padded_to_the_column_precision():
    # TIMESTAMP(2) arrives as "...59.45Z": two digits, which Python before 3.11 cannot parse as such.
    _, row = _decode_real(_real_decoder(), 13, 26)
    values = dict(zip(row.schema.column_names(), row.after, strict=True))
    utc = dt.timezone.utc
    assert values["ts2"] == dt.datetime(2024, 3, 1, 23, 59, 59, 450000, tzinfo=utc)
    assert values["ts"] == dt.datetime(2024, 3, 1, 23, 59, 59, tzinfo=utc)
    assert values["dt3"] == dt.datetime(2024, 3, 1, 23, 59, 59, 123000)
    assert values["dt6"] == dt.datetime(2024, 3, 1, 23, 59, 59, 654321)
    assert (values["t"], values["t6"], values["y"]) == ("-00:54:54", "01:00:00.987654", 1902)
    assert values["d"] == dt.date(1001, 2, 2)


def test_real_mariadb_tombstones_are_skipped():
    # A primary-key change: d (old key), the tombstone (key, null value), c (new key).
    deleted, created = _decode_real(_real_decoder(), 9, 146, 147, 148)[1:]
    assert deleted.op is Op.DELETE and deleted.before[0] == 2
    assert created.op is Op.INSERT and created.after[0] == 1000
    assert _real_decoder().decode(_captured()[147]) == []


def test_real_mariadb_database_level_ddl_is_skipped_and_drop_if_exists_is_a_drop():
    # The snapshot starts with SET ..., DROP TABLE IF EXISTS each table, DROP/CREATE DATABASE, USE.
    decoder = _real_decoder()
    assert _decode_real(decoder, 0) == [] and _decode_real(decoder, 8) == []
    (drop,) = _decode_real(decoder, 1)
    assert drop.kind is SchemaChangeKind.DROP and drop.table == TableName("dbz_shop", "numbers")


def test_real_mariadb_successive_alters_without_commit_ts_give_successive_structures():
    # All descriptions have ts 0 here: the structure cache must still tell them apart.
    create, added, dropped = _decode_real(_real_decoder(), 9, 186, 187)
    names = [c.name for c in create.schema.columns]
    assert [c.name for c in added.schema.columns] == [*names, "note", "qty"]
    assert [c.name for c in dropped.schema.columns] == [n for n in names if n != "legacy"] + ["note", "qty"]
    assert added.schema.columns[-2].default == "none" and added.schema.columns[-1].default == 7
    _, update = _decode_real(_real_decoder(), 187, 189)
    values = dict(zip(update.schema.column_names(), update.after, strict=True))
    assert values["qty"] is None  # an explicit NULL (with converter.replace.null.with.default=false)


def test_real_mariadb_rename_table_is_an_alter_of_the_new_name():
    # Debezium's tableChanges: ALTER "dbz_shop"."orders_archive" only; the old name is in the statement.
    (rename,) = _decode_real(_real_decoder(), 197)
    assert rename.kind is SchemaChangeKind.RENAME and rename.table == TableName("dbz_shop", "orders_archive")
    assert rename.previous_name == TableName("dbz_shop", "orders")
    (column_rename,) = _decode_real(_real_decoder(), 188)
    assert column_rename.kind is SchemaChangeKind.ALTER and column_rename.previous_name is None


def test_real_mariadb_truncate_event():
    # op "t" (with skipped.operations=none): no key, no before/after.
    decoder = _real_decoder()
    (create, truncate) = _decode_real(decoder, 11, 204)
    assert truncate.kind is SchemaChangeKind.TRUNCATE and truncate.table == TableName("dbz_shop", "scratch")
    assert truncate.schema == create.schema


@pytest.mark.parametrize("with_schema", [True, False], ids=["schema", "disable-schema"])
@pytest.mark.parametrize("restored", [False, True], ids=["read-on", "restored"])
def test_rows_take_the_description_of_their_commit_ts_whatever_was_decoded_before(with_schema, restored):
    # Setup: a table with a DECIMAL column (a double in Debezium's values: its description gives the
    #    precision) changed, then ALTERed (a column added) and RENAMEd. DDL goes to every partition, and
    #    partitions are read at their own pace: partition 2 is decoded through its ALTER, then partition 1
    #    whole (to the RENAME), then the rest of 2, then 0. With `restored`, partition 0 is decoded whole
    #    and the decoder's state saved and restored into a new decoder, as a restarted job's is, which
    #    resumes partition 1 after its CREATE (the checkpoint had passed it), then reads partition 2.
    # Expect: every row gets the structure of the last DDL before its commitTs (DECIMAL(10,2); the added
    #    column only after the ALTER), never a later description nor none (the RENAME moved the table away):
    #    each commitTs of the table has one structure (two would split it between MERGEs, losing changes).
    feed = Changefeed(3, debezium_writer=DebeziumWriter(with_schema=with_schema))
    feed.create_table("shop", "items", [column("id", "int", nullable=False), column("price", "decimal", length=10, decimal=2)],
                      primary_key=["id"])
    for n in range(4):
        with feed.transaction() as txn:
            for i in range(6):
                txn.insert("shop", "items", {"id": n * 10 + i, "price": Decimal(f"{n}.{i}5")})
    altered_at = feed.last_ts + 1
    feed.add_column("shop", "items", column("note", "varchar", length=20))
    with feed.transaction() as txn:
        for i in range(6):
            txn.insert("shop", "items", {"id": 90 + i, "price": Decimal("9.99"), "note": "x"})
    feed.rename_table("shop", "items", "archive", "items")
    p0, p1, p2 = ([m for m in feed.messages if m.partition == p] for p in range(3))
    decoder = debezium_decoder()
    if restored:
        events = decode(decoder, _only(p0))
        state, decoder = decoder.state(), debezium_decoder()
        decoder.restore(state)
        read = [p1[1:], p2]  # resumed after its CREATE
    else:
        ahead = next(i for i, m in enumerate(p2) if m.kind == "DDL" and i > 0) + 1  # through its ALTER
        assert any(m.kind == "DML" for m in p2[ahead:])
        events = decode(decoder, _only(p2[:ahead]))
        read = [p1, p2[ahead:], p0]
    for messages in read:
        events += decode(decoder, _only(messages))

    changes = [e for e in events if isinstance(e, RowChange)]
    assert len(changes) == sum(1 for m in feed.messages if m.kind == "DML") and decoder.parked() == []
    for change in changes:
        types = {c.name: c.spark_type for c in change.schema.columns}
        assert types["price"] == "DECIMAL(10,2)", (change.commit_ts, types)
        assert ("note" in types) == (change.commit_ts > altered_at), (change.commit_ts, types)
    structures: dict[int, set] = {}
    for change in changes:
        structures.setdefault(change.commit_ts, set()).add(change.schema.columns)
    assert all(len(s) == 1 for s in structures.values())


@pytest.mark.parametrize("with_schema", [True, False], ids=["schema", "disable-schema"])
def test_a_partition_read_behind_many_ddls_still_gets_the_description_of_its_rows(with_schema):
    # Setup: rows at one commitTs, then a column renamed and nine columns added; partition 0 decoded whole
    #    before partition 1 (a busy partition catching up a backlog).
    # Expect: partition 1's rows get the structure of their commitTs, as partition 0's did (the original
    #    column name, none of the added columns, the value kept): descriptions are not forgotten by count.
    feed = Changefeed(2, debezium_writer=DebeziumWriter(with_schema=with_schema))
    feed.create_table("shop", "t", [column("id", "int", nullable=False), column("b", "varchar", length=8)],
                      primary_key=["id"])
    with feed.transaction() as txn:
        for i in range(6):
            txn.insert("shop", "t", {"id": i, "b": "x"})
    feed.rename_column("shop", "t", "b", "b2")
    for n in range(9):
        feed.add_column("shop", "t", column(f"c{n}", "int"))
    decoder = debezium_decoder()
    events = decode(decoder, _only([m for m in feed.messages if m.partition == 0]))
    events += decode(decoder, _only([m for m in feed.messages if m.partition == 1]))
    changes = [e for e in events if isinstance(e, RowChange)]
    assert {c.partition for c in (e.position for e in changes)} == {0, 1}
    assert {e.schema.column_names() for e in changes} == {("id", "b")}
    assert {e.after for e in changes} == {(i, "x") for i in range(6)}


def test_descriptions_are_forgotten_by_progress_and_one_commit_ts_keeps_its_ddls_order():
    from ticdc_delta.schema_cache.debezium.descriptions import Descriptions

    a, gone = TableName("shop", "a"), TableName("shop", "gone")
    known = Descriptions()
    for ts in (10, 20, 30):
        known.add(a, ts, {"v": ts})
    known.add(gone, 12, {"v": 12})
    known.add(gone, 22, None)  # dropped
    # A multi-table RENAME at 40: `a` is renamed away, then another table renamed to `a`; a lagging
    # partition's copies of both arrive after.
    for _ in range(2):
        known.add(a, 40, None)
        known.add(a, 40, {"v": "b as a"})
    assert known.at(a, 41) == (40, {"v": "b as a"}) and known.at(a, 35) == (30, {"v": 30})
    assert known.at(a, 15) == (10, {"v": 10}) and known.at(gone, 23) is None

    known.forget_before(25)  # every partition is past 25
    assert known.at(a, 26) == (20, {"v": 20}) and known.at(a, 31) == (30, {"v": 30})
    assert [row[2] for row in known.state() if row[1] == "a"] == [20, 30, 40, 40]
    assert all(row[1] != "gone" for row in known.state())
    restored = Descriptions()
    restored.restore(known.state())
    assert restored.state() == known.state()
