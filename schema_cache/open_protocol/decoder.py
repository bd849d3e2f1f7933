"""TiCDC Open Protocol decoder (encoder: pingcap/ticdc pkg/sink/codec/open).

Framing: the Kafka key is an 8-byte big-endian version (1) then items of
8-byte length + key JSON; the value holds as many items of 8-byte length +
value bytes (each compressed as configured); the i-th key goes with the i-th
value, up to max-batch-size rows per message. Key `t`: 1 row, 2 DDL, 3
resolved (a watermark; sent to every partition). A row value is
`{"u": cols}` (insert), `{"u": cols, "p": old cols}` (update) or
`{"d": cols}` (delete); each column is `{"t": MySQL type code, "h": handle
key, "f": flags, "v": value}`. DDL values carry only `{"q": statement, "t":
TiDB action type}`: the table's next rows show the new structure.

Values: TEXT/BLOB (codes 249-252) base64; binary CHAR/VARCHAR a Go-quoted
string body; ENUM index and SET bitmask as numbers; BIT a number; DECIMAL and
temporal values as text (TIMESTAMP in the TiCDC server's zone).
"""

from __future__ import annotations

import base64
import logging
import struct
from collections.abc import Iterator, Mapping

import orjson

from ticdc_delta.exceptions import InvalidMessage
from ticdc_delta.schema_cache import events, types
from ticdc_delta.schema_cache.codec import ColumnCodec, Converter, RowCodec, ValueContext, text_value
from ticdc_delta.schema_cache.ddl_text import renamed_from
from ticdc_delta.schema_cache.decoder import SelfDescribing, read_commit_ts, require_handle_key
from ticdc_delta.schema_cache.large_messages import handle_key_only
from ticdc_delta.schema_cache.open_protocol.options import OpenProtocolOptions
from ticdc_delta.schema_cache.types import DEFAULT_OPTIONS, TypeOptions

log = logging.getLogger(__name__)

BATCH_VERSION = 1
ROW, DDL, RESOLVED = 1, 2, 3
FLAG_BINARY, FLAG_HANDLE_KEY, FLAG_UNSIGNED = 1, 2, 128

# MySQL type codes -> TiDB type names (TEXT and BLOB share codes: the binary flag tells).
_TYPE_CODES = {
    1: "tinyint", 2: "smallint", 3: "int", 4: "float", 5: "double", 7: "timestamp", 8: "bigint",
    9: "mediumint", 10: "date", 11: "time", 12: "datetime", 13: "year", 14: "date", 15: "varchar",
    16: "bit", 225: "vector", 245: "json", 246: "decimal", 247: "enum", 248: "set", 249: "tinytext",
    250: "mediumtext", 251: "longtext", 252: "text", 253: "varchar", 254: "char", 255: "geometry",
}
_BINARY_NAMES = {"varchar": "varbinary", "char": "binary", "tinytext": "tinyblob", "text": "blob",
                 "mediumtext": "mediumblob", "longtext": "longblob"}
_BASE64_CODES = {249, 250, 251, 252}

# TiDB model.ActionType -> schema change kind (other table DDL: ALTER).
_ACTIONS = {
    3: events.SchemaChangeKind.CREATE, 60: events.SchemaChangeKind.CREATE, 4: events.SchemaChangeKind.DROP,
    11: events.SchemaChangeKind.TRUNCATE, 14: events.SchemaChangeKind.RENAME, 47: events.SchemaChangeKind.RENAME,
    7: events.SchemaChangeKind.INDEX, 8: events.SchemaChangeKind.INDEX, 32: events.SchemaChangeKind.INDEX,
    33: events.SchemaChangeKind.INDEX, 41: events.SchemaChangeKind.INDEX, 73: events.SchemaChangeKind.INDEX,
    21: events.SchemaChangeKind.OTHER, 24: events.SchemaChangeKind.OTHER,  # views
}


def split_items(data: bytes) -> list[bytes]:
    """The length-prefixed items of a key or value (after the key's version)."""
    items, at = [], 0
    while at < len(data):
        if at + 8 > len(data):
            raise InvalidMessage("truncated item length")
        (length,) = struct.unpack_from(">Q", data, at)
        at += 8
        if at + length > len(data):
            raise InvalidMessage(f"item of {length} bytes runs past the end")
        items.append(data[at : at + length])
        at += length
    return items


_SIMPLE_ESCAPES = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92, '"': 34, "'": 39}


def go_unquote(body: str) -> bytes:
    """The bytes of a Go strconv.Quote body (\\xNN is a raw byte, \\uXXXX a UTF-8 rune)."""
    out = bytearray()
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out += ch.encode("utf-8")
            i += 1
            continue
        escape = body[i + 1]
        if escape in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[escape])
            i += 2
        elif escape == "x":
            out.append(int(body[i + 2 : i + 4], 16))
            i += 4
        elif escape in "uU":
            width = 4 if escape == "u" else 8
            out += chr(int(body[i + 2 : i + 2 + width], 16)).encode("utf-8")
            i += 2 + width
        elif escape in "01234567":
            out.append(int(body[i + 1 : i + 4], 8))
            i += 4
        else:
            raise InvalidMessage(f"bad escape \\{escape} in a quoted value")
    return bytes(out)


# Codec hints: how a column's value is written beside its type.
_BASE64, _QUOTED = "base64", "go-quoted"


def open_value(column: ColumnCodec, context: ValueContext) -> Converter:
    """TEXT/BLOB base64 (`hint` base64), binary CHAR/VARCHAR Go-quoted, the rest TiCDC's text form."""
    convert = text_value(column, context)
    if column.hint == _BASE64:
        if types.is_binary(column.tidb):
            return lambda v: convert(base64.b64decode(str(v)))
        return lambda v: convert(base64.b64decode(str(v)).decode("utf-8"))
    if column.hint == _QUOTED:
        return lambda v: convert(go_unquote(str(v)))
    return convert


class OpenProtocolDecoder(SelfDescribing):
    ordering = events.Ordering.COMMIT_TS  # resolved events are sent to every partition
    inserts_are_new = False  # without old values an update comes as `u` alone, read as an INSERT

    def __init__(self, options: OpenProtocolOptions = OpenProtocolOptions(), types: TypeOptions = DEFAULT_OPTIONS) -> None:
        self._context = ValueContext(types, options.timestamp_zone)
        self._large = options.large_messages()
        self._structures: dict[tuple, RowCodec] = {}

    # --- decoding ---------------------------------------------------------------

    @staticmethod
    def _pairs(key: bytes | None, value: bytes | None) -> Iterator[tuple[dict, bytes]]:
        if not key or len(key) < 8 or struct.unpack_from(">Q", key)[0] != BATCH_VERSION:
            raise InvalidMessage("not an Open Protocol message (the key lacks batch version 1)")
        keys = split_items(key[8:])
        values = split_items(value or b"")
        if len(keys) != len(values):
            raise InvalidMessage(f"{len(keys)} keys but {len(values)} values in one batch")
        for key_item, value_item in zip(keys, values, strict=True):
            yield orjson.loads(key_item), value_item

    def _decode(self, message: events.RawMessage) -> list[events.Event]:
        decoded: list[events.Event] = []
        for key, value in self._pairs(message.key, message.value):
            kind = key.get("t")
            if kind == RESOLVED:
                decoded.append(events.Watermark(read_commit_ts(key["ts"]), message.position))
            elif kind == DDL:
                decoded.extend(self._schema_change(message, key, orjson.loads(self._large.value(value))))
            elif kind == ROW:
                decoded.append(self._row_change(message, key, value))
            else:
                raise InvalidMessage(f"unknown Open Protocol message type {kind!r}")
        return decoded

    def _row_change(self, message: events.RawMessage, key: Mapping, value: bytes) -> events.RowChange:
        location = key.get("ccl")
        if location:
            stored_key, stored_value = self._large.claimed(location)
            (key, value), *_ = self._pairs(stored_key, stored_value)
        elif key.get("ohk"):
            raise handle_key_only()
        body = orjson.loads(self._large.value(value))
        table = events.TableName(str(key["scm"]), str(key["tbl"]))
        commit_ts = read_commit_ts(key["ts"])
        if "d" in body:
            codec = self._structure(table, body["d"])
            require_handle_key(codec.schema)
            before = codec.key_row(_values(body["d"]))
            return events.RowChange(table, commit_ts, events.Op.DELETE, before, None, codec.schema, message.position)
        codec = self._structure(table, body["u"])
        require_handle_key(codec.schema)
        after = codec.row(_values(body["u"]))
        if "p" in body:
            # `p` may hold only the changed columns (only-output-updated-columns).
            before = codec.key_row(_values({**body["u"], **body["p"]}))
            return events.RowChange(table, commit_ts, events.Op.UPDATE, before, after, codec.schema, message.position)
        return events.RowChange(table, commit_ts, events.Op.INSERT, None, after, codec.schema, message.position)

    def _structure(self, table: events.TableName, columns: Mapping[str, Mapping]) -> RowCodec:
        signature = (table, tuple((n, c["t"], int(c.get("f") or 0)) for n, c in columns.items()))
        cached = self._structures.get(signature)
        if cached is None:
            codecs, key = [], []
            for name, column in columns.items():
                code, flags = int(column["t"]), int(column.get("f") or 0)
                tidb = _tidb_type(name, code, flags)
                hint = _BASE64 if code in _BASE64_CODES else _QUOTED if types.is_binary(tidb) else ""
                codecs.append(ColumnCodec(name, tidb, open_value, hint=hint))
                if column.get("h") or flags & FLAG_HANDLE_KEY:
                    key.append(name)
            cached = self._structures[signature] = RowCodec.build(table, codecs, key, self._context)
        return cached

    def _schema_change(self, message: events.RawMessage, key: Mapping, value: Mapping) -> list[events.Event]:
        statement = str(value.get("q") or "")
        if not key.get("tbl"):
            log.warning("ignoring database-level DDL at %s: %s", message.position, statement)
            return []
        kind = _ACTIONS.get(int(value.get("t") or 0), events.SchemaChangeKind.ALTER)
        table = events.TableName(str(key["scm"]), str(key["tbl"]))
        previous = renamed_from(statement, table.database, table) if kind is events.SchemaChangeKind.RENAME else None
        commit_ts = read_commit_ts(key["ts"])
        return [events.SchemaChange(table, commit_ts, kind, None, message.position, statement, previous_name=previous)]


def _tidb_type(name: str, code: int, flags: int) -> types.TiDBType:
    base = _TYPE_CODES.get(code)
    if base is None:
        raise InvalidMessage(f"column {name!r}: unsupported type code {code}")
    if flags & FLAG_BINARY and base in _BINARY_NAMES:
        base = _BINARY_NAMES[base]
    if base in ("enum", "set"):
        return types.TiDBType("varchar")  # members are not carried: the index / bitmask stays, as text
    if base == "decimal":
        return types.TiDBType("decimal", length=types.MAX_SPARK_DECIMAL_PRECISION + 1)  # precision not carried
    if base == "bit":
        return types.TiDBType("bit", length=64)  # width not carried
    return types.TiDBType(base, unsigned=bool(flags & FLAG_UNSIGNED))



def _values(columns: Mapping[str, Mapping]) -> dict[str, object]:
    return {name: (column or {}).get("v") for name, column in columns.items()}


def decoder_for(options: OpenProtocolOptions, types: TypeOptions = DEFAULT_OPTIONS) -> OpenProtocolDecoder:
    """The protocol's decoder (`schema_cache.protocols.create_decoder`)."""
    return OpenProtocolDecoder(options, types)
