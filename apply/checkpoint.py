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
from dataclasses import dataclass
from typing import Mapping

from pyspark.errors import AnalysisException
from pyspark.sql import functions as F

from apply.locator import TableLocator
from apply.progress import APP_ID, is_missing_table, tagged_commit
from apply.views import ensure_internal_table, temp_view

TopicPartition = tuple[str, int]

_TABLE = "checkpoints"
_SOURCE_VIEW = "ticdc_delta_checkpoint_source"
_COLUMNS = (
    "consumer STRING, batch BIGINT, saved_at TIMESTAMP, offsets STRING, "
    "watermarks STRING, tables STRING, decoder_state BINARY"
)


def _encode_tp_map(values: Mapping[TopicPartition, int]) -> str:
    return json.dumps([[t, p, v] for (t, p), v in sorted(values.items())])


def _decode_tp_map(text: str) -> dict[TopicPartition, int]:
    return {(t, int(p)): int(v) for t, p, v in json.loads(text)}


@dataclass(frozen=True, slots=True)
class Checkpoint:
    consumer: str
    batch: int
    offsets: Mapping[TopicPartition, int]
    watermarks: Mapping[TopicPartition, int]
    tables: Mapping[str, dict]
    decoder_state: bytes


class CheckpointStore:
    def __init__(self, spark, locator: TableLocator) -> None:
        self._spark = spark
        self._locator = locator
        self._name = locator.internal_sql_name(_TABLE)
        self._created = False

    def load(self, consumer: str) -> Checkpoint | None:
        try:
            rows = (
                self._spark.table(self._name)
                .where(F.col("consumer") == F.lit(consumer))
                .orderBy(F.col("batch").desc())
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
            tables=json.loads(row["tables"]),
            decoder_state=bytes(row["decoder_state"]),
        )

    def save(self, checkpoint: Checkpoint) -> None:
        if not self._created:
            ensure_internal_table(self._spark, self._locator, _TABLE, _COLUMNS)
            self._created = True
        row = (
            checkpoint.consumer,
            checkpoint.batch,
            dt.datetime.now(dt.timezone.utc),
            _encode_tp_map(checkpoint.offsets),
            _encode_tp_map(checkpoint.watermarks),
            json.dumps(dict(checkpoint.tables), sort_keys=True),
            checkpoint.decoder_state,
        )
        # Idempotent per (consumer, batch): a save retried after a crash is skipped.
        txn = (f"{APP_ID}:checkpoint:{checkpoint.consumer}", checkpoint.batch)
        with temp_view(self._spark, [row], _COLUMNS, _SOURCE_VIEW) as source:
            with tagged_commit(self._spark, None, txn=txn):
                self._spark.sql(f"INSERT INTO {self._name} SELECT * FROM {source}")
