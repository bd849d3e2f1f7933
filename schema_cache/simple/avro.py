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

_KINDS = ("WATERMARK", "BOOTSTRAP", "DDL", "DML")


def read(value: bytes) -> dict:
    """Decode one Avro message into the shape of the JSON encoding.

    fastavro gives union branches as plain values, so the body needs no
    rewriting: a DML's row maps go to the decoder as they are (a TIMESTAMP is
    already the JSON encoding's `{location, value}`; an UnsignedBigint record
    `{value}` is undone by the column's reader, see `unsigned_bigint`).
    """
    message = fastavro.schemaless_reader(io.BytesIO(value), _PARSED, None)
    kind = message.get("type") if message.__class__ is dict else None
    if kind not in _KINDS or "payload" not in message:
        raise ValueError("the top-level record is not a Simple message")
    body = message["payload"]
    if kind == "WATERMARK":
        body["type"] = "WATERMARK"
    elif kind == "BOOTSTRAP":
        body["type"] = "BOOTSTRAP"
        body["commitTs"] = 0
    return body


def unsigned_bigint(value: object) -> object:
    """A BIGINT UNSIGNED as the JSON encoding carries it (decimal text), from either encoding.

    The Avro encoding stores the uint64 in a signed long inside a record; values >= 2^63 wrapped.
    """
    if value.__class__ is dict:
        return str(value["value"] & _UINT64_MASK)
    return value
