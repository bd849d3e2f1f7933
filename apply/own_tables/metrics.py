"""Batch records: what each batch of the job did, appended to the product's `metrics` table.

One row per batch (`_ticdc/metrics`, or `<catalog>.<meta_schema>.metrics`).
Nested values are typed columns, queryable without parsing:

- `row_events`: ARRAY<STRUCT<database, table, op, events>>, the row events
  merged per table and op (INSERT, UPDATE, DELETE, UPSERT), before collapsing
  to net changes; an array rather than a map keyed by "db.table" because
  upstream names may themselves hold dots;
- `offsets`, `offset_lag`: MAP<STRING, BIGINT> keyed by "topic/partition"
  (Kafka names cannot hold '/'): the offset committed after the batch, and how
  far the partition's end offset is beyond it;
- `stage_seconds`: MAP<STRING, DOUBLE>, seconds per phase of the batch
  (`apply.base.phases.PHASES`), added up over the threads that did them;
- `table_seconds`: ARRAY<STRUCT<database, table, seconds>>, the wall seconds
  of each table's work in the batch (its first reads, DDL and MERGEs, its
  history table's with it), slowest first: the tables a batch waited on.
  Added in a later release than the table may be: a job adds the column to a
  metrics table that lacks it (`append_internal_rows`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ticdc_delta.apply.base.session import SqlSession
from ticdc_delta.apply.own_tables.base import InternalTable, OwnTablePlaces, append_internal_rows
from ticdc_delta.schema_cache.events import TableName, TopicPartition

TABLE = "metrics"
COLUMNS = (
    ("consumer", "STRING"),
    ("run_id", "STRING"),
    ("round", "BIGINT"),
    ("checkpoint", "BIGINT"),
    ("recorded_at", "TIMESTAMP"),
    ("messages", "BIGINT"),
    ("rows_merged", "BIGINT"),
    ("row_events", "ARRAY<STRUCT<`database`: STRING, `table`: STRING, `op`: STRING, `events`: BIGINT>>"),
    ("ddl", "BIGINT"),
    ("dead_letters", "BIGINT"),
    ("replays_skipped", "BIGINT"),
    ("waiting", "BIGINT"),
    ("applied_ts", "BIGINT"),
    ("commit_ts_lag_ms", "BIGINT"),
    ("offsets", "MAP<STRING, BIGINT>"),
    ("offset_lag", "MAP<STRING, BIGINT>"),
    ("stage_seconds", "MAP<STRING, DOUBLE>"),
    ("batch_seconds", "DOUBLE"),
    ("table_seconds", "ARRAY<STRUCT<`database`: STRING, `table`: STRING, `seconds`: DOUBLE>>"),
)


@dataclass(frozen=True)
class BatchRecord:
    """One batch of one run.

    `round` counts the run's batches from 1; `checkpoint` is the consumer's
    checkpoint number after the batch. `applied_ts` is the upstream commitTs
    through which the tables are applied (None: not known, e.g. the avro
    protocol without its TiDB extension); `commit_ts_lag_ms` is how far that
    is behind the wall clock when the batch ended.
    """

    consumer: str
    run_id: str
    round: int
    checkpoint: int
    recorded_at: dt.datetime
    messages: int
    row_events: Mapping[tuple[TableName, str], int]
    ddl: int
    dead_letters: int
    replays_skipped: int
    waiting: int
    applied_ts: int | None
    commit_ts_lag_ms: int | None
    offsets: Mapping[TopicPartition, int]
    offset_lag: Mapping[TopicPartition, int]
    stage_seconds: Mapping[str, float]
    batch_seconds: float
    table_seconds: Mapping[TableName, float]

    @property
    def rows_merged(self) -> int:
        return sum(self.row_events.values())

    def _row_events(self) -> list[tuple[str, str, str, int]]:
        return sorted((t.database, t.table, op, n) for (t, op), n in self.row_events.items())

    def _table_seconds(self) -> list[tuple[str, str, float]]:
        ordered = sorted(self.table_seconds.items(), key=lambda item: (-item[1], item[0].database, item[0].table))
        return [(t.database, t.table, round(seconds, 3)) for t, seconds in ordered]

    def to_row(self) -> tuple:
        """The record as a row of the metrics table, in `COLUMNS` order."""
        return (
            self.consumer,
            self.run_id,
            self.round,
            self.checkpoint,
            self.recorded_at,
            self.messages,
            self.rows_merged,
            self._row_events(),
            self.ddl,
            self.dead_letters,
            self.replays_skipped,
            self.waiting,
            self.applied_ts,
            self.commit_ts_lag_ms,
            _by_partition(self.offsets),
            _by_partition(self.offset_lag),
            dict(self.stage_seconds),
            round(self.batch_seconds, 3),
            self._table_seconds(),
        )

    def to_json(self) -> dict:
        """The record as JSON-ready values: the same names and nesting as the table's columns."""
        values = dict(zip((name for name, _ in COLUMNS), self.to_row(), strict=True))
        values["recorded_at"] = self.recorded_at.isoformat()
        values["row_events"] = [
            {"database": d, "table": t, "op": op, "events": n} for d, t, op, n in values["row_events"]
        ]
        values["table_seconds"] = [{"database": d, "table": t, "seconds": s} for d, t, s in values["table_seconds"]]
        return values


def _by_partition(values: Mapping[TopicPartition, int]) -> dict[str, int]:
    return {str(tp): value for tp, value in sorted(values.items())}


class MetricsTable(InternalTable):
    def __init__(self, sql: SqlSession, locator: OwnTablePlaces) -> None:
        super().__init__(sql, locator, TABLE)
        self._exists = False  # known to exist (this object appended to it)

    def append(self, records: Sequence[BatchRecord]) -> None:
        """Append `records` in one commit (the table is created with the first ones)."""
        if records:
            rows = [r.to_row() for r in records]
            append_internal_rows(self._sql, self._locator, TABLE, COLUMNS, rows, exists=self._exists,
                                 add_missing_columns=True)
            self._exists = True
