"""Builds TiCDC `debezium` protocol messages shaped as TiCDC's codec shapes them.

For tests and the stream stand-in (`testbed.changefeed`), from Simple-style
table definitions (`testbed.tables.column/table_schema`). Shapes
follow pingcap/ticdc pkg/sink/codec/debezium/codec.go: payload before schema,
`source.commit_ts` always present, deletes with `after` null, DDL without
`op` and with `tableChanges` (a rename's id lists old, then new), watermarks
(`op` m) only with the TiDB extension.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Mapping, Sequence

from testbed.tables import primary_key_columns

_UINT64 = 1 << 64
_SMALL = {"tinyint": "int16", "smallint": "int16", "mediumint": "int32", "int": "int32", "bigint": "int64"}
_UNSIGNED = {"tinyint": "int16", "smallint": "int32", "mediumint": "int32", "int": "int64", "bigint": "int64"}
_STRINGS = {"char", "varchar", "binary", "varbinary", "tinytext", "text", "mediumtext", "longtext",
            "tinyblob", "blob", "mediumblob", "longblob"}
_BINARY_NAMES = {"char": "binary", "varchar": "varbinary", "tinytext": "tinyblob", "text": "blob",
                 "mediumtext": "mediumblob", "longtext": "longblob"}
_JDBC = {"tinyint": 5, "smallint": 5, "mediumint": 4, "int": 4, "year": 4, "bigint": -5, "float": 6, "double": 8,
         "decimal": 3, "date": 91, "time": 92, "datetime": 93, "timestamp": 2014, "char": 1, "varchar": 12,
         "binary": -2, "varbinary": -3, "enum": 1, "set": 1, "bit": -7, "json": 1111}
_EPOCH = dt.datetime(1970, 1, 1)


def _type_name(data_type: Mapping[str, object]) -> str:
    """TiDB's TypeToStr: binary-charset strings are named binary/varbinary/blob."""
    kind = str(data_type["mysqlType"])
    if data_type.get("charset") == "binary" and kind in _BINARY_NAMES:
        return _BINARY_NAMES[kind]
    return kind


def _is_binary(data_type: Mapping[str, object]) -> bool:
    return _type_name(data_type) in {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}


def _fsp(data_type: Mapping[str, object]) -> int:
    return int(data_type.get("decimal") or 0)


def field_schema(column: Mapping[str, object], extension: bool) -> dict:
    data_type = column["dataType"]
    kind = str(data_type["mysqlType"])
    unsigned = bool(data_type.get("unsigned"))
    out: dict = {}
    if extension:
        name = _type_name(data_type)
        out["tidb_type"] = name + (" unsigned" if unsigned and kind not in ("year", "bit", "decimal") else "")
    if kind in _SMALL:
        out["type"] = (_UNSIGNED if unsigned else _SMALL)[kind]
    elif kind == "bit":
        length = int(data_type.get("length") or 1)
        if length == 1:
            out["type"] = "boolean"
        else:
            out.update(type="bytes", name="io.debezium.data.Bits", version=1, parameters={"length": str(length)})
    elif kind in ("float", "double"):
        out["type"] = kind
    elif kind == "decimal":
        out["type"] = "double"
    elif kind == "enum":
        allowed = ",".join(e.replace(",", "\\,") for e in data_type["elements"])
        out.update(type="string", name="io.debezium.data.Enum", version=1, parameters={"allowed": allowed})
    elif kind == "set":
        out.update(type="string", name="io.debezium.data.EnumSet", version=1,
                   parameters={"allowed": ",".join(data_type["elements"])})
    elif kind == "date":
        out.update(type="int32", name="io.debezium.time.Date", version=1)
    elif kind == "datetime":
        semantic = "io.debezium.time.MicroTimestamp" if _fsp(data_type) > 3 else "io.debezium.time.Timestamp"
        out.update(type="int64", name=semantic, version=1)
    elif kind == "timestamp":
        out.update(type="string", name="io.debezium.time.ZonedTimestamp", version=1)
    elif kind == "time":
        out.update(type="int64", name="io.debezium.time.MicroTime", version=1)
    elif kind == "year":
        out.update(type="int32", name="io.debezium.time.Year", version=1)
    elif kind == "json":
        out.update(type="string", name="io.debezium.data.Json", version=1)
    elif kind in _STRINGS:
        out["type"] = "string"  # binary values are base64, still declared string
    else:
        raise ValueError(f"no Debezium mapping for {kind!r}")
    out["optional"] = bool(column.get("nullable", True))
    out["field"] = column["name"]
    return out


def value(column: Mapping[str, object], raw: object) -> object:
    """A TiDB value as TiCDC's debezium codec writes it."""
    if raw is None:
        return None
    data_type = column["dataType"]
    kind = str(data_type["mysqlType"])
    if kind == "bigint" and data_type.get("unsigned"):
        return int(raw) - (_UINT64 if int(raw) >= 1 << 63 else 0)
    if kind in _SMALL or kind == "year":
        return int(raw)
    if kind in ("float", "double", "decimal"):
        return float(raw)
    if kind == "bit":
        length = int(data_type.get("length") or 1)
        if length == 1:
            return bool(raw)
        return base64.b64encode(int(raw).to_bytes((length + 7) // 8, "little")).decode()
    if kind == "date":
        return (dt.date.fromisoformat(str(raw)[:10]) - _EPOCH.date()).days
    if kind == "datetime":
        moment = raw if isinstance(raw, dt.datetime) else dt.datetime.fromisoformat(str(raw))
        delta = moment - _EPOCH
        if _fsp(data_type) > 3:
            return delta // dt.timedelta(microseconds=1)
        return delta // dt.timedelta(milliseconds=1)
    if kind == "timestamp":
        utc = raw.astimezone(dt.timezone.utc)
        fsp = _fsp(data_type)
        text = utc.strftime("%Y-%m-%dT%H:%M:%S")
        return (text + "." + f"{utc.microsecond:06d}"[:fsp] if fsp else text) + "Z"
    if kind == "time":
        text = str(raw)
        sign = -1 if text.startswith("-") else 1
        hours, minutes, seconds = text.lstrip("-").split(":")
        whole, _, fraction = seconds.partition(".")
        micros = ((int(hours) * 60 + int(minutes)) * 60 + int(whole)) * 1_000_000 + int(fraction.ljust(6, "0") or 0)
        return sign * micros
    if _is_binary(data_type):
        return base64.b64encode(bytes(raw)).decode()
    return str(raw)


def _handle_key(schema: Mapping[str, object]) -> list[str]:
    nullable = {c["name"]: c.get("nullable", True) for c in schema["columns"]}
    for index in schema["indexes"]:
        if index.get("primary"):
            return list(index["columns"])
    for index in schema["indexes"]:
        if index.get("unique") and not any(nullable[c] for c in index["columns"]):
            return list(index["columns"])
    return []


def _ddl_column(column: Mapping[str, object], position: int) -> dict:
    data_type = column["dataType"]
    kind = str(data_type["mysqlType"])
    name = _type_name(data_type).upper()
    unsigned = bool(data_type.get("unsigned"))
    if kind in ("datetime", "timestamp", "time"):
        length, scale = _fsp(data_type), None
    elif kind == "decimal":
        length, scale = int(data_type.get("length") or 10), int(data_type.get("decimal") or 0)
    else:
        length, scale = data_type.get("length"), None
    default = column.get("default")
    return {
        "name": column["name"],
        "jdbcType": _JDBC.get(kind, 12),
        "nativeType": None,
        "typeName": name,
        "typeExpression": name + (" UNSIGNED" if unsigned else ""),
        "charsetName": None if data_type.get("charset") == "binary" else data_type.get("charset"),
        "length": length,
        "scale": scale,
        "position": position,
        "optional": bool(column.get("nullable", True)),
        "autoIncremented": False,
        "generated": False,
        "comment": None,
        "defaultValueExpression": None if default is None else str(default),
        "enumValues": [f"'{e}'" for e in data_type["elements"]] if kind in ("enum", "set") else None,
    }


class DebeziumWriter:
    def __init__(self, *, with_schema: bool = True, enable_tidb_extension: bool = True, cluster: str = "default") -> None:
        self.with_schema = with_schema
        self.extension = enable_tidb_extension
        self._cluster = cluster

    def _json(self, payload: dict, schema: dict) -> bytes:
        body = {"payload": payload}
        if self.with_schema:
            body["schema"] = schema
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()

    def _source(self, commit_ts: int, database: str, table: str) -> dict:
        return {
            "version": "2.4.0.Final", "connector": "TiCDC", "name": self._cluster, "ts_ms": commit_ts >> 18,
            "snapshot": "false", "db": database, "table": table, "server_id": 0, "gtid": None, "file": "",
            "pos": 0, "row": 0, "thread": 0, "query": None, "commit_ts": commit_ts, "cluster_id": self._cluster,
        }

    def _prefix(self, schema: Mapping[str, object]) -> str:
        return f"{self._cluster}.{schema['schema']}.{schema['table']}"

    def row(
        self, schema: Mapping[str, object], kind: str, commit_ts: int,
        before: Mapping[str, object] | None, after: Mapping[str, object] | None,
    ) -> tuple[bytes, bytes]:
        columns = list(schema["columns"])
        fields = [field_schema(c, self.extension) for c in columns]

        def image(row):
            return None if row is None else {c["name"]: value(c, row.get(c["name"])) for c in columns}

        op = {"INSERT": "c", "UPDATE": "u", "DELETE": "d"}[kind]
        payload: dict = {"source": self._source(commit_ts, schema["schema"], schema["table"]),
                         "ts_ms": commit_ts >> 18, "transaction": None, "op": op}
        if op == "d":
            payload.update(after=None, before=image(before))
        else:
            payload.update(before=image(before), after=image(after))
        prefix = self._prefix(schema)
        envelope = {"type": "struct", "optional": False, "name": f"{prefix}.Envelope", "version": 1, "fields": [
            {"type": "struct", "optional": True, "name": f"{prefix}.Value", "field": "before", "fields": fields},
            {"type": "struct", "optional": True, "name": f"{prefix}.Value", "field": "after", "fields": fields},
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ]}
        key_columns = [c for c in columns if c["name"] in _handle_key(schema)]
        key_row = after if after is not None else before
        key_payload = {c["name"]: value(c, key_row[c["name"]]) for c in key_columns}
        key_schema = {"type": "struct", "name": f"{prefix}.Key", "optional": False,
                      "fields": [field_schema(c, self.extension) for c in key_columns]}
        return self._json(key_payload, key_schema), self._json(payload, envelope)

    def ddl(
        self, kind: str, schema: Mapping[str, object], commit_ts: int, sql: str,
        previous: Sequence[str] | None = None,
    ) -> tuple[bytes, bytes]:
        database, table = schema["schema"], schema["table"]
        table_id = f'"{database}"."{table}"'
        if kind == "TRUNCATE":
            changes: list = []
        elif kind == "ERASE":
            changes = [{"type": "DROP", "id": table_id, "table": None}]
        else:
            if previous is not None:
                table_id = f'"{previous[0]}"."{previous[1]}",{table_id}'
            described = {
                "defaultCharsetName": "utf8mb4",
                "primaryKeyColumnNames": primary_key_columns(schema),
                "columns": [_ddl_column(c, n + 1) for n, c in enumerate(schema["columns"])],
                "comment": None,
            }
            changes = [{"type": "CREATE" if kind == "CREATE" else "ALTER", "id": table_id, "table": described}]
        payload = {"source": self._source(commit_ts, database, table), "ts_ms": commit_ts >> 18,
                   "databaseName": database, "schemaName": None, "ddl": sql, "tableChanges": changes}
        value_schema = {"optional": False, "type": "struct", "version": 1,
                        "name": "io.debezium.connector.mysql.SchemaChangeValue", "fields": []}
        key_schema = {"type": "struct", "name": "io.debezium.connector.mysql.SchemaChangeKey", "optional": False,
                      "version": 1, "fields": [{"field": "databaseName", "optional": False, "type": "string"}]}
        return self._json({"databaseName": database}, key_schema), self._json(payload, value_schema)

    def watermark(self, commit_ts: int) -> tuple[bytes, bytes] | None:
        if not self.extension:
            return None  # TiCDC sends watermarks only with the TiDB extension
        payload = {"source": self._source(commit_ts, "", ""), "ts_ms": commit_ts >> 18, "transaction": None, "op": "m"}
        key_schema = {"type": "struct", "name": f"{self._cluster}.watermark.Key", "optional": False, "fields": []}
        value_schema = {"type": "struct", "name": f"{self._cluster}.watermark.Envelope", "optional": False, "fields": []}
        return self._json({}, key_schema), self._json(payload, value_schema)
