"""TiCDC `canal-json` protocol decoder (encoder: pingcap/ticdc pkg/sink/codec/canal).

One JSON message per row change: `data` (and for UPDATE `old`) hold every
value as a string, `mysqlType` the column types, `pkNames` the primary key,
`_tidb.commitTs` the commitTs (TiDB extension). DDL messages (`isDdl`) carry
only the statement, on partition 0; with the extension, `TIDB_WATERMARK`
messages go to every partition. A DDL therefore becomes a schema change with
no structure: the table's next rows show the new structure (see
`apply.applier`); the statement is only read for renames.

Values: binary columns are their bytes read as ISO-8859-1; ENUM is its index
and SET its bitmask (names need `content-compatible` types); BIT an unsigned
integer; TIMESTAMP wall clock in the TiCDC server's time zone.
"""

from __future__ import annotations

import json
import logging
from typing import Callable, Mapping

from schema_cache import types
from schema_cache.canal.mysql_type import parse_mysql_type
from schema_cache.checks import decoding, require_handle_key
from schema_cache.ddl_text import renamed_from
from schema_cache.events import (
    Column,
    Event,
    Op,
    Ordering,
    RawMessage,
    RowChange,
    SchemaChange,
    SchemaChangeKind,
    TableName,
    TableSchema,
    Watermark,
)
from schema_cache.exceptions import DecodeError, ValueConversionError
from schema_cache.large_messages import ClaimCheck, decompress, handle_key_only
from schema_cache.decoder import Stateless

log = logging.getLogger(__name__)

_OPS = {"INSERT": Op.INSERT, "UPDATE": Op.UPDATE, "DELETE": Op.DELETE}
_DDL_KINDS = {
    "CREATE": SchemaChangeKind.CREATE,
    "ALTER": SchemaChangeKind.ALTER,
    "ERASE": SchemaChangeKind.DROP,
    "TRUNCATE": SchemaChangeKind.TRUNCATE,
    "RENAME": SchemaChangeKind.RENAME,
    "CINDEX": SchemaChangeKind.INDEX,
    "DINDEX": SchemaChangeKind.INDEX,
    "QUERY": SchemaChangeKind.OTHER,
}
class CanalJsonDecoder(Stateless):
    def __init__(
        self,
        *,
        enable_tidb_extension: bool = True,
        types_options: types.TypeOptions = types.DEFAULT_OPTIONS,
        timestamp_zone: str = "UTC",
        compression: str = "none",
        claim_check: ClaimCheck | None = None,
    ) -> None:
        # Without the extension there is no commitTs and no watermark: offset order.
        self.ordering = Ordering.COMMIT_TS if enable_tidb_extension else Ordering.OFFSET
        self._types = types_options
        self._zone = timestamp_zone
        self._compression = compression
        self._claim_check = claim_check
        self._structures: dict[tuple, tuple[TableSchema, tuple[Callable, ...]]] = {}

    # --- the Decoder interface -------------------------------------------------

    def decode(self, message: RawMessage) -> list[Event]:
        return decoding(message, self._decode)

    # --- decoding ---------------------------------------------------------------

    def _body(self, message: RawMessage, value: bytes | None) -> Mapping[str, object]:
        if value is None:
            raise DecodeError.about(message, "empty message value (canal-json sends no tombstones)")
        try:
            body = json.loads(decompress(self._compression, value))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise DecodeError.about(message, f"not JSON: {err}") from err
        if not isinstance(body, dict):
            raise DecodeError.about(message, "a canal-json message must be a JSON object")
        return body

    def _decode(self, message: RawMessage) -> list[Event]:
        body = self._body(message, message.value)
        extension = body.get("_tidb") or {}
        if body.get("type") == "TIDB_WATERMARK":
            return [Watermark(int(extension["watermarkTs"]), message.position)]
        if body.get("isDdl"):
            return self._schema_change(message, body, extension)
        location = extension.get("claimCheckLocation")
        if location:
            if self._claim_check is None:
                raise DecodeError.about(message, "a claim-check message, but protocol.claim_check_root is not set")
            _, value = self._claim_check.read(str(location))
            body = self._body(message, value)  # the original, full message
            extension = body.get("_tidb") or {}
        elif extension.get("onlyHandleKey"):
            raise handle_key_only()
        return [self._row_change(message, body, extension)]

    def _row_change(self, message: RawMessage, body: Mapping, extension: Mapping) -> RowChange:
        table = TableName(str(body["database"]), str(body["table"]))
        kind = _OPS.get(str(body.get("type")))
        if kind is None:
            raise ValueConversionError(f"unknown canal-json type {body.get('type')!r}")
        data = (body.get("data") or [None])[0]
        if data is None:
            raise ValueConversionError("a row change without data")
        schema, converters = self._structure(table, data, body["mysqlType"], tuple(body.get("pkNames") or ()))
        require_handle_key(schema, message)
        row = _row(schema, converters, data)
        before = after = None
        if kind is Op.DELETE:
            before = row  # canal-json carries the deleted row in `data`
        else:
            after = row
            if kind is Op.UPDATE:
                old = (body.get("old") or [{}])[0] or {}
                # `old` may hold only changed columns (only-output-updated-columns).
                before = _row(schema, converters, {**data, **old})
        commit_ts = int(extension.get("commitTs") or 0)
        return RowChange(table, commit_ts, kind, before, after, schema, message.position)

    def _structure(
        self, table: TableName, data: Mapping[str, object], mysql_types: Mapping[str, str], key: tuple[str, ...]
    ) -> tuple[TableSchema, tuple[Callable, ...]]:
        names = tuple(data)  # table column order (mysqlType's order is Go map order)
        signature = (table, names, tuple(str(mysql_types[n]) for n in names), key)
        cached = self._structures.get(signature)
        if cached is None:
            columns, converters = [], []
            for name in names:
                tidb = parse_mysql_type(str(mysql_types[name]))
                columns.append(Column(name, types.spark_type(tidb, self._types), True, None, tidb.describe()))
                converters.append(self._converter(tidb))
            missing = [k for k in key if k not in names]
            if missing:
                raise ValueConversionError(f"pkNames {missing} are not in the row")
            cached = self._structures[signature] = (TableSchema(table, tuple(columns), key), tuple(converters))
        return cached

    def _converter(self, tidb: types.TiDBType) -> Callable[[object], object]:
        if tidb.name == "timestamp":
            zone, options = self._zone, self._types
            return lambda v: types.timestamp_in_zone(str(v), zone, options)
        convert = types.text_converter(tidb, self._types)
        if types.is_binary(tidb):
            # TiCDC reads the bytes as ISO-8859-1 characters.
            return lambda v: convert(str(v).encode("latin-1"))
        return convert

    def _schema_change(self, message: RawMessage, body: Mapping, extension: Mapping) -> list[Event]:
        database, table_name = str(body.get("database") or ""), str(body.get("table") or "")
        statement = str(body.get("sql") or "")
        if not table_name:
            log.warning("ignoring database-level DDL at %s: %s", message.position, statement)
            return []
        kind = _DDL_KINDS.get(str(body.get("type")), SchemaChangeKind.OTHER)
        table = TableName(database, table_name)
        previous = renamed_from(statement, database, table) if kind is SchemaChangeKind.RENAME else None
        commit_ts = int(extension.get("commitTs") or 0)
        # No structure travels with canal-json DDL: the next rows carry it.
        return [SchemaChange(table, commit_ts, kind, None, message.position, statement, previous_name=previous)]


def _row(schema: TableSchema, converters: tuple[Callable, ...], values: Mapping[str, object]) -> tuple:
    return types.convert_values(schema.column_names(), converters, values.get)
