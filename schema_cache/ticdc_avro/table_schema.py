"""TiCDC Avro record schemas -> neutral TableSchema and row conversion.

A value schema is one record per table: name = table, namespace =
`<keyspace>.<database>` (TiCDC: pkg/sink/codec/avro/arvo.go), one field per
column in table order, then the TiDB extension fields. Each column type
carries `connect.parameters.tidb_type` (INT, INT UNSIGNED, BIGINT UNSIGNED,
DECIMAL, TEXT, BLOB, BIT, ENUM, ...), which with the Avro type says which
TiDB type it was; ENUM/SET members are in `allowed`, BIT width in `length`.
Names are TiCDC-sanitized (characters outside [A-Za-z0-9_] became `_`).
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Mapping

from ticdc_delta.exceptions import InvalidMessage
from ticdc_delta.schema_cache import types
from ticdc_delta.schema_cache.codec import ColumnCodec, Converter, RowCodec, ValueContext, as_is, text_value
from ticdc_delta.schema_cache.events import TableName
from ticdc_delta.schema_cache.ticdc_avro.options import AvroOptions

EXTENSION_FIELDS = (
    "_tidb_op",
    "_tidb_commit_ts",
    "_tidb_commit_physical_time",
    "_tidb_row_level_checksum",
    "_tidb_corrupted",
    "_tidb_checksum_version",
)
BEFORE_FIELD = "_ticdc_before"
_EXTENSION_SPARK_TYPES = {
    "_tidb_op": "STRING",
    "_tidb_commit_ts": "BIGINT",
    "_tidb_commit_physical_time": "BIGINT",
    "_tidb_row_level_checksum": "STRING",
    "_tidb_corrupted": "BOOLEAN",
    "_tidb_checksum_version": "INT",
}
# The Avro types TiCDC gives its extension fields: kept columns take their values as they are read.
_EXTENSION_AVRO_TYPES = {
    "_tidb_op": "string",
    "_tidb_commit_ts": "long",
    "_tidb_commit_physical_time": "long",
    "_tidb_row_level_checksum": "string",
    "_tidb_corrupted": "boolean",
    "_tidb_checksum_version": "int",
}
_UINT64_MASK = (1 << 64) - 1

# tidb_type -> TiDB type name (INT covers TINYINT..INT: TiCDC does not say which).
_TIDB_TYPES = {
    "INT": "int",
    "BIGINT": "bigint",
    "FLOAT": "float",
    "DOUBLE": "double",
    "DECIMAL": "decimal",
    "TEXT": "text",
    "BLOB": "blob",
    "DATE": "date",
    "DATETIME": "datetime",
    "TIMESTAMP": "timestamp",
    "TIME": "time",
    "YEAR": "year",
    "BIT": "bit",
    "JSON": "json",
    "ENUM": "enum",
    "SET": "set",
    "TIDBVECTORFLOAT32": "vector",
}


def _unwrap(field_type: object) -> tuple[object, bool]:
    """(the non-null type, nullable) of a field type that may be a union with null."""
    if isinstance(field_type, list):
        branches = [t for t in field_type if t != "null"]
        if len(branches) != 1:
            raise InvalidMessage(f"unsupported union {field_type!r}")
        return branches[0], len(branches) != len(field_type)
    return field_type, False


def _split_namespace(namespace: str) -> str:
    # `<keyspace>.<database>`; the keyspace is TiCDC's ("default").
    return namespace.split(".", 1)[1] if "." in namespace else namespace


def table_name(record: Mapping[str, object]) -> TableName:
    return TableName(_split_namespace(str(record.get("namespace") or "")), str(record["name"]))


def key_columns(key_schema: Mapping[str, object]) -> tuple[str, ...]:
    return tuple(str(f["name"]) for f in key_schema["fields"])


def _column_type(name: str, avro_type: object, options: AvroOptions) -> tuple[types.TiDBType, str]:
    """(the TiDB type, the Avro primitive) of a column's Avro type."""
    if isinstance(avro_type, str):
        raise InvalidMessage(f"column {name!r} has no connect.parameters.tidb_type")
    params = avro_type.get("connect.parameters") or {}
    tidb_type = str(params.get("tidb_type", "")).upper()
    unsigned = tidb_type.endswith(" UNSIGNED")
    base = tidb_type.removesuffix(" UNSIGNED")
    primitive = str(avro_type["type"])
    try:
        tidb_name = _TIDB_TYPES[base]
    except KeyError:
        raise InvalidMessage(f"column {name!r}: unsupported tidb_type {tidb_type!r}") from None
    if tidb_name == "int" and unsigned and primitive == "int":
        tidb_name = "mediumint"  # TINYINT..MEDIUMINT UNSIGNED fit an Avro int; INT UNSIGNED is a long
    logical = avro_type.get("logicalType") == "decimal"
    _check_mode(name, tidb_name, unsigned, primitive, logical, options)
    length = scale = None
    if tidb_name == "decimal":
        # string mode carries no precision: the exact text is kept (see docs/protocols.md).
        length = int(avro_type["precision"]) if logical else types.MAX_SPARK_DECIMAL_PRECISION + 1
        scale = int(avro_type.get("scale", 0)) if logical else None
    elif tidb_name == "bit":
        length = int(params.get("length", 64))
    elements = types.split_allowed(str(params["allowed"])) if "allowed" in params else ()
    return types.TiDBType(tidb_name, unsigned=unsigned, length=length, scale=scale, elements=elements), primitive


def _check_mode(name: str, tidb_name: str, unsigned: bool, primitive: str, logical: bool, options: AvroOptions) -> None:
    if tidb_name == "decimal":
        expected = "precise" if logical else "string"
        if expected != options.avro_decimal_handling_mode:
            raise InvalidMessage(
                f"column {name!r}: DECIMAL encoded as {expected} but protocol.avro_decimal_handling_mode "
                f"is {options.avro_decimal_handling_mode!r}; they must match the changefeed's sink-uri"
            )
    if tidb_name == "bigint" and unsigned:
        expected = "string" if primitive == "string" else "long"
        if expected != options.avro_bigint_unsigned_handling_mode:
            raise InvalidMessage(
                f"column {name!r}: BIGINT UNSIGNED encoded as {expected} but "
                f"protocol.avro_bigint_unsigned_handling_mode is {options.avro_bigint_unsigned_handling_mode!r}"
            )


def avro_value(column: ColumnCodec, context: ValueContext) -> Converter:
    """A value as fastavro reads it; `column.hint` is the Avro primitive type."""
    t = column.tidb
    if t.name in ("enum", "set"):
        return str  # TiCDC Avro sends member names, not indexes
    if t.name == "timestamp":
        return text_value(column, context)  # wall clock in the server's zone
    convert = types.text_converter(t, context.types)
    if t.name == "bit":
        return lambda v: convert(int.from_bytes(v, "big"))
    if t.name == "bigint" and t.unsigned and column.hint == "long":
        # The uint64 travels as a signed long: values >= 2^63 wrapped negative.
        return lambda v: convert(str(int(v) & _UINT64_MASK))
    return convert  # DECIMAL: fastavro yields decimal.Decimal (precise) or text (string mode)


def _default(field: Mapping[str, object], column: ColumnCodec, context: ValueContext) -> object:
    if field.get("default") is None:
        return None
    raw = field["default"]
    if column.hint == "bytes" and isinstance(raw, str):
        raw = base64.b64decode(raw)  # TiCDC marshals []byte defaults as base64 JSON strings
    try:
        return avro_value(column, context)(raw)
    except (ValueError, TypeError, ArithmeticError, InvalidMessage):
        return None  # an unreadable default only loses the backfill of older rows


def _extension_column(name: str) -> ColumnCodec:
    return ColumnCodec(
        name, types.TiDBType("ticdc extension"), as_is, spark_type=_EXTENSION_SPARK_TYPES[name]
    )


def parse_value_schema(
    record: Mapping[str, object],
    key: tuple[str, ...],
    options: AvroOptions,
    context: ValueContext,
    *,
    version: int | None = None,
) -> RowCodec:
    """The row codec a TiCDC Avro value schema describes; `key` from the key schema."""
    if record.get("type") != "record":
        raise InvalidMessage("the value schema is not an Avro record")
    columns = []
    for field in record["fields"]:
        name = str(field["name"])
        if name == BEFORE_FIELD:
            continue
        if name in EXTENSION_FIELDS:
            if options.keep_extension_columns:
                declared = _unwrap(field["type"])[0]
                if declared != _EXTENSION_AVRO_TYPES[name]:
                    # Taken as read into a column of a fixed Spark type: another Avro type would not fit it.
                    raise InvalidMessage(f"extension field {name!r} has Avro type {declared!r}, not {_EXTENSION_AVRO_TYPES[name]!r}")
                columns.append(_extension_column(name))
            continue
        avro_type, nullable = _unwrap(field["type"])
        tidb, primitive = _column_type(name, avro_type, options)
        column = ColumnCodec(name, tidb, avro_value, hint=primitive, nullable=nullable)
        columns.append(dataclasses.replace(column, default=_default(field, column, context)))
    return RowCodec.build(table_name(record), columns, key, context, version=version)
