"""TiCDC's canal-json protocol, and large-message handling (compression, claim-check)."""

from __future__ import annotations

import base64
import json

import pytest

from testbed.changefeed import Changefeed
from testbed.encoders.canal import CanalJsonWriter
from testbed.encoders.large_messages import compress
from testbed.tables import column
from tests.decoding import ROW, canal_decoder, decode, rows, workload
from ticdc_delta.exceptions import DecodeError
from ticdc_delta.schema_cache.canal.mysql_type import parse_mysql_type
from ticdc_delta.schema_cache.ddl_text import renamed_from
from ticdc_delta.schema_cache.events import (
    Ordering,
    RawMessage,
    RowChange,
    SchemaChange,
    SchemaChangeKind,
    TableName,
    Watermark,
)
from ticdc_delta.schema_cache.simple.decoder import SimpleDecoder
from ticdc_delta.schema_cache.types import TiDBType


def canal(**options) -> Changefeed:
    return Changefeed(canal_writer=CanalJsonWriter(**options))


@pytest.mark.parametrize("compression", ["none", "lz4", "snappy"])
def test_content_compatible_canal_gives_the_same_rows_as_simple(compression):
    # Setup: one workload over every type, through Simple JSON and through canal-json
    # (content-compatible types, so lengths and ENUM/SET members travel), compressed or not.
    # Expect: identical row changes, Spark types and watermarks.
    simple = decode(SimpleDecoder(), workload(Changefeed()))
    feed = workload(canal(content_compatible=True, compression=compression))
    events = decode(canal_decoder(large_message_compression=compression), feed)
    assert rows(events) == rows(simple)
    simple_row = next(e for e in simple if isinstance(e, RowChange))
    canal_row = next(e for e in events if isinstance(e, RowChange))
    assert [c.spark_type for c in canal_row.schema.columns] == [c.spark_type for c in simple_row.schema.columns]
    assert sum(isinstance(e, Watermark) for e in events) == sum(isinstance(e, Watermark) for e in simple)


def test_default_types_keep_what_they_cannot_name():
    # Without content-compatible, mysqlType has no lengths and no members: DECIMAL keeps its
    # exact text, ENUM/SET their index/bitmask text, BIT of unknown width a 20-digit decimal.
    events = decode(canal_decoder(), workload(canal()))
    row = next(e for e in events if isinstance(e, RowChange))
    values = dict(zip(row.schema.column_names(), row.after, strict=True))
    types = {c.name: c.spark_type for c in row.schema.columns}
    assert (types["price"], values["price"]) == ("STRING", "-123456789.125")
    assert (values["size"], values["tags"]) == ("2", "5")
    assert types["bits"] == "DECIMAL(20,0)"
    assert values["raw"] == ROW["raw"] and values["name"] == ROW["name"]


def test_update_with_only_changed_columns_in_old():
    # content-compatible sends only the changed columns in `old`: the rest come from `data`.
    feed = workload(canal(content_compatible=True))
    update = next(json.loads(m.value) for m in feed.messages if b'"UPDATE"' in m.value)
    assert set(update["old"][0]) < set(update["data"][0])
    (change,) = [e for e in decode(canal_decoder(), feed) if isinstance(e, RowChange) and e.op.value == "UPDATE"]
    assert change.before[0] == change.after[0]


def test_ddl_carries_no_structure_and_goes_to_partition_zero():
    feed = canal()
    feed.create_table("shop", "t", [column("id", "int", nullable=False)], primary_key=["id"])
    feed.rename_table("shop", "t", "arch", "t2")
    feed.truncate_table("arch", "t2")
    feed.drop_table("arch", "t2")
    assert {m.partition for m in feed.messages if m.kind == "DDL"} == {0}
    changes = [e for e in decode(canal_decoder(), feed) if isinstance(e, SchemaChange)]
    assert [(c.kind, c.table, c.schema) for c in changes] == [
        (SchemaChangeKind.CREATE, TableName("shop", "t"), None),
        (SchemaChangeKind.RENAME, TableName("arch", "t2"), None),
        (SchemaChangeKind.TRUNCATE, TableName("arch", "t2"), None),
        (SchemaChangeKind.DROP, TableName("arch", "t2"), None),
    ]
    assert changes[1].previous_name == TableName("shop", "t")


@pytest.mark.parametrize(
    "statement, new, old",
    [
        ("RENAME TABLE `shop`.`t` TO `arch`.`t2`", TableName("arch", "t2"), TableName("shop", "t")),
        ("rename table t to t2, u to u2", TableName("shop", "u2"), TableName("shop", "u")),
        ("ALTER TABLE `we``ird` RENAME TO x", TableName("shop", "x"), TableName("shop", "we`ird")),
        ("RENAME TABLE a TO b", TableName("shop", "c"), None),
    ],
)
def test_renamed_from(statement, new, old):
    assert renamed_from(statement, "shop", new) == old


def test_without_the_extension_offsets_order_and_commit_ts_is_unknown():
    events = decode(canal_decoder(enable_tidb_extension=False, allow_offset_ordering=True), workload(canal(enable_tidb_extension=False)))
    assert canal_decoder(enable_tidb_extension=False, allow_offset_ordering=True).ordering is Ordering.OFFSET
    assert not any(isinstance(e, Watermark) for e in events)
    assert {e.commit_ts for e in events if isinstance(e, RowChange)} == {0}


@pytest.mark.parametrize(
    "text, expected",
    [
        ("int unsigned", TiDBType("int", unsigned=True)),
        ("int(10) unsigned zerofill", TiDBType("int", unsigned=True, length=10)),
        ("decimal(5,2)", TiDBType("decimal", length=5, scale=2)),
        ("enum('a','b''c')", TiDBType("enum", elements=("a", "b'c"))),
        ("datetime(3)", TiDBType("datetime", scale=3)),
        ("varbinary(23)", TiDBType("varbinary", length=23)),
    ],
)
def test_parse_mysql_type(text, expected):
    assert parse_mysql_type(text) == expected


def test_unknown_mysql_type_is_bad_input():
    row = {"id": 0, "database": "d", "table": "t", "pkNames": ["id"], "isDdl": False, "type": "INSERT",
           "mysqlType": {"id": "hyperloglog"}, "data": [{"id": "1"}], "_tidb": {"commitTs": 5}}
    with pytest.raises(DecodeError, match="unsupported mysqlType 'hyperloglog'"):
        canal_decoder().decode(RawMessage("t", 0, 0, None, json.dumps(row).encode()))


def test_compressed_stream_read_without_decompression_is_bad_input():
    feed = workload(canal(compression="lz4"))
    with pytest.raises(DecodeError, match="not JSON"):
        decode(canal_decoder(), feed)
    with pytest.raises(DecodeError, match="not snappy-compressed as configured"):
        decode(canal_decoder(large_message_compression="snappy"), feed)


# --- claim-check and handle-key-only ------------------------------------------------


def test_claim_checked_rows_are_read_from_the_configured_root(tmp_path):
    # Setup: TiCDC moved every message over 200 bytes to claim-check storage (lz4-compressed).
    # Expect: the decoder reads the originals from its root: same rows as without claim-check.
    store = tmp_path / "claims"
    store.mkdir()
    feed = workload(canal(content_compatible=True, compression="lz4", claim_check_dir=store, claim_check_over_bytes=200))
    assert any(b"claimCheckLocation" in _plain(m.value) for m in feed.messages)
    decoder = canal_decoder(large_message_compression="lz4", claim_check_root=f"file://{store}")
    reference = decode(canal_decoder(), workload(canal(content_compatible=True)))
    assert rows(decode(decoder, feed)) == rows(reference)


def _plain(value: bytes) -> bytes:
    import cramjam

    return bytes(cramjam.lz4.decompress(value))


def claim_message(location: str) -> bytes:
    body = {"id": 0, "database": "d", "table": "t", "pkNames": ["id"], "isDdl": False, "type": "INSERT",
            "mysqlType": {"id": "int"}, "data": [{"id": "1"}], "_tidb": {"commitTs": 5, "claimCheckLocation": location}}
    return json.dumps(body).encode()


def test_a_claim_check_location_outside_the_root_is_never_read(tmp_path):
    # Setup: a valid claim-check file outside the configured root, and messages pointing at
    # it by absolute path, by '..' and by another scheme.
    # Expect: only <root>/<base name> is ever opened; the outside file is not read.
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    original = claim_message("x").replace(b',"claimCheckLocation":"x"', b"")
    (outside / "secret.json").write_text(json.dumps({"key": None, "value": base64.b64encode(original).decode()}))
    decoder = canal_decoder(claim_check_root=str(root))
    for location in (f"file://{outside}/secret.json", f"{root}/../outside/secret.json", "s3://elsewhere/secret.json"):
        with pytest.raises(DecodeError, match=f"claim-check file '{root}/secret.json' does not exist"):
            decoder.decode(RawMessage("t", 0, 0, None, claim_message(location)))
    for location in ("", "..", "dir/"):
        with pytest.raises(DecodeError, match="names no file"):
            decoder.decode(RawMessage("t", 0, 0, None, claim_message(location or "/")))
    # The same file inside the root is read.
    (root / "secret.json").write_text((outside / "secret.json").read_text())
    (row,) = decoder.decode(RawMessage("t", 0, 0, None, claim_message(f"file://{outside}/secret.json")))
    assert row.after == (1,)


def test_corrupt_or_missing_claim_check_is_a_typed_error(tmp_path):
    (tmp_path / "bad.json").write_text("not json")
    decoder = canal_decoder(claim_check_root=str(tmp_path))
    with pytest.raises(DecodeError, match="is not a claim-check message"):
        decoder.decode(RawMessage("t", 0, 0, None, claim_message("s3://b/bad.json")))
    with pytest.raises(DecodeError, match="claim_check_root is not set"):
        canal_decoder().decode(RawMessage("t", 0, 0, None, claim_message("s3://b/bad.json")))


def test_handle_key_only_is_bad_input_never_a_partial_row():
    body = json.loads(claim_message("x"))
    body["_tidb"] = {"commitTs": 5, "onlyHandleKey": True}
    with pytest.raises(DecodeError, match="handle-key-only"):
        canal_decoder().decode(RawMessage("t", 0, 0, None, json.dumps(body).encode()))


def test_claim_check_raw_value(tmp_path):
    original = claim_message("x").replace(b',"claimCheckLocation":"x"', b"")
    (tmp_path / "raw.json").write_bytes(compress("snappy", original))
    decoder = canal_decoder(large_message_compression="snappy", claim_check_root=str(tmp_path), claim_check_raw_value=True)
    (row,) = decoder.decode(RawMessage("t", 0, 0, None, compress("snappy", claim_message("file:///raw.json"))))
    assert row.after == (1,)
