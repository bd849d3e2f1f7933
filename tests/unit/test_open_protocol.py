"""TiCDC Open Protocol: batched framing, column objects, DDL, resolved events, large messages."""

from __future__ import annotations

import datetime as dt
import json
import struct
from decimal import Decimal

import pytest

from testbed.changefeed import Changefeed
from testbed.encoders.open_protocol import OpenProtocolWriter, go_quote
from testbed.tables import column
from tests.decoding import ROW, decode, open_decoder, rows, workload
from ticdc_delta.exceptions import DecodeError
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
from ticdc_delta.schema_cache.open_protocol.decoder import go_unquote
from ticdc_delta.schema_cache.simple.decoder import SimpleDecoder


def feed(**options) -> Changefeed:
    return Changefeed(open_writer=OpenProtocolWriter(**options))


def test_values_and_types():
    # Setup: the all-types workload as Open Protocol. Expect: what the protocol carries comes out
    # exactly; what it does not carry (ENUM/SET members, DECIMAL precision, BIT width) keeps
    # TiCDC's index/bitmask, the exact decimal text, and a 20-digit decimal.
    events = decode(open_decoder(), workload(feed()))
    row = next(e for e in events if isinstance(e, RowChange) and e.after and e.after[0] == 2**64 - 1)
    values = dict(zip(row.schema.column_names(), row.after, strict=True))
    types = {c.name: c.spark_type for c in row.schema.columns}
    assert row.schema.key == ("id",)
    assert values["id"] == Decimal(2**64 - 1) and types["id"] == "DECIMAL(20,0)"
    assert (values["raw"], values["name"]) == (ROW["raw"], ROW["name"])  # Go-quoted binary, base64-free text
    assert values["ts"] == ROW["ts"] and values["at6"] == ROW["at6"] and values["t"] == "-12:34:56.789"
    assert (values["price"], types["price"]) == ("-123456789.125", "STRING")
    assert (values["size"], values["tags"]) == ("2", "5")
    assert (values["bits"], types["bits"]) == (Decimal(0xABC), "DECIMAL(20,0)")
    assert values["doc"] == ROW["doc"]


def test_same_changes_as_simple_for_the_columns_both_carry():
    simple = decode(SimpleDecoder(), workload(Changefeed()))
    opened = decode(open_decoder(), workload(feed()))
    carried = [i for i, c in enumerate(next(e for e in simple if isinstance(e, RowChange)).schema.columns)
               if c.name in ("id", "i8", "u16", "u32", "f", "d", "name", "raw", "day", "at", "at6", "ts", "t", "y", "doc")]

    def project(changes):
        return [(ts, op, _pick(before, carried), _pick(after, carried)) for ts, op, before, after in changes]

    assert project(rows(opened)) == project(rows(simple))


def _pick(values, indexes):
    return None if values is None else tuple(values[i] for i in indexes)


def test_rows_are_batched_and_resolved_events_are_watermarks():
    changefeed = feed(max_batch_size=2)
    changefeed.create_table("d", "t", [column("id", "int", nullable=False)], primary_key=["id"])
    with changefeed.transaction() as txn:
        for i in range(12):
            txn.insert("d", "t", {"id": i})
    batched = [m for m in changefeed.messages if m.kind == "DML"]
    decoder = open_decoder()
    assert decoder.ordering is Ordering.COMMIT_TS
    per_message = [len(decoder.decode(RawMessage("t", m.partition, 0, m.key, m.value))) for m in batched]
    assert sum(per_message) == 12 and max(per_message) == 2
    resolved = next(m for m in changefeed.messages if m.kind == "WATERMARK")
    (mark,) = decoder.decode(RawMessage("t", 1, 9, resolved.key, resolved.value))
    assert isinstance(mark, Watermark) and mark.commit_ts == changefeed.last_ts


def test_ddl_kinds_without_structure():
    changefeed = feed()
    changefeed.create_table("shop", "t", [column("id", "int", nullable=False)], primary_key=["id"])
    changefeed.add_column("shop", "t", column("v", "int"))
    changefeed.rename_table("shop", "t", "shop", "t2")
    changefeed.truncate_table("shop", "t2")
    changefeed.drop_table("shop", "t2")
    changefeed.messages[:] = [m for m in changefeed.messages if m.partition == 0]
    changes = [e for e in decode(open_decoder(), changefeed) if isinstance(e, SchemaChange)]
    assert [(c.kind, c.table.table, c.schema) for c in changes] == [
        (SchemaChangeKind.CREATE, "t", None),
        (SchemaChangeKind.ALTER, "t", None),
        (SchemaChangeKind.RENAME, "t2", None),
        (SchemaChangeKind.TRUNCATE, "t2", None),
        (SchemaChangeKind.DROP, "t2", None),
    ]
    assert changes[2].previous_name == TableName("shop", "t")


@pytest.mark.parametrize("compression", ["lz4", "snappy"])
def test_compression_and_claim_check(tmp_path, compression):
    changefeed = workload(feed(compression=compression, claim_check_dir=tmp_path, claim_check_over_bytes=300))
    assert any(tmp_path.iterdir())
    decoder = open_decoder(large_message_compression=compression, claim_check_root=str(tmp_path))
    assert rows(decode(decoder, changefeed)) == rows(decode(open_decoder(), workload(feed())))


@pytest.mark.parametrize(
    "body, raw",
    [
        ("abc", b"abc"),
        ("\\x00\\xff\\x7f", b"\x00\xff\x7f"),
        ('\\"q\\"\\\\', b'"q"\\'),
        ("\\n\\t\\r", b"\n\t\r"),
        ("\\u00e9\\U0001F600", "é😀".encode()),
        ("\\101", b"A"),
        ("é", "é".encode()),
    ],
)
def test_go_unquote(body, raw):
    assert go_unquote(body) == raw


def test_go_quote_round_trips_every_byte():
    data = bytes(range(256))
    assert go_unquote(go_quote(data)) == data


def test_framing_errors_are_typed():
    decoder = open_decoder()
    with pytest.raises(DecodeError, match="lacks batch version 1"):
        decoder.decode(RawMessage("t", 0, 0, struct.pack(">Q", 2), b""))
    key = struct.pack(">Q", 1) + struct.pack(">Q", 2) + b"{}"
    with pytest.raises(DecodeError, match="1 keys but 0 values"):
        decoder.decode(RawMessage("t", 0, 0, key, b""))
    with pytest.raises(DecodeError, match="runs past the end"):
        decoder.decode(RawMessage("t", 0, 0, struct.pack(">Q", 1) + struct.pack(">Q", 99), b""))


def test_delete_and_update_shapes():
    changefeed = workload(feed())
    changes = [e for e in decode(open_decoder(), changefeed) if isinstance(e, RowChange)]
    assert {c.op for c in changes} == {Op.INSERT, Op.UPDATE, Op.DELETE}
    update = next(c for c in changes if c.op is Op.UPDATE)
    assert update.before[0] == update.after[0] and update.before != update.after


def test_handle_key_only_is_bad_input():
    key = {"ts": 5, "scm": "d", "tbl": "t", "t": 1, "ohk": True}
    message_key, value = OpenProtocolWriter.frame([(json.dumps(key).encode(), b'{"u": {}}')])
    with pytest.raises(DecodeError, match="handle-key-only"):
        open_decoder().decode(RawMessage("t", 0, 0, message_key, value))


def test_timestamps_in_the_server_zone():
    changefeed = Changefeed(open_writer=OpenProtocolWriter(location="Asia/Kolkata"))
    changefeed.create_table("d", "t", [column("id", "int", nullable=False), column("at", "timestamp")], primary_key=["id"])
    moment = dt.datetime(2024, 3, 1, 0, 0, tzinfo=dt.timezone.utc)
    with changefeed.transaction() as txn:
        txn.insert("d", "t", {"id": 1, "at": moment})
    (row,) = [e for e in decode(open_decoder(timestamp_zone="Asia/Kolkata"), changefeed) if isinstance(e, RowChange)]
    assert row.after[1] == moment
