"""TiCDC `debezium` protocol decoder (spec: shared/spec/001; encoder: pingcap/ticdc
pkg/sink/codec/debezium).

Values are JSON `{"payload": ..., "schema": ...}` (no `schema` with
debezium-disable-schema). A payload with `op` c/u/d is a row change, `op` m a
watermark (sent only with enable-tidb-extension), and one without `op` a DDL
whose `tableChanges` describe the table after it. The Kafka key holds the
handle-key columns. The structure of a row comes from its inline schema
refined by the table's last DDL description, or from that description alone
when schemas are disabled (rows of a table not described yet are parked, as
with Simple); the description is the one in effect at the row's commitTs
(`descriptions`), whatever was decoded last.

Ordering: with the TiDB extension, watermarks gate by commitTs like Simple;
without it there are no watermarks, so events are taken in offset order.

Debezium's own MySQL/MariaDB connectors (`source.connector` "mysql"/"mariadb")
write the same envelope; what they send beyond TiCDC's output is accepted here:
no `commit_ts` (offset order only), snapshot reads (`op` r, inserts), truncates
(`op` t, no key), the tombstone after each delete (a null value: skipped), a
RENAME TABLE as an ALTER of the new name only (the old one is read from the
statement), and schema changes without a table (SET, CREATE DATABASE, USE).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping

import orjson

from ticdc_delta.exceptions import InvalidMessage
from ticdc_delta.schema_cache import events
from ticdc_delta.schema_cache.codec import ColumnCodec, RowCodec, ValueContext, column_default
from ticdc_delta.schema_cache.ddl_text import renamed_from
from ticdc_delta.schema_cache.debezium.columns import debezium_value, resolve_type
from ticdc_delta.schema_cache.debezium.descriptions import Descriptions
from ticdc_delta.schema_cache.debezium.options import DebeziumOptions
from ticdc_delta.schema_cache.decoder import Parking, read_commit_ts, require_handle_key
from ticdc_delta.schema_cache.parking import ParkingLot
from ticdc_delta.schema_cache.types import DEFAULT_OPTIONS, TypeOptions

log = logging.getLogger(__name__)

_DDL_KINDS = {
    "CREATE": events.SchemaChangeKind.CREATE,
    "ALTER": events.SchemaChangeKind.ALTER,
    "DROP": events.SchemaChangeKind.DROP,
}


def parse_table_ids(text: str) -> list[events.TableName]:
    """`"db"."table"` ids of a tableChanges entry; a rename lists old, then new."""
    names: list[str] = []
    ids: list[events.TableName] = []
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
            ids.append(events.TableName(*names))
            names = []
            i += 1
        else:
            i += 1  # the '.' between database and table
    if names:
        ids.append(events.TableName(*names))
    return ids


# Decoders made without options (tests, tools) read TiCDC's output with its extension.
_WITH_EXTENSION = DebeziumOptions(enable_tidb_extension=True)


class DebeziumDecoder(Parking):
    # Debezium's own connectors' `r` (a snapshot's row) is read as an INSERT: they are ordered by offset, where
    # the applier never appends.
    inserts_are_new = True

    def __init__(self, options: DebeziumOptions = _WITH_EXTENSION, types: TypeOptions = DEFAULT_OPTIONS, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ordering = options.ordering
        self._context = ValueContext(types)
        wait = options.schema_wait_seconds
        self._parking = ParkingLot(
            wait,
            lambda p: f"no description of {p.table} arrived within {wait:g}s "
            "(schemas are disabled, so its structure only comes with DDL events)",
            clock,
        )
        # Per table: its DDL descriptions (tableChanges[].table) by commitTs.
        self._described = Descriptions()
        self._structures: dict[tuple, RowCodec] = {}
        self._description_texts: dict[int, tuple[Mapping[str, object], str]] = {}

    # --- the Decoder interface -------------------------------------------------

    def state(self) -> bytes:
        return json.dumps(self._described.state()).encode()

    def restore(self, state: bytes) -> None:
        self._described.restore(json.loads(state))

    def forget_before(self, commit_ts: int) -> None:
        self._described.forget_before(commit_ts)

    # --- decoding ---------------------------------------------------------------

    def _decode(self, message: events.RawMessage) -> list[events.Event]:
        if message.value is None:
            if message.key:
                # The tombstone Debezium's connectors send after a delete (for log compaction);
                # the delete itself came just before it.
                return []
            raise InvalidMessage("empty message value without a key (not a Debezium tombstone)")
        try:
            envelope = orjson.loads(message.value)
        except ValueError as err:
            raise InvalidMessage(f"not JSON: {err}") from err
        payload = envelope["payload"]
        op = payload.get("op")
        if op == "m":
            return [events.Watermark(read_commit_ts(payload["source"]["commit_ts"]), message.position)]
        if op in ("c", "u", "d", "r"):
            return self._row_change(message, envelope)
        if op == "t":
            return self._truncate(message, payload)
        if op is None:
            return self._schema_change(message, payload)
        raise InvalidMessage(f"unknown op {op!r}")

    def _row_change(self, message: events.RawMessage, envelope: Mapping[str, object]) -> list[events.Event]:
        payload = envelope["payload"]
        source = payload["source"]
        table = events.TableName(str(source["db"]), str(source["table"]))
        key = self._key(message)
        fields = self._value_fields(envelope.get("schema"))
        commit_ts = self._commit_ts(source)
        described = self._described.at(table, commit_ts)
        if fields is None and described is None:
            log.info("parking %s: %s not described yet (schemas are disabled)", message.position, table)
            self._parking.park(table, message, table, commit_ts)
            return []
        structure = self._structure(table, fields, described, tuple(key))
        require_handle_key(structure.schema)
        op = payload["op"]
        old, new = payload.get("before"), payload.get("after")
        if new is None and op != "d":
            # An insert or update is applied as its new row image; without one it would pass decoding
            # and fail the batch (the applier reads the image), instead of being dead-lettered.
            raise InvalidMessage(f"op {op!r} without its new row image (`after` is null)")
        before = None if old is None else structure.key_row(old)
        after = None if new is None else structure.row(new)
        if op in ("c", "r"):  # r: a row of Debezium's initial snapshot
            kind = events.Op.INSERT
        elif op == "d":
            kind = events.Op.DELETE
            if before is None:  # the old image is missing: the key finds the row
                before = structure.key_row(key)
        else:
            # Without output-old-value there is no `before`: an upsert of the new image.
            kind = events.Op.UPDATE if before is not None else events.Op.UPSERT
        return [events.RowChange(table, commit_ts, kind, before, after, structure.schema, message.position)]

    def _commit_ts(self, source: Mapping[str, object]) -> int:
        """TiCDC's commitTs; 0 (unknown) for Debezium's own connectors, which have none (offset order only)."""
        if "commit_ts" in source:
            return read_commit_ts(source["commit_ts"])
        if self.ordering is events.Ordering.OFFSET:
            return 0
        raise InvalidMessage(
            f"no source.commit_ts (connector {source.get('connector')!r}): only TiCDC's messages order by commitTs; "
            "set enable_tidb_extension = false and allow_offset_ordering = true"
        )

    def _truncate(self, message: events.RawMessage, payload: Mapping[str, object]) -> list[events.Event]:
        """Debezium's truncate event (`op` t; sent unless `skipped.operations` has t, its default)."""
        source = payload["source"]
        table = events.TableName(str(source["db"]), str(source["table"]))
        commit_ts = self._commit_ts(source)
        known = self._described.at(table, commit_ts)
        schema = self._structure(table, None, known, self._primary_key(known[1])).schema if known else None
        truncate = events.SchemaChangeKind.TRUNCATE
        return [events.SchemaChange(table, commit_ts, truncate, schema, message.position, "TRUNCATE")]

    def _key(self, message: events.RawMessage) -> dict:
        if not message.key:
            return {}
        try:
            return dict(orjson.loads(message.key)["payload"])
        except (ValueError, KeyError, TypeError) as err:
            raise InvalidMessage(f"the Kafka key is not a Debezium key: {err}") from err

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
        raise InvalidMessage("the inline schema has no before/after struct")

    def _structure(
        self,
        table: events.TableName,
        fields: list[Mapping[str, object]] | None,
        described: tuple[int, Mapping[str, object]] | None,
        key: tuple[str, ...],
    ) -> RowCodec:
        ddl_ts, ddl_table = described if described is not None else (0, None)
        fields_text = json.dumps(fields, sort_keys=True) if fields is not None else None
        # Without commitTs (Debezium's own connectors) every description has ts 0: the description
        # itself tells them apart.
        ddl_text = self._description_text(ddl_table) if ddl_table is not None and not ddl_ts else None
        signature = (table, ddl_ts, ddl_text, frozenset(key), fields_text)
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
        columns = []
        for name in names:
            field, ddl_column = by_name.get(name), ddl_columns.get(name)
            tidb = resolve_type(field, ddl_column)
            default = None
            if ddl_column is not None:
                default = column_default(tidb, ddl_column.get("defaultValueExpression"), self._context.types)
            columns.append(
                ColumnCodec(
                    name,
                    tidb,
                    debezium_value,
                    hint=str(field.get("name") or "") if field else "",
                    nullable=bool((ddl_column or field or {}).get("optional", True)),
                    default=default,
                )
            )
        # Key columns in table order, whether they came from the Kafka key or the DDL.
        ordered_key = tuple(n for n in names if n in key)
        if len(ordered_key) != len(key):
            raise InvalidMessage(f"key columns {sorted(set(key) - set(names))} are not columns of {table}")
        structure = RowCodec.build(table, columns, ordered_key, self._context, version=ddl_ts or None)
        self._structures[signature] = structure
        return structure

    def _description_text(self, described: Mapping[str, object]) -> str:
        # Memoized by identity (the mapping is kept, so its id is not reused): rows are many, DDLs few.
        known = self._description_texts.get(id(described))
        if known is None or known[0] is not described:
            known = self._description_texts[id(described)] = (described, json.dumps(described, sort_keys=True))
        return known[1]

    def _schema_change(self, message: events.RawMessage, payload: Mapping[str, object]) -> list[events.Event]:
        source = payload["source"]
        commit_ts = self._commit_ts(source)
        statement = str(payload.get("ddl") or "")
        changes = payload.get("tableChanges") or []
        table_name = str(source.get("table") or "")
        if not changes:
            if not table_name:
                log.warning("ignoring database-level DDL at %s: %s", message.position, statement)
                return []
            # TiCDC sends TRUNCATE TABLE with no tableChanges (the structure is unchanged).
            table = events.TableName(str(source["db"]), table_name)
            known = self._described.at(table, commit_ts)
            schema = self._structure(table, None, known, self._primary_key(known[1])).schema if known else None
            truncate = events.SchemaChangeKind.TRUNCATE
            return [events.SchemaChange(table, commit_ts, truncate, schema, message.position, statement)]
        change = changes[0]
        ids = parse_table_ids(str(change["id"]))
        kind = _DDL_KINDS[str(change["type"])]
        table, previous = ids[-1], (ids[0] if len(ids) == 2 else None)
        if previous is None and kind is events.SchemaChangeKind.ALTER and "RENAME" in statement.upper():
            # Debezium's connectors describe RENAME TABLE as an ALTER of the new name alone.
            database = str(payload.get("databaseName") or source.get("db") or table.database)
            previous = renamed_from(statement, database, table)
            if previous == table:
                previous = None
        described = change.get("table")
        if described is None:  # DROP TABLE
            self._described.add(table, commit_ts, None)
            return [events.SchemaChange(table, commit_ts, kind, None, message.position, statement)]
        self._described.add(table, commit_ts, described)
        if previous is not None:
            self._described.add(previous, commit_ts, None)
            kind = events.SchemaChangeKind.RENAME
        schema = self._structure(table, None, (commit_ts, described), self._primary_key(described)).schema
        event = events.SchemaChange(table, commit_ts, kind, schema, message.position, statement, previous_name=previous)
        return [event, *self._parking.decode_released(table, self.decode)]

    @staticmethod
    def _primary_key(described: Mapping[str, object]) -> tuple[str, ...]:
        return tuple(str(c) for c in described.get("primaryKeyColumnNames") or ())


def decoder_for(options: DebeziumOptions, types: TypeOptions = DEFAULT_OPTIONS) -> DebeziumDecoder:
    """The protocol's decoder (`schema_cache.protocols.create_decoder`)."""
    return DebeziumDecoder(options, types)
