"""Debezium column types and values -> the shared TiDB type mapping.

A column's TiDB type is pieced together from what the messages carry, most
precise first: the DDL event's `tableChanges` column (typeName,
typeExpression, length, scale, enumValues), the `tidb_type` the TiDB
extension adds to the inline schema, then the inline Kafka Connect schema
alone (type, semantic name, parameters). The result goes through the same
`schema_cache.types` mapping as every protocol, so Spark types agree wherever
the information does.

Values as TiCDC's debezium codec writes them (pkg/sink/codec/debezium/codec.go):
DATE days since epoch; DATETIME epoch millis (fsp <= 3) or micros (fsp 4..6)
of the wall clock; TIMESTAMP an ISO string in UTC ending in Z; TIME signed
micros; BIT(1) a boolean, BIT(n) base64 of little-endian bytes; binary
strings base64; BIGINT UNSIGNED the int64 two's complement; DECIMAL a float64.
Debezium's own MySQL/MariaDB connectors write the same with the options TiCDC mimics
(`decimal.handling.mode=double`, `binary.handling.mode=base64`, the default
`time.precision.mode`), except that TIMESTAMP's fraction is padded to the column's precision
and typeName carries UNSIGNED.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import re
from collections.abc import Callable, Mapping

from ticdc_delta.exceptions import InvalidMessage
from ticdc_delta.schema_cache import types
from ticdc_delta.schema_cache.codec import ColumnCodec, Converter, ValueContext

_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)
_UINT64_MASK = (1 << 64) - 1

# typeName / tidb_type words -> TiDB base type names (binary charset folded into the name).
_NAMES = {
    "tinyint": "tinyint", "smallint": "smallint", "mediumint": "mediumint", "int": "int", "integer": "int",
    "bigint": "bigint", "float": "float", "double": "double", "real": "double", "decimal": "decimal",
    "numeric": "decimal", "date": "date", "datetime": "datetime", "timestamp": "timestamp", "time": "time",
    "year": "year", "bit": "bit", "char": "char", "varchar": "varchar", "var_string": "varchar",
    "binary": "binary", "varbinary": "varbinary", "tinytext": "tinytext", "text": "text",
    "mediumtext": "mediumtext", "longtext": "longtext", "tinyblob": "tinyblob", "blob": "blob",
    "mediumblob": "mediumblob", "longblob": "longblob", "enum": "enum", "set": "set", "json": "json",
    "vector": "vector", "bool": "tinyint", "boolean": "tinyint",
}
# Connect semantic names / types -> TiDB types, when nothing better is known.
_SEMANTIC = {
    "io.debezium.time.Date": ("date", None),
    "io.debezium.time.Timestamp": ("datetime", 3),
    "io.debezium.time.MicroTimestamp": ("datetime", 6),
    "io.debezium.time.ZonedTimestamp": ("timestamp", None),
    "io.debezium.time.MicroTime": ("time", None),  # the fsp is not carried
    "io.debezium.time.Year": ("year", None),
    "io.debezium.data.Json": ("json", None),
    "io.debezium.data.TiDBVectorFloat32": ("vector", None),
}
_CONNECT = {"int16": "smallint", "int32": "int", "int64": "bigint", "float": "float", "double": "double", "string": "varchar"}


def _ddl_type(column: Mapping[str, object]) -> types.TiDBType:
    # Debezium's MySQL/MariaDB connectors put the attributes into typeName ("BIGINT UNSIGNED",
    # "INT UNSIGNED ZEROFILL"); TiCDC's only into typeExpression.
    words = str(column.get("typeName") or "").upper().split()
    attributes = {"UNSIGNED", "ZEROFILL", "SIGNED"}
    name = _NAMES.get(" ".join(w for w in words if w not in attributes).lower())
    if name is None:
        raise InvalidMessage(f"column {column.get('name')!r}: unsupported typeName {column.get('typeName')!r}")
    length = column.get("length")
    scale = column.get("scale")
    if name in ("datetime", "timestamp", "time"):
        length, scale = None, length  # temporal `length` is the fractional-second precision
    elements = tuple(str(e)[1:-1].replace("''", "'") for e in column.get("enumValues") or ())
    return types.TiDBType(
        name,
        unsigned="UNSIGNED" in words or "UNSIGNED" in str(column.get("typeExpression") or "").upper(),
        length=None if length is None else int(length),
        scale=None if scale is None else int(scale),
        elements=elements,
    )


def _schema_type(field: Mapping[str, object]) -> types.TiDBType:
    params = field.get("parameters") or {}
    elements = types.split_allowed(str(params["allowed"])) if "allowed" in params else ()
    tidb_type = str(field.get("tidb_type") or "").lower()
    if tidb_type:
        unsigned = tidb_type.endswith(" unsigned")
        name = _NAMES.get(tidb_type.removesuffix(" unsigned").strip())
        if name is None:
            raise InvalidMessage(f"column {field.get('field')!r}: unsupported tidb_type {tidb_type!r}")
        if name == "decimal":
            # The value is a float64 and no precision is carried: without the DDL's
            # DECIMAL(p,s) the honest type is DOUBLE.
            return types.TiDBType("double")
        fsp = _SEMANTIC.get(str(field.get("name")), (None, None))[1]
        length = int(params["length"]) if "length" in params else None
        return types.TiDBType(name, unsigned=unsigned, length=length, scale=fsp, elements=elements)
    semantic = str(field.get("name") or "")
    connect = str(field.get("type"))
    if semantic == "io.debezium.data.Bits":
        return types.TiDBType("bit", length=int(params.get("length", 64)))
    if semantic == "io.debezium.data.Enum":
        return types.TiDBType("enum", elements=elements)
    if semantic == "io.debezium.data.EnumSet":
        return types.TiDBType("set", elements=elements)
    if semantic in _SEMANTIC:
        name, fsp = _SEMANTIC[semantic]
        return types.TiDBType(name, scale=fsp)
    if connect == "boolean":
        return types.TiDBType("bit", length=1)
    if connect in _CONNECT:
        return types.TiDBType(_CONNECT[connect])
    raise InvalidMessage(f"column {field.get('field')!r}: unsupported Connect type {connect!r} {semantic!r}")


def resolve_type(field: Mapping[str, object] | None, ddl_column: Mapping[str, object] | None) -> types.TiDBType:
    """The best TiDB type the messages tell for a column."""
    if ddl_column is not None:
        return _ddl_type(ddl_column)
    if field is not None:
        return _schema_type(field)
    raise InvalidMessage("a column with neither schema nor DDL description")


def _datetime_reader(fsp: int | None, semantic: str | None) -> Callable[[object], dt.datetime]:
    micros = semantic == "io.debezium.time.MicroTimestamp" or (semantic is None and (fsp or 0) > 3)

    def read(value: object) -> dt.datetime:
        return _EPOCH + (dt.timedelta(microseconds=int(value)) if micros else dt.timedelta(milliseconds=int(value)))

    return read


def _time_text(micros: int, fsp: int | None) -> str:
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    seconds, fraction = divmod(micros, 1_000_000)
    minutes, second = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    text = f"{sign}{hours:02d}:{minute:02d}:{second:02d}"
    if fsp is None:  # precision unknown (no DDL seen): show the fraction only when there is one
        return text + (f".{fraction:06d}" if fraction else "")
    return text + "." + f"{fraction:06d}"[:fsp] if fsp else text


def _bit_value(value: object) -> int:
    if isinstance(value, bool):
        return int(value)  # BIT(1)
    return int.from_bytes(base64.b64decode(str(value)), "little")


# An ISO instant's fraction: Debezium pads it to the column's precision (".45" for TIMESTAMP(2)),
# which Python before 3.11 does not read (it takes 3 or 6 digits only).
_FRACTION = re.compile(r"\.(\d{1,9})(?=[+-]\d\d:\d\d$)")


def _zoned_instant(value: object) -> dt.datetime:
    text = str(value).replace("Z", "+00:00")
    text = _FRACTION.sub(lambda m: "." + m[1][:6].ljust(6, "0"), text)
    instant = dt.datetime.fromisoformat(text)
    if instant.tzinfo is None:
        # TiCDC writes TIMESTAMP in UTC ending in Z; without a zone the instant is unknown (Spark
        # would take the session's zone).
        raise InvalidMessage(f"TIMESTAMP {value!r} without a UTC offset")
    return instant


def debezium_value(column: ColumnCodec, context: ValueContext) -> Converter:
    """A value as TiCDC's debezium codec writes it; `column.hint` is the Connect semantic name, if any."""
    tidb = column.tidb
    target = types.spark_type(tidb, context.types)
    text = types.text_converter(tidb, context.types)
    name = tidb.name
    if name == "date":
        return lambda v: _EPOCH_DATE + dt.timedelta(days=int(v))
    if name == "datetime":
        read = _datetime_reader(tidb.scale, column.hint or None)
        if target == "TIMESTAMP":
            return lambda v: read(v).replace(tzinfo=dt.timezone.utc)
        if target == "STRING":
            return lambda v: str(read(v))
        return read
    if name == "timestamp":
        return _zoned_instant
    if name == "time":
        if target == "BIGINT":
            return int
        return lambda v: _time_text(int(v), tidb.scale)
    if name == "bit":
        return lambda v: text(_bit_value(v))
    if name in ("enum", "set"):
        return str  # Debezium sends member names
    if name == "bigint" and tidb.unsigned:
        return lambda v: text(str(int(v) & _UINT64_MASK))
    if types.is_binary(tidb):
        return lambda v: base64.b64decode(str(v))
    if name == "decimal" and target.startswith("DECIMAL"):
        # A float64 upstream: rounded back to the column's scale (see the caveat in docs/protocols.md), and
        # checked against the precision as every protocol's decimals are (types.decimal_fit).
        step = decimal.Decimal(1).scaleb(-(tidb.scale or 0))
        context_80 = decimal.Context(prec=80)
        fit = types.decimal_fit(target)
        return lambda v: fit(context_80.quantize(decimal.Decimal(repr(float(v))), step))
    if name == "decimal":
        return lambda v: text(repr(float(v)))  # STRING, or DOUBLE checked by the shared converter
    return text
