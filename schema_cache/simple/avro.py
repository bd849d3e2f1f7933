"""The Simple protocol's Avro encoding.

Each Kafka value is raw Avro binary (no Confluent header, no registry, no
container) of one fixed message schema: a top-level union of the protocol's
named types in which every message is the `Message` branch, whose `payload`
is a Watermark, Bootstrap, DDL or DML record. Field meanings equal the JSON
encoding; the differences (TiCDC pkg/sink/codec/simple/avro.go, message.go):

- TableSchema names its database `database` (JSON: `schema`);
- a Bootstrap has no commitTs;
- row values are a union: integers (also ENUM index and SET bitmask) are
  `long`, BIGINT UNSIGNED an `UnsignedBigint` record holding the two's
  complement, FLOAT/DOUBLE `float`/`double`, binary values raw `bytes`,
  TIMESTAMP a `Timestamp` record {location, value}, everything else text.

`read` returns the message shaped like the JSON encoding, so one decoder
handles both.
"""

from __future__ import annotations

import io
from collections.abc import Mapping

import fastavro

_NS = "com.pingcap.simple.avro"
_UINT64_MASK = (1 << 64) - 1


def _record(name: str, *fields: dict) -> dict:
    return {"type": "record", "name": name, "namespace": _NS, "fields": list(fields)}


def _field(name: str, avro_type: object) -> dict:
    return {"name": name, "type": avro_type}


def _optional(name: str, avro_type: object) -> dict:
    return {"name": name, "type": ["null", avro_type], "default": None}


def qualified(name: str) -> str:
    """The full name of one of the protocol's named Avro types."""
    return f"{_NS}.{name}"


def _enum(name: str, *symbols: str) -> dict:
    return {"type": "enum", "name": name, "namespace": _NS, "symbols": list(symbols)}


_VALUE = ["null", "long", "float", "double", "string", "bytes", qualified("Timestamp"), qualified("UnsignedBigint")]
_ROW = {"type": "map", "values": _VALUE}

# Order matters: it fixes the union branch indexes on the wire.
MESSAGE_SCHEMA = [
    _record(
        "DataType",
        _field("mysqlType", "string"),
        _field("charset", "string"),
        _field("collate", "string"),
        _field("length", "long"),
        _optional("decimal", "int"),
        _optional("elements", {"type": "array", "items": "string"}),
        _optional("unsigned", "boolean"),
        _optional("zerofill", "boolean"),
    ),
    _record(
        "ColumnSchema",
        _field("name", "string"),
        _field("dataType", qualified("DataType")),
        _field("nullable", "boolean"),
        _field("default", ["null", "string"]),
    ),
    _record(
        "IndexSchema",
        _field("name", "string"),
        _field("unique", "boolean"),
        _field("primary", "boolean"),
        _field("nullable", "boolean"),
        _field("columns", {"type": "array", "items": "string"}),
    ),
    _record(
        "TableSchema",
        _field("database", "string"),
        _field("table", "string"),
        _field("tableID", "long"),
        _field("version", "long"),
        _field("columns", {"type": "array", "items": qualified("ColumnSchema")}),
        _field("indexes", {"type": "array", "items": qualified("IndexSchema")}),
    ),
    _record(
        "Checksum",
        _field("version", "int"),
        _field("corrupted", "boolean"),
        _field("current", "long"),
        _field("previous", "long"),
    ),
    _record("Watermark", _field("version", "int"), _field("commitTs", "long"), _field("buildTs", "long")),
    _record("Bootstrap", _field("version", "int"), _field("buildTs", "long"), _field("tableSchema", qualified("TableSchema"))),
    _record(
        "DDL",
        _field("version", "int"),
        _field("type", _enum("DDLType", "CREATE", "ALTER", "ERASE", "RENAME", "TRUNCATE", "CINDEX", "DINDEX", "QUERY")),
        _field("sql", "string"),
        _field("commitTs", "long"),
        _field("buildTs", "long"),
        _optional("tableSchema", qualified("TableSchema")),
        _optional("preTableSchema", qualified("TableSchema")),
    ),
    _record("Timestamp", _field("location", "string"), _field("value", "string")),
    _record("UnsignedBigint", _field("value", "long")),
    _record(
        "DML",
        _field("version", "int"),
        _field("database", "string"),
        _field("table", "string"),
        _field("tableID", "long"),
        _field("type", _enum("DMLType", "INSERT", "UPDATE", "DELETE")),
        _field("commitTs", "long"),
        _field("buildTs", "long"),
        _field("schemaVersion", "long"),
        _optional("claimCheckLocation", "string"),
        _optional("handleKeyOnly", "boolean"),
        _optional("checksum", qualified("Checksum")),
        _optional("data", _ROW),
        _optional("old", _ROW),
    ),
    _record(
        "Message",
        _field("type", _enum("MessageType", "WATERMARK", "BOOTSTRAP", "DDL", "DML")),
        _field("payload", [qualified("Watermark"), qualified("Bootstrap"), qualified("DDL"), qualified("DML")]),
    ),
]
_PARSED = fastavro.parse_schema(MESSAGE_SCHEMA)


# --- reading ------------------------------------------------------------------


def _plain(value: object) -> object:
    """Drop fastavro's (record name, record) wrapping of union branches."""
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return _plain(value[1])
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _row_value(value: object) -> object:
    if isinstance(value, tuple):
        name, record = value
        if name == qualified("UnsignedBigint"):
            # TiCDC stores the uint64 in a signed long; values >= 2^63 wrap.
            return str(record["value"] & _UINT64_MASK)
        return dict(record)  # Timestamp: {location, value}, as in JSON
    return value


def _row(values: Mapping[str, object] | None) -> dict | None:
    return None if values is None else {name: _row_value(v) for name, v in values.items()}


def read(value: bytes) -> dict:
    """Decode one Avro message into the shape of the JSON encoding."""
    top = fastavro.schemaless_reader(io.BytesIO(value), _PARSED, return_record_name=True)
    name, message = top
    if name != qualified("Message"):
        raise ValueError(f"top-level branch {name!r} is not a Simple message")
    kind = message["type"]
    _, payload = message["payload"]
    if kind == "DML":
        body = {k: _plain(v) for k, v in payload.items() if k not in ("data", "old")}
        body["data"] = _row(payload["data"])
        body["old"] = _row(payload["old"])
        return body
    body = _plain(payload)
    if kind == "WATERMARK":
        body["type"] = "WATERMARK"
    elif kind == "BOOTSTRAP":
        body["type"] = "BOOTSTRAP"
        body["commitTs"] = 0
    return body
