"""Builds TiCDC `avro` protocol messages shaped as TiCDC's encoder shapes them.

For tests and the stream stand-in (`testbed.changefeed`): schemas are
generated from a table definition the way pingcap/ticdc
pkg/sink/codec/avro/arvo.go generates them (sanitized names, namespace
`default.<database>`, `connect.parameters.tidb_type`, nullable columns as
["null", T]), registered under `<topic>-key` / `<topic>-value` with
confluent-kafka's SchemaRegistryClient, and values are Confluent-framed.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import re
import struct
from collections.abc import Mapping
from decimal import Context, Decimal
from zoneinfo import ZoneInfo

import fastavro
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

_INVALID = re.compile(r"[^A-Za-z0-9_]")
_SMALL_INTEGERS = {"tinyint", "smallint", "mediumint"}
_TEXT = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext"}
_BLOB = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
_STRINGS = {"date": "DATE", "datetime": "DATETIME", "timestamp": "TIMESTAMP", "time": "TIME", "json": "JSON"}
_UINT64 = 1 << 64


def sanitize(name: str) -> str:
    """TiCDC's SanitizeName: invalid characters become '_', a leading digit gets '_' before it."""
    cleaned = _INVALID.sub("_", name)
    return f"_{cleaned}" if cleaned[:1].isdigit() else cleaned


def _column_type(column: Mapping[str, object], options: dict) -> object:
    data_type = column["dataType"]
    kind = str(data_type["mysqlType"])
    unsigned = bool(data_type.get("unsigned"))
    binary = data_type.get("charset") == "binary"
    params: dict = {}
    extra: dict = {}
    if kind in _SMALL_INTEGERS or kind == "int":
        params["tidb_type"] = "INT UNSIGNED" if unsigned else "INT"
        avro = "long" if kind == "int" and unsigned else "int"
    elif kind == "bigint":
        params["tidb_type"] = "BIGINT UNSIGNED" if unsigned else "BIGINT"
        avro = "string" if unsigned and options["bigint_mode"] == "string" else "long"
    elif kind in ("float", "double"):
        # The spec's type table: FLOAT -> FLOAT, double (TiCDC's source writes an Avro float; the spec wins).
        params["tidb_type"], avro = kind.upper(), "double"
    elif kind == "decimal":
        params["tidb_type"] = "DECIMAL"
        if options["decimal_mode"] == "string":
            avro = "string"
        else:
            avro = "bytes"
            extra = {"logicalType": "decimal", "precision": int(data_type.get("length") or 10),
                     "scale": int(data_type.get("decimal") or 0)}
    elif kind in _TEXT:
        params["tidb_type"], avro = ("BLOB", "bytes") if binary else ("TEXT", "string")
    elif kind in _BLOB:
        params["tidb_type"], avro = "BLOB", "bytes"
    elif kind in _STRINGS:
        params["tidb_type"], avro = _STRINGS[kind], "string"
    elif kind == "year":
        params["tidb_type"], avro = "YEAR", "int"
    elif kind == "bit":
        params.update(tidb_type="BIT", length=str(data_type.get("length") or 1))
        avro = "bytes"
    elif kind in ("enum", "set"):
        allowed = ",".join(e.replace(",", "\\,") for e in data_type["elements"])
        params.update(tidb_type=kind.upper(), allowed=allowed)
        avro = "string"
    else:
        raise ValueError(f"no Avro mapping for {kind!r}")
    return {"type": avro, "connect.parameters": params, **extra}


def _field(column: Mapping[str, object], options: dict) -> dict:
    avro_type = _column_type(column, options)
    if column.get("nullable", True):
        return {"name": sanitize(str(column["name"])), "type": ["null", avro_type], "default": None}
    return {"name": sanitize(str(column["name"])), "type": avro_type}


_EXTENSION = [
    {"name": "_tidb_op", "type": "string"},
    {"name": "_tidb_commit_ts", "type": "long"},
    {"name": "_tidb_commit_physical_time", "type": "long"},
]


def _record(schema: Mapping[str, object], fields: list[dict]) -> dict:
    return {
        "type": "record",
        "name": sanitize(str(schema["table"])),
        "namespace": "default." + sanitize(str(schema["schema"])),
        "fields": fields,
    }


def _primary_key(schema: Mapping[str, object]) -> list[str]:
    """The Key's columns: the spec's "只包含主键或唯一索引列" (the primary key, else a NOT NULL unique index)."""
    for index in schema["indexes"]:
        if index.get("primary"):
            return list(index["columns"])
    for index in schema["indexes"]:
        if index.get("unique") and not index.get("nullable"):
            return list(index["columns"])
    return []


class TiCDCAvroWriter:
    """Encodes row changes of Simple-style table definitions as TiCDC's avro protocol."""

    def __init__(
        self,
        registry_url: str,
        *,
        enable_tidb_extension: bool = False,
        decimal_mode: str = "precise",
        bigint_mode: str = "long",
        timestamp_zone: str = "UTC",
        registry_config: Mapping[str, object] | None = None,
        enable_watermark: bool = False,
    ) -> None:
        # registry_config: more of the client's settings (basic.auth.user.info, ssl.ca.location, ...)
        # enable_watermark: TiCDC's testing option avro-enable-watermark (with the extension): checkpoints sent
        self._client = SchemaRegistryClient({**(registry_config or {}), "url": registry_url})
        self.enable_watermark = enable_watermark and enable_tidb_extension
        self._options = {"decimal_mode": decimal_mode, "bigint_mode": bigint_mode}
        self._extension = enable_tidb_extension
        self._zone = ZoneInfo(timestamp_zone)
        self._registered: dict[tuple[str, str], tuple[int, object]] = {}

    def schemas(self, schema: Mapping[str, object]) -> tuple[dict, dict]:
        """(key schema, value schema) TiCDC generates for a table definition."""
        columns = {c["name"]: c for c in schema["columns"]}
        key = _record(schema, [_field(columns[k], self._options) for k in _primary_key(schema)])
        fields = [_field(c, self._options) for c in schema["columns"]]
        value = _record(schema, fields + (list(_EXTENSION) if self._extension else []))
        return key, value

    def checkpoint(self, commit_ts: int) -> bytes:
        """avro-enable-watermark's checkpoint: byte 2, then the commitTs (big-endian uint64)."""
        return struct.pack(">BQ", 2, commit_ts)

    def _register(self, subject: str, avro_schema: dict) -> tuple[int, object]:
        text = json.dumps(avro_schema, separators=(",", ":"))
        cached = self._registered.get((subject, text))
        if cached is None:
            schema_id = self._client.register_schema(subject, Schema(text, "AVRO"))
            cached = self._registered[(subject, text)] = (schema_id, fastavro.parse_schema(avro_schema))
        return cached

    def _frame(self, subject: str, avro_schema: dict, record: dict) -> bytes:
        schema_id, parsed = self._register(subject, avro_schema)
        out = io.BytesIO()
        out.write(struct.pack(">bI", 0, schema_id))
        fastavro.schemaless_writer(out, parsed, record)
        return out.getvalue()

    def _values(self, schema: Mapping[str, object], row: Mapping[str, object]) -> dict:
        return {sanitize(c["name"]): self._value(c, row.get(c["name"])) for c in schema["columns"]}

    def _value(self, column: Mapping[str, object], value: object) -> object:
        if value is None:
            return None
        data_type = column["dataType"]
        kind = data_type["mysqlType"]
        fsp = int(data_type.get("decimal") or 0)
        if kind == "bigint" and data_type.get("unsigned"):
            if self._options["bigint_mode"] == "string":
                return str(value)
            return int(value) - (_UINT64 if int(value) >= 1 << 63 else 0)  # TiCDC's int64(uint64) wrap
        if kind == "decimal":
            # TiDB decimals reach 65 digits, beyond the default context's 28.
            exact = Context(prec=80).quantize(Decimal(str(value)), Decimal(1).scaleb(-fsp))
            return str(exact) if self._options["decimal_mode"] == "string" else exact
        if kind == "timestamp":
            return _time_text(value.astimezone(self._zone), fsp)
        if kind == "datetime" and isinstance(value, dt.datetime):
            return _time_text(value, fsp)
        if kind == "bit":
            width = max(1, (int(data_type.get("length") or 1) + 7) // 8)
            return int(value).to_bytes(width, "big")
        if kind in ("float", "double"):
            return float(value)
        if isinstance(value, (bytes, bytearray)):
            return bytes(value)
        if kind in _SMALL_INTEGERS or kind in ("int", "bigint", "year"):
            return int(value)
        return value if isinstance(value, str) else str(value)

    def row(
        self,
        topic: str,
        schema: Mapping[str, object],
        kind: str,
        commit_ts: int,
        before: Mapping[str, object] | None,
        after: Mapping[str, object] | None,
    ) -> tuple[bytes | None, bytes | None]:
        """(Kafka key, Kafka value) of one row change: DELETE is a tombstone."""
        key_schema, value_schema = self.schemas(schema)
        subject = topic.replace(".", "_")  # TiCDC's subject for topic a.b is a_b-value
        image = after if after is not None else before
        key = None
        if key_schema["fields"]:
            key_values = {sanitize(k): self._value(_column(schema, k), image[k]) for k in _primary_key(schema)}
            key = self._frame(f"{subject}-key", key_schema, key_values)
        if kind == "DELETE":
            return key, None
        record = self._values(schema, after)
        if self._extension:
            record.update(
                _tidb_op="c" if kind == "INSERT" else "u",
                _tidb_commit_ts=commit_ts,
                _tidb_commit_physical_time=commit_ts >> 18,
            )
        return key, self._frame(f"{subject}-value", value_schema, record)


def _column(schema: Mapping[str, object], name: str) -> Mapping[str, object]:
    return next(c for c in schema["columns"] if c["name"] == name)


def _time_text(value: dt.datetime, fsp: int) -> str:
    text = value.strftime("%Y-%m-%d %H:%M:%S")
    return text + "." + f"{value.microsecond:06d}"[:fsp] if fsp else text
