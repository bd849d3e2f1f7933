"""Simple protocol `tableSchema` objects -> neutral TableSchema plus a row codec.

Field names follow TiCDC's encoder (pkg/sink/codec/simple/message.go): the
JSON TableSchema names its database `schema`, the Avro one `database`;
`dataType.unsigned`, `decimal`, `elements` are omitted when empty.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Callable, Mapping

from schema_cache import types
from schema_cache.events import Column, TableName, TableSchema
from schema_cache.exceptions import ValueConversionError


@dataclass(frozen=True, slots=True)
class RowCodec:
    """Turns a Simple `data`/`old` object into a tuple in column order."""

    names: tuple[str, ...]
    converters: tuple[Callable[[object], object], ...]

    def decode(self, values: Mapping[str, object]) -> tuple:
        return types.convert_values(self.names, self.converters, values.get)


@dataclass(frozen=True, slots=True)
class SimpleTableSchema:
    schema: TableSchema
    codec: RowCodec


def tidb_type(data_type: Mapping[str, object]) -> types.TiDBType:
    """The TiDBType a Simple `dataType` object describes."""
    name = str(data_type["mysqlType"]).lower()
    # Older encoders (tiflow) wrote "int unsigned"; current ones use a flag.
    unsigned = bool(data_type.get("unsigned")) or name.endswith(" unsigned")
    name = name.removesuffix(" unsigned").strip()
    return types.TiDBType(
        name=name,
        unsigned=unsigned,
        length=_optional_int(data_type.get("length")),
        scale=_optional_int(data_type.get("decimal")),
        elements=tuple(data_type.get("elements") or ()),
        binary=str(data_type.get("charset") or "").lower() == "binary",
    )


def _optional_int(value: object) -> int | None:
    return None if value is None else int(value)


def _value_converter(t: types.TiDBType, options: types.TypeOptions) -> Callable[[object], object]:
    """Undo Simple's wire encoding, then apply the shared text conversion."""
    if t.name == "timestamp":
        return lambda raw: _timestamp_value(raw, options)
    convert = types.text_converter(t, options)
    if types.is_binary(t):
        return lambda raw: convert(_binary_value(raw))
    return convert


def _binary_value(raw: object) -> bytes:
    # JSON carries binary as standard base64; Avro carries raw bytes.
    if isinstance(raw, (bytes, bytearray)):
        return bytes(raw)
    return base64.b64decode(str(raw), validate=True)


def _timestamp_value(raw: object, options: types.TypeOptions) -> object:
    # TIMESTAMP arrives as {"location": zone, "value": wall-clock in that zone}.
    if isinstance(raw, Mapping):
        return types.timestamp_in_zone(str(raw["value"]), str(raw.get("location") or "UTC"), options)
    return types.timestamp_in_zone(str(raw), "UTC", options)


def handle_key(indexes: list[Mapping[str, object]], nullable: Mapping[str, bool]) -> tuple[str, ...]:
    """The primary key, else the first unique index whose columns are all NOT NULL."""
    for index in indexes:
        if index.get("primary"):
            return tuple(index["columns"])
    for index in indexes:
        columns = tuple(index.get("columns") or ())
        if index.get("unique") and columns and not any(nullable.get(c, True) for c in columns):
            return columns
    return ()


def parse_table_schema(
    raw: Mapping[str, object], options: types.TypeOptions = types.DEFAULT_OPTIONS
) -> SimpleTableSchema:
    """Build the neutral schema and row codec from a Simple TableSchema object."""
    database = raw.get("schema", raw.get("database"))
    columns = []
    converters = []
    nullable = {}
    for column in raw["columns"]:
        t = tidb_type(column["dataType"])
        name = str(column["name"])
        nullable[name] = bool(column.get("nullable", True))
        try:
            default = types.default_value(t, column.get("default"), options)
        except (ValueError, ArithmeticError, ValueConversionError):
            default = None  # an unparseable default is not worth failing the stream for
        columns.append(
            Column(
                name=name,
                spark_type=types.spark_type(t, options),
                nullable=nullable[name],
                default=default,
                source_type=t.describe(),
            )
        )
        converters.append(_value_converter(t, options))
    schema = TableSchema(
        name=TableName(str(database), str(raw["table"])),
        columns=tuple(columns),
        key=handle_key(list(raw.get("indexes") or ()), nullable),
        table_id=_optional_int(raw.get("tableID")),
        version=_optional_int(raw.get("version")),
    )
    return SimpleTableSchema(schema, RowCodec(schema.column_names(), tuple(converters)))
