"""Simple protocol `tableSchema` objects -> a row codec.

Field names follow TiCDC's encoder (pkg/sink/codec/simple/message.go): the
JSON TableSchema names its database `schema`, the Avro one `database`;
`dataType.unsigned`, `decimal`, `elements` are omitted when empty.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping

from schema_cache import types
from schema_cache.codec import ColumnCodec, Converter, RowCodec, ValueContext, column_default
from schema_cache.events import TableName


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
            if isinstance(raw, dict):
                return types.timestamp_in_zone(str(raw["value"]), str(raw.get("location") or "UTC"), options)
            return types.timestamp_in_zone(str(raw), "UTC", options)

        return timestamp
    convert = types.text_converter(column.tidb, context.types)
    if types.is_binary(column.tidb):
        return lambda raw: convert(_binary_value(raw))
    return convert


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
