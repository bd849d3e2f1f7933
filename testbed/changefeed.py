"""A small stand-in for a TiCDC changefeed, for the demo, tests and the benchmark.

It keeps an upstream model of each table (the expected Delta contents) and
emits the messages TiCDC would emit for the same operations, in one of:

- the Simple protocol (JSON or Avro encoding) to one topic: DDL and
  watermarks to every partition, rows to the partition of their key
  (index-value dispatch), a BOOTSTRAP before a table's first row;
- TiCDC's avro protocol: one topic per table (`<prefix>_<db>_<table>`), no
  DDL or watermark messages, DELETE as a tombstone, schemas in a registry;
- TiCDC's debezium protocol: one topic, DDL (and, with the TiDB extension,
  watermarks) to every partition, a JSON key with the handle key;
- TiCDC's canal-json protocol: one topic, DDL to partition 0 only;
- TiCDC's Open Protocol: one topic, rows batched per partition, DDL and
  resolved events to every partition.

With `topic_per_table` (a topic expression such as "tidb_{schema}_{table}", as
a changefeed's `[sink.dispatchers]` gives it), every protocol but avro sends
as TiCDC's event router does (pingcap/tiflow cdc/sink/dmlsink/mq/dispatcher/
event_router.go, cdc/sink/ddlsink/mq/mq_ddl_sink.go): a row to its table's
topic; a DDL to the topic of the table's old name (a CREATE: the new name's);
a watermark to every partition of the topics of the tables replicated now and
of the default topic. So after a DROP TABLE or a RENAME away, the old name's
topic gets nothing more, and a new name's topic begins with its first message.

A key-changing UPDATE is split into DELETE + INSERT at one commitTs (TiCDC's
default) unless `split_key_updates` is off. Values are given as TiDB holds
them (ENUM/SET by name, TIMESTAMP as an aware datetime); each protocol's
writer encodes them.

The real encoders are exercised by the golden fixtures, not by this module.
"""

from __future__ import annotations

import datetime as dt
import zlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from zoneinfo import ZoneInfo

from testbed.encoders.canal import CanalJsonWriter
from testbed.encoders.debezium import DebeziumWriter
from testbed.encoders.open_protocol import OpenProtocolWriter
from testbed.encoders.simple import SimpleAvroWriter, SimpleJsonWriter
from testbed.encoders.ticdc_avro import TiCDCAvroWriter
from testbed.tables import table_schema, timestamp

# A plausible TSO: physical milliseconds << 18.
_FIRST_TS = 1_700_000_000_000 << 18


@dataclass
class _Table:
    schema: dict
    key: tuple[str, ...]
    rows: dict[tuple, dict] = field(default_factory=dict)
    bootstrapped: bool = False

    def column(self, name: str) -> dict:
        return next(c for c in self.schema["columns"] if c["name"] == name)

    def key_of(self, row: Mapping[str, object]) -> tuple:
        return tuple(row[k] for k in self.key)


@dataclass(frozen=True)
class Message:
    partition: int
    value: bytes | None
    kind: str
    topic: str | None = None  # None: the changefeed's one topic (Simple)
    key: bytes | None = None


class _Emitter:
    """What a protocol sends for each upstream happening; by default nothing."""

    def ddl(self, kind: str, schema: dict, commit_ts: int, sql: str, previous=None) -> None:
        pass

    def watermark(self, commit_ts: int) -> None:
        pass

    def bootstrap(self, schema: dict) -> None:
        pass

    def flush(self) -> None:
        """Send what is held back (batched protocols)."""


class _SimpleEmitter(_Emitter):
    """Simple protocol: one topic; DDL, watermarks and BOOTSTRAP to every partition."""

    def __init__(self, feed: Changefeed, encoding: str) -> None:
        self._feed = feed
        writer = {"json": SimpleJsonWriter, "avro": SimpleAvroWriter}[encoding]
        self._writer = writer(build_ts_ms=1_700_000_000_000)

    def ddl(self, kind: str, schema: dict, commit_ts: int, sql: str, previous=None) -> None:
        self._feed.broadcast(self._writer.ddl(kind, schema, commit_ts, sql), "DDL", [self._feed.ddl_topic(schema, previous)])

    def watermark(self, commit_ts: int) -> None:
        self._feed.broadcast(self._writer.watermark(commit_ts), "WATERMARK", self._feed.watermark_topics())

    def bootstrap(self, schema: dict) -> None:
        self._feed.broadcast(self._writer.bootstrap(schema), "BOOTSTRAP", [self._feed.row_topic(schema)])

    def row(self, state: _Table, kind: str, commit_ts: int, before: dict | None, after: dict | None) -> None:
        if not state.bootstrapped:
            # TiCDC sends a BOOTSTRAP before a table's first row.
            self.bootstrap(state.schema)
            state.bootstrapped = True
        wire = self._feed._wire
        if kind == "INSERT":
            value = self._writer.insert(state.schema, commit_ts, wire(state, after))
        elif kind == "DELETE":
            value = self._writer.delete(state.schema, commit_ts, wire(state, before))
        else:
            value = self._writer.update(state.schema, commit_ts, wire(state, before), wire(state, after))
        partition = self._feed._partition_of(state, after if after is not None else before)
        self._feed.messages.append(Message(partition, value, "DML", self._feed.row_topic(state.schema)))


class _AvroEmitter(_Emitter):
    """TiCDC avro protocol: a topic per table, rows only, deletes as tombstones."""

    def __init__(self, feed: Changefeed, writer: TiCDCAvroWriter, topic_prefix: str) -> None:
        self._feed = feed
        self._writer = writer
        self._prefix = topic_prefix

    def topic(self, schema: Mapping[str, object]) -> str:
        return f"{self._prefix}_{schema['schema']}_{schema['table']}"

    # No DDL or bootstrap messages: a new schema comes with the next row. Watermarks only with TiCDC's testing
    # option avro-enable-watermark, to the topics of the tables replicated now.

    def watermark(self, commit_ts: int) -> None:
        if self._writer.enable_watermark:
            topics = sorted({self.topic(state.schema) for state in self._feed._tables.values()})
            self._feed.broadcast(self._writer.checkpoint(commit_ts), "WATERMARK", topics)

    def row(self, state: _Table, kind: str, commit_ts: int, before: dict | None, after: dict | None) -> None:
        topic = self.topic(state.schema)
        key, value = self._writer.row(topic, state.schema, kind, commit_ts, before, after)
        partition = self._feed._partition_of(state, after if after is not None else before)
        self._feed.messages.append(Message(partition, value, "DML", topic=topic, key=key))


class _DebeziumEmitter(_Emitter):
    """TiCDC debezium protocol: one topic; DDL and watermarks (with the extension) to every partition."""

    def __init__(self, feed: Changefeed, writer: DebeziumWriter) -> None:
        self._feed = feed
        self._writer = writer

    def ddl(self, kind: str, schema: dict, commit_ts: int, sql: str, previous=None) -> None:
        key_value = self._writer.ddl(kind, schema, commit_ts, sql, previous)
        if key_value is not None:
            self._feed.broadcast(key_value[1], "DDL", [self._feed.ddl_topic(schema, previous)], key=key_value[0])

    def watermark(self, commit_ts: int) -> None:
        key_value = self._writer.watermark(commit_ts)
        if key_value is not None:
            self._feed.broadcast(key_value[1], "WATERMARK", self._feed.watermark_topics(), key=key_value[0])

    def row(self, state: _Table, kind: str, commit_ts: int, before: dict | None, after: dict | None) -> None:
        key, value = self._writer.row(state.schema, kind, commit_ts, before, after)
        partition = self._feed._partition_of(state, after if after is not None else before)
        self._feed.messages.append(Message(partition, value, "DML", self._feed.row_topic(state.schema), key=key))


class _CanalEmitter(_Emitter):
    """TiCDC canal-json: one topic; DDL to partition 0 only, watermarks (extension) to every partition."""

    def __init__(self, feed: Changefeed, writer: CanalJsonWriter) -> None:
        self._feed = feed
        self._writer = writer

    def ddl(self, kind: str, schema: dict, commit_ts: int, sql: str, previous=None) -> None:
        topic = self._feed.ddl_topic(schema, previous)
        self._feed.messages.append(Message(0, self._writer.ddl(kind, schema, commit_ts, sql), "DDL", topic))

    def watermark(self, commit_ts: int) -> None:
        value = self._writer.watermark(commit_ts)
        if value is not None:
            self._feed.broadcast(value, "WATERMARK", self._feed.watermark_topics())

    def row(self, state: _Table, kind: str, commit_ts: int, before: dict | None, after: dict | None) -> None:
        value = self._writer.row(state.schema, kind, commit_ts, before, after)
        partition = self._feed._partition_of(state, after if after is not None else before)
        self._feed.messages.append(Message(partition, value, "DML", self._feed.row_topic(state.schema)))


class _OpenProtocolEmitter(_Emitter):
    """TiCDC Open Protocol: one topic; rows batched per partition (up to max-batch-size),
    DDL and resolved events to every partition."""

    def __init__(self, feed: Changefeed, writer: OpenProtocolWriter) -> None:
        self._feed = feed
        self._writer = writer
        self._batches: dict[tuple[str | None, int], list[tuple[bytes, bytes]]] = {}  # (topic, partition) -> rows

    def flush(self) -> None:
        for (topic, partition), pairs in sorted(self._batches.items(), key=lambda item: (item[0][0] or "", item[0][1])):
            key, value = self._writer.frame(pairs)
            self._feed.messages.append(Message(partition, value, "DML", topic, key=key))
        self._batches.clear()

    def _broadcast(self, key_value: tuple[bytes, bytes], kind: str, topics: list[str | None]) -> None:
        self.flush()
        key, value = key_value
        self._feed.broadcast(value, kind, topics, key=key)

    def ddl(self, kind: str, schema: dict, commit_ts: int, sql: str, previous=None) -> None:
        self._broadcast(self._writer.ddl(kind, schema, commit_ts, sql), "DDL", [self._feed.ddl_topic(schema, previous)])

    def watermark(self, commit_ts: int) -> None:
        self._broadcast(self._writer.resolved(commit_ts), "WATERMARK", self._feed.watermark_topics())

    def row(self, state: _Table, kind: str, commit_ts: int, before: dict | None, after: dict | None) -> None:
        partition = self._feed._partition_of(state, after if after is not None else before)
        where = (self._feed.row_topic(state.schema), partition)
        batch = self._batches.setdefault(where, [])
        batch.append(self._writer.row(state.schema, kind, commit_ts, before, after))
        if len(batch) >= self._writer.max_batch_size:
            pairs = self._batches.pop(where)
            key, value = self._writer.frame(pairs)
            self._feed.messages.append(Message(partition, value, "DML", where[0], key=key))


class Changefeed:
    def __init__(
        self,
        partitions: int = 3,
        *,
        encoding: str = "json",
        location: str = "UTC",
        split_key_updates: bool = True,
        avro_writer: TiCDCAvroWriter | None = None,
        debezium_writer: DebeziumWriter | None = None,
        canal_writer: CanalJsonWriter | None = None,
        open_writer: OpenProtocolWriter | None = None,
        topic_prefix: str = "tidb",
        topic_per_table: str | None = None,
        default_topic: str | None = None,
    ) -> None:
        """Simple protocol in `encoding` (json/avro); TiCDC's avro protocol with `avro_writer`;
        TiCDC's debezium protocol with `debezium_writer`; canal-json with `canal_writer`; Open
        Protocol with `open_writer`. `topic_per_table`: a topic expression ("{schema}" and "{table}"
        substituted, as TiCDC's dispatcher rule `topic`), with `default_topic` the changefeed's own
        (None: no default topic is read, so watermarks go to the tables' topics only)."""
        self.partitions = partitions
        self.topic_per_table = topic_per_table
        self.default_topic = default_topic
        self.location = location
        self.split_key_updates = split_key_updates
        self.messages: list[Message] = []
        if avro_writer is not None:
            self._emitter = _AvroEmitter(self, avro_writer, topic_prefix)
        elif debezium_writer is not None:
            self._emitter = _DebeziumEmitter(self, debezium_writer)
        elif canal_writer is not None:
            self._emitter = _CanalEmitter(self, canal_writer)
        elif open_writer is not None:
            self._emitter = _OpenProtocolEmitter(self, open_writer)
        else:
            self._emitter = _SimpleEmitter(self, encoding)
        self._tables: dict[tuple[str, str], _Table] = {}
        self._left: dict[tuple[str, str], _Table] = {}  # tables taken out of the changefeed (`leave_changefeed`)
        self._ts = _FIRST_TS
        self._next_table_id = 100

    # --- time -------------------------------------------------------------------

    def _tick(self) -> int:
        self._ts += 1 << 18  # one millisecond
        return self._ts

    @property
    def last_ts(self) -> int:
        return self._ts

    def advance_to(self, commit_ts: int) -> None:
        """Move this feed's clock on to `commit_ts` (if behind): feeds that stand for the topics of one TiCDC
        changefeed share its upstream's clock, and every topic gets its watermarks."""
        self._ts = max(self._ts, commit_ts)

    def watermark(self) -> int:
        """Send the current commitTs as a watermark to every partition."""
        self._emitter.watermark(self._ts)
        return self._ts

    def topics(self) -> list[str]:
        """The topics messages went to (None: the changefeed's one topic)."""
        return sorted({m.topic for m in self.messages if m.topic is not None})

    # --- where TiCDC's event router sends each message (`topic_per_table`) ---------------

    def topic_of(self, database: str, table: str) -> str | None:
        """The topic of a table's name (None: the changefeed's one topic)."""
        if self.topic_per_table is None:
            return None
        name = self.topic_per_table.replace("{schema}", database).replace("{table}", table)
        return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)  # (as TiCDC's Substitute)

    def row_topic(self, schema: Mapping[str, object]) -> str | None:
        return self.topic_of(str(schema["schema"]), str(schema["table"]))

    def ddl_topic(self, schema: Mapping[str, object], previous: tuple[str, str] | None = None) -> str | None:
        """A DDL goes to the topic of the table's old name (`GetTopicForDDL`: its pre-table's); a CREATE has none."""
        return self.topic_of(*previous) if previous is not None else self.row_topic(schema)

    def watermark_topics(self) -> list[str | None]:
        """The topics of the tables replicated now, and the default topic (`GetActiveTopics`)."""
        if self.topic_per_table is None:
            return [None]
        topics = sorted({self.topic_of(*name) for name in self._tables})
        if self.default_topic is not None and self.default_topic not in topics:
            topics.append(self.default_topic)
        return topics

    def broadcast(self, value: bytes, kind: str, topics: Sequence[str | None], *, key: bytes | None = None) -> None:
        """`value` to every partition of each of `topics`."""
        for topic in topics:
            self.messages.extend(Message(p, value, kind, topic, key=key) for p in range(self.partitions))

    # --- DDL --------------------------------------------------------------------

    def create_table(
        self,
        database: str,
        table: str,
        columns: Sequence[dict],
        primary_key: Sequence[str] = (),
        unique_keys: Sequence[Sequence[str]] = (),
    ) -> int:
        ts = self._tick()
        self._next_table_id += 1
        schema = table_schema(
            database,
            table,
            table_id=self._next_table_id,
            version=ts,
            columns=columns,
            primary_key=primary_key,
            unique_keys=unique_keys,
        )
        key = tuple(primary_key) or tuple(unique_keys[0] if unique_keys else ())
        self._tables[(database, table)] = _Table(schema, key)
        self._emitter.ddl("CREATE", schema, ts, f"CREATE TABLE `{table}` (...)")
        return ts

    def add_column(self, database: str, table: str, column: dict, *, existing_rows_value: object = None) -> int:
        """ALTER TABLE ADD COLUMN; rows that exist take `existing_rows_value` (TiDB: the default)."""
        state = self._tables[(database, table)]
        ts = self._tick()
        state.schema = {**state.schema, "version": ts, "columns": [*state.schema["columns"], column]}
        for row in state.rows.values():
            row[column["name"]] = existing_rows_value
        self._emitter.ddl("ALTER", state.schema, ts, f"ALTER TABLE `{table}` ADD COLUMN `{column['name']}`")
        return ts

    def _alter(self, database: str, table: str, columns: list[dict], sql: str) -> int:
        state = self._tables[(database, table)]
        ts = self._tick()
        state.schema = {**state.schema, "version": ts, "columns": columns}
        self._emitter.ddl("ALTER", state.schema, ts, sql)
        return ts

    def drop_column(self, database: str, table: str, name: str) -> int:
        state = self._tables[(database, table)]
        for row in state.rows.values():
            del row[name]
        columns = [c for c in state.schema["columns"] if c["name"] != name]
        return self._alter(database, table, columns, f"ALTER TABLE `{table}` DROP COLUMN `{name}`")

    def rename_column(self, database: str, table: str, old: str, new: str) -> int:
        state = self._tables[(database, table)]
        for key, row in state.rows.items():
            state.rows[key] = {new if k == old else k: v for k, v in row.items()}
        columns = [{**c, "name": new} if c["name"] == old else c for c in state.schema["columns"]]
        return self._alter(database, table, columns, f"ALTER TABLE `{table}` RENAME COLUMN `{old}` TO `{new}`")

    def modify_column(self, database: str, table: str, column: dict, convert=lambda v: v) -> int:
        """MODIFY COLUMN to `column`'s type; `convert` maps existing values as TiDB does."""
        state = self._tables[(database, table)]
        name = column["name"]
        for row in state.rows.values():
            row[name] = None if row[name] is None else convert(row[name])
        columns = [column if c["name"] == name else c for c in state.schema["columns"]]
        return self._alter(database, table, columns, f"ALTER TABLE `{table}` MODIFY COLUMN `{name}` ...")

    def rename_table(self, database: str, table: str, new_database: str, new_table: str) -> int:
        """RENAME TABLE: same table id and schema version, new name."""
        ts = self._tick()
        self._rename(database, table, new_database, new_table, ts)
        return ts

    def rename_tables(self, database: str, renames: Sequence[tuple[str, str]]) -> int:
        """RENAME TABLE a TO b, c TO d, ... in one DDL, one commitTs: as TiCDC sends it, one RENAME per table,
        in the statement's order, each with its own clause as its statement (a swap frees a name and takes it)."""
        ts = self._tick()
        for table, new_table in renames:
            self._rename(database, table, database, new_table, ts)
        return ts

    def _rename(self, database: str, table: str, new_database: str, new_table: str, ts: int) -> None:
        state = self._tables.pop((database, table))
        state.schema = {**state.schema, "schema": new_database, "table": new_table}
        self._tables[(new_database, new_table)] = state
        sql = f"RENAME TABLE `{database}`.`{table}` TO `{new_database}`.`{new_table}`"
        self._emitter.ddl("RENAME", state.schema, ts, sql, previous=(database, table))

    def truncate_table(self, database: str, table: str) -> int:
        state = self._tables[(database, table)]
        state.rows.clear()
        ts = self._tick()
        self._emitter.ddl("TRUNCATE", state.schema, ts, f"TRUNCATE TABLE `{table}`")
        return ts

    def drop_table(self, database: str, table: str) -> int:
        state = self._tables.pop((database, table))
        ts = self._tick()
        self._emitter.ddl("ERASE", state.schema, ts, f"DROP TABLE `{table}`")
        return ts

    def leave_changefeed(self, database: str, table: str) -> None:
        """The table taken out of the changefeed (its filter changed): TiCDC sends nothing more of it, no
        watermark to its topic either; no DDL says so. The model keeps its rows as they were."""
        state = self._tables.pop((database, table))
        self._left[(database, table)] = state

    def bootstrap(self, database: str, table: str) -> None:
        """Send a BOOTSTRAP for the table to every partition (TiCDC does so periodically)."""
        self._emitter.bootstrap(self._tables[(database, table)].schema)

    # --- DML --------------------------------------------------------------------

    @contextmanager
    def transaction(self, *, watermark: bool = True) -> Iterator[_Transaction]:
        """Group changes under one commitTs; a watermark follows unless disabled.

        Like TiDB, a transaction yields one final mutation per key, emitted at
        commit: touching a key twice in one transaction sends only the net.
        """
        txn = _Transaction(self, self._tick())
        yield txn
        txn.emit()
        self._emitter.flush()  # batched protocols: a transaction's rows leave with it
        if watermark:
            self.watermark()

    def _partition_of(self, state: _Table, row: Mapping[str, object]) -> int:
        text = "|".join(str(v) for v in state.key_of(row))
        return zlib.crc32(f"{state.schema['table']}|{text}".encode()) % self.partitions

    def _wire(self, state: _Table, row: Mapping[str, object]) -> dict:
        return {name: _wire_value(state.column(name), value, self.location) for name, value in row.items()}

    # --- the expected downstream --------------------------------------------------

    def table_names(self) -> list[tuple[str, str]]:
        """The tables the target should hold: those replicated now, and those taken out of the changefeed."""
        return sorted({**self._left, **self._tables})

    def _known(self, database: str, table: str) -> _Table:
        return self._tables.get((database, table)) or self._left[(database, table)]

    def columns(self, database: str, table: str) -> list[dict]:
        """The table's column definitions (Simple-style), in order."""
        return list(self._known(database, table).schema["columns"])

    def table_state(self, database: str, table: str) -> tuple[dict, list[dict]]:
        """The table's Simple-style schema and its rows as TiDB holds them now (copies): what a
        snapshot of upstream taken at `last_ts` holds."""
        state = self._tables[(database, table)]
        return dict(state.schema), [dict(row) for row in state.rows.values()]

    def column_names(self, database: str, table: str) -> list[str]:
        return [c["name"] for c in self._known(database, table).schema["columns"]]

    def expected_rows(self, database: str, table: str) -> list[tuple]:
        """The table's rows as Delta should hold them, in column order."""
        state = self._known(database, table)
        names = self.column_names(database, table)
        return [tuple(_delta_value(state.column(n), row.get(n)) for n in names) for row in state.rows.values()]


class _Transaction:
    def __init__(self, feed: Changefeed, commit_ts: int) -> None:
        self._feed = feed
        self.commit_ts = commit_ts
        # (database, table, key) -> the row before this transaction (None: absent)
        self._before: dict[tuple[str, str, tuple], dict | None] = {}
        # new key -> old key, for key changes sent as one UPDATE
        self._moved: dict[tuple[str, str, tuple], tuple[str, str, tuple]] = {}

    def _table(self, database: str, table: str) -> _Table:
        return self._feed._tables[(database, table)]

    def _touch(self, database: str, table: str, key: tuple) -> None:
        state = self._table(database, table)
        ref = (database, table, key)
        if ref not in self._before:
            row = state.rows.get(key)
            self._before[ref] = dict(row) if row is not None else None

    def insert(self, database: str, table: str, row: Mapping[str, object]) -> None:
        state = self._table(database, table)
        full = {c["name"]: row.get(c["name"]) for c in state.schema["columns"]}
        key = state.key_of(full)
        if key in state.rows:
            raise ValueError(f"duplicate key {key} in {database}.{table}")
        self._touch(database, table, key)
        state.rows[key] = full

    def update(self, database: str, table: str, key: Sequence[object], changes: Mapping[str, object]) -> None:
        state = self._table(database, table)
        key = tuple(key)
        self._touch(database, table, key)
        new = {**state.rows.pop(key), **changes}
        new_key = state.key_of(new)
        self._touch(database, table, new_key)
        state.rows[new_key] = new
        if new_key != key:
            self._moved[(database, table, new_key)] = (database, table, key)

    def delete(self, database: str, table: str, key: Sequence[object]) -> None:
        state = self._table(database, table)
        self._touch(database, table, tuple(key))
        del state.rows[tuple(key)]

    def emit(self) -> None:
        feed = self._feed
        paired: set[tuple] = set()
        if not feed.split_key_updates:
            for new_ref, old_ref in self._moved.items():
                if self._before[new_ref] is None and self._after(old_ref) is None and self._before[old_ref]:
                    paired.update({new_ref, old_ref})
                    self._send(new_ref, "UPDATE", self._before[old_ref], self._after(new_ref))
        for ref, before in self._before.items():
            if ref in paired:
                continue
            after = self._after(ref)
            if before is None and after is not None:
                self._send(ref, "INSERT", None, after)
            elif before is not None and after is None:
                self._send(ref, "DELETE", before, None)
            elif before is not None and after != before:
                self._send(ref, "UPDATE", before, after)

    def _after(self, ref: tuple) -> dict | None:
        database, table, key = ref
        return self._table(database, table).rows.get(key)

    def _send(self, ref: tuple, kind: str, before: dict | None, after: dict | None) -> None:
        state = self._table(ref[0], ref[1])
        self._feed._emitter.row(state, kind, self.commit_ts, before, after)


def _wire_value(column: dict, value: object, location: str) -> object:
    """A TiDB value in the Simple protocol's form for its column.

    TIMESTAMP: wall-clock in the changefeed's time zone, named beside it, as TiCDC sends it.
    """
    if value is None:
        return None
    data_type = column["dataType"]
    kind = data_type["mysqlType"]
    if kind == "timestamp":
        wall = value.astimezone(ZoneInfo(location))
        text = wall.strftime("%Y-%m-%d %H:%M:%S") + (f".{wall.microsecond:06d}" if wall.microsecond else "")
        return timestamp(text, location)
    if kind == "enum":
        return str(data_type["elements"].index(value) + 1)
    if kind == "set":
        names = [n for n in str(value).split(",") if n]
        return str(sum(1 << data_type["elements"].index(n) for n in names))
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S") + (f".{value.microsecond:06d}" if value.microsecond else "")
    return value  # the writer stringifies numbers and base64-encodes bytes


def _delta_value(column: dict, value: object) -> object:
    """A TiDB value as the Delta table should hold it (see the type table in docs/protocols.md)."""
    if value is None:
        return None
    data_type = column["dataType"]
    if data_type["mysqlType"] == "timestamp":
        return value.astimezone(dt.timezone.utc)
    if data_type["mysqlType"] == "bigint" and data_type.get("unsigned"):
        return Decimal(value)
    return value
