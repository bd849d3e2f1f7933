"""TiDB/MySQL column types: which Spark type each lands in, and value conversion.

One module of mapping tables shared by every decoder. Decoders undo their
protocol's wire encoding (base64, Avro unions, ...) and hand the remaining
TiCDC text form of a value to the converter built here, which returns the
Python value PySpark expects for the column's Spark type.

The mapping (see the README's type table for the reasons):

- signed integers -> the smallest Spark integer that holds the range;
  unsigned -> the next wider one; BIGINT UNSIGNED -> DECIMAL(20,0);
- DECIMAL(p,s) -> DECIMAL(p,s) for p <= 38, else STRING holding the exact text;
- DATETIME -> TIMESTAMP_NTZ (MySQL DATETIME has no zone), TIMESTAMP -> TIMESTAMP
  (an instant), DATE -> DATE, TIME -> STRING (negative and >24h values exist),
  YEAR -> SMALLINT; zero dates ('0000-00-00') become NULL;
- BIT(n) -> BIGINT for n <= 63, DECIMAL(20,0) for BIT(64);
- ENUM / SET -> STRING (names, SET comma-joined as TiDB shows it);
- text types -> STRING; binary types and binary-charset strings -> BINARY;
- JSON -> STRING.
"""

from __future__ import annotations

import datetime as dt
import decimal
from dataclasses import dataclass
from typing import Callable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from schema_cache.exceptions import ValueConversionError

# Spark's DecimalType tops out at 38 digits.
MAX_SPARK_DECIMAL_PRECISION = 38


@dataclass(frozen=True, slots=True)
class TiDBType:
    """An upstream column type, as the protocols describe it.

    `name` is TiDB's lower-case base type name (`int`, `varchar`, `blob`, ...)
    without `unsigned`; `binary` is true for the binary character set.
    `scale` is the decimal scale, or the fractional-second precision of
    temporal types.
    """

    name: str
    unsigned: bool = False
    length: int | None = None
    scale: int | None = None
    elements: tuple[str, ...] = ()
    binary: bool = False

    def describe(self) -> str:
        text = self.name
        if self.name == "decimal":
            text += f"({self.length},{self.scale or 0})"
        elif self.length and self.length > 0 and self.name not in _NO_LENGTH_IN_NAME:
            text += f"({self.length})"
        if self.unsigned:
            text += " unsigned"
        if self.binary and self.name in _TEXT_TYPES:
            text += " binary"
        return text


_SIGNED_INTEGERS = {
    "tinyint": "TINYINT",
    "smallint": "SMALLINT",
    "mediumint": "INT",
    "int": "INT",
    "bigint": "BIGINT",
}
_UNSIGNED_INTEGERS = {
    "tinyint": "SMALLINT",
    "smallint": "INT",
    "mediumint": "INT",
    "int": "BIGINT",
    "bigint": "DECIMAL(20,0)",
}
_TEXT_TYPES = {"char", "varchar", "var_string", "tinytext", "text", "mediumtext", "longtext"}
_BINARY_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "geometry"}
_FIXED_TYPES = {
    "float": "FLOAT",
    "double": "DOUBLE",
    "date": "DATE",
    "datetime": "TIMESTAMP_NTZ",
    "timestamp": "TIMESTAMP",
    "time": "STRING",
    "year": "SMALLINT",
    "json": "STRING",
    "enum": "STRING",
    "set": "STRING",
    "vector": "STRING",
}
_NO_LENGTH_IN_NAME = {"date", "year", "json", "enum", "set", "float", "double", "timestamp", "datetime", "time"}

# TiDB's default decimal when the protocol omits precision (DECIMAL == DECIMAL(10,0)).
_DEFAULT_DECIMAL_PRECISION = 10


def is_binary(t: TiDBType) -> bool:
    """True when values of `t` are byte strings rather than text."""
    return t.name in _BINARY_TYPES or (t.binary and t.name in _TEXT_TYPES)


def spark_type(t: TiDBType) -> str:
    """The Spark SQL type a column of TiDB type `t` is materialized as."""
    if t.name in _SIGNED_INTEGERS:
        return (_UNSIGNED_INTEGERS if t.unsigned else _SIGNED_INTEGERS)[t.name]
    if t.name == "decimal":
        precision = t.length if t.length and t.length > 0 else _DEFAULT_DECIMAL_PRECISION
        if precision > MAX_SPARK_DECIMAL_PRECISION:
            return "STRING"
        return f"DECIMAL({precision},{t.scale or 0})"
    if t.name == "bit":
        return "DECIMAL(20,0)" if (t.length or 1) >= 64 else "BIGINT"
    if t.name in _TEXT_TYPES:
        return "BINARY" if t.binary else "STRING"
    if t.name in _BINARY_TYPES:
        return "BINARY"
    try:
        return _FIXED_TYPES[t.name]
    except KeyError:
        raise ValueConversionError(f"unsupported column type {t.name!r}") from None


# --- value conversion from TiCDC's text form ------------------------------------

Converter = Callable[[object], object]


def _to_int(text: object) -> int:
    return int(text)


def _to_decimal(text: object) -> decimal.Decimal:
    value = decimal.Decimal(str(text))
    if not value.is_finite():
        raise ValueConversionError(f"not a finite decimal: {text!r}")
    return value


def _to_float(text: object) -> float:
    return float(text)


def _to_str(text: object) -> str:
    return text if isinstance(text, str) else str(text)


def _to_bytes(value: object) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    raise ValueConversionError(f"expected bytes for a binary column, got {type(value).__name__}")


def _has_zero_date_part(text: str) -> bool:
    # MySQL allows '0000-00-00' and, outside strict mode, '2020-00-15'; none of
    # them is a real date. Policy (README): they become NULL.
    date_part = text[:10]
    return date_part[:4] == "0000" or date_part[5:7] == "00" or date_part[8:10] == "00"


def _to_date(text: object) -> dt.date | None:
    text = _to_str(text)
    if _has_zero_date_part(text):
        return None
    return dt.date.fromisoformat(text[:10])


def _to_datetime(text: object) -> dt.datetime | None:
    text = _to_str(text)
    if _has_zero_date_part(text):
        return None
    return dt.datetime.fromisoformat(text)


def _zone(name: str) -> dt.tzinfo:
    if name in ("", "UTC", "Local", "SYSTEM"):
        # TiCDC resolves "system"/"local" to an IANA name before encoding; an empty
        # or "UTC" location means UTC.
        return dt.timezone.utc
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as err:
        raise ValueConversionError(f"unknown time zone {name!r}") from err


def timestamp_in_zone(text: str, zone_name: str) -> dt.datetime | None:
    """A TIMESTAMP shown as wall-clock `text` in `zone_name`, as a UTC instant."""
    if _has_zero_date_part(text):
        return None
    wall = dt.datetime.fromisoformat(text)
    return wall.replace(tzinfo=_zone(zone_name)).astimezone(dt.timezone.utc)


def _to_timestamp_utc(text: object) -> dt.datetime | None:
    return timestamp_in_zone(_to_str(text), "UTC")


def _enum_converter(t: TiDBType) -> Converter:
    elements = t.elements

    def convert(index: object) -> str:
        position = int(index)
        if position == 0:
            return ""  # MySQL's "invalid value" member, shown as the empty string
        try:
            return elements[position - 1]
        except IndexError:
            raise ValueConversionError(f"enum index {position} outside {len(elements)} members") from None

    return convert


def _set_converter(t: TiDBType) -> Converter:
    elements = t.elements

    def convert(bitmask: object) -> str:
        mask = int(bitmask)
        if mask >> len(elements):
            raise ValueConversionError(f"set bitmask {mask} has bits beyond {len(elements)} members")
        return ",".join(name for bit, name in enumerate(elements) if mask >> bit & 1)

    return convert


_CONVERTERS_BY_SPARK_TYPE: dict[str, Converter] = {
    "TINYINT": _to_int,
    "SMALLINT": _to_int,
    "INT": _to_int,
    "BIGINT": _to_int,
    "FLOAT": _to_float,
    "DOUBLE": _to_float,
    "DATE": _to_date,
    "TIMESTAMP_NTZ": _to_datetime,
    "TIMESTAMP": _to_timestamp_utc,
    "STRING": _to_str,
    "BINARY": _to_bytes,
}


def text_converter(t: TiDBType) -> Converter:
    """A function from TiCDC's text form of a `t` value to its Python value.

    TiCDC's text form: integers, BIT and decimals as decimal digits, temporal
    values as MySQL shows them, ENUM as its 1-based index, SET as its bitmask.
    Binary values must already be bytes. TIMESTAMP text is taken as UTC; use
    `timestamp_in_zone` when the protocol names a zone.
    """
    if t.name == "enum":
        return _enum_converter(t)
    if t.name == "set":
        return _set_converter(t)
    target = spark_type(t)
    if target.startswith("DECIMAL"):
        return _to_decimal
    return _CONVERTERS_BY_SPARK_TYPE[target]


# Defaults TiDB evaluates at write time (CURRENT_TIMESTAMP(3), NOW(), ...): there
# is no single value to backfill.
_DYNAMIC_DEFAULT_PREFIXES = ("CURRENT_", "NOW(", "LOCALTIME")


def default_value(t: TiDBType, raw: object) -> object:
    """The Python value of a column default as the schema describes it.

    Defaults are stored the way TiDB stores them: ENUM/SET by name, BIT as a
    number, everything else as text. Returns None for no default and for
    defaults evaluated at write time (CURRENT_TIMESTAMP).
    """
    if raw is None:
        return None
    text = _to_str(raw)
    if text.upper().startswith(_DYNAMIC_DEFAULT_PREFIXES):
        return None
    if t.name in ("enum", "set"):
        return text
    if is_binary(t):
        return text.encode("utf-8")
    if t.name == "bit":
        return decimal.Decimal(int(float(text))) if spark_type(t).startswith("DECIMAL") else int(float(text))
    return text_converter(t)(text)
