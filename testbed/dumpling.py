"""Dumpling exports of the stand-in changefeed's upstream model, written the way Dumpling writes them.

The layout, names and value encoding follow Dumpling's source (pingcap/tidb dumpling/export:
prepare.go's file name templates and escaping, metadata.go, writer_util.go, sql_type.go), so the
snapshot loader is tested against files shaped like real exports: `metadata` with the TSO as
`Pos`, `<db>-schema-create.sql`, `<db>.<table>-schema.sql` (SHOW CREATE TABLE text with TiDB's
`/*T![clustered_index] ... */` comment), data files `<db>.<table>.<9 digits>.csv|sql` of at most
`rows_per_file` rows (a header on every CSV file), optionally gzip-compressed.
"""

from __future__ import annotations

import datetime as dt
import gzip
import re
from decimal import Decimal
from pathlib import Path

from testbed.changefeed import Changefeed

_NUMERIC = {"tinyint", "smallint", "mediumint", "int", "bigint", "float", "double", "decimal"}
_BYTES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "bit"}
_CSV_ESCAPES = {0: b"\\0", 13: b"\\r", 10: b"\\n", 92: b"\\\\", 34: b'\\"'}
_SQL_ESCAPES = {0: b"\\0", 10: b"\\n", 13: b"\\r", 92: b"\\\\", 39: b"\\'", 34: b'\\"', 26: b"\\Z"}
_FILE_NAME_ESCAPES = re.compile(r'[\x00-\x1f%"*./:<>?\\|]|-(?i:schema)')


def file_name_part(name: str) -> str:
    """Dumpling's `fn` template function: characters a file name cannot hold as %XX."""
    return _FILE_NAME_ESCAPES.sub(lambda m: f"%{ord(m.group(0)[0]):02X}{m.group(0)[1:]}", name)


def _column_type(data_type: dict) -> str:
    kind = data_type["mysqlType"]
    if kind in ("enum", "set"):
        members = ",".join("'" + e.replace("'", "''") + "'" for e in data_type["elements"])
        return f"{kind}({members})"
    if kind == "decimal":
        text = f"decimal({data_type.get('length', 10)},{data_type.get('decimal', 0)})"
    elif kind in ("datetime", "timestamp", "time") and data_type.get("decimal"):
        text = f"{kind}({data_type['decimal']})"
    elif kind in ("varchar", "char", "binary", "varbinary", "bit"):
        text = f"{kind}({data_type.get('length') or (1 if kind == 'bit' else 255)})"
    elif kind == "bigint" and not data_type.get("unsigned"):
        text = "bigint(20)"
    else:
        text = kind
    return text + (" unsigned" if data_type.get("unsigned") else "")


def create_table(schema: dict) -> str:
    """The table's SHOW CREATE TABLE as TiDB prints it."""
    lines = []
    for column in schema["columns"]:
        line = f"  `{column['name']}` {_column_type(column['dataType'])}"
        if column["dataType"]["mysqlType"] in ("varchar", "char", "text", "enum", "set"):
            line += " COLLATE utf8mb4_bin"
        if not column.get("nullable", True):
            line += " NOT NULL"
        elif column.get("default") is None:
            line += " DEFAULT NULL"
        if column.get("default") is not None:
            line += " DEFAULT '" + str(column["default"]).replace("'", "''") + "'"
        lines.append(line)
    for index in schema["indexes"]:
        columns = ",".join(f"`{c}`" for c in index["columns"])
        if index.get("primary"):
            lines.append(f"  PRIMARY KEY ({columns}) /*T![clustered_index] CLUSTERED */")
        elif index.get("unique"):
            lines.append(f"  UNIQUE KEY `{index['name']}` ({columns})")
    body = ",\n".join(lines)
    return f"CREATE TABLE `{schema['table']}` (\n{body}\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"


def _raw(data_type: dict, value: object) -> bytes:
    """A value as TiDB's text protocol returns it to Dumpling (bytes for binary and BIT)."""
    kind = data_type["mysqlType"]
    if kind == "bit":
        return int(value).to_bytes(((data_type.get("length") or 1) + 7) // 8, "big")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    fsp = data_type.get("decimal") or 0
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc)
        text = value.strftime("%Y-%m-%d %H:%M:%S") + (f".{value.microsecond:06d}"[: fsp + 1] if fsp else "")
        return text.encode()
    if isinstance(value, float):
        return repr(value).encode()
    if isinstance(value, Decimal):
        return format(value, "f").encode()
    return str(value).encode()


def _escaped(raw: bytes, escapes: dict[int, bytes]) -> bytes:
    return b"".join(escapes.get(b, bytes((b,))) for b in raw)


def _csv_field(data_type: dict, value: object, escape_backslash: bool) -> bytes:
    if value is None:
        return b"\\N"
    raw = _raw(data_type, value)
    if data_type["mysqlType"] in _NUMERIC:
        return raw
    body = _escaped(raw, _CSV_ESCAPES) if escape_backslash else raw.replace(b'"', b'""')
    return b'"' + body + b'"'


def _sql_value(data_type: dict, value: object, escape_backslash: bool) -> bytes:
    if value is None:
        return b"NULL"
    raw = _raw(data_type, value)
    if data_type["mysqlType"] in _NUMERIC:
        return raw
    if data_type["mysqlType"] in _BYTES or data_type.get("charset") == "binary" and data_type["mysqlType"] not in (
        "date", "datetime", "timestamp", "time", "year", "json"
    ):
        return b"x'" + raw.hex().encode() + b"'"
    body = _escaped(raw, _SQL_ESCAPES) if escape_backslash else raw.replace(b"'", b"''")
    return b"'" + body + b"'"


def _data_file(schema: dict, rows: list[dict], fmt: str, escape_backslash: bool) -> bytes:
    columns = schema["columns"]
    if fmt == "csv":
        header = b",".join(b'"' + c["name"].encode() + b'"' for c in columns)
        lines = [header] + [
            b",".join(_csv_field(c["dataType"], row.get(c["name"]), escape_backslash) for c in columns) for row in rows
        ]
        return b"".join(line + b"\r\n" for line in lines)
    out = [b"/*!40014 SET FOREIGN_KEY_CHECKS=0*/;\n", b"/*!40101 SET NAMES binary*/;\n",
           b"INSERT INTO `" + schema["table"].replace("`", "``").encode() + b"` VALUES\n"]
    tuples = [b"(" + b",".join(_sql_value(c["dataType"], row.get(c["name"]), escape_backslash) for c in columns) + b")"
              for row in rows]
    out.append(b",\n".join(tuples) + b";\n")
    return b"".join(out)


def write_export(
    feed: Changefeed,
    folder: Path,
    *,
    fmt: str = "csv",
    rows_per_file: int = 1000,
    escape_backslash: bool = True,
    compress: bool = False,
) -> int:
    """Write the feed's tables as Dumpling exports them at the feed's last commitTs; return that TSO."""
    folder.mkdir(parents=True, exist_ok=True)
    tso = feed.last_ts
    suffix = ".gz" if compress else ""

    def write(name: str, data: bytes) -> None:
        (folder / (name + suffix)).write_bytes(gzip.compress(data) if compress else data)

    for database in sorted({db for db, _ in feed.table_names()}):
        write(f"{file_name_part(database)}-schema-create.sql",
              f"/*!40101 SET NAMES binary*/;\nCREATE DATABASE `{database}` /*!40100 DEFAULT CHARACTER SET utf8mb4 */;\n".encode())
    for database, table in feed.table_names():
        schema, rows = feed.table_state(database, table)
        prefix = f"{file_name_part(database)}.{file_name_part(table)}"
        write(f"{prefix}-schema.sql", f"/*!40101 SET NAMES binary*/;\n{create_table(schema)};\n".encode())
        for n, start in enumerate(range(0, len(rows), rows_per_file)):  # no file for an empty table
            write(f"{prefix}.{n:09d}.{fmt}", _data_file(schema, rows[start:start + rows_per_file], fmt, escape_backslash))
    (folder / "metadata").write_text(
        "Started dump at: 2026-11-24 10:40:19\nSHOW MASTER STATUS:\n\tLog: tidb-binlog\n"
        f"\tPos: {tso}\n\tGTID:\n\nFinished dump at: 2026-11-24 10:40:20\n"
    )
    return tso
