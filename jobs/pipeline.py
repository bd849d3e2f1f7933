"""The consumer loop: read a batch, decode, gate, apply, checkpoint, commit.

One job per consumer: the run holds the consumer's lease (`apply.own_tables.lease`),
and every write asks it first.

Order of durability per batch: the registry of tables the batch may create,
Delta table commits, then dead letters, then the checkpoint row, then Kafka
offsets. Offsets never pass a message whose effects are not yet durable:
events still waiting in the gate and messages parked for their schema hold
their partition's offset back. Each batch's metrics record comes after all
of that (`jobs.batch_metrics`); an until-idle run on a terminal shows a
progress line (`jobs.live_progress`).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TextIO

from ticdc_delta.apply.applier import Applier, ApplySummary
from ticdc_delta.apply.base.phases import PhaseTimes
from ticdc_delta.apply.base.session import SqlSession
from ticdc_delta.apply.changes.table_changes import TableChanges
from ticdc_delta.apply.maintenance import TableMaintenance
from ticdc_delta.apply.ordering.gate import Gate, gate_for
from ticdc_delta.apply.own_tables.checkpoint import Checkpoint, CheckpointStore, Retention
from ticdc_delta.apply.own_tables.dead_letters import DeadLetterTable
from ticdc_delta.apply.own_tables.delta_rs import DeltaRsOwnTables
from ticdc_delta.apply.own_tables.lease import ConsumerLease, committing_processes
from ticdc_delta.apply.own_tables.lease_store import DeltaLeaseStore
from ticdc_delta.apply.own_tables.metrics import BatchRecord, MetricsTable
from ticdc_delta.apply.own_tables.tombstones import Tombstones
from ticdc_delta.apply.places.locator import CatalogLocator, PathLocator, TableLocator
from ticdc_delta.apply.places.registry import TableRegistry
from ticdc_delta.apply.places.routing import Routes
from ticdc_delta.apply.writers.delta_rs import DeltaRs
from ticdc_delta.apply.writers.delta_writer import DeltaWriter
from ticdc_delta.exceptions import DecodeError
from ticdc_delta.jobs.batch_metrics import MetricsRecorder, commit_ts_lag_ms, offset_lag
from ticdc_delta.jobs.caught_up import commit_tag
from ticdc_delta.jobs.config import SPARK_WRITER, Config, TargetConfig
from ticdc_delta.jobs.intake import DriverIntake, Intake, Reading
from ticdc_delta.jobs.kafka_source import KafkaSource
from ticdc_delta.jobs.live_progress import ProgressLine
from ticdc_delta.jobs.runtime import check_session, settle, targets_case_sensitive
from ticdc_delta.jobs.waits import Wait, WaitWarnings, waits
from ticdc_delta.jobs.waits import encode as encode_waits
from ticdc_delta.schema_cache.decoder import Decoder
from ticdc_delta.schema_cache.events import Ordering, RowChange, SchemaChange, TableName, TopicPartition
from ticdc_delta.schema_cache.protocols import create_decoder

log = logging.getLogger(__name__)

def locator_for(config: Config) -> TableLocator:
    """Where the tables are; the product's own tables take their appends from delta-rs wherever it takes the
    data tables' small MERGEs (`target.small_merge_writer`; apply.own_tables.delta_rs)."""
    if config.target.path:
        fast = config.target.small_merge_writer != SPARK_WRITER and config.target.why_not_delta_rs() is None
        return PathLocator(config.target.path, config.kafka.group_id, own_delta_rs=DeltaRsOwnTables() if fast else None)
    return CatalogLocator(config.target.catalog, config.target.meta_schema)


def small_merges_of(target: TargetConfig) -> DeltaRs | None:
    """Who commits small MERGEs besides Spark (`target.small_merge_writer`): delta-rs, or nobody."""
    if target.small_merge_writer == SPARK_WRITER:
        return None
    why = target.why_not_delta_rs()  # ("delta-rs" itself refused to start on any reason)
    if why is not None:
        log.info("small MERGEs are Spark's here, not delta-rs's (target.small_merge_writer = \"auto\"): %s", why)
        return None
    return DeltaRs()


@dataclass
class RunResult:
    batches: int = 0
    messages: int = 0
    rows_applied: int = 0
    schema_changes: int = 0
    replays_skipped: int = 0
    dead_letters: int = 0
    waiting: int = 0
    # seconds per phase of the batch loop (apply.base.phases.PHASES)
    phases: dict[str, float] = field(default_factory=dict)
    # continuous mode with kafka.topic_pattern: what changed among the matching topics, which ended the run
    # at a checkpoint for its caller to start again with them ("": the run ended otherwise)
    topics_changed: str = ""


GateFactory = Callable[[Ordering, Mapping[str, Iterable[int]]], Gate]


class Pipeline:
    """The batch loop over its collaborators, one for both engines (`jobs.intake`); `Pipeline.from_config`
    builds the production set."""

    def __init__(
        self,
        config: Config,
        *,
        intake: Intake,
        source: KafkaSource,
        decoder: Decoder,
        applier: Applier,
        checkpoints: CheckpointStore,
        dead_letters: DeadLetterTable,
        gate_factory: GateFactory = gate_for,
        times: PhaseTimes | None = None,
        stop: threading.Event | None = None,
        metrics: MetricsRecorder | None = None,
        progress: ProgressLine | None = None,
        lease: ConsumerLease | None = None,
        maintenance: TableMaintenance | None = None,
    ) -> None:
        self._config = config
        self._consumer_id = config.kafka.group_id
        self._intake = intake
        self._source = source
        self._decoder = decoder
        self._applier = applier
        self._checkpoints = checkpoints
        self._dead_letters = dead_letters
        self._gate_factory = gate_factory
        self._times = times or PhaseTimes()
        self._stop = stop or threading.Event()
        self._gate: Gate | None = None
        self._batch = 0
        self._saved: tuple | None = None  # (offsets, watermarks) this run last saved
        self._resumed: tuple | None = None  # those of the checkpoint it began from
        self._metrics = metrics or MetricsRecorder(None, config.metrics.flush_seconds)
        self._progress = progress
        if progress is not None:
            self._times.watch(progress.doing)
        self._lease = lease  # None: the caller makes sure no other job runs this consumer
        self._run_id = ""
        self._committed: dict[TopicPartition, int] = {}  # offsets saved last (at start: where reading began)
        self._applied_ts: int | None = None  # upstream commitTs through which the tables are applied
        self._tables_touched: set[TableName] = set()
        self._opened: dict[str, list[int]] = {}  # the partitions read, per topic
        # Data tables compacted and vacuumed every `maintenance.every_batches` batches (None: never in the job):
        # those this run wrote (a table nothing was written to gains no file; `ticdc-delta maintain` does all)
        self._maintenance = maintenance
        self._waits: list[Wait] = []  # what the last batch left waiting, and for what (saved with the checkpoint)
        self._topics_changed = ""  # topics found by pattern changed since the run began (it ends at this batch)
        self._wait_warnings = WaitWarnings(config.run.wait_warning_seconds)

    @classmethod
    def from_config(
        cls, config: Config, spark, *, stop: threading.Event | None = None, progress_stream: TextIO | None = None
    ) -> Pipeline:
        """The production pipeline: Kafka, the protocol's decoder, Delta tables on a session of its own.

        `progress_stream` (default stderr) shows the live progress line, if it is a terminal.
        """
        tag = commit_tag(config.target)  # (the target as configured: what a run's look at the commits compares)
        config = settle(config, spark)
        check_session(config, spark)
        sql = SqlSession(spark)
        locator = locator_for(config)
        # The lease is renewed on a session of its own (a heartbeat thread), so a long
        # statement of the job's does not hold its renewal up.
        lease = ConsumerLease(
            DeltaLeaseStore(sql.fork(), locator),
            config.kafka.group_id,
            config.run.lease_seconds,
            process=committing_processes(spark, sql.isolated),
            overlap=sql.isolated,
        )
        if not sql.isolated:
            log.warning(
                "this Spark session cannot be forked (Spark Connect): the lease is renewed between the job's "
                "statements only, so run.lease_seconds (%g) must exceed the longest one (a large MERGE)",
                config.run.lease_seconds,
            )
        sql.guard_writes(lease.check)
        decoder = create_decoder(config.protocol, config.types)
        times = PhaseTimes()
        registry = TableRegistry(sql, locator, config.kafka.group_id)
        routes = Routes(config.tables, case_sensitive=targets_case_sensitive(config, spark))
        writer = DeltaWriter(sql, locator, times, table_features=config.target.table_features,
                             small_merges=small_merges_of(config.target), layouts=routes.layout)
        run = config.run
        source = KafkaSource(config.kafka, tag)
        stop = stop or threading.Event()
        progress = ProgressLine.for_run(run.mode, progress_stream)
        reading = Reading(source, decoder, times, stop, progress)
        if run.engine == "spark":
            from ticdc_delta.jobs.spark_engine.intake import SparkIntake
            from ticdc_delta.jobs.spark_engine.staging import StagingTable

            staging = StagingTable(sql, locator, config.kafka.group_id, decoder.ordering,
                                   in_memory_rows=config.run.max_pending_events)
            intake = SparkIntake(config, reading, spark=sql.spark, staging=staging)
        else:
            intake = DriverIntake(run, reading)
        return cls(
            config,
            intake=intake,
            source=source,
            decoder=decoder,
            applier=Applier(
                writer,
                Tombstones(sql, locator),
                decoder.ordering,
                times,
                registry=registry,
                history=config.history.choice(),
                concurrency=run.apply_concurrency,
                inserts_are_new=decoder.inserts_are_new and run.append_new_keys,
                routes=routes,
            ),
            checkpoints=CheckpointStore(sql, locator, Retention(config.checkpoint.keep, config.checkpoint.cleanup_every)),
            dead_letters=DeadLetterTable(sql, locator, config.kafka.group_id),
            gate_factory=functools.partial(
                gate_for, max_in_memory=run.max_pending_events, spill_dir=run.spill_dir or None,
                silent_rounds=run.silent_topic_rounds, topics_by_pattern=bool(config.kafka.topic_pattern),
            ),
            times=times,
            stop=stop,
            metrics=MetricsRecorder(
                MetricsTable(sql, locator) if config.metrics.table else None, config.metrics.flush_seconds, times=times
            ),
            progress=progress,
            lease=lease,
            maintenance=TableMaintenance(sql, locator, min_files=config.maintenance.min_files,
                                         retain_hours=config.maintenance.vacuum_retain_hours)
            if config.maintenance.every_batches else None,
        )

    def run(self) -> RunResult:
        """Run the job as `run.mode` says (until idle, or continuously until `stop` is set or SIGTERM), holding
        the consumer's lease: what `ticdc-delta run` does. Its errors are the product's own (`MaterializerError`)
        or Spark's; the command line turns them into one line and an exit status."""
        log.info("effective configuration: %s", json.dumps(self._config.describe(), sort_keys=True))
        self._run_id = uuid.uuid4().hex
        try:
            # The checkpoint is read once the lease was seen free, while the take is written (`ConsumerLease.acquire`):
            # what a previous holder saved last is what counts.
            load = functools.partial(self._checkpoints.load, self._consumer_id)
            with self._lease.held(meanwhile=load) if self._lease is not None else nullcontext(load()) as checkpoint:
                try:
                    self._start(checkpoint)
                    return self._loop()
                finally:
                    if self._progress is not None:
                        self._progress.close()
                    self._metrics.flush()  # a write: while the lease is held
        finally:
            self._applier.close()
            self._source.close()
            if self._gate is not None:
                self._gate.close()

    def _start(self, checkpoint: Checkpoint | None) -> None:
        if checkpoint is not None:
            log.info("resuming %s from checkpoint batch %d", self._consumer_id, checkpoint.batch)
            self._decoder.restore(checkpoint.decoder_state)
            self._batch = checkpoint.batch
            if self._applier.routes or checkpoint.routes is not None:
                self._applier.routes.restore(checkpoint.routes, self._applier.materialized)
        self._source.expect_topic_ids(checkpoint.topic_ids if checkpoint else {})
        partitions = self._intake.open(checkpoint.offsets if checkpoint else None)
        self._opened = partitions
        self._gate = self._gate_factory(self._decoder.ordering, partitions)
        if checkpoint is not None:
            # (a topic deleted and created again: its old watermarks say nothing of the new one)
            self._gate.restore({tp: ts for tp, ts in checkpoint.watermarks.items() if tp.topic not in self._source.recreated})
            self._resumed = (dict(checkpoint.offsets), dict(checkpoint.watermarks))
        # The topics were listed just now (`open`), after every watermark restored was read.
        self._gate.completeness.listed(self._gate.completeness.newest())
        self._committed = self._source.next_offsets()
        self._note_applied(self._gate.limits(), [])  # a restored gate: applied by earlier runs
        if self._progress is not None:
            self._progress.start(self._committed, self._source.end_offsets())

    def _loop(self) -> RunResult:
        result = RunResult()
        until_idle = self._config.run.mode == "until-idle"
        last_message_at = time.monotonic()
        # (continuous mode: a topic the pattern matches from now on is read after a restart from the checkpoint
        # saved at the end of a batch, so the gate, the offsets and the checkpoint cover it from its start)
        watch_topics = not until_idle and bool(self._config.kafka.topic_pattern)
        next_topic_look = time.monotonic() + self._config.kafka.topic_refresh_seconds
        while not self._stop.is_set():
            if watch_topics and (time.monotonic() >= next_topic_look or self._source.topic_gone):
                next_topic_look = time.monotonic() + self._config.kafka.topic_refresh_seconds
                result.topics_changed = self._source.partitions_changed(self._opened)
                if result.topics_changed:
                    log.info("kafka.topic_pattern: %s; reading them from the checkpoint", result.topics_changed)
                    break
            began, spent = time.monotonic(), self._times.totals()
            messages = self._intake.collect(until_idle)
            summary, dead_letters = self._process(messages, result)
            if messages or summary:
                self._record(len(messages), summary, dead_letters, result, began, spent)
            if self._topics_changed:
                result.topics_changed = self._topics_changed
                log.info("kafka.topic_pattern: %s; reading them from the checkpoint", result.topics_changed)
                break
            # Idle means polls that brought nothing: a batch that takes long to apply is not idleness,
            # nor is a broker that does not answer (the source raises once that lasts too long).
            if messages or self._source.waiting_for_broker():
                last_message_at = time.monotonic()
            if until_idle and self._intake.caught_up():
                break
            if until_idle and time.monotonic() - last_message_at > self._config.run.idle_timeout_seconds:
                log.warning(
                    "no message for %gs before reaching the end offsets noted at start; stopping",
                    self._config.run.idle_timeout_seconds,
                )
                break
        self._metrics.flush()  # (again in `run` for a run that fails: nothing waiting is lost either way)
        result.waiting = self._pending_count()
        result.phases = self._times.snapshot()
        log.info("time per phase: %s", self._times.describe())
        if result.waiting:
            log.info(
                "%d events wait for a later watermark or their schema; they stay uncommitted for the next run",
                result.waiting,
            )
        return result

    def _pending_count(self) -> int:
        """Events waiting for a watermark or for their structure."""
        return self._intake.waiting(self._gate) + len(self._decoder.parked())

    def _process(self, messages: Sized, result: RunResult) -> tuple[ApplySummary, int]:
        """Decode, gate, apply and checkpoint one batch; what it applied, and how many dead letters."""
        errors: list[DecodeError] = []
        # (also with no new message: the decoder may have given up on a message parked for its schema)
        self._intake.take(messages, self._gate, functools.partial(self._bad_message, errors=errors))
        self._look_at_end_offsets()
        if self._lease is not None:
            self._lease.check("apply a batch")  # (every write asks again)
        summary = ApplySummary()
        released_count = 0
        holds = self._holds()
        for released in self._intake.releases(self._gate, holds):
            summary.add(self._applier.apply(released.events, released.through, holds))
            self._gate.released(released.events)
            self._note_applied(released.through, released.events, holds)
            released_count += len(released.events)
        with self._times.phase("dead_letters"):
            self._dead_letters.write(errors)
        self._intake.settle(messages, holds)
        ordered = self._decoder.ordering is Ordering.COMMIT_TS
        self._waits = waits(self._intake.waiting_by_partition(self._gate), self._decoder.parked(),
                            self._gate.completeness if ordered else None)
        self._wait_warnings.round_ended(self._waits, self._gate.completeness, self._source.unread())
        self._save_progress(summary)

        result.batches += 1
        result.messages += len(messages)
        result.rows_applied += sum(summary.merged_rows.values())
        result.schema_changes += summary.schema_changes
        result.replays_skipped += summary.skipped_replays
        result.dead_letters += len(errors)
        if messages or summary:
            log.info(
                "round %d (checkpoint %d): %d messages, %d released, %d rows merged into %d tables (%d runs appended), "
                "%d DDL, %d replays skipped, %d dead letters, %d waiting; watermarks %s",
                result.batches,
                self._batch,
                len(messages),
                released_count,
                sum(summary.merged_rows.values()),
                len(summary.merged_rows),
                summary.appends,
                summary.schema_changes,
                summary.skipped_replays,
                len(errors),
                self._pending_count(),
                self._gate.watermarks(),
            )
        return summary, len(errors)

    def _look_at_end_offsets(self) -> None:
        """Look up the end offsets of partitions of topics that get no watermarks: read up to them, they are complete
        through the newest watermark (a topic whose table was dropped or renamed away, a new topic before its
        first: `apply.ordering.completeness`). Topics found by pattern: list them again where the release would pass the
        newest watermark read before they were last listed; a new one ends the run at this batch's checkpoint,
        to read it from there (`runs`)."""
        completeness = self._gate.completeness
        if self._decoder.ordering is not Ordering.COMMIT_TS:
            return
        wanted = completeness.looks_wanted()
        if wanted:
            with self._times.phase("kafka_poll"):
                completeness.looked(self._source.end_offsets_now(wanted), wanted)
        completeness.read_up_to(self._source.next_offsets())
        if self._config.kafka.topic_pattern and completeness.needs_listing() and not self._topics_changed:
            newest = completeness.newest()  # (read before the listing)
            with self._times.phase("kafka_poll"):
                changed = self._source.partitions_changed(self._opened, ids=False)
            if changed:
                self._topics_changed = changed
            else:
                completeness.listed(newest)

    def _note_applied(self, through: Mapping[str, int], events: list, holds: Mapping[TableName, int] | None = None) -> None:
        """Move the applied commitTs on: everything through it is in the tables.

        commitTs ordering: the lowest topic's `through` of a release, and below
        any event parked for its schema. Offset ordering (no watermarks): the
        newest commitTs the applied events carry.
        """
        if through:
            newest = min([*through.values(), *(ts - 1 for ts in (holds or {}).values())])
        else:
            newest = max((_newest_commit_ts(e) for e in events), default=0)
        if newest > 0 and newest > (self._applied_ts or 0):
            self._applied_ts = newest

    def _record(
        self, messages: int, summary: ApplySummary, dead_letters: int, result: RunResult, began: float, spent: dict
    ) -> None:
        """The batch's metrics record (log line, table row) and the progress line."""
        now = dt.datetime.now(dt.timezone.utc)
        self._tables_touched |= summary.tables
        committed = self._committed
        record = BatchRecord(
            consumer=self._consumer_id,
            run_id=self._run_id,
            round=result.batches,
            checkpoint=self._batch,
            recorded_at=now,
            messages=messages,
            row_events=dict(summary.row_events),
            ddl=summary.schema_changes,
            dead_letters=dead_letters,
            replays_skipped=summary.skipped_replays,
            waiting=self._pending_count(),
            applied_ts=self._applied_ts,
            commit_ts_lag_ms=commit_ts_lag_ms(self._applied_ts, now),
            offsets=committed,
            offset_lag=offset_lag(self._source.latest_end_offsets(), committed),
            stage_seconds=self._times.since(spent),
            batch_seconds=time.monotonic() - began,
            table_seconds=dict(summary.table_seconds),
        )
        self._metrics.record(record)
        if self._progress is not None:
            self._progress.applied(result.rows_applied, len(self._tables_touched))

    def _holds(self) -> dict[TableName, int]:
        """Per table, the commitTs of its oldest message parked for its schema: nothing from there on is applied."""
        holds: dict[TableName, int] = {}
        for parked in self._decoder.parked():
            holds[parked.table] = min(holds.get(parked.table, parked.commit_ts), parked.commit_ts)
        return holds

    def _save_progress(self, summary) -> None:
        """Checkpoint, then Kafka offsets: only what the Delta commits before them cover."""
        offsets = self._committable_offsets()
        watermarks = self._gate.safe_watermarks(offsets)
        if (offsets, watermarks) == self._saved and not summary:
            return
        if (offsets, watermarks) == self._resumed and not summary and self._saved is None:
            # Nothing new since the checkpoint this run began from (a run with nothing to read): no checkpoint
            # of the same, a Delta commit; Kafka is told again (a crash may have come between the two).
            with self._times.phase("kafka_commit"):
                self._source.commit(offsets)
            self._saved, self._committed = (offsets, watermarks), offsets
            self._applier.clean_up()  # what a run cut short before its clean-up left
            return
        if self._decoder.ordering is Ordering.COMMIT_TS:
            # What a restart from these offsets reads is after every partition's watermark here (none yet: 0).
            self._decoder.forget_before(min((watermarks.get(tp, 0) for tp in self._source.next_offsets()), default=0))
        self._batch += 1
        with self._times.phase("checkpoint"):
            self._checkpoints.save(
                Checkpoint(
                    consumer=self._consumer_id,
                    batch=self._batch,
                    offsets=offsets,
                    watermarks=watermarks,
                    decoder_state=self._decoder.state(),
                    routes=self._applier.routes.saved() if self._applier.routes else None,
                    waiting=encode_waits(self._waits, self._gate.completeness.newest()),
                    topic_ids=self._source.topic_ids,
                )
            )
        with self._times.phase("kafka_commit"):
            self._source.commit(offsets)
        self._saved = (offsets, watermarks)
        self._committed = offsets
        # Only now that a checkpoint covers them: a replay after a crash never reads what went.
        self._applier.clean_up()
        # Only after the checkpoint it keeps is saved (a crash in it loses nothing).
        if self._checkpoints.cleanup_due(self._batch):
            with self._times.phase("checkpoint_cleanup"):
                self._checkpoints.clean_up(self._consumer_id, self._batch)
                self._intake.clean_up(self._checkpoints.retention)
        every = self._config.maintenance.every_batches
        if self._maintenance is not None and every and self._batch % every == 0:
            with self._times.phase("maintenance"):
                self._maintenance.run(sorted(self._tables_touched, key=lambda t: (t.database, t.table)),
                                      self._config.maintenance.budget_seconds)

    def _bad_message(self, err: DecodeError, *, errors: list[DecodeError]) -> None:
        if self._config.policy.on_bad_message == "fail":
            raise err
        log.warning("dead-lettering %s: %s", err.position, err.reason)
        errors.append(err)

    def _committable_offsets(self) -> dict[TopicPartition, int]:
        offsets = self._source.next_offsets()
        held = self._intake.held_offsets(self._gate)
        for parked in self._decoder.parked():
            tp = parked.position.topic_partition
            held[tp] = min(held.get(tp, parked.position.offset), parked.position.offset)
        return {tp: min(offset, held.get(tp, offset)) for tp, offset in offsets.items()}


def runs(config: Config, spark, *, stop: threading.Event | None = None) -> Iterator[RunResult]:
    """The job's runs, each result as it ends: one, or with `kafka.topic_pattern` another from the checkpoint
    each time the matching topics change (continuous mode's look every `topic_refresh_seconds`, or a release
    that must know them first), until one ends otherwise (a stop, an error)."""
    while True:
        result = Pipeline.from_config(config, spark, stop=stop).run()
        yield result
        if not result.topics_changed or (stop is not None and stop.is_set()):
            return


def _newest_commit_ts(event) -> int:
    """The newest commitTs an applied event carries (0: a watermark, which is no change)."""
    if isinstance(event, (RowChange, SchemaChange)):
        return event.commit_ts
    if isinstance(event, TableChanges):
        return event.max_commit_ts
    return 0
