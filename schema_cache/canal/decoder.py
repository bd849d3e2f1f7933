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

import logging
from collections.abc import Mapping

import orjson

from ticdc_delta.exceptions import InvalidMessage
from ticdc_delta.schema_cache import events, types
from ticdc_delta.schema_cache.canal.mysql_type import parse_mysql_type
from ticdc_delta.schema_cache.canal.options import CanalJsonOptions
from ticdc_delta.schema_cache.codec import ColumnCodec, Converter, RowCodec, ValueContext, text_value
from ticdc_delta.schema_cache.ddl_text import renamed_from
from ticdc_delta.schema_cache.decoder import SelfDescribing, read_commit_ts, require_handle_key
from ticdc_delta.schema_cache.large_messages import handle_key_only
from ticdc_delta.schema_cache.types import DEFAULT_OPTIONS, TypeOptions

log = logging.getLogger(__name__)

_OPS = {"INSERT": events.Op.INSERT, "UPDATE": events.Op.UPDATE, "DELETE": events.Op.DELETE}
_DDL_KINDS = {
    "CREATE": events.SchemaChangeKind.CREATE,
    "ALTER": events.SchemaChangeKind.ALTER,
    "ERASE": events.SchemaChangeKind.DROP,
    "TRUNCATE": events.SchemaChangeKind.TRUNCATE,
    "RENAME": events.SchemaChangeKind.RENAME,
    "CINDEX": events.SchemaChangeKind.INDEX,
    "DINDEX": events.SchemaChangeKind.INDEX,
    "QUERY": events.SchemaChangeKind.OTHER,
}

def canal_value(column: ColumnCodec, context: ValueContext) -> Converter:
    """Every value is a string; binary values are their bytes read as ISO-8859-1 characters."""
    convert = text_value(column, context)
    if types.is_binary(column.tidb):
        return lambda v: convert(str(v).encode("latin-1"))
    return convert


# Decoders made without options (tests, tools) read TiCDC's output with its extension.
_WITH_EXTENSION = CanalJsonOptions(enable_tidb_extension=True)


class CanalJsonDecoder(SelfDescribing):
    inserts_are_new = True  # only where ordered by commitTs (TiCDC's extension): the applier's condition

    def __init__(self, options: CanalJsonOptions = _WITH_EXTENSION, types: TypeOptions = DEFAULT_OPTIONS) -> None:
        # Without the extension there is no commitTs and no watermark: offset order.
        self.ordering = options.ordering
        self._context = ValueContext(types, options.timestamp_zone)
        self._large = options.large_messages()
        self._structures: dict[tuple, RowCodec] = {}

    # --- decoding ---------------------------------------------------------------

    def _body(self, value: bytes | None) -> Mapping[str, object]:
        if value is None:
            raise InvalidMessage("empty message value (canal-json sends no tombstones)")
        try:
            body = orjson.loads(self._large.value(value))
        except ValueError as err:
            raise InvalidMessage(f"not JSON: {err}") from err
        if not isinstance(body, dict):
            raise InvalidMessage("a canal-json message must be a JSON object")
        return body

    def _decode(self, message: events.RawMessage) -> list[events.Event]:
        body = self._body(message.value)
        extension = body.get("_tidb") or {}
        if body.get("type") == "TIDB_WATERMARK":
            return [events.Watermark(read_commit_ts(extension["watermarkTs"]), message.position)]
        if body.get("isDdl"):
            return self._schema_change(message, body, extension)
        location = extension.get("claimCheckLocation")
        if location:
            _, value = self._large.claimed(location)
            body = self._body(value)  # the original, full message
            extension = body.get("_tidb") or {}
        elif extension.get("onlyHandleKey"):
            raise handle_key_only()
        return [self._row_change(message, body, extension)]

    def _row_change(self, message: events.RawMessage, body: Mapping, extension: Mapping) -> events.RowChange:
        table = events.TableName(str(body["database"]), str(body["table"]))
        kind = _OPS.get(str(body.get("type")))
        if kind is None:
            raise InvalidMessage(f"unknown canal-json type {body.get('type')!r}")
        data = (body.get("data") or [None])[0]
        if data is None:
            raise InvalidMessage("a row change without data")
        codec = self._structure(table, data, body["mysqlType"], tuple(body.get("pkNames") or ()))
        require_handle_key(codec.schema)
        before = after = None
        if kind is events.Op.DELETE:
            before = codec.key_row(data)  # canal-json carries the deleted row in `data`
        else:
            after = codec.row(data)
            if kind is events.Op.UPDATE:
                old = (body.get("old") or [{}])[0] or {}
                # `old` may hold only changed columns (only-output-updated-columns).
                before = codec.key_row(old if codec.has_key_fields(old) else {**data, **old})
        commit_ts = read_commit_ts(extension.get("commitTs") or 0)
        return events.RowChange(table, commit_ts, kind, before, after, codec.schema, message.position)

    def _structure(
        self, table: events.TableName, data: Mapping[str, object], mysql_types: Mapping[str, str], key: tuple[str, ...]
    ) -> RowCodec:
        names = tuple(data)  # table column order (mysqlType's order is Go map order)
        signature = (table, names, tuple(str(mysql_types[n]) for n in names), key)
        cached = self._structures.get(signature)
        if cached is None:
            columns = [ColumnCodec(n, parse_mysql_type(str(mysql_types[n])), canal_value) for n in names]
            cached = self._structures[signature] = RowCodec.build(table, columns, key, self._context)
        return cached

    def _schema_change(self, message: events.RawMessage, body: Mapping, extension: Mapping) -> list[events.Event]:
        database, table_name = str(body.get("database") or ""), str(body.get("table") or "")
        statement = str(body.get("sql") or "")
        if not table_name:
            log.warning("ignoring database-level DDL at %s: %s", message.position, statement)
            return []
        kind = _DDL_KINDS.get(str(body.get("type")), events.SchemaChangeKind.OTHER)
        table = events.TableName(database, table_name)
        previous = renamed_from(statement, database, table) if kind is events.SchemaChangeKind.RENAME else None
        commit_ts = read_commit_ts(extension.get("commitTs") or 0)
        # No structure travels with canal-json DDL: the next rows carry it.
        return [events.SchemaChange(table, commit_ts, kind, None, message.position, statement, previous_name=previous)]


def decoder_for(options: CanalJsonOptions, types: TypeOptions = DEFAULT_OPTIONS) -> CanalJsonDecoder:
    """The protocol's decoder (`schema_cache.protocols.create_decoder`)."""
    return CanalJsonDecoder(options, types)
