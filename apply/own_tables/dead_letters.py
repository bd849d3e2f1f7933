"""The dead-letter table: messages that could not be decoded, kept whole.

Written before the offsets past them are committed, and merged on
(topic, partition, offset) so a replay never records a message twice.

Next to it, the replay log (`dead_letter_replays`): what replaying each dead
letter decided (see `apply.replay`), one row per dead letter, its latest
attempt. The dead letters themselves are never changed: they are what happened.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.errors import AnalysisException
from pyspark.sql import functions as F

from ticdc_delta.apply.base.errors import is_missing_table
from ticdc_delta.apply.base.session import SqlSession
from ticdc_delta.apply.own_tables.base import InternalTable, OwnTablePlaces, ensure_internal_table
from ticdc_delta.exceptions import DecodeError
from ticdc_delta.schema_cache.events import Position

_TABLE = "dead_letters"
_COLUMNS = (
    "topic STRING, partition INT, offset BIGINT, key BINARY, value BINARY, "
    "error_type STRING, reason STRING, consumer STRING, recorded_at TIMESTAMP"
)
_REPLAYS = "dead_letter_replays"
_REPLAY_COLUMNS = (
    "consumer STRING, topic STRING, partition INT, offset BIGINT, outcome STRING, detail STRING, replayed_at TIMESTAMP"
)
# Outcomes after which a dead letter needs nothing more (`apply.replay.Outcome`).
RESOLVED = ("applied", "superseded", "no-change")


@dataclass(frozen=True, slots=True)
class DeadLetter:
    position: Position
    key: bytes | None
    value: bytes | None
    error_type: str
    reason: str
    recorded_at: dt.datetime


def _missing_is_empty(read):
    try:
        return read()
    except AnalysisException as err:
        if is_missing_table(err):
            return []
        raise


class DeadLetterTable(InternalTable):
    def __init__(self, sql: SqlSession, locator: OwnTablePlaces, consumer: str) -> None:
        super().__init__(sql, locator, _TABLE)
        self._consumer = consumer
        self._created = False

    def read(self, *, unresolved_only: bool = True) -> list[DeadLetter]:
        """This consumer's dead letters, oldest first; by default those no replay resolved yet."""
        rows = _missing_is_empty(
            lambda: self._sql.table(self.sql_name)
            .where(F.col("consumer") == F.lit(self._consumer))
            .orderBy("recorded_at", "topic", "partition", "offset")
            .collect()
        )
        outcomes = self.replay_outcomes() if unresolved_only else {}
        letters = [
            DeadLetter(
                Position(r["topic"], r["partition"], r["offset"]),
                None if r["key"] is None else bytes(r["key"]),
                None if r["value"] is None else bytes(r["value"]),
                r["error_type"],
                r["reason"],
                r["recorded_at"],
            )
            for r in rows
        ]
        return [d for d in letters if outcomes.get(d.position, ("",))[0] not in RESOLVED]

    def earliest_unresolved_at(self) -> dt.datetime | None:
        """When the oldest dead letter no replay resolved was recorded (`read`'s first), reading positions only."""
        rows = _missing_is_empty(
            lambda: self._sql.table(self.sql_name)
            .where(F.col("consumer") == F.lit(self._consumer))
            .select("topic", "partition", "offset", "recorded_at")
            .collect()
        )
        if not rows:
            return None
        outcomes = self.replay_outcomes()
        unresolved = [
            r["recorded_at"]
            for r in rows
            if outcomes.get(Position(r["topic"], r["partition"], r["offset"]), ("",))[0] not in RESOLVED
        ]
        return min(unresolved, default=None)

    def _replays(self):
        return self._sql.table(self._locator.internal_sql_name(_REPLAYS)).where(F.col("consumer") == F.lit(self._consumer))

    def replay_outcomes(self) -> dict[Position, tuple[str, str]]:
        """Per dead letter, (outcome, detail) of its latest replay."""
        rows = _missing_is_empty(lambda: self._replays().collect())
        return {Position(r["topic"], r["partition"], r["offset"]): (r["outcome"], r["detail"]) for r in rows}

    def record_replays(self, outcomes: Sequence[tuple[Position, str, str]]) -> None:
        """Record (position, outcome, detail) of replayed dead letters; a later attempt replaces an earlier one."""
        if not outcomes:
            return
        name = ensure_internal_table(self._sql, self._locator, _REPLAYS, _REPLAY_COLUMNS)
        now = dt.datetime.now(dt.timezone.utc)
        rows = [(self._consumer, p.topic, p.partition, p.offset, outcome, detail, now) for p, outcome, detail in outcomes]
        with self._sql.view(rows, _REPLAY_COLUMNS) as source:
            self._sql.run(
                f"MERGE INTO {name} AS t USING {source} AS s "
                "ON t.consumer = s.consumer AND t.topic = s.topic AND t.partition = s.partition AND t.offset = s.offset "
                "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
                what="record dead-letter replays",
            )

    def write(self, errors: Sequence[DecodeError]) -> None:
        if not errors:
            return
        if not self._created:
            ensure_internal_table(self._sql, self._locator, _TABLE, _COLUMNS)
            self._created = True
        now = dt.datetime.now(dt.timezone.utc)
        rows = [
            (
                e.position.topic,
                e.position.partition,
                e.position.offset,
                e.key,
                e.value,
                type(e).__name__,
                e.reason,
                self._consumer,
                now,
            )
            for e in errors
        ]
        with self._sql.view(rows, _COLUMNS) as source:
            self._sql.run(
                f"MERGE INTO {self.sql_name} AS t USING {source} AS s "
                "ON t.topic = s.topic AND t.partition = s.partition AND t.offset = s.offset "
                "AND t.consumer = s.consumer "  # another consumer group's letters are its own
                "WHEN NOT MATCHED THEN INSERT *",
                what="record dead letters",
            )
