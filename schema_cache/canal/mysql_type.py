"""Canal-JSON `mysqlType` strings -> TiDBType.

TiCDC writes `int unsigned`, `varchar`, `decimal`, `enum` ... (no lengths) by
default, and `int(10) unsigned zerofill`, `decimal(5,2)`, `enum('a','b')` ...
with `content-compatible` (pkg/sink/codec/common/helper.go GetMySQLType).
What the short form leaves out is filled conservatively: a DECIMAL of unknown
precision keeps its exact text, a BIT of unknown width may need 64 bits, an
ENUM or SET without members keeps TiCDC's index or bitmask.
"""

from __future__ import annotations

import re

from ticdc_delta.exceptions import InvalidMessage
from ticdc_delta.schema_cache import types

_TYPE = re.compile(r"\s*([a-z_]+)\s*(?:\((.*)\))?\s*(.*)$", re.IGNORECASE | re.DOTALL)
_MEMBER = re.compile(r"'((?:[^']|'')*)'")
_KNOWN = {
    "tinyint", "smallint", "mediumint", "int", "bigint", "float", "double", "decimal", "date", "datetime",
    "timestamp", "time", "year", "bit", "char", "varchar", "var_string", "binary", "varbinary", "tinytext",
    "text", "mediumtext", "longtext", "tinyblob", "blob", "mediumblob", "longblob", "enum", "set", "json",
    "vector", "geometry",
}


def parse_mysql_type(text: str) -> types.TiDBType:
    match = _TYPE.match(text)
    if match is None or match.group(1).lower() not in _KNOWN:
        raise InvalidMessage(f"unsupported mysqlType {text!r}")
    name, args, suffix = match.group(1).lower(), match.group(2), match.group(3).lower()
    unsigned = "unsigned" in suffix
    if name in ("enum", "set"):
        if not args:
            # Members unknown: the value stays TiCDC's index / bitmask, as text.
            return types.TiDBType("varchar")
        members = tuple(m.replace("''", "'") for m in _MEMBER.findall(args))
        return types.TiDBType(name, elements=members)
    numbers = [int(n) for n in re.findall(r"\d+", args or "")]
    if name == "decimal":
        if not numbers:
            # Precision unknown: exact text (a STRING column) rather than a guessed DECIMAL.
            return types.TiDBType("decimal", unsigned=unsigned, length=types.MAX_SPARK_DECIMAL_PRECISION + 1)
        return types.TiDBType("decimal", unsigned=unsigned, length=numbers[0], scale=numbers[1] if len(numbers) > 1 else 0)
    if name == "bit":
        return types.TiDBType("bit", length=numbers[0] if numbers else 64)
    if name in ("datetime", "timestamp", "time"):
        return types.TiDBType(name, scale=numbers[0] if numbers else None)
    return types.TiDBType(name, unsigned=unsigned, length=numbers[0] if numbers else None)
