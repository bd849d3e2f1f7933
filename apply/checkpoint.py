"""The consumer checkpoint: where to resume reading, saved after the data.

One Delta table row per saved batch: the next offset to read per partition,
the watermarks that were safe at those offsets, and the decoder's schema
cache (opaque bytes). It is written after every Delta commit it covers and
before Kafka offsets are committed, so a restart resumes from it even if the
Kafka commit was lost. Per-table progress is not here: it lives on each
table's own commits (`apply.progress`).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.errors import AnalysisException
from pyspark.sql import functions as F

from apply.internal_tables import ensure_internal_table
from apply.locator import TableLocator
from apply.progress import is_missing_table
from apply.sql_session import SqlSession
from schema_cache.events import TopicPartition

_TABLE = "checkpoints"
_COLUMNS = (
    ("consumer", "STRING"),
    ("batch", "BIGINT"),
    ("saved_at", "TIMESTAMP"),
    ("offsets", "STRING"),
    ("watermarks", "STRING"),
    ("decoder_state", "BINARY"),
)
_SCHEMA = ", ".join(f"{name} {kind}" for name, kind in _COLUMNS)


def _encode_tp_map(values: Mapping[TopicPartition, int]) -> str:
    return json.dumps([[tp.topic, tp.partition, v] for tp, v in sorted(values.items())])


def _decode_tp_map(text: str) -> dict[TopicPartition, int]:
    return {TopicPartition(t, int(p)): int(v) for t, p, v in json.loads(text)}


@dataclass(frozen=True, slots=True)
class Checkpoint:
    consumer: str
    batch: int
    offsets: Mapping[TopicPartition, int]
    watermarks: Mapping[TopicPartition, int]
    decoder_state: bytes
    saved_at: dt.datetime | None = None  # when it was saved (set on loaded checkpoints)


class CheckpointStore:
    def __init__(self, sql: SqlSession, locator: TableLocator) -> None:
        self._sql = sql
        self._locator = locator
        self._name = locator.internal_sql_name(_TABLE)
        self._created = False

    def load(self, consumer: str, *, saved_before: dt.datetime | None = None) -> Checkpoint | None:
        """The consumer's newest checkpoint; with `saved_before`, its newest one saved before then."""
        try:
            rows = self._sql.table(self._name).where(F.col("consumer") == F.lit(consumer))
            if saved_before is not None:
                rows = rows.where(F.col("saved_at") < F.lit(saved_before))
            rows = (
                rows.orderBy(F.col("batch").desc())
                .limit(1)
                .collect()
            )
        except AnalysisException as err:
            if is_missing_table(err):
                return None
            raise
        if not rows:
            return None
        row = rows[0]
        return Checkpoint(
            consumer=consumer,
            batch=row["batch"],
            offsets=_decode_tp_map(row["offsets"]),
            watermarks=_decode_tp_map(row["watermarks"]),
            decoder_state=bytes(row["decoder_state"]),
            saved_at=row["saved_at"],
        )

    def save(self, checkpoint: Checkpoint) -> None:
        if not self._created:
            ensure_internal_table(self._sql, self._locator, _TABLE, _SCHEMA)
            self._created = True
        row = (
            checkpoint.consumer,
            checkpoint.batch,
            dt.datetime.now(dt.timezone.utc),
            _encode_tp_map(checkpoint.offsets),
            _encode_tp_map(checkpoint.watermarks),
            checkpoint.decoder_state,
        )
        # No idempotent-write pair: it makes Delta reconstruct the table's state
        # on every commit (about 0.4 s each), and a save repeated after a crash
        # only adds an identical row for the same batch.
        # By column name: tables written by earlier releases have more columns.
        names = ", ".join(name for name, _ in _COLUMNS)
        with self._sql.view([row], _SCHEMA) as source:
            self._sql.run(f"INSERT INTO {self._name} ({names}) SELECT * FROM {source}", what="save checkpoint")
