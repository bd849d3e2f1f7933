"""Builds Simple protocol messages (JSON or Avro) shaped as TiCDC's encoder shapes them.

For the demo, the tests and the benchmark: synthetic streams with a known
answer. The shapes follow pingcap/ticdc pkg/sink/codec/simple/message.go:
every value is a string except TIMESTAMP ({location, value}); binary values
are base64; ENUM is its 1-based index and SET its bitmask (the caller passes
them as such).
"""

from __future__ import annotations

import base64
import io
import json
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

import fastavro

from testbed.tables import timestamp  # noqa: F401 - re-exported: a Simple TIMESTAMP value
from ticdc_delta.schema_cache.simple import avro


def _wire_value(value: object) -> object:
    if value is None or isinstance(value, (str, dict)):
        return value
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return str(value)


def _wire_row(row: Mapping[str, object]) -> dict:
    # TiCDC emits map keys sorted (Go map marshalling); kept for realism.
    return {name: _wire_value(row[name]) for name in sorted(row)}


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


# --- the Avro encoding ---------------------------------------------------------------

_AVRO_MESSAGE = fastavro.parse_schema(avro.MESSAGE_SCHEMA)
_ref = avro.qualified

def avro_message(kind: str, payload: Mapping[str, object]) -> bytes:
    """Encode an Avro-native payload as a Message of `kind` (WATERMARK/BOOTSTRAP/DDL/DML)."""
    record = {"WATERMARK": "Watermark", "BOOTSTRAP": "Bootstrap", "DDL": "DDL", "DML": "DML"}[kind]
    out = io.BytesIO()
    fastavro.schemaless_writer(
        out, _AVRO_MESSAGE, (_ref("Message"), {"type": kind, "payload": (_ref(record), dict(payload))})
    )
    return out.getvalue()


def unsigned_bigint(value: int) -> tuple[str, dict]:
    """A BIGINT UNSIGNED row value as TiCDC writes it (two's complement in a long)."""
    return (_ref("UnsignedBigint"), {"value": value - (1 << 64) if value >= 1 << 63 else value})


def timestamp_value(location: str, value: str) -> tuple[str, dict]:
    return (_ref("Timestamp"), {"location": location, "value": value})


_AVRO_INTEGERS = {"tinyint", "smallint", "mediumint", "int", "bigint", "year", "enum", "set"}
_AVRO_BYTES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}


def _avro_value(data_type: Mapping[str, object], value: object) -> object:
    """A row value as TiCDC's Avro marshaller writes it (tuple: the union branch)."""
    kind = data_type["mysqlType"]
    if value is None:
        return None
    if kind in _AVRO_INTEGERS:
        if kind == "bigint" and data_type.get("unsigned"):
            return unsigned_bigint(int(value))
        return ("long", int(value))
    if kind in ("float", "double"):
        return (kind, float(value))
    if kind == "timestamp":
        return timestamp_value(value["location"], value["value"])
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
            return avro_message("WATERMARK", {"version": 1, "commitTs": message["commitTs"], "buildTs": self._build_ts})
        if kind == "BOOTSTRAP":
            payload = {"version": 1, "buildTs": self._build_ts, "tableSchema": _avro_table_schema(message["tableSchema"])}
            return avro_message("BOOTSTRAP", payload)
        schema = message.get("tableSchema")
        return avro_message(
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

        return avro_message(
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


def claim_check(value: bytes, directory: Path, over_bytes: int) -> bytes:
    """TiCDC's claim-check for a Simple JSON DML value over `over_bytes`: the original goes to
    `<directory>/<uuid>.json` (`{"key": null, "value": base64}`) and Kafka gets the message without
    its row data, naming that file (`claimCheckLocation`). Smaller values are returned as they are."""
    if len(value) <= over_bytes:
        return value
    message = json.loads(value)
    name = f"{uuid.uuid4()}.json"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(json.dumps({"key": None, "value": base64.b64encode(value).decode("ascii")}))
    message.pop("data", None)
    message.pop("old", None)
    message["claimCheckLocation"] = f"file://{directory.resolve()}/{name}"
    return json.dumps(message, separators=(",", ":")).encode("utf-8")
