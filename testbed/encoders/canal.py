"""Builds TiCDC `canal-json` messages shaped as TiCDC's encoder shapes them.

For tests and the stream stand-in, from Simple-style table definitions.
Shapes follow pingcap/ticdc pkg/sink/codec/canal: every value a string (ENUM
index, SET bitmask, BIT integer, binary bytes as ISO-8859-1, TIMESTAMP wall
clock in the server's zone), `old` before `data`, `mysqlType` without lengths
unless content-compatible, DDL with only its statement, watermarks only with
the TiDB extension. Large messages: values compressed as configured, and
with a claim-check folder, messages over a size written there and replaced
by a key-only message naming the file.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import uuid
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

from testbed.encoders.large_messages import compress
from testbed.tables import primary_key_columns

_BINARY_NAMES = {"char": "binary", "varchar": "varbinary", "tinytext": "tinyblob", "text": "blob",
                 "mediumtext": "mediumblob", "longtext": "longblob"}


def _type_name(data_type: Mapping[str, object]) -> str:
    kind = str(data_type["mysqlType"])
    if data_type.get("charset") == "binary" and kind in _BINARY_NAMES:
        return _BINARY_NAMES[kind]
    return kind


def mysql_type(data_type: Mapping[str, object], content_compatible: bool) -> str:
    name = _type_name(data_type)
    kind = str(data_type["mysqlType"])
    unsigned = " unsigned" if data_type.get("unsigned") and kind not in ("bit", "year") else ""
    if not content_compatible:
        return name + unsigned
    if kind in ("enum", "set"):
        members = ",".join("'" + e.replace("'", "''") + "'" for e in data_type["elements"])
        return f"{kind}({members})"
    if kind == "decimal":
        return f"decimal({data_type.get('length') or 10},{data_type.get('decimal') or 0}){unsigned}"
    if kind in ("datetime", "timestamp", "time"):
        fsp = int(data_type.get("decimal") or 0)
        return f"{kind}({fsp})" if fsp else kind
    if data_type.get("length"):
        return f"{name}({data_type['length']}){unsigned}"
    return name + unsigned


def _time_text(value: dt.datetime, fsp: int) -> str:
    text = value.strftime("%Y-%m-%d %H:%M:%S")
    return text + "." + f"{value.microsecond:06d}"[:fsp] if fsp else text


def value_text(column: Mapping[str, object], value: object, zone: ZoneInfo) -> str | None:
    if value is None:
        return None
    data_type = column["dataType"]
    kind = str(data_type["mysqlType"])
    fsp = int(data_type.get("decimal") or 0)
    if kind == "timestamp":
        return _time_text(value.astimezone(zone), fsp)
    if kind == "datetime" and isinstance(value, dt.datetime):
        return _time_text(value, fsp)
    if kind == "enum":
        return str(data_type["elements"].index(value) + 1)
    if kind == "set":
        names = [n for n in str(value).split(",") if n]
        return str(sum(1 << data_type["elements"].index(n) for n in names))
    if kind == "decimal":
        return str(Decimal(str(value)).quantize(Decimal(1).scaleb(-fsp)))
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("latin-1")  # TiCDC: ISO-8859-1 characters of the bytes
    return str(value)


class CanalJsonWriter:
    def __init__(
        self,
        *,
        enable_tidb_extension: bool = True,
        content_compatible: bool = False,
        location: str = "UTC",
        compression: str = "none",
        claim_check_dir: Path | None = None,
        claim_check_over_bytes: int = 1_000_000,
        delete_only_handle_key_columns: bool = False,
    ) -> None:
        self.extension = enable_tidb_extension
        # TiCDC's `delete-only-output-handle-key-columns`: a DELETE's data and types name the key columns
        # alone, and nothing in the message says so.
        self._delete_keys_only = delete_only_handle_key_columns
        self._compatible = content_compatible
        self._zone = ZoneInfo(location)
        self._compression = compression
        self._claim_check_dir = claim_check_dir
        self._claim_check_over = claim_check_over_bytes

    def _encode(self, message: dict) -> bytes:
        return compress(self._compression, json.dumps(message, ensure_ascii=False).encode("utf-8"))

    def _message(self, schema: Mapping, kind: str, commit_ts: int, columns: list, data, old) -> dict:
        message = {
            "id": 0,
            "database": schema["schema"],
            "table": schema["table"],
            "pkNames": primary_key_columns(schema),
            "isDdl": False,
            "type": kind,
            "es": commit_ts >> 18,
            "ts": commit_ts >> 18,
            "sql": "",
            "sqlType": {c["name"]: 12 for c in columns},
            "mysqlType": {c["name"]: mysql_type(c["dataType"], self._compatible) for c in columns},
            "old": old,
            "data": data,
        }
        if self.extension:
            message["_tidb"] = {"commitTs": commit_ts}
        return message

    def row(self, schema: Mapping, kind: str, commit_ts: int, before: Mapping | None, after: Mapping | None) -> bytes:
        columns = list(schema["columns"])

        def image(row):
            return {c["name"]: value_text(c, row.get(c["name"]), self._zone) for c in columns}

        if kind == "DELETE":
            if self._delete_keys_only:
                keys = set(primary_key_columns(schema))
                columns = [c for c in columns if c["name"] in keys]
            data, old = [image(before)], None
        elif kind == "UPDATE":
            data, old = [image(after)], [image(before)]
            if self._compatible:  # only the changed columns
                old = [{k: v for k, v in old[0].items() if data[0].get(k) != v}]
        else:
            data, old = [image(after)], None
        value = self._encode(self._message(schema, kind, commit_ts, columns, data, old))
        if self._claim_check_dir is not None and len(value) > self._claim_check_over:
            return self._claim_check(schema, kind, commit_ts, columns, data, old, value)
        return value

    def _claim_check(self, schema, kind, commit_ts, columns, data, old, value: bytes) -> bytes:
        name = f"{uuid.uuid4()}.json"
        stored = {"key": None, "value": base64.b64encode(value).decode()}
        (self._claim_check_dir / name).write_text(json.dumps(stored))
        keys = set(primary_key_columns(schema))
        key_columns = [c for c in columns if c["name"] in keys]
        only_keys = [{k: v for k, v in data[0].items() if k in keys}]
        message = self._message(schema, kind, commit_ts, key_columns, only_keys, None)
        message["_tidb"]["claimCheckLocation"] = f"file://{self._claim_check_dir}/{name}"
        return self._encode(message)

    def ddl(self, kind: str, schema: Mapping, commit_ts: int, sql: str) -> bytes:
        message = {
            "id": 0, "database": schema["schema"], "table": schema["table"], "pkNames": None, "isDdl": True,
            "type": kind, "es": commit_ts >> 18, "ts": commit_ts >> 18, "sql": sql, "sqlType": None,
            "mysqlType": None, "data": None, "old": None,
        }
        if self.extension:
            message["_tidb"] = {"commitTs": commit_ts}
        return self._encode(message)

    def watermark(self, commit_ts: int) -> bytes | None:
        if not self.extension:
            return None
        message = {
            "id": 0, "database": "", "table": "", "pkNames": None, "isDdl": False, "type": "TIDB_WATERMARK",
            "es": commit_ts >> 18, "ts": commit_ts >> 18, "sql": "", "sqlType": None, "mysqlType": None,
            "data": None, "old": None, "_tidb": {"watermarkTs": commit_ts},
        }
        return self._encode(message)
