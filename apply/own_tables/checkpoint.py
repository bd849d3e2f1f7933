"""The consumer checkpoint: where to resume reading, saved after the data.

One Delta table row per saved batch: the next offset to read per partition,
the watermarks that were safe at those offsets, and the decoder's schema
cache (opaque bytes). It is written after every Delta commit it covers and
before Kafka offsets are committed, so a restart resumes from it even if the
Kafka commit was lost. Per-table progress is not here: it lives on each
table's own commits (`apply.progress`).

The table stays bounded (`Retention`, settings `checkpoint.keep` and
`checkpoint.cleanup_every`): every `cleanup_every` batches of a consumer,
after that batch's checkpoint is saved, the table is compacted (OPTIMIZE),
the consumer's checkpoints older than its newest `keep` are deleted except
the one `replay-dead-letters` starts from, and files the table no longer uses
are removed (VACUUM) once they are older than its short
`delta.deletedFileRetentionDuration`. Each step is one atomic Delta commit
(VACUUM deletes only files no snapshot newer than the retention uses), and
none can touch the checkpoint just saved: a crash anywhere in between loses
nothing, and the next cleanup does what is left.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.errors import AnalysisException
from pyspark.sql import functions as F

from ticdc_delta.apply.base.errors import is_missing_table
from ticdc_delta.apply.base.session import SqlSession
from ticdc_delta.apply.own_tables.base import OwnTablePlaces, append_internal_rows, own_rows, vacuum_internal_table
from ticdc_delta.apply.own_tables.dead_letters import DeadLetterTable
from ticdc_delta.exceptions import ConcurrentCommitError, MaterializerError
from ticdc_delta.schema_cache.events import TopicPartition

log = logging.getLogger(__name__)

_TABLE = "checkpoints"
_COLUMNS = (
    ("consumer", "STRING"), ("batch", "BIGINT"), ("saved_at", "TIMESTAMP"),
    ("offsets", "STRING"), ("watermarks", "STRING"), ("decoder_state", "BINARY"),
)
# Written only by jobs with `[[tables]]` rules (`apply.places.routing`): a table of an earlier release gets it then.
_ROUTES = ("routes", "STRING")
# What waited at the save, and for what (`jobs.waits`; NULL: nothing): every save has it, a table of an earlier
# release gets it at a process's first save.
_WAITING = ("waiting", "STRING")
# Each topic's Kafka id when the checkpoint was saved (JSON {topic: id}): a topic deleted and created again under
# its name is read from its start, not from these offsets (`jobs.kafka_source`). Like `waiting`.
_TOPIC_IDS = ("topic_ids", "STRING")

# Only the product reads this table, and only its newest snapshot, in statements
# that take seconds (`load`: the newest checkpoint, or the newest saved before a
# time). Nobody travels back in its history, so it need not keep Delta's
# defaults (files replaced a week ago, commits of 30 days): commits are kept a
# day (Delta removes older ones when it writes a log checkpoint, counting from
# midnight UTC, so one to two days stay), replaced files `Retention.file_seconds`.
_LOG_RETENTION = "interval 1 days"


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
    routes: str | None = None  # the routes taken so far (`Routes.saved`); None: none recorded
    waiting: str | None = None  # what waited, and for what (`jobs.waits.encode`); None: nothing
    topic_ids: Mapping[str, str] = field(default_factory=dict)  # each topic's Kafka id at the save


@dataclass(frozen=True, slots=True)
class Retention:
    """How many checkpoints a consumer keeps, and how often the table is cleaned up."""

    keep: int  # newest checkpoints kept per consumer (`checkpoint.keep`)
    cleanup_every: int  # batches between cleanups (`checkpoint.cleanup_every`)
    # How long files the table no longer uses stay on disk: longer than any read
    # of the table takes (a reader that listed the files of a snapshot still finds them).
    file_seconds: int = 3600

    def __post_init__(self) -> None:
        if self.keep < 1 or self.cleanup_every < 1 or self.file_seconds < 0:
            raise ValueError(f"keep and cleanup_every must be at least 1, file_seconds not negative: {self}")

    def due(self, batch: int) -> bool:
        # By batch number, not by saves of this process: a scheduled job of a few
        # batches per run gets its cleanups too.
        return batch % self.cleanup_every == 0

    def table_properties(self) -> dict[str, str]:
        return {
            "delta.deletedFileRetentionDuration": f"interval {self.file_seconds} seconds",
            "delta.logRetentionDuration": _LOG_RETENTION,
        }


@dataclass(frozen=True, slots=True)
class CleanupReport:
    """What one cleanup did, and what each step cost."""

    deleted: int  # the consumer's checkpoints deleted
    kept_for_replay: int | None  # batch of the checkpoint kept (beyond `keep`) for replay-dead-letters
    files_compacted: int  # data files OPTIMIZE replaced
    vacuumed: bool
    seconds: dict[str, float] = field(default_factory=dict)  # per step: compact, prune, vacuum


def _first_row(result) -> dict:
    rows = result.collect() if result is not None else []
    return rows[0].asDict(recursive=True) if rows else {}


def _newest(rows: list[dict], consumer: str, saved_before: dt.datetime | None) -> dict | None:
    """What Spark's read of the newest checkpoint gives, from every row of the table as delta-rs reads them: its
    times are UTC (Spark's: the local time zone's, without one), a `saved_before` without a zone is local time."""
    bound = None if saved_before is None else saved_before.astimezone(dt.timezone.utc)
    mine = [r for r in rows if r["consumer"] == consumer and (bound is None or (r["saved_at"] is not None and r["saved_at"] < bound))]
    if not mine:
        return None
    newest = dict(max(mine, key=lambda r: r["batch"]))
    if newest["saved_at"] is not None:
        newest["saved_at"] = newest["saved_at"].astimezone().replace(tzinfo=None)
    return newest


class CheckpointStore:
    def __init__(self, sql: SqlSession, locator: OwnTablePlaces, retention: Retention | None = None) -> None:
        """`retention` None: never cleans up (for readers: status, replay)."""
        self._sql = sql
        self._locator = locator
        self._name = locator.internal_sql_name(_TABLE)
        self._created = False
        self._retention = retention
        self._properties_set = False
        self._vacuumed_at: float | None = None  # time.monotonic() of this process's last VACUUM

    def load(self, consumer: str, *, saved_before: dt.datetime | None = None) -> Checkpoint | None:
        """The consumer's newest checkpoint; with `saved_before`, its newest one saved before then."""
        read = own_rows(self._locator, _TABLE)
        if read is not None:  # (delta-rs's read: no Spark statement)
            row = _newest(read.to_pylist(), consumer, saved_before)
        elif self._locator.own_delta_rs is not None and not self._locator.internal_table_exists(self._sql, _TABLE):
            return None  # (a new target's: a look at the folder, not a Spark statement)
        else:
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
            row = rows[0].asDict() if rows else None
        if row is None:
            return None
        return Checkpoint(
            consumer=consumer,
            batch=row["batch"],
            offsets=_decode_tp_map(row["offsets"]),
            watermarks=_decode_tp_map(row["watermarks"]),
            decoder_state=bytes(row["decoder_state"]),
            saved_at=row["saved_at"],
            routes=row.get("routes"),
            waiting=row.get("waiting"),
            topic_ids=json.loads(row.get("topic_ids") or "{}"),
        )

    def save(self, checkpoint: Checkpoint) -> None:
        row = (
            checkpoint.consumer,
            checkpoint.batch,
            dt.datetime.now(dt.timezone.utc),
            _encode_tp_map(checkpoint.offsets),
            _encode_tp_map(checkpoint.watermarks),
            checkpoint.decoder_state,
            checkpoint.waiting,
            json.dumps(dict(sorted(checkpoint.topic_ids.items())), separators=(",", ":")),
        )
        columns = (*_COLUMNS, _WAITING, _TOPIC_IDS)
        if checkpoint.routes is not None:
            columns, row = (*columns, _ROUTES), (*row, checkpoint.routes)
        # No idempotent-write pair: it makes Delta reconstruct the table's state
        # on every commit (about 0.4 s each), and a save repeated after a crash
        # only adds an identical row for the same batch. By column name: tables
        # written by earlier releases have more columns. The first save to a new
        # target creates the table with its row (one commit, not two).
        append_internal_rows(self._sql, self._locator, _TABLE, columns, [row], exists=self._created,
                             what="save checkpoint", add_missing_columns=True)
        self._created = True

    # --- keeping the table bounded ------------------------------------------------------------

    @property
    def retention(self) -> Retention | None:
        return self._retention

    def cleanup_due(self, batch: int) -> bool:
        """Whether `clean_up` has work after saving checkpoint `batch`."""
        return self._retention is not None and self._retention.due(batch)

    def clean_up(self, consumer: str, batch: int) -> CleanupReport | None:
        """After checkpoint `batch` of `consumer` is saved: compact, delete its old checkpoints, vacuum.

        A failure of Spark or Delta (a race lost five times in a row, a
        permission refused, a storage hiccup) is logged and left to the next
        cleanup: nothing here is needed for the job's progress. The product's
        own errors (a lost lease) stop the job as anywhere else.
        """
        if self._retention is None:
            return None
        try:
            return self._clean_up(consumer, batch)
        except Exception as err:
            if isinstance(err, MaterializerError) and not isinstance(err, ConcurrentCommitError):
                raise
            log.error("cleaning up %s failed; the next cleanup tries again", self._name, exc_info=True)
            return None

    def _clean_up(self, consumer: str, batch: int) -> CleanupReport:
        seconds = {}
        started = time.perf_counter()
        self._set_retention_properties()
        # Compaction first: the prune then rewrites the one file holding every
        # checkpoint, the one just saved included, so what it writes is never
        # empty. (Spark writes one empty file for an empty result; Delta leaves
        # it out of the table, and VACUUM LITE, which goes by the log, would
        # never remove it: one stray file per cleanup.)
        compacted = self._compact()
        seconds["compact"] = time.perf_counter() - started
        started = time.perf_counter()
        deleted, kept_for_replay = self._prune(consumer, batch)
        seconds["prune"] = time.perf_counter() - started
        started = time.perf_counter()
        vacuumed = self._vacuum()
        seconds["vacuum"] = time.perf_counter() - started
        report = CleanupReport(deleted, kept_for_replay, compacted, vacuumed, seconds)
        log.info(
            "checkpoints of %s cleaned up at batch %d: %d deleted%s, %d files compacted, %s (%s)",
            consumer,
            batch,
            deleted,
            f" (batch {kept_for_replay} kept for replay-dead-letters)" if kept_for_replay is not None else "",
            compacted,
            "vacuumed" if vacuumed else "not vacuumed (done less than the file retention ago)",
            ", ".join(f"{step} {s:.2f}s" for step, s in seconds.items()),
        )
        return report

    def _set_retention_properties(self) -> None:
        """The table's retention properties, once per process; a commit only when they differ."""
        if self._properties_set:
            return
        wanted = self._retention.table_properties()
        current = {r["key"]: r["value"] for r in self._sql.sql(f"SHOW TBLPROPERTIES {self._name}").collect()}
        if any(current.get(key) != value for key, value in wanted.items()):
            settings = ", ".join(f"'{key}' = '{value}'" for key, value in wanted.items())
            self._sql.run(f"ALTER TABLE {self._name} SET TBLPROPERTIES ({settings})", what="set checkpoint retention")
        self._properties_set = True

    def _kept_for_replay(self, consumer: str) -> int | None:
        """The batch of the checkpoint `replay-dead-letters` would start from (`jobs.replay`), if any.

        The replay re-reads from the newest checkpoint saved before the
        earliest dead letter it replays; the earliest unresolved one of the
        consumer gives the oldest such checkpoint, and nothing older is ever
        needed. (A replay of later dead letters only, whose own checkpoint was
        deleted, starts from this older one: it re-reads more, and decides the same.)
        """
        earliest = DeadLetterTable(self._sql, self._locator, consumer).earliest_unresolved_at()
        if earliest is None:
            return None
        start = self.load(consumer, saved_before=earliest)
        return None if start is None else start.batch

    def _prune(self, consumer: str, batch: int) -> tuple[int, int | None]:
        """Delete the consumer's checkpoints older than its newest `keep` (not the replay's); (deleted, kept)."""
        kept_for_replay = self._kept_for_replay(consumer)
        # A consumer's batches are numbered one after the other (each save the
        # previous + 1), so its newest `keep` are those above `batch - keep`.
        oldest_kept = batch - self._retention.keep + 1
        if oldest_kept <= 1:
            return 0, kept_for_replay
        # Values travel in a view, never as SQL text (the consumer is a configured name).
        # Other consumers' rows do not match `t.consumer = s.consumer`.
        with self._sql.view([(consumer, oldest_kept, kept_for_replay)], "consumer STRING, below BIGINT, kept BIGINT") as source:
            result = self._sql.run(
                f"MERGE INTO {self._name} AS t USING {source} AS s "
                "ON t.consumer = s.consumer AND t.batch < s.below AND NOT (t.batch <=> s.kept) "
                "WHEN MATCHED THEN DELETE",
                what="delete old checkpoints",
            )
            deleted = _first_row(result).get("num_deleted_rows") or 0
        return deleted, kept_for_replay

    def _compact(self) -> int:
        """OPTIMIZE: the files of the saves since the last cleanup, and the one it left, into one; how many it replaced."""
        metrics = _first_row(self._sql.run(f"OPTIMIZE {self._name}", what="compact checkpoints")).get("metrics") or {}
        return metrics.get("numFilesRemoved") or 0

    def _vacuum(self) -> bool:
        """Delete files the table stopped using more than the file retention ago; at most once per retention.

        A VACUUM sooner after the last one could only find files that are not yet old enough.
        """
        now = time.monotonic()
        if self._vacuumed_at is not None and now - self._vacuumed_at < self._retention.file_seconds:
            return False
        vacuum_internal_table(self._sql, self._name, "vacuum checkpoints")
        self._vacuumed_at = now
        return True
