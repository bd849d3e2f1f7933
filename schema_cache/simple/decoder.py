"""TiCDC Simple protocol decoder, JSON and Avro encodings (spec: shared/spec/004,
encoder: pingcap/ticdc pkg/sink/codec/simple/message.go).

Each message holds one event. DML carries only `schemaVersion`; the structure
comes from BOOTSTRAP and DDL messages, cached by (database, table, version).
DML whose version is not cached yet is parked until it arrives.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping

import orjson

from ticdc_delta.exceptions import InvalidMessage
from ticdc_delta.schema_cache import events
from ticdc_delta.schema_cache.codec import RowCodec, ValueContext
from ticdc_delta.schema_cache.ddl_text import renamed_from
from ticdc_delta.schema_cache.decoder import Parking, read_commit_ts, require_handle_key
from ticdc_delta.schema_cache.large_messages import handle_key_only
from ticdc_delta.schema_cache.parking import ParkingLot
from ticdc_delta.schema_cache.simple import avro
from ticdc_delta.schema_cache.simple.options import SimpleOptions
from ticdc_delta.schema_cache.simple.table_schema import parse_table_schema
from ticdc_delta.schema_cache.types import DEFAULT_OPTIONS, TypeOptions

log = logging.getLogger(__name__)

SUPPORTED_VERSION = 1

_DDL_KINDS = {
    "CREATE": events.SchemaChangeKind.CREATE,
    "ALTER": events.SchemaChangeKind.ALTER,
    "RENAME": events.SchemaChangeKind.RENAME,
    "TRUNCATE": events.SchemaChangeKind.TRUNCATE,
    "ERASE": events.SchemaChangeKind.DROP,
    "CINDEX": events.SchemaChangeKind.INDEX,
    "DINDEX": events.SchemaChangeKind.INDEX,
    "QUERY": events.SchemaChangeKind.OTHER,
}
_DML_OPS = {"INSERT": events.Op.INSERT, "UPDATE": events.Op.UPDATE, "DELETE": events.Op.DELETE}

# Schema versions kept per table in the cache and its saved state. Old versions
# are only needed by DML still in flight when a DDL lands.
_VERSIONS_KEPT = 16

SchemaKey = tuple[str, str, int]


class SimpleDecoder(Parking):
    """Decodes Simple protocol messages (JSON or Avro encoding) into events."""

    ordering = events.Ordering.COMMIT_TS
    inserts_are_new = True  # an update is UPDATE, or DELETE + INSERT at one commitTs when TiCDC splits it

    def __init__(
        self,
        options: SimpleOptions = SimpleOptions(),
        types: TypeOptions = DEFAULT_OPTIONS,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._encoding = options.encoding
        self._large = options.large_messages()
        self._context = ValueContext(types)
        self._schemas: dict[SchemaKey, RowCodec] = {}
        self._raw_schemas: dict[SchemaKey, Mapping[str, object]] = {}
        wait = options.schema_wait_seconds
        self._parking = ParkingLot(
            wait,
            lambda p: f"no schema for {p.table} arrived within {wait:g}s "
            f"(commitTs {p.commit_ts}); BOOTSTRAP messages may be disabled upstream",
            clock,
        )

    # --- the Decoder interface -------------------------------------------------

    def state(self) -> bytes:
        # Avro-decoded schemas hold the same JSON-compatible values.
        return json.dumps(list(self._raw_schemas.values()), separators=(",", ":")).encode()

    def restore(self, state: bytes) -> None:
        for raw in json.loads(state):
            self._remember(raw)

    def forget_before(self, commit_ts: int) -> None:
        pass  # rows name their schema version: nothing depends on what was decoded last

    # --- decoding ---------------------------------------------------------------

    def _decode(self, message: events.RawMessage) -> list[events.Event]:
        return self._events(self._parse(message.value), message)

    def _parse(self, value: bytes | None) -> Mapping[str, object]:
        """The body of a message value (the message's own, or a claim-checked original)."""
        if value is None:
            raise InvalidMessage("empty message value (Simple protocol never sends tombstones)")
        if self._large.compression != "none":
            value = self._large.value(value)
        if self._encoding == "avro":
            try:
                body = avro.read(value)
            except (EOFError, ValueError, TypeError, IndexError, KeyError) as err:
                raise InvalidMessage(f"not a Simple Avro message: {type(err).__name__}: {err}") from err
        else:
            try:
                body = orjson.loads(value)
            except ValueError as err:
                raise InvalidMessage(f"not JSON: {err}") from err
            if not isinstance(body, dict):
                raise InvalidMessage("a Simple message must be a JSON object")
        version = body.get("version")
        if version != SUPPORTED_VERSION:
            raise InvalidMessage(f"unsupported Simple protocol version {version!r} (supported: 1)")
        return body

    def _events(self, body: Mapping[str, object], message: events.RawMessage) -> list[events.Event]:
        kind = body.get("type")
        if kind in _DML_OPS:
            return self._row_change(body, message)
        if kind == "WATERMARK":
            return [events.Watermark(read_commit_ts(body["commitTs"]), message.position)]
        if kind == "BOOTSTRAP":
            return self._learn(body["tableSchema"])
        if kind in _DDL_KINDS:
            return self._schema_change(body, message)
        raise InvalidMessage(f"unknown message type {kind!r}")

    def _row_change(self, body: Mapping[str, object], message: events.RawMessage) -> list[events.Event]:
        location = body.get("claimCheckLocation")
        if location:
            # The original message is in claim-check storage; this one holds only the key.
            _, value = self._large.claimed(location)
            return self._row_change(self._parse(value), message)
        if body.get("handleKeyOnly"):
            raise handle_key_only()
        key: SchemaKey = (body["database"], body["table"], body["schemaVersion"])
        cached = self._schemas.get(key)
        if cached is None:
            # Cached keys are (str, str, int): a message with other types is looked up as those.
            key = (str(key[0]), str(key[1]), int(key[2]))
            cached = self._schemas.get(key)
        if cached is None:
            table = events.TableName(key[0], key[1])
            log.info("parking %s: schema %s version %d not known yet", message.position, table, key[2])
            self._parking.park(key, message, table, read_commit_ts(body["commitTs"]))
            return []
        schema = cached.schema
        require_handle_key(schema)
        op = _DML_OPS[body["type"]]
        if op is events.Op.INSERT:
            after, before = cached.row(body["data"]), None
        elif op is events.Op.DELETE:
            after, before = None, cached.key_row(body["old"])
        else:
            data, old = body["data"], body["old"]
            after = cached.row(data)
            # TiCDC may omit unchanged columns from `old`; they equal `data`.
            before = cached.key_row(old if cached.has_key_fields(old) else {**data, **old})
        commit_ts = read_commit_ts(body["commitTs"])
        return [events.RowChange(schema.name, commit_ts, op, before, after, schema, message.position)]

    def _schema_change(self, body: Mapping[str, object], message: events.RawMessage) -> list[events.Event]:
        raw_schema = body.get("tableSchema")
        statement = str(body.get("sql") or "")
        if raw_schema is None:
            # Database-level DDL (CREATE/DROP DATABASE): no table structure to act on.
            log.warning("ignoring %s at %s: no table schema (%s)", body["type"], message.position, statement)
            return []
        database, table, version = self._key_of(raw_schema)
        kind = _DDL_KINDS[str(body["type"])]
        previous_name = None
        if kind is events.SchemaChangeKind.RENAME:
            new_name = events.TableName(database, table)
            previous_name = self._name_before(
                int(raw_schema.get("tableID") or 0), version, new_name, renamed_from(statement, database, new_name)
            )
        released = self._learn(raw_schema)
        if body.get("preTableSchema"):
            # In current TiCDC this is the other table of EXCHANGE PARTITION, not
            # the pre-DDL structure; its rows may still arrive, so cache it.
            released += self._learn(body["preTableSchema"])
        parsed = self._schemas[self._key_of(raw_schema)]
        change = events.SchemaChange(
            table=parsed.schema.name,
            commit_ts=read_commit_ts(body["commitTs"]),
            kind=kind,
            schema=parsed.schema,
            position=message.position,
            statement=statement,
            previous_name=previous_name,
        )
        return [change, *released]

    # --- the schema cache --------------------------------------------------------

    @staticmethod
    def _key_of(raw_schema: Mapping[str, object]) -> SchemaKey:
        database = raw_schema.get("schema", raw_schema.get("database"))
        return (str(database), str(raw_schema["table"]), int(raw_schema["version"]))

    def _remember(self, raw_schema: Mapping[str, object]) -> SchemaKey:
        key = self._key_of(raw_schema)
        if key not in self._schemas:
            parsed = parse_table_schema(raw_schema, self._context)
            self._schemas[key] = parsed
            self._raw_schemas[key] = raw_schema
            self._forget_old_versions(key[:2])
        return key

    def _name_before(
        self, table_id: int, version: int, name: events.TableName, stated: events.TableName | None
    ) -> events.TableName | None:
        """The name table `table_id` had before a DDL gave it `name` at schema `version` (None: unknown).

        The statement's old name (`stated`) when the table had it: TiCDC sends `RENAME TABLE a TO b,
        c TO d` as one RENAME per table, each with its own clause, and a table traded through a
        temporary name had two earlier names at one version, which versions cannot order. Otherwise
        the newest cached structure of the table up to `version` other than the DDL's own, preferring
        another name at equal versions (a rename may keep the version): an unqualified old name in
        the statement is in the session's database, which the message does not carry. Decided by
        version, not by what was cached last: a schema cache restored from a checkpoint may already
        hold the renamed structure (learned before a crash from a DDL the checkpoint did not cover
        yet), and the DDL's copies on other partitions arrive after it was learned. Nothing cached:
        the statement's name, if any.
        """
        if not table_id:
            return stated
        older = [
            (key[2], codec.schema.name != name, codec.schema.name)
            for key, codec in self._schemas.items()
            if codec.schema.table_id == table_id and key[2] <= version and (codec.schema.name, key[2]) != (name, version)
        ]
        if stated is not None and any(found[2] == stated for found in older):
            return stated
        return max(older, key=lambda found: found[:2])[2] if older else stated

    def _forget_old_versions(self, table: tuple[str, str]) -> None:
        versions = sorted(k for k in self._schemas if k[:2] == table)
        for key in versions[:-_VERSIONS_KEPT]:
            del self._schemas[key]
            del self._raw_schemas[key]

    def _learn(self, raw_schema: Mapping[str, object]) -> list[events.Event]:
        """Cache a schema and decode the DML that was waiting for it."""
        key = self._remember(raw_schema)
        return self._parking.decode_released(key, self.decode)


def decoder_for(options: SimpleOptions, types: TypeOptions = DEFAULT_OPTIONS) -> SimpleDecoder:
    """The protocol's decoder (`schema_cache.protocols.create_decoder`)."""
    return SimpleDecoder(options, types)
