"""TiCDC `debezium` protocol decoder (spec: shared/spec/001; encoder: pingcap/ticdc
pkg/sink/codec/debezium).

Values are JSON `{"payload": ..., "schema": ...}` (no `schema` with
debezium-disable-schema). A payload with `op` c/u/d is a row change, `op` m a
watermark (sent only with enable-tidb-extension), and one without `op` a DDL
whose `tableChanges` describe the table after it. The Kafka key holds the
handle-key columns. The structure of a row comes from its inline schema
refined by the table's last DDL description, or from that description alone
when schemas are disabled (rows of a table not described yet are parked, as
with Simple).

Ordering: with the TiDB extension, watermarks gate by commitTs like Simple;
without it there are no watermarks, so events are taken in offset order.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Callable, Mapping, Sequence

from schema_cache import types
from schema_cache.checks import decoding, require_handle_key
from schema_cache.debezium.columns import ValueReader, resolve_type, value_reader
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
from schema_cache.parking import ParkedMessage, ParkingLot

log = logging.getLogger(__name__)

_DDL_KINDS = {"CREATE": SchemaChangeKind.CREATE, "ALTER": SchemaChangeKind.ALTER, "DROP": SchemaChangeKind.DROP}


def parse_table_ids(text: str) -> list[TableName]:
    """`"db"."table"` ids of a tableChanges entry; a rename lists old, then new."""
    names: list[str] = []
    ids: list[TableName] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            end = i + 1
            while end < len(text) and not (text[end] == '"' and text[end + 1 : end + 2] != '"'):
                end += 2 if text[end] == '"' else 1
            names.append(text[i + 1 : end].replace('""', '"'))
            i = end + 1
        elif ch == ",":
            ids.append(TableName(*names))
            names = []
            i += 1
        else:
            i += 1  # the '.' between database and table
    if names:
        ids.append(TableName(*names))
    return ids


class _Structure:
    """A table structure resolved for decoding: neutral schema plus a reader per column."""

    def __init__(self, schema: TableSchema, readers: Sequence[ValueReader]) -> None:
        self.schema = schema
        self.converters = tuple(r.convert for r in readers)
        self.names = schema.column_names()

    def row(self, values: Mapping[str, object] | None) -> tuple | None:
        if values is None:
            return None
        return types.convert_values(self.names, self.converters, values.get)


class DebeziumDecoder:
    def __init__(
        self,
        *,
        enable_tidb_extension: bool = True,
        types_options: types.TypeOptions = types.DEFAULT_OPTIONS,
        schema_wait_seconds: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ordering = Ordering.COMMIT_TS if enable_tidb_extension else Ordering.OFFSET
        self._types = types_options
        self._schema_wait_seconds = schema_wait_seconds
        self._parking = ParkingLot(clock)
        self._late_errors: list[DecodeError] = []
        # Per table: the last DDL description (tableChanges[].table) and its commitTs.
        self._described: dict[TableName, tuple[int, Mapping[str, object]]] = {}
        self._structures: dict[tuple, _Structure] = {}

    # --- the Decoder interface -------------------------------------------------

    def decode(self, message: RawMessage) -> list[Event]:
        return decoding(message, self._decode)

    def parked(self) -> list[ParkedMessage]:
        return self._parking.all()

    def take_errors(self) -> list[DecodeError]:
        errors, self._late_errors = self._late_errors, []
        return errors + self._parking.expired_errors(
            self._schema_wait_seconds,
            lambda p: f"no description of {p.table} arrived within {self._schema_wait_seconds:g}s "
            "(schemas are disabled, so its structure only comes with DDL events)",
        )

    def state(self) -> bytes:
        return json.dumps(
            [[t.database, t.table, ts, described] for t, (ts, described) in self._described.items()]
        ).encode()

    def restore(self, state: bytes) -> None:
        for database, table, ts, described in json.loads(state):
            self._described[TableName(database, table)] = (ts, described)

    # --- decoding ---------------------------------------------------------------

    def _decode(self, message: RawMessage) -> list[Event]:
        if message.value is None:
            raise DecodeError.about(message, "empty message value (TiCDC's debezium protocol sends no tombstones)")
        try:
            envelope = json.loads(message.value)
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise DecodeError.about(message, f"not JSON: {err}") from err
        payload = envelope["payload"]
        op = payload.get("op")
        if op == "m":
            return [Watermark(int(payload["source"]["commit_ts"]), message.position)]
        if op in ("c", "u", "d"):
            return self._row_change(message, envelope)
        if op is None:
            return self._schema_change(message, payload)
        raise DecodeError.about(message, f"unknown op {op!r}")

    def _row_change(self, message: RawMessage, envelope: Mapping[str, object]) -> list[Event]:
        payload = envelope["payload"]
        source = payload["source"]
        table = TableName(str(source["db"]), str(source["table"]))
        key = self._key(message)
        fields = self._value_fields(envelope.get("schema"))
        described = self._described.get(table)
        if fields is None and described is None:
            log.info("parking %s: %s not described yet (schemas are disabled)", message.position, table)
            self._parking.park(table, message, table, int(source["commit_ts"]))
            return []
        structure = self._structure(table, fields, described, tuple(key))
        require_handle_key(structure.schema, message)
        op = payload["op"]
        before = structure.row(payload.get("before"))
        after = structure.row(payload.get("after"))
        if op == "c":
            kind = Op.INSERT
        elif op == "d":
            kind = Op.DELETE
            if before is None:  # the old image is missing: the key finds the row
                before = structure.row(key)
        else:
            # Without output-old-value there is no `before`: an upsert of the new image.
            kind = Op.UPDATE if before is not None else Op.UPSERT
        return [RowChange(table, int(source["commit_ts"]), kind, before, after, structure.schema, message.position)]

    def _key(self, message: RawMessage) -> dict:
        if not message.key:
            return {}
        try:
            return dict(json.loads(message.key)["payload"])
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as err:
            raise ValueConversionError(f"the Kafka key is not a Debezium key: {err}") from err

    @staticmethod
    def _value_fields(schema: Mapping[str, object] | None) -> list[Mapping[str, object]] | None:
        if not schema:
            return None
        for field in schema["fields"]:
            if field.get("field") in ("after", "before"):
                unique: dict[str, Mapping[str, object]] = {}
                for column in field["fields"]:
                    unique.setdefault(str(column["field"]), column)  # ticdc lists virtual columns twice
                return list(unique.values())
        raise ValueConversionError("the inline schema has no before/after struct")

    def _structure(
        self,
        table: TableName,
        fields: list[Mapping[str, object]] | None,
        described: tuple[int, Mapping[str, object]] | None,
        key: tuple[str, ...],
    ) -> _Structure:
        ddl_ts, ddl_table = described if described is not None else (0, None)
        fields_text = json.dumps(fields, sort_keys=True) if fields is not None else None
        signature = (table, ddl_ts, frozenset(key), fields_text)
        cached = self._structures.get(signature)
        if cached is not None:
            return cached
        ddl_columns = {str(c["name"]): c for c in (ddl_table or {}).get("columns") or ()}
        if fields is not None:
            names = [str(f["field"]) for f in fields]
            by_name = {str(f["field"]): f for f in fields}
        else:
            ordered = sorted(ddl_columns.values(), key=lambda c: int(c.get("position") or 0))
            names, by_name = [str(c["name"]) for c in ordered], {}
        columns, readers = [], []
        for name in names:
            field, ddl_column = by_name.get(name), ddl_columns.get(name)
            tidb = resolve_type(field, ddl_column)
            reader = value_reader(tidb, str(field.get("name")) if field and field.get("name") else None, self._types)
            nullable = bool((ddl_column or field or {}).get("optional", True))
            default = None
            if ddl_column is not None and ddl_column.get("defaultValueExpression") is not None:
                try:
                    default = types.default_value(tidb, ddl_column["defaultValueExpression"], self._types)
                except (ValueError, ArithmeticError, ValueConversionError):
                    default = None
            columns.append(Column(name, types.spark_type(tidb, self._types), nullable, default, tidb.describe()))
            readers.append(reader)
        # Key columns in table order, whether they came from the Kafka key or the DDL.
        ordered_key = tuple(n for n in names if n in key)
        if len(ordered_key) != len(key):
            raise ValueConversionError(f"key columns {sorted(set(key) - set(names))} are not columns of {table}")
        schema = TableSchema(table, tuple(columns), ordered_key, version=ddl_ts or None)
        structure = self._structures[signature] = _Structure(schema, readers)
        return structure

    def _schema_change(self, message: RawMessage, payload: Mapping[str, object]) -> list[Event]:
        source = payload["source"]
        commit_ts = int(source["commit_ts"])
        statement = str(payload.get("ddl") or "")
        changes = payload.get("tableChanges") or []
        table_name = str(source.get("table") or "")
        if not changes:
            if not table_name:
                log.warning("ignoring database-level DDL at %s: %s", message.position, statement)
                return []
            # TiCDC sends TRUNCATE TABLE with no tableChanges (the structure is unchanged).
            table = TableName(str(source["db"]), table_name)
            known = self._described.get(table)
            schema = self._structure(table, None, known, self._primary_key(known[1])).schema if known else None
            return [SchemaChange(table, commit_ts, SchemaChangeKind.TRUNCATE, schema, message.position, statement)]
        change = changes[0]
        ids = parse_table_ids(str(change["id"]))
        kind = _DDL_KINDS[str(change["type"])]
        table, previous = ids[-1], (ids[0] if len(ids) == 2 else None)
        described = change.get("table")
        if described is None:  # DROP TABLE
            self._described.pop(table, None)
            return [SchemaChange(table, commit_ts, kind, None, message.position, statement)]
        self._described[table] = (commit_ts, described)
        if previous is not None:
            self._described.pop(previous, None)
            kind = SchemaChangeKind.RENAME
        schema = self._structure(table, None, (commit_ts, described), self._primary_key(described)).schema
        event = SchemaChange(table, commit_ts, kind, schema, message.position, statement, previous_name=previous)
        return [event, *self._parking.decode_released(table, self.decode, self._late_errors)]

    @staticmethod
    def _primary_key(described: Mapping[str, object]) -> tuple[str, ...]:
        return tuple(str(c) for c in described.get("primaryKeyColumnNames") or ())
