"""TiDB/MySQL column types: which Spark type each lands in, and value conversion.

One module of mapping tables shared by every decoder. Decoders undo their
protocol's wire encoding (base64, Avro unions, ...) and hand the remaining
TiCDC text form of a value to the converter built here, which returns the
Python value PySpark expects for the column's Spark type.

The default mapping (the type table in docs/protocols.md gives the reasons); the choices
marked * can be changed with `TypeOptions` (config section [types]):

- signed integers -> the smallest Spark integer that holds the range;
  unsigned -> the next wider one; BIGINT UNSIGNED -> DECIMAL(20,0)*;
- DECIMAL(p,s) -> DECIMAL(p,s) for p <= 38, else STRING holding the exact text*;
- DATETIME -> TIMESTAMP_NTZ* (MySQL DATETIME has no zone), TIMESTAMP -> TIMESTAMP
  (an instant), DATE -> DATE, TIME -> STRING* (negative and >24h values exist),
  YEAR -> SMALLINT; zero dates ('0000-00-00') become NULL*;
- BIT(n) -> BIGINT for n <= 63, DECIMAL(20,0) for BIT(64)*;
- ENUM / SET -> STRING (names, SET comma-joined as TiDB shows it);
- text types -> STRING; binary types and binary-charset strings -> BINARY;
- JSON -> STRING*; VECTOR -> STRING ('[1,2,3]').
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ticdc_delta.exceptions import ConfigError, ValueConversionError

# Spark's DecimalType tops out at 38 digits.
MAX_SPARK_DECIMAL_PRECISION = 38

# Allowed values per TypeOptions field; the first is the default.
TYPE_CHOICES: dict[str, tuple[str, ...]] = {
    # BIGINT UNSIGNED: exact number, or its decimal text
    "bigint_unsigned": ("decimal", "string"),
    # DECIMAL wider than 38 digits: exact text, or a (lossy, opt-in) double
    "wide_decimal": ("string", "double"),
    # DATETIME: zone-less timestamp, an instant taking the wall clock as UTC, or text
    "datetime": ("timestamp_ntz", "timestamp_utc", "string"),
    # TIME: text as TiDB shows it, or signed microseconds
    "time": ("string", "microseconds"),
    # BIT(n): the unsigned number, or ceil(n/8) big-endian bytes
    "bit": ("integer", "binary"),
    # JSON: text, or Spark's VARIANT (Spark 4 / Delta 4 readers required)
    "json": ("string", "variant"),
    # Zero dates ('0000-00-00', '2020-00-15'): NULL, or bad input
    "zero_date": ("null", "error"),
}


@dataclass(frozen=True, slots=True)
class TypeOptions:
    """The user's choices where more than one faithful mapping exists."""

    bigint_unsigned: str = "decimal"
    wide_decimal: str = "string"
    datetime: str = "timestamp_ntz"
    time: str = "string"
    bit: str = "integer"
    json: str = "string"
    zero_date: str = "null"

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            allowed = TYPE_CHOICES[field.name]
            if value not in allowed:
                raise ConfigError(f"types.{field.name}: {value!r} is not allowed; allowed: {', '.join(allowed)}")


DEFAULT_OPTIONS = TypeOptions()


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
    "timestamp": "TIMESTAMP",
    "year": "SMALLINT",
    "enum": "STRING",
    "set": "STRING",
    "vector": "STRING",
}
# Types whose Spark type is an option: (type name, TypeOptions field) -> choice -> Spark type.
_CHOSEN_TYPES = {
    "datetime": ("datetime", {"timestamp_ntz": "TIMESTAMP_NTZ", "timestamp_utc": "TIMESTAMP", "string": "STRING"}),
    "time": ("time", {"string": "STRING", "microseconds": "BIGINT"}),
    "json": ("json", {"string": "STRING", "variant": "VARIANT"}),
}
_NO_LENGTH_IN_NAME = {"date", "year", "json", "enum", "set", "float", "double", "timestamp", "datetime", "time"}

# TiDB's default decimal when the protocol omits precision (DECIMAL == DECIMAL(10,0)).
_DEFAULT_DECIMAL_PRECISION = 10


def split_allowed(allowed: str) -> tuple[str, ...]:
    """ENUM/SET members from a comma-joined list where TiCDC escaped ',' as '\\,'."""
    members, current, escaped = [], [], False
    for ch in allowed:
        if escaped:
            current.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == ",":
            members.append("".join(current))
            current = []
        else:
            current.append(ch)
    members.append("".join(current))
    return tuple(members)


def is_binary(t: TiDBType) -> bool:
    """True when values of `t` are byte strings rather than text."""
    return t.name in _BINARY_TYPES or (t.binary and t.name in _TEXT_TYPES)


def spark_type(t: TiDBType, options: TypeOptions = DEFAULT_OPTIONS) -> str:
    """The Spark SQL type a column of TiDB type `t` is materialized as."""
    if t.name in _SIGNED_INTEGERS:
        if t.name == "bigint" and t.unsigned and options.bigint_unsigned == "string":
            return "STRING"
        return (_UNSIGNED_INTEGERS if t.unsigned else _SIGNED_INTEGERS)[t.name]
    if t.name == "decimal":
        precision = t.length if t.length and t.length > 0 else _DEFAULT_DECIMAL_PRECISION
        if precision > MAX_SPARK_DECIMAL_PRECISION:
            return "DOUBLE" if options.wide_decimal == "double" else "STRING"
        scale = t.scale or 0
        if not 0 <= scale <= precision:
            # Spark cannot create such a column (TiDB cannot either): bad input, not a failed CREATE TABLE later.
            raise ValueConversionError(f"DECIMAL({precision},{scale}): the scale must be between 0 and the precision")
        return f"DECIMAL({precision},{scale})"
    if t.name == "bit":
        if (t.length or 1) > 64:
            # MySQL's BIT stops at 64 bits; a larger width would make `bit = "binary"` allocate its bytes per value.
            raise ValueConversionError(f"BIT({t.length}): at most 64 bits")
        if options.bit == "binary":
            return "BINARY"
        return "DECIMAL(20,0)" if (t.length or 1) >= 64 else "BIGINT"
    if t.name in _TEXT_TYPES:
        return "BINARY" if t.binary else "STRING"
    if t.name in _BINARY_TYPES:
        return "BINARY"
    if t.name in _CHOSEN_TYPES:
        option, choices = _CHOSEN_TYPES[t.name]
        return choices[getattr(options, option)]
    try:
        return _FIXED_TYPES[t.name]
    except KeyError:
        raise ValueConversionError(f"unsupported column type {t.name!r}") from None


# --- value conversion from TiCDC's text form ------------------------------------

Converter = Callable[[object], object]


# Every converter returns a value its Spark type holds unchanged, or raises: PySpark would refuse an
# integer out of range only when the batch is applied (stopping the job, where a bad message should
# be dead-lettered), and would silently turn an overflowing DECIMAL into NULL and a FLOAT beyond
# float32 into infinity. TiDB never sends such values; hostile or corrupt messages can.


def _integer_converter(spark: str, bits: int) -> Converter:
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def convert(text: object) -> int:
        value = int(text)
        if low <= value <= high and (text.__class__ is not float or value == text):  # a fraction int() would cut
            return value
        raise ValueConversionError(f"{text!r} is not a {spark} value")

    return convert


_DECIMAL_TYPE = re.compile(r"DECIMAL\((\d+),(\d+)\)")


def decimal_fit(spark: str) -> Callable[[decimal.Decimal], decimal.Decimal]:
    """A check that a Decimal is finite and fits the Spark `DECIMAL(p,s)` type `spark` exactly; returns it."""
    precision, scale = map(int, _DECIMAL_TYPE.fullmatch(spark).groups())
    whole_digits = precision - scale
    quantum = decimal.Decimal(1).scaleb(-scale)

    def fit(value: decimal.Decimal) -> decimal.Decimal:
        # The usual case, cheap: exactly `scale` decimals, as TiCDC writes them (NaN and infinity
        # are never of the same quantum, so they take the slow path).
        if value.adjusted() < whole_digits and value.same_quantum(quantum):
            return value
        if not value.is_finite():
            raise ValueConversionError(f"not a finite decimal: {value}")
        _, digits, exponent = value.as_tuple()
        # Digits below the scale would be rounded away (trailing zeros are harmless); the
        # exponent arithmetic stays cheap for values like 1E-999999999.
        if exponent < -scale and any(digits[exponent + scale :]):
            raise ValueConversionError(f"{value} has more than {scale} decimal places ({spark})")
        if value and value.adjusted() >= whole_digits:
            raise ValueConversionError(f"{value} has more than {whole_digits} integer digits ({spark})")
        return value

    return fit


def _decimal_converter(spark: str) -> Converter:
    fit = decimal_fit(spark)
    new = decimal.Decimal

    def convert(text: object) -> decimal.Decimal:
        return fit(new(text if text.__class__ is str else str(text)))  # fit refuses NaN and infinity

    return convert


# Doubles from here up round to infinity as float32 (float32's largest value plus half a step):
# TiDB's own text of FLOAT's maximum, 3.4028235e+38, lies just above that maximum and below this.
_FLOAT32_OVERFLOW = (2 - 2**-24) * 2.0**127


def _to_float(text: object) -> float:
    value = float(text)
    if value - value != 0.0:  # NaN or infinity (x - x is 0.0 for every finite x)
        raise ValueConversionError(f"{text!r} is not a finite number (TiDB has no NaN or infinity)")
    return value


def _to_float32(text: object) -> float:
    value = _to_float(text)
    if -_FLOAT32_OVERFLOW < value < _FLOAT32_OVERFLOW:
        return value
    raise ValueConversionError(f"{text!r} is outside FLOAT's range")


# The text of a value; a str is returned as it is.
_to_str = str


def _to_bytes(value: object) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    raise ValueConversionError(f"expected bytes for a binary column, got {type(value).__name__}")


def _is_zero_date(text: str, policy: str) -> bool:
    # MySQL allows '0000-00-00' and, outside strict mode, '2020-00-15'; none of
    # them is a real date.
    date_part = text[:10]
    if date_part[:4] == "0000" or date_part[5:7] == "00" or date_part[8:10] == "00":
        if policy == "error":
            raise ValueConversionError(f"zero date {text!r} (types.zero_date = error)")
        return True
    return False


_UTC = dt.timezone.utc
_from_iso = dt.datetime.fromisoformat


def parse_wall_clock(text: str) -> dt.datetime:
    """MySQL's DATETIME / TIMESTAMP text (`2026-01-02 03:04:05[.f]`, any fraction width), zone-less."""
    try:
        wall = _from_iso(text)
    except ValueError:
        # Python 3.10 accepts only 3 or 6 fractional digits; TiDB writes the column's precision.
        head, dot, fraction = text.partition(".")
        if not (dot and fraction.isdigit() and len(fraction) <= 6):
            raise ValueError(f"not a date and time: {text!r}") from None
        wall = _from_iso(f"{head}.{fraction.ljust(6, '0')}")
    if wall.tzinfo is not None:
        # MySQL's text never has one; taking it as a wall clock in another zone would shift the instant.
        raise ValueError(f"a date and time with a UTC offset: {text!r}")
    return wall


def _wall_clock_or_none(text: str, policy: str) -> dt.datetime | None:
    # Zero dates are no dates: they fail to parse, and only then are told apart.
    try:
        return parse_wall_clock(text)
    except ValueError:
        if _is_zero_date(text, policy):
            return None
        raise


@functools.lru_cache(maxsize=64)
def _zone(name: str) -> dt.tzinfo:
    if name in ("", "UTC", "Local", "SYSTEM"):
        # TiCDC resolves "system"/"local" to an IANA name before encoding; an empty
        # or "UTC" location means UTC.
        return _UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as err:
        # OSError: a name that is a folder of the zone database ("America") or too long for a file name.
        raise ValueConversionError(f"unknown time zone {name!r}") from err


def timestamp_in_zone(text: str, zone_name: str, options: TypeOptions = DEFAULT_OPTIONS) -> dt.datetime | None:
    """A TIMESTAMP shown as wall-clock `text` in `zone_name`, as a UTC instant."""
    zone = _zone(zone_name)
    if zone is _UTC:
        return _utc_instant(text, options.zero_date)
    wall = _wall_clock_or_none(str(text), options.zero_date)
    if wall is None:
        return None
    return wall.replace(tzinfo=zone).astimezone(_UTC)


def _utc_instant(text: object, policy: str) -> dt.datetime | None:
    """A TIMESTAMP shown as wall-clock `text` in UTC, as an instant."""
    try:
        instant = _from_iso(text + "+00:00")  # the common case: replace() costs 5x the parse
        if instant.tzinfo is not None:  # a date alone parses too, but CPython drops the offset then
            return instant
    except (ValueError, TypeError):
        pass
    wall = _wall_clock_or_none(str(text), policy)
    return None if wall is None else wall.replace(tzinfo=_UTC)


def _temporal_converter(name: str, target: str, options: TypeOptions) -> Converter:
    policy = options.zero_date
    if target == "STRING":

        def as_text(value: object) -> str | None:
            text = str(value)
            return None if _is_zero_date(text, policy) else text

        return as_text
    if name == "date":

        def as_date(value: object) -> dt.date | None:
            text = str(value)
            try:
                return dt.date.fromisoformat(text[:10])
            except ValueError:
                if _is_zero_date(text, policy):
                    return None
                raise

        return as_date
    if name == "timestamp" or target == "TIMESTAMP":

        def as_instant(value: object) -> dt.datetime | None:
            return _utc_instant(value, policy)

        return as_instant

    def as_wall_clock(value: object) -> dt.datetime | None:
        try:
            wall = _from_iso(value)  # the common case, inline
            if wall.tzinfo is None:
                return wall
        except (ValueError, TypeError):
            pass
        return _wall_clock_or_none(str(value), policy)  # refuses a UTC offset: DATETIME has none

    return as_wall_clock


_TIME = re.compile(r"(-)?(\d+):(\d{2}):(\d{2})(?:\.(\d{1,6}))?")


def _time_to_microseconds(value: object) -> int:
    match = _TIME.fullmatch(_to_str(value))
    if match is None:
        raise ValueConversionError(f"not a TIME value: {value!r}")
    sign, hours, minutes, seconds, fraction = match.groups()
    micros = ((int(hours) * 60 + int(minutes)) * 60 + int(seconds)) * 1_000_000 + int((fraction or "").ljust(6, "0"))
    if micros >= 1 << 63:  # TiDB's TIME stops at 838:59:59; the BIGINT column at 2^63 microseconds
        raise ValueConversionError(f"TIME {value!r} is outside BIGINT microseconds")
    return -micros if sign else micros


def _bit_to_bytes(t: TiDBType) -> Converter:
    width = max(1, ((t.length or 1) + 7) // 8)

    def convert(value: object) -> bytes:
        return int(value).to_bytes(width, "big")

    return convert


def _enum_converter(t: TiDBType) -> Converter:
    elements = t.elements

    def convert(index: object) -> str:
        position = int(index)
        if position == 0:
            return ""  # MySQL's "invalid value" member, shown as the empty string
        if 0 < position <= len(elements):  # not elements[-1] for a negative index
            return elements[position - 1]
        raise ValueConversionError(f"enum index {position} outside {len(elements)} members")

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
    "TINYINT": _integer_converter("TINYINT", 8),
    "SMALLINT": _integer_converter("SMALLINT", 16),
    "INT": _integer_converter("INT", 32),
    "BIGINT": _integer_converter("BIGINT", 64),
    "FLOAT": _to_float32,
    "DOUBLE": _to_float,
    "STRING": _to_str,
    "VARIANT": _to_str,  # JSON text; the writer parses it into a VARIANT
    "BINARY": _to_bytes,
}


def text_converter(t: TiDBType, options: TypeOptions = DEFAULT_OPTIONS) -> Converter:
    """A function from TiCDC's text form of a `t` value to its Python value.

    TiCDC's text form: integers, BIT and decimals as decimal digits, temporal
    values as MySQL shows them, ENUM as its 1-based index, SET as its bitmask.
    Binary values must already be bytes. TIMESTAMP text is taken as UTC; use
    `timestamp_in_zone` when the protocol names a zone.
    """
    target = spark_type(t, options)
    if t.name == "enum":
        return _enum_converter(t)
    if t.name == "set":
        return _set_converter(t)
    if t.name in ("date", "datetime", "timestamp"):
        return _temporal_converter(t.name, target, options)
    if t.name == "time" and target == "BIGINT":
        return _time_to_microseconds
    if t.name == "bit" and target == "BINARY":
        return _bit_to_bytes(t)
    if target.startswith("DECIMAL"):
        return _decimal_converter(target)
    return _CONVERTERS_BY_SPARK_TYPE[target]


# Defaults TiDB evaluates at write time (CURRENT_TIMESTAMP(3), NOW(), ...): there
# is no single value to backfill.
_DYNAMIC_DEFAULT_PREFIXES = ("CURRENT_", "NOW(", "LOCALTIME")


def is_dynamic_default(raw: object) -> bool:
    return raw is not None and _to_str(raw).upper().startswith(_DYNAMIC_DEFAULT_PREFIXES)


def _bit_default(raw: object) -> int:
    # Simple JSON carries a BIT default as a number; Avro as the raw bytes of
    # the binary literal.
    try:
        return int(float(_to_str(raw)))
    except ValueError:
        return int.from_bytes(_to_str(raw).encode("latin-1"), "big")


def default_value(t: TiDBType, raw: object, options: TypeOptions = DEFAULT_OPTIONS) -> object:
    """The Python value of a column default as the schema describes it.

    Defaults are stored the way TiDB stores them: ENUM/SET by name, BIT as a
    number, everything else as text. Returns None for no default and for
    defaults evaluated at write time (CURRENT_TIMESTAMP).
    """
    if raw is None or is_dynamic_default(raw):
        return None
    text = _to_str(raw)
    if t.name in ("enum", "set"):
        return text
    if is_binary(t):
        return text.encode("utf-8")
    if t.name == "bit":
        return text_converter(t, options)(_bit_default(raw))
    return text_converter(t, options)(text)
