"""Simple protocol `tableSchema` objects -> a row codec.

Field names follow TiCDC's encoder (pkg/sink/codec/simple/message.go): the
JSON TableSchema names its database `schema`, the Avro one `database`;
`dataType.unsigned`, `decimal`, `elements` are omitted when empty.
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Mapping

from ticdc_delta.schema_cache import types
from ticdc_delta.schema_cache.codec import ColumnCodec, Converter, RowCodec, ValueContext, column_default
from ticdc_delta.schema_cache.events import TableName
from ticdc_delta.schema_cache.simple import avro


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


def simple_value(column: ColumnCodec, context: ValueContext) -> Converter:
    """Undo Simple's wire encoding, then apply the shared text conversion."""
    if column.tidb.name == "timestamp":
        options = context.types

        def timestamp(raw: object) -> object:
            # {"location": zone, "value": wall clock in that zone}
            if raw.__class__ is not dict:
                return types.timestamp_in_zone(raw, "UTC", options)
            location = raw.get("location")
            if location == "UTC":  # the usual case, inline
                try:
                    instant = _from_iso(raw["value"] + "+00:00")  # datetime.replace() costs 5x the parse
                    if instant.tzinfo is not None:  # a date alone parses too, but CPython drops the offset then
                        return instant
                except (ValueError, TypeError):
                    pass  # a zero date, an odd fraction width, or bad input: the general path says which
            return types.timestamp_in_zone(raw["value"], location or "UTC", options)

        return timestamp
    convert = types.text_converter(column.tidb, context.types)
    if types.is_binary(column.tidb):
        return lambda raw: convert(_binary_value(raw))
    if column.tidb.name == "bigint" and column.tidb.unsigned:
        return lambda raw: convert(avro.unsigned_bigint(raw))
    return convert


_from_iso = datetime.datetime.fromisoformat


def _binary_value(raw: object) -> bytes:
    # JSON carries binary as standard base64; Avro carries raw bytes.
    if isinstance(raw, (bytes, bytearray)):
        return bytes(raw)
    return base64.b64decode(str(raw), validate=True)


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


def parse_table_schema(raw: Mapping[str, object], context: ValueContext = ValueContext()) -> RowCodec:
    """The row codec a Simple TableSchema object describes."""
    database = raw.get("schema", raw.get("database"))
    columns = []
    for column in raw["columns"]:
        t = tidb_type(column["dataType"])
        columns.append(
            ColumnCodec(
                name=str(column["name"]),
                tidb=t,
                reader=simple_value,
                nullable=bool(column.get("nullable", True)),
                default=column_default(t, column.get("default"), context.types),
            )
        )
    nullable = {c.name: c.nullable for c in columns}
    return RowCodec.build(
        TableName(str(database), str(raw["table"])),
        columns,
        handle_key(list(raw.get("indexes") or ()), nullable),
        context,
        table_id=_optional_int(raw.get("tableID")),
        version=_optional_int(raw.get("version")),
    )
