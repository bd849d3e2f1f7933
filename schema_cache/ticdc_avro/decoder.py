"""TiCDC `avro` protocol decoder (spec: shared/spec/000 and 003; encoder: pingcap/ticdc
pkg/sink/codec/avro).

Key and value are Confluent-framed Avro (magic byte 0, 4-byte big-endian
schema id); the key holds the primary-key columns. INSERT/UPDATE send the
new row image; DELETE is a tombstone (key, null value). There are no DDL or
watermark messages: a table's structure is its value schema, and a newer
schema id for a table is a schema change, emitted before the row that
carries it. TiCDC requires one topic per table for this protocol and writes
each partition in commit order, so events are ordered by offset.

With TiCDC's testing option avro-enable-watermark, values framed with byte 1
(DDL), 2 (checkpoint) and 3 (delete with commitTs) also occur; 3 is a delete,
2 a watermark (it orders nothing here: it tells a topic that stops getting
them), 1 carries nothing this consumer needs.
"""

from __future__ import annotations

import io
import json
import logging
import struct
from collections.abc import Mapping

import fastavro
from fastavro.schema import SchemaParseException

from ticdc_delta.exceptions import InvalidMessage
from ticdc_delta.schema_cache import events
from ticdc_delta.schema_cache.codec import RowCodec, ValueContext
from ticdc_delta.schema_cache.decoder import SelfDescribing, read_commit_ts, require_handle_key
from ticdc_delta.schema_cache.ticdc_avro.options import AvroOptions
from ticdc_delta.schema_cache.ticdc_avro.registry import SchemaRegistry, ShippedSchemas
from ticdc_delta.schema_cache.ticdc_avro.table_schema import BEFORE_FIELD, key_columns, parse_value_schema, table_name
from ticdc_delta.schema_cache.types import DEFAULT_OPTIONS, TypeOptions

log = logging.getLogger(__name__)

_CONFLUENT_MAGIC = 0
_TICDC_DDL, _TICDC_CHECKPOINT, _TICDC_DELETE = 1, 2, 3
_OPS = {"c": events.Op.INSERT, "u": events.Op.UPDATE, "d": events.Op.DELETE}


def _frame(payload: bytes) -> tuple[int, bytes]:
    if len(payload) < 5 or payload[0] != _CONFLUENT_MAGIC:
        raise InvalidMessage(
            f"not Confluent wire format (first byte {payload[:1].hex() or 'missing'}, {len(payload)} bytes)"
        )
    return struct.unpack(">I", payload[1:5])[0], payload[5:]


def _refuse_repetition(schema_id: int, schema: object) -> None:
    """Refuse a schema with arrays or maps: TiCDC's have none, and fastavro reads as many items as a
    message claims, so two bytes could make it build 2^62 empty records (memory, or a hang)."""
    waiting = [schema]
    while waiting:  # iterative: a schema may nest deeper than the recursion limit
        node = waiting.pop()
        if isinstance(node, dict):
            if node.get("type") in ("array", "map"):
                raise InvalidMessage(f"schema id {schema_id} has an Avro {node['type']}; TiCDC's schemas have none")
            waiting.extend(node.values())
        elif isinstance(node, list):
            waiting.extend(node)


def _key_only(schema: events.TableSchema, row: tuple) -> tuple:
    keep = set(schema.key_indexes())
    return tuple(v if i in keep else None for i, v in enumerate(row))


def _typed_key(schema: events.TableSchema) -> list[tuple[str, str]]:
    return [(schema.columns[i].name, schema.columns[i].spark_type) for i in schema.key_indexes()]


class TiCDCAvroDecoder(SelfDescribing):
    ordering = events.Ordering.OFFSET
    inserts_are_new = False  # offset order: a redelivered INSERT is not known by its position

    def __init__(self, options: AvroOptions, types: TypeOptions, registry: SchemaRegistry) -> None:
        self._registry = registry
        self._options = options
        self._context = ValueContext(types, options.timestamp_zone)
        self._parsed_avro: dict[int, object] = {}
        self._tables: dict[tuple[int, int | None], RowCodec] = {}
        self._keys: dict[int, RowCodec] = {}
        # Per table: the newest (value schema id, key schema id) seen, to detect schema changes.
        self._latest: dict[events.TableName, tuple[int, int | None]] = {}
        self._topic_tables: dict[str, events.TableName] = {}

    # Nothing is ever parked (every message names its schema), but the table
    # each topic carries and each table's newest schema ids are saved.

    def fetched_schemas(self) -> bytes:
        """The registry schemas this decoder fetched, for executors of the Spark engine (`ShippedSchemas`)."""
        from ticdc_delta.schema_cache.ticdc_avro.registry import ShippedSchemas

        fetched = getattr(self._registry, "fetched", None)
        return ShippedSchemas.to_bytes(fetched() if fetched is not None else {})

    def state(self) -> bytes:
        return json.dumps(
            {
                "latest": [[t.database, t.table, v, k] for t, (v, k) in self._latest.items()],
                "topics": {topic: [t.database, t.table] for topic, t in self._topic_tables.items()},
            }
        ).encode()

    def restore(self, state: bytes) -> None:
        saved = json.loads(state)
        self._latest = {events.TableName(d, t): (v, k) for d, t, v, k in saved["latest"]}
        self._topic_tables = {topic: events.TableName(d, t) for topic, (d, t) in saved["topics"].items()}

    # --- decoding ---------------------------------------------------------------

    def _read(self, schema_id: int, body: bytes) -> Mapping[str, object]:
        parsed = self._parsed_avro.get(schema_id)
        if parsed is None:
            schema = self._registry.schema(schema_id)
            _refuse_repetition(schema_id, schema)
            try:
                parsed = fastavro.parse_schema(schema)
            except SchemaParseException as err:
                # Not a ValueError, so the decoder boundary would not see bad input in it: the message
                # names a schema no Avro reader can use, which no retry or restart will change.
                raise InvalidMessage(f"schema id {schema_id} in the registry is not a valid Avro schema: {err}") from err
            self._parsed_avro[schema_id] = parsed
        return fastavro.schemaless_reader(io.BytesIO(body), parsed, None)

    def _decode(self, message: events.RawMessage) -> list[events.Event]:
        key_id = key = None
        if message.key:
            key_id, body = _frame(message.key)
            key = self._key_schema(key_id).row(self._read(key_id, body))
        value = message.value
        if value is None or value[:1] == bytes([_TICDC_DELETE]):
            commit_ts = read_commit_ts(struct.unpack(">Q", value[1:9])[0]) if value else 0
            return self._tombstone(message, key_id, key, commit_ts)
        if value[:1] == bytes([_TICDC_CHECKPOINT]):
            # avro-enable-watermark (TiCDC testing mode): offsets order this protocol, so a watermark only tells
            # which topics still get them (a topic that falls silent: its table dropped or renamed upstream).
            return [events.Watermark(read_commit_ts(struct.unpack(">Q", value[1:9])[0]), message.position)]
        if value[:1] == bytes([_TICDC_DDL]):
            return []  # (avro-enable-watermark: schema changes come with new schema ids)
        value_id, body = _frame(value)
        table = self._table_schema(value_id, key_id)
        self._check_topic(message, table.schema.name)
        record = self._read(value_id, body)
        require_handle_key(table.schema)
        decoded: list[events.Event] = self._schema_change(message, table, value_id, key_id, record)
        decoded.append(self._row(message, table, record))
        return decoded

    def _row(self, message: events.RawMessage, table: RowCodec, record: Mapping[str, object]) -> events.RowChange:
        op_name = record.get("_tidb_op") or ""
        if op_name and op_name not in _OPS:
            raise InvalidMessage(f"unknown _tidb_op {op_name!r} (expected c, u or d)")
        op = _OPS.get(op_name, events.Op.UPSERT)
        before = after = None
        if op is events.Op.DELETE:
            before = table.key_row(record)  # avro-include-before-value: the pre-image in the main fields
        else:
            after = table.row(record)
            old = record.get(BEFORE_FIELD)
            if old is not None:
                # avro-include-before-value: the old image lets key changes delete the old key.
                op, before = events.Op.UPDATE, table.key_row(old)
            elif op is events.Op.UPDATE:
                # _tidb_op "u" (the spec: an update) without an old image: the row the Key names, the
                # key of the new image (TiCDC's Kafka key of an update is built from the new row).
                before = _key_only(table.schema, after)
        return events.RowChange(
            table=table.schema.name,
            commit_ts=read_commit_ts(record.get("_tidb_commit_ts") or 0),
            op=op,
            before=before,
            after=after,
            schema=table.schema,
            position=message.position,
        )

    def _tombstone(
        self, message: events.RawMessage, key_id: int | None, key: tuple | None, commit_ts: int
    ) -> list[events.Event]:
        if key_id is None:
            raise InvalidMessage("a delete (null value) without a key: the table has no primary key")
        key_schema = self._key_schema(key_id).schema
        self._check_topic(message, key_schema.name)
        latest = self._latest.get(key_schema.name)
        schema = self._table_schema(*latest).schema if latest else key_schema
        if _typed_key(schema) != _typed_key(key_schema):
            # The key schema does not type the table's key columns as its latest structure does (a key
            # change not yet seen in a row, or another key schema): the delete goes by its own key
            # schema, as before any row, so its values keep the types they were read with.
            schema = key_schema
        require_handle_key(schema)  # a key schema without fields finds no row
        by_name = dict(zip(key_schema.column_names(), key, strict=True))
        before = tuple(by_name.get(c.name) for c in schema.columns)
        return [events.RowChange(schema.name, commit_ts, events.Op.DELETE, before, None, schema, message.position)]

    # --- schemas ------------------------------------------------------------------

    def _key_schema(self, key_id: int) -> RowCodec:
        cached = self._keys.get(key_id)
        if cached is None:
            record = self._registry.schema(key_id)
            cached = parse_value_schema(record, key_columns(record), self._options, self._context, version=key_id)
            self._keys[key_id] = cached
        return cached

    def _table_schema(self, value_id: int, key_id: int | None) -> RowCodec:
        cached = self._tables.get((value_id, key_id))
        if cached is None:
            record = self._registry.schema(value_id)
            key = key_columns(self._registry.schema(key_id)) if key_id is not None else ()
            cached = parse_value_schema(record, key, self._options, self._context, version=value_id)
            self._check_extension(record)
            self._tables[(value_id, key_id)] = cached
        return cached

    def _check_extension(self, record: Mapping[str, object]) -> None:
        has = any(f["name"] == "_tidb_commit_ts" for f in record["fields"])
        if has != self._options.enable_tidb_extension:
            raise InvalidMessage(
                f"the value schema of {table_name(record)} {'has' if has else 'lacks'} TiDB extension fields but "
                f"protocol.enable_tidb_extension is {str(self._options.enable_tidb_extension).lower()}; "
                "it must match the changefeed's enable-tidb-extension"
            )

    def _schema_change(
        self, message: events.RawMessage, table: RowCodec, value_id: int, key_id: int | None, record: Mapping
    ) -> list[events.Event]:
        name = table.schema.name
        latest = self._latest.get(name)
        if latest is not None and value_id <= latest[0]:
            return []  # the current structure, or an older one (a lagging partition)
        self._latest[name] = (value_id, key_id)
        if latest is not None and self._table_schema(*latest).schema.same_structure(table.schema):
            return []
        # A newer structure, or the first one this consumer sees: the table follows it.
        return [
            events.SchemaChange(
                table=name,
                commit_ts=read_commit_ts(record.get("_tidb_commit_ts") or 0),
                kind=events.SchemaChangeKind.ALTER,
                schema=table.schema,
                position=message.position,
                statement="",
            )
        ]

    def _check_topic(self, message: events.RawMessage, table: events.TableName) -> None:
        known = self._topic_tables.setdefault(message.topic, table)
        if known != table:
            raise InvalidMessage(
                f"topic {message.topic!r} carries rows of {known} and {table}; TiCDC's avro protocol needs one "
                "topic per table (a topic rule with {schema} and {table}), or rows cannot be ordered",
            )


def decoder_for(options: AvroOptions, types: TypeOptions = DEFAULT_OPTIONS) -> TiCDCAvroDecoder:
    """The protocol's decoder (`schema_cache.protocols.create_decoder`), reading schemas from the registry."""
    return TiCDCAvroDecoder(options, types, SchemaRegistry(options.registry))


def worker_decoder_for(options: AvroOptions, types: TypeOptions, state: bytes, shipped: bytes) -> TiCDCAvroDecoder:
    """An executor's decoder (`schema_cache.protocols.create_worker_decoder`): the schemas the driver shipped."""
    decoder = TiCDCAvroDecoder(options, types, ShippedSchemas.from_bytes(shipped))
    decoder.restore(state)
    return decoder


def worker_payload(decoder: TiCDCAvroDecoder) -> bytes:
    """What executors need besides the driver decoder's state: the schemas it fetched."""
    return decoder.fetched_schemas()


def check_credentials(options: AvroOptions) -> None:
    """Raise AuthenticationError if the registry refuses the configured credentials."""
    SchemaRegistry(options.registry).check_credentials()
