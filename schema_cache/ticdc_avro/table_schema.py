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
from dataclasses import dataclass
from typing import Callable, Mapping

from schema_cache import types
from schema_cache.events import Column, TableName, TableSchema
from schema_cache.exceptions import ValueConversionError

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


@dataclass(frozen=True)
class AvroOptions:
    """How the changefeed was configured (TiCDC sink-uri options) and how to read it."""

    decimal_handling_mode: str = "precise"  # avro-decimal-handling-mode
    bigint_unsigned_handling_mode: str = "long"  # avro-bigint-unsigned-handling-mode
    enable_tidb_extension: bool = False
    keep_extension_columns: bool = False
    timestamp_zone: str = "UTC"  # the TiCDC server's time zone (TIMESTAMP strings carry none)


def _unwrap(field_type: object) -> tuple[object, bool]:
    """(the non-null type, nullable) of a field type that may be a union with null."""
    if isinstance(field_type, list):
        branches = [t for t in field_type if t != "null"]
        if len(branches) != 1:
            raise ValueConversionError(f"unsupported union {field_type!r}")
        return branches[0], len(branches) != len(field_type)
    return field_type, False


def _split_namespace(namespace: str) -> str:
    # `<keyspace>.<database>`; the keyspace is TiCDC's ("default").
    return namespace.split(".", 1)[1] if "." in namespace else namespace


def table_name(record: Mapping[str, object]) -> TableName:
    return TableName(_split_namespace(str(record.get("namespace") or "")), str(record["name"]))


def key_columns(key_schema: Mapping[str, object]) -> tuple[str, ...]:
    return tuple(str(f["name"]) for f in key_schema["fields"])


@dataclass(frozen=True)
class _ColumnType:
    tidb: types.TiDBType
    avro: str  # the Avro primitive type
    logical_decimal: bool


def _column_type(name: str, avro_type: object, options: AvroOptions) -> _ColumnType:
    if isinstance(avro_type, str):
        raise ValueConversionError(f"column {name!r} has no connect.parameters.tidb_type")
    params = avro_type.get("connect.parameters") or {}
    tidb_type = str(params.get("tidb_type", "")).upper()
    unsigned = tidb_type.endswith(" UNSIGNED")
    base = tidb_type.removesuffix(" UNSIGNED")
    primitive = str(avro_type["type"])
    try:
        tidb_name = _TIDB_TYPES[base]
    except KeyError:
        raise ValueConversionError(f"column {name!r}: unsupported tidb_type {tidb_type!r}") from None
    if tidb_name == "int" and unsigned and primitive == "int":
        tidb_name = "mediumint"  # TINYINT..MEDIUMINT UNSIGNED fit an Avro int; INT UNSIGNED is a long
    logical = avro_type.get("logicalType") == "decimal"
    _check_mode(name, tidb_name, unsigned, primitive, logical, options)
    length = scale = None
    if tidb_name == "decimal":
        # string mode carries no precision: the exact text is kept (see the README).
        length = int(avro_type["precision"]) if logical else types.MAX_SPARK_DECIMAL_PRECISION + 1
        scale = int(avro_type.get("scale", 0)) if logical else None
    elif tidb_name == "bit":
        length = int(params.get("length", 64))
    elements = types.split_allowed(str(params["allowed"])) if "allowed" in params else ()
    return _ColumnType(
        types.TiDBType(tidb_name, unsigned=unsigned, length=length, scale=scale, elements=elements),
        primitive,
        logical,
    )


def _check_mode(name: str, tidb_name: str, unsigned: bool, primitive: str, logical: bool, options: AvroOptions) -> None:
    if tidb_name == "decimal":
        expected = "precise" if logical else "string"
        if expected != options.decimal_handling_mode:
            raise ValueConversionError(
                f"column {name!r}: DECIMAL encoded as {expected} but protocol.avro_decimal_handling_mode "
                f"is {options.decimal_handling_mode!r}; they must match the changefeed's sink-uri"
            )
    if tidb_name == "bigint" and unsigned:
        expected = "string" if primitive == "string" else "long"
        if expected != options.bigint_unsigned_handling_mode:
            raise ValueConversionError(
                f"column {name!r}: BIGINT UNSIGNED encoded as {expected} but "
                f"protocol.avro_bigint_unsigned_handling_mode is {options.bigint_unsigned_handling_mode!r}"
            )


def _converter(column: _ColumnType, options: AvroOptions, type_options: types.TypeOptions) -> Callable:
    t = column.tidb
    if t.name in ("enum", "set"):
        return str  # TiCDC Avro sends member names, not indexes
    if t.name == "timestamp":
        zone = options.timestamp_zone
        return lambda v: types.timestamp_in_zone(str(v), zone, type_options)
    convert = types.text_converter(t, type_options)
    if t.name == "bit":
        return lambda v: convert(int.from_bytes(v, "big"))
    if t.name == "bigint" and t.unsigned and column.avro == "long":
        # The uint64 travels as a signed long: values >= 2^63 wrapped negative.
        return lambda v: convert(str(int(v) & _UINT64_MASK))
    return convert  # DECIMAL: fastavro yields decimal.Decimal (precise) or text (string mode)


def _default(field: Mapping[str, object], column: _ColumnType, convert: Callable) -> object:
    if "default" not in field or field["default"] is None:
        return None
    raw = field["default"]
    if column.avro == "bytes" and isinstance(raw, str):
        raw = base64.b64decode(raw)  # TiCDC marshals []byte defaults as base64 JSON strings
    try:
        return convert(raw)
    except (ValueError, TypeError, ArithmeticError, ValueConversionError):
        return None


@dataclass(frozen=True)
class AvroTableSchema:
    schema: TableSchema
    fields: tuple[str, ...]  # Avro field names feeding the columns, in order
    converters: tuple[Callable, ...]
    has_before: bool

    def row(self, record: Mapping[str, object]) -> tuple:
        return types.convert_values(self.fields, self.converters, record.get)


def parse_value_schema(
    record: Mapping[str, object],
    key: tuple[str, ...],
    options: AvroOptions,
    type_options: types.TypeOptions,
    *,
    version: int | None = None,
) -> AvroTableSchema:
    """The table structure a TiCDC Avro value schema describes; `key` from the key schema."""
    if record.get("type") != "record":
        raise ValueConversionError("the value schema is not an Avro record")
    columns, fields, converters = [], [], []
    has_before = False
    for field in record["fields"]:
        name = str(field["name"])
        if name == BEFORE_FIELD:
            has_before = True
            continue
        if name in EXTENSION_FIELDS:
            if options.keep_extension_columns:
                columns.append(Column(name, _EXTENSION_SPARK_TYPES[name], True, None, "ticdc extension"))
                fields.append(name)
                converters.append(lambda v: v)
            continue
        avro_type, nullable = _unwrap(field["type"])
        column = _column_type(name, avro_type, options)
        convert = _converter(column, options, type_options)
        columns.append(
            Column(
                name=name,
                spark_type=types.spark_type(column.tidb, type_options),
                nullable=nullable,
                default=_default(field, column, convert),
                source_type=column.tidb.describe(),
            )
        )
        fields.append(name)
        converters.append(convert)
    missing = [k for k in key if k not in fields]
    if missing:
        raise ValueConversionError(f"key columns {missing} are not in the value schema")
    schema = TableSchema(table_name(record), tuple(columns), key, version=version)
    return AvroTableSchema(schema, tuple(fields), tuple(converters), has_before)
