"""Builds Simple protocol messages (JSON or Avro) shaped as TiCDC's encoder shapes them.

For the demo, the tests and the benchmark: synthetic streams with a known
answer. The shapes follow pingcap/ticdc pkg/sink/codec/simple/message.go:
every value is a string except TIMESTAMP ({location, value}); binary values
are base64; ENUM is its 1-based index and SET its bitmask (the caller passes
them as such).
"""

from __future__ import annotations

import base64
import json
import time
from typing import Mapping, Sequence

from schema_cache.simple import avro

_BINARY_CHARSET = {"charset": "binary", "collate": "binary"}
_TEXT_CHARSET = {"charset": "utf8mb4", "collate": "utf8mb4_bin"}
_TEXT_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json"}


def column(
    name: str,
    mysql_type: str,
    *,
    nullable: bool = True,
    default: object = None,
    unsigned: bool = False,
    length: int | None = None,
    decimal: int | None = None,
    elements: Sequence[str] | None = None,
    binary: bool = False,
) -> dict:
    """A Simple `columns[]` entry."""
    data_type: dict = {"mysqlType": mysql_type}
    text = mysql_type in _TEXT_TYPES and not binary
    data_type.update(_TEXT_CHARSET if text else _BINARY_CHARSET)
    if length is not None:
        data_type["length"] = length
    if decimal:
        data_type["decimal"] = decimal
    if elements:
        data_type["elements"] = list(elements)
    if unsigned:
        data_type["unsigned"] = True
    return {"name": name, "dataType": data_type, "nullable": nullable, "default": default}


def table_schema(
    database: str,
    table: str,
    *,
    table_id: int,
    version: int,
    columns: Sequence[dict],
    primary_key: Sequence[str] = (),
    unique_keys: Sequence[Sequence[str]] = (),
) -> dict:
    """A Simple TableSchema object (JSON naming: the database is `schema`)."""
    by_name = {c["name"]: c for c in columns}
    indexes = []
    if primary_key:
        indexes.append(
            {"name": "primary", "unique": True, "primary": True, "nullable": False, "columns": list(primary_key)}
        )
    for n, key in enumerate(unique_keys):
        indexes.append(
            {
                "name": f"uk_{n}",
                "unique": True,
                "primary": False,
                "nullable": any(by_name[c]["nullable"] for c in key),
                "columns": list(key),
            }
        )
    return {
        "schema": database,
        "table": table,
        "tableID": table_id,
        "version": version,
        "columns": list(columns),
        "indexes": indexes,
    }


def _wire_value(value: object) -> object:
    if value is None or isinstance(value, (str, dict)):
        return value
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return str(value)


def _wire_row(row: Mapping[str, object]) -> dict:
    # TiCDC emits map keys sorted (Go map marshalling); kept for realism.
    return {name: _wire_value(row[name]) for name in sorted(row)}


def timestamp(value: str, location: str = "UTC") -> dict:
    """A TIMESTAMP value: wall-clock `value` in `location`."""
    return {"location": location, "value": value}


class SimpleJsonWriter:
    """Encodes events of one changefeed as Simple JSON message values."""

    def __init__(self, build_ts_ms: int | None = None) -> None:
        self._build_ts = build_ts_ms if build_ts_ms is not None else int(time.time() * 1000)

    def _encode(self, message: dict) -> bytes:
        return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def watermark(self, commit_ts: int) -> bytes:
        return self._encode({"version": 1, "type": "WATERMARK", "commitTs": commit_ts, "buildTs": self._build_ts})

    def bootstrap(self, schema: dict) -> bytes:
        return self._encode(
            {"version": 1, "type": "BOOTSTRAP", "commitTs": 0, "buildTs": self._build_ts, "tableSchema": schema}
        )

    def ddl(self, kind: str, schema: dict | None, commit_ts: int, sql: str) -> bytes:
        message = {"version": 1, "type": kind, "sql": sql, "commitTs": commit_ts, "buildTs": self._build_ts}
        if schema is not None:
            message["tableSchema"] = schema
        return self._encode(message)

    def _dml(self, kind: str, schema: dict, commit_ts: int, data=None, old=None) -> bytes:
        message = {
            "version": 1,
            "database": schema["schema"],
            "table": schema["table"],
            "tableID": schema["tableID"],
            "type": kind,
            "commitTs": commit_ts,
            "buildTs": self._build_ts,
            "schemaVersion": schema["version"],
        }
        if data is not None:
            message["data"] = _wire_row(data)
        if old is not None:
            message["old"] = _wire_row(old)
        return self._encode(message)

    def insert(self, schema: dict, commit_ts: int, row: Mapping[str, object]) -> bytes:
        return self._dml("INSERT", schema, commit_ts, data=row)

    def update(self, schema: dict, commit_ts: int, old: Mapping[str, object], new: Mapping[str, object]) -> bytes:
        return self._dml("UPDATE", schema, commit_ts, data=new, old=old)

    def delete(self, schema: dict, commit_ts: int, old: Mapping[str, object]) -> bytes:
        return self._dml("DELETE", schema, commit_ts, old=old)


_AVRO_INTEGERS = {"tinyint", "smallint", "mediumint", "int", "bigint", "year", "enum", "set"}
_AVRO_BYTES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}


def _avro_value(data_type: Mapping[str, object], value: object) -> object:
    """A row value as TiCDC's Avro marshaller writes it (tuple: the union branch)."""
    kind = data_type["mysqlType"]
    if value is None:
        return None
    if kind in _AVRO_INTEGERS:
        if kind == "bigint" and data_type.get("unsigned"):
            return avro.unsigned_bigint(int(value))
        return ("long", int(value))
    if kind in ("float", "double"):
        return (kind, float(value))
    if kind == "timestamp":
        return avro.timestamp_value(value["location"], value["value"])
    if isinstance(value, (bytes, bytearray)) or kind in _AVRO_BYTES:
        return ("bytes", bytes(value))
    return ("string", str(value))


def _avro_table_schema(schema: Mapping[str, object]) -> dict:
    columns = []
    for column in schema["columns"]:
        data_type = column["dataType"]
        columns.append(
            {
                "name": column["name"],
                "dataType": {
                    "mysqlType": data_type["mysqlType"],
                    "charset": data_type["charset"],
                    "collate": data_type["collate"],
                    "length": int(data_type.get("length") or 0),
                    "decimal": data_type.get("decimal"),
                    "elements": data_type.get("elements"),
                    "unsigned": data_type.get("unsigned"),
                    "zerofill": data_type.get("zerofill"),
                },
                "nullable": column["nullable"],
                "default": None if column.get("default") is None else str(column["default"]),
            }
        )
    return {
        "database": schema["schema"],
        "table": schema["table"],
        "tableID": schema["tableID"],
        "version": schema["version"],
        "columns": columns,
        "indexes": [dict(index) for index in schema["indexes"]],
    }


class SimpleAvroWriter(SimpleJsonWriter):
    """The same messages in the Simple protocol's Avro encoding."""

    def _encode(self, message: dict) -> bytes:
        kind = message["type"]
        if kind == "WATERMARK":
            return avro.write("WATERMARK", {"version": 1, "commitTs": message["commitTs"], "buildTs": self._build_ts})
        if kind == "BOOTSTRAP":
            payload = {"version": 1, "buildTs": self._build_ts, "tableSchema": _avro_table_schema(message["tableSchema"])}
            return avro.write("BOOTSTRAP", payload)
        schema = message.get("tableSchema")
        return avro.write(
            "DDL",
            {
                "version": 1,
                "type": kind,
                "sql": message["sql"],
                "commitTs": message["commitTs"],
                "buildTs": self._build_ts,
                "tableSchema": None if schema is None else _avro_table_schema(schema),
                "preTableSchema": None,
            },
        )

    def _dml(self, kind: str, schema: dict, commit_ts: int, data=None, old=None) -> bytes:
        types = {c["name"]: c["dataType"] for c in schema["columns"]}

        def row(values):
            if values is None:
                return None
            return {name: _avro_value(types[name], v) for name, v in sorted(values.items())}

        return avro.write(
            "DML",
            {
                "version": 1,
                "database": schema["schema"],
                "table": schema["table"],
                "tableID": schema["tableID"],
                "type": kind,
                "commitTs": commit_ts,
                "buildTs": self._build_ts,
                "schemaVersion": schema["version"],
                "claimCheckLocation": None,
                "handleKeyOnly": None,
                "checksum": None,
                "data": row(data),
                "old": row(old),
            },
        )
