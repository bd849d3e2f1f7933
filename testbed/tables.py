"""Table definitions in the shape of the Simple protocol's TableSchema, for every stand-in encoder.

The TiCDC stand-in (`testbed.changefeed`) and all protocol encoders describe
tables this way; each encoder derives its own protocol's schema from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

_BINARY_CHARSET = {"charset": "binary", "collate": "binary"}
_TEXT_CHARSET = {"charset": "utf8mb4", "collate": "utf8mb4_bin"}
_TEXT_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json"}


def column(
    name: str,
    mysql_type: str,
    *,
    nullable: bool = True,
    default: object = None,
    unsigned: bool = False,
    length: int | None = None,
    decimal: int | None = None,
    elements: Sequence[str] | None = None,
    binary: bool = False,
) -> dict:
    """A Simple `columns[]` entry."""
    data_type: dict = {"mysqlType": mysql_type}
    text = mysql_type in _TEXT_TYPES and not binary
    data_type.update(_TEXT_CHARSET if text else _BINARY_CHARSET)
    if length is not None:
        data_type["length"] = length
    if decimal:
        data_type["decimal"] = decimal
    if elements:
        data_type["elements"] = list(elements)
    if unsigned:
        data_type["unsigned"] = True
    return {"name": name, "dataType": data_type, "nullable": nullable, "default": default}


def table_schema(
    database: str,
    table: str,
    *,
    table_id: int,
    version: int,
    columns: Sequence[dict],
    primary_key: Sequence[str] = (),
    unique_keys: Sequence[Sequence[str]] = (),
) -> dict:
    """A Simple TableSchema object (JSON naming: the database is `schema`)."""
    by_name = {c["name"]: c for c in columns}
    indexes = []
    if primary_key:
        indexes.append(
            {"name": "primary", "unique": True, "primary": True, "nullable": False, "columns": list(primary_key)}
        )
    for n, key in enumerate(unique_keys):
        indexes.append(
            {
                "name": f"uk_{n}",
                "unique": True,
                "primary": False,
                "nullable": any(by_name[c]["nullable"] for c in key),
                "columns": list(key),
            }
        )
    return {
        "schema": database,
        "table": table,
        "tableID": table_id,
        "version": version,
        "columns": list(columns),
        "indexes": indexes,
    }



def primary_key_columns(schema: Mapping[str, object]) -> list[str]:
    """The primary key's columns of a `table_schema` object (none without a primary key)."""
    return list(next((i["columns"] for i in schema["indexes"] if i.get("primary")), []))

def timestamp(value: str, location: str = "UTC") -> dict:
    """A TIMESTAMP value: wall-clock `value` in `location`."""
    return {"location": location, "value": value}
