"""Builds TiCDC Open Protocol messages shaped as TiCDC's encoder shapes them.

For tests and the stream stand-in, from Simple-style table definitions:
batched key/value framing (8-byte big-endian lengths, a version header on
the key only), column objects with type code and flags, TEXT/BLOB base64,
binary strings Go-quoted, ENUM index / SET bitmask / BIT as numbers, each
value item compressed as configured, and optionally oversized rows written
to a claim-check folder (key/value of the whole message) and replaced by a
key-only row naming the file.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import struct
import uuid
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

from testbed.encoders.large_messages import compress
from testbed.tables import primary_key_columns
from ticdc_delta.schema_cache.open_protocol.decoder import (
    BATCH_VERSION,
    DDL,
    FLAG_BINARY,
    FLAG_HANDLE_KEY,
    FLAG_UNSIGNED,
    RESOLVED,
    ROW,
)

_CODES = {
    "tinyint": 1, "smallint": 2, "int": 3, "float": 4, "double": 5, "timestamp": 7, "bigint": 8, "mediumint": 9,
    "date": 10, "time": 11, "datetime": 12, "year": 13, "varchar": 15, "bit": 16, "json": 245, "decimal": 246,
    "enum": 247, "set": 248, "tinytext": 249, "mediumtext": 250, "longtext": 251, "text": 252, "char": 254,
    "binary": 254, "varbinary": 15, "tinyblob": 249, "mediumblob": 250, "longblob": 251, "blob": 252,
}
_TEXT_CODES = {249, 250, 251, 252}
_FLAG_NULLABLE = 64
# TiDB action types for the DDL kinds the stand-in emits.
_ACTIONS = {"CREATE": 3, "ERASE": 4, "ALTER": 5, "TRUNCATE": 11, "RENAME": 14}


def _item(data: bytes) -> bytes:
    return struct.pack(">Q", len(data)) + data


def go_quote(data: bytes) -> str:
    """A Go strconv.Quote body for arbitrary bytes (printable ASCII kept, the rest escaped)."""
    out = []
    for b in data:
        if b == 0x5C:
            out.append("\\\\")
        elif b == 0x22:
            out.append('\\"')
        elif 0x20 <= b < 0x7F:
            out.append(chr(b))
        else:
            out.append(f"\\x{b:02x}")
    return "".join(out)


def _time_text(value: dt.datetime, fsp: int) -> str:
    text = value.strftime("%Y-%m-%d %H:%M:%S")
    return text + "." + f"{value.microsecond:06d}"[:fsp] if fsp else text


class OpenProtocolWriter:
    def __init__(
        self,
        *,
        location: str = "UTC",
        compression: str = "none",
        max_batch_size: int = 16,
        claim_check_dir: Path | None = None,
        claim_check_over_bytes: int = 1_000_000,
        delete_only_handle_key_columns: bool = False,
    ) -> None:
        self._zone = ZoneInfo(location)
        # TiCDC's `delete-only-output-handle-key-columns`: a DELETE names its key columns alone.
        self._delete_keys_only = delete_only_handle_key_columns
        self._compression = compression
        self.max_batch_size = max_batch_size
        self._claim_check_dir = claim_check_dir
        self._claim_check_over = claim_check_over_bytes

    @staticmethod
    def frame(pairs: list[tuple[bytes, bytes]]) -> tuple[bytes, bytes]:
        """One Kafka message (key, value) holding `pairs` of key JSON and (compressed) value."""
        key = struct.pack(">Q", BATCH_VERSION) + b"".join(_item(k) for k, _ in pairs)
        value = b"".join(_item(v) for _, v in pairs)
        return key, value

    def _column(self, column: Mapping, value: object, key: set[str]) -> dict:
        data_type = column["dataType"]
        kind = str(data_type["mysqlType"])
        # TiDB gives numeric and temporal columns the binary charset too: the flag is
        # set for them, but only CHAR/VARCHAR with it hold binary strings.
        binary = data_type.get("charset") == "binary"
        code = _CODES[kind]
        flags = (FLAG_BINARY if binary else 0) | (FLAG_UNSIGNED if data_type.get("unsigned") else 0)
        flags |= _FLAG_NULLABLE if column.get("nullable", True) else 0
        out: dict = {"t": code}
        if column["name"] in key:
            out["h"] = True
            flags |= FLAG_HANDLE_KEY
        out["f"] = flags
        binary_string = kind in ("binary", "varbinary") or (binary and kind in ("char", "varchar"))
        out["v"] = self._value(data_type, kind, code, binary_string, value)
        return out

    def _value(self, data_type: Mapping, kind: str, code: int, binary: bool, value: object) -> object:
        if value is None:
            return None
        fsp = int(data_type.get("decimal") or 0)
        if code in _TEXT_CODES:
            raw = bytes(value) if isinstance(value, (bytes, bytearray)) else str(value).encode("utf-8")
            return base64.b64encode(raw).decode()
        if binary:
            return go_quote(bytes(value))
        if kind == "enum":
            return data_type["elements"].index(value) + 1
        if kind == "set":
            return sum(1 << data_type["elements"].index(n) for n in str(value).split(",") if n)
        if kind in ("bit", "tinyint", "smallint", "mediumint", "int", "bigint", "year"):
            return int(value)
        if kind in ("float", "double"):
            return float(value)
        if kind == "decimal":
            return str(Decimal(str(value)).quantize(Decimal(1).scaleb(-fsp)))
        if kind == "timestamp":
            return _time_text(value.astimezone(self._zone), fsp)
        if kind == "datetime" and isinstance(value, dt.datetime):
            return _time_text(value, fsp)
        return str(value)

    def row(self, schema: Mapping, kind: str, commit_ts: int, before: Mapping | None, after: Mapping | None) -> tuple[bytes, bytes]:
        """One (key JSON, compressed value) pair for a row change, ready to be framed."""
        key_columns = set(primary_key_columns(schema))

        def columns(row, only_key: bool = False):
            return {
                c["name"]: self._column(c, row.get(c["name"]), key_columns)
                for c in schema["columns"]
                if not only_key or c["name"] in key_columns
            }

        key = {"ts": commit_ts, "scm": schema["schema"], "tbl": schema["table"], "t": ROW}
        if kind == "DELETE":
            body = {"d": columns(before, only_key=self._delete_keys_only)}
        elif kind == "UPDATE":
            body = {"u": columns(after), "p": columns(before)}
        else:
            body = {"u": columns(after)}
        key_json = json.dumps(key).encode()
        value = compress(self._compression, json.dumps(body, ensure_ascii=False).encode("utf-8"))
        if self._claim_check_dir is not None and len(value) > self._claim_check_over:
            name = f"{uuid.uuid4()}.json"
            full_key, full_value = self.frame([(key_json, value)])
            stored = {"key": base64.b64encode(full_key).decode(), "value": base64.b64encode(full_value).decode()}
            (self._claim_check_dir / name).write_text(json.dumps(stored))
            image = after if after is not None else before
            slim = {"d" if kind == "DELETE" else "u": columns(image, only_key=True)}
            key_json = json.dumps({**key, "ohk": False, "ccl": f"file://{self._claim_check_dir}/{name}"}).encode()
            value = compress(self._compression, json.dumps(slim).encode())
        return key_json, value

    def ddl(self, kind: str, schema: Mapping, commit_ts: int, sql: str) -> tuple[bytes, bytes]:
        key = {"ts": commit_ts, "scm": schema["schema"], "tbl": schema["table"], "t": DDL}
        value = compress(self._compression, json.dumps({"q": sql, "t": _ACTIONS.get(kind, 5)}).encode())
        return self.frame([(json.dumps(key).encode(), value)])

    def resolved(self, commit_ts: int) -> tuple[bytes, bytes]:
        return self.frame([(json.dumps({"ts": commit_ts, "t": RESOLVED}).encode(), b"")])
