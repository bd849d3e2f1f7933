"""The protocol-neutral event model.

Decoders turn raw Kafka messages into these values; everything after
`schema_cache` (the ordering gate, the applier, the jobs) works only with them
and never sees bytes or protocol names.

All are immutable and hashable. What is made once or more per message (a
raw message, its position, its events) is a NamedTuple: building one costs
a fifth of a frozen dataclass, which at a hundred thousand messages a batch
is a measurable part of decoding.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True, slots=True)
class TableName:
    """An upstream table, as (database, table). Both parts are untrusted data."""

    database: str
    table: str

    def __str__(self) -> str:
        return f"{self.database}.{self.table}"


class TopicPartition(NamedTuple):
    """One partition of a Kafka topic; written `topic/partition` (Kafka names cannot hold '/')."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition}"

    @staticmethod
    def parse(text: str) -> TopicPartition:
        topic, _, partition = text.rpartition("/")
        return TopicPartition(topic, int(partition))


class Position(NamedTuple):
    """Where a message was read: enough to find it again and to commit past it."""

    topic: str
    partition: int
    offset: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


class RawMessage(NamedTuple):
    """One Kafka record, as the consumer delivered it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None

    @property
    def position(self) -> Position:
        return Position(self.topic, self.partition, self.offset)


@dataclass(frozen=True, slots=True)
class Column:
    """A column of the materialized table.

    `spark_type` is a Spark SQL type string (for example ``DECIMAL(20,0)``);
    `default` is the upstream default already converted to the Python value of
    that type (None when there is none or it cannot be represented, such as
    ``CURRENT_TIMESTAMP``).
    """

    name: str
    spark_type: str
    nullable: bool = True
    default: object = None


@dataclass(frozen=True, slots=True)
class TableSchema:
    """The structure of an upstream table at one schema version.

    `key` names the handle-key columns (primary key, else a NOT NULL unique
    key); it is empty for tables with neither.
    """

    name: TableName
    columns: tuple[Column, ...]
    key: tuple[str, ...]
    table_id: int | None = None
    version: int | None = None

    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def key_indexes(self) -> tuple[int, ...]:
        names = self.column_names()
        return tuple(names.index(k) for k in self.key)

    def same_structure(self, other: TableSchema) -> bool:
        """True when both describe the same columns and key (names may differ)."""
        return self.columns == other.columns and self.key == other.key


class Op(enum.Enum):
    INSERT = "INSERT"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    # The new row image of an insert or an update, when the protocol does not
    # say which and sends no old image (TiCDC Avro).
    UPSERT = "UPSERT"


class Ordering(enum.Enum):
    """How a protocol's events are put in order.

    COMMIT_TS: by commitTs, complete once every partition's watermark passed
    it (Simple, Debezium, Canal-JSON, Open Protocol). OFFSET: by partition
    offset, complete on arrival (TiCDC Avro: no watermarks, one topic per
    table, each partition written in commit order).
    """

    COMMIT_TS = "commit_ts"
    OFFSET = "offset"


class RowChange(NamedTuple):
    """One row mutation. `before`/`after` hold values in `schema.columns` order.

    `after` is the full new row image. `before` identifies the old row: only
    its handle-key columns are set (the others are None), because finding the
    row is all an old image is used for, and converting the rest of it would
    cost every UPDATE and DELETE as much as an INSERT. `commit_ts` is 0 where
    the protocol carries none (Avro tombstones).
    """

    table: TableName
    commit_ts: int
    op: Op
    before: tuple | None
    after: tuple | None
    schema: TableSchema
    position: Position

    def __repr__(self) -> str:
        return (
            f"RowChange({self.table}, {self.commit_ts}, {self.op.value}, before={self.before!r}, "
            f"after={self.after!r}, {self.position})"
        )


class SchemaChangeKind(enum.Enum):
    CREATE = "CREATE"
    ALTER = "ALTER"
    RENAME = "RENAME"
    TRUNCATE = "TRUNCATE"
    DROP = "DROP"
    INDEX = "INDEX"
    OTHER = "OTHER"


class SchemaChange(NamedTuple):
    """A DDL, described by the table structure after it.

    `statement` is the upstream DDL text, kept for logs only: it is never
    executed. `schema` is None when the DDL leaves no table (DROP) or when the
    protocol carries no structure (database-level DDL).
    """

    table: TableName
    commit_ts: int
    kind: SchemaChangeKind
    schema: TableSchema | None
    position: Position
    statement: str = ""
    previous_name: TableName | None = None


class Watermark(NamedTuple):
    """Everything on `position`'s partition with commitTs <= `commit_ts` has been sent."""

    commit_ts: int
    position: Position


Event = RowChange | SchemaChange | Watermark
