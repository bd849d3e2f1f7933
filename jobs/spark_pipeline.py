"""The Spark engine (`run.engine = "spark"`): Kafka read by Spark, decoded on the executors, staged in Delta.

Per batch:
1. per partition, an offset range (from where the last batch ended, at most `run.batch_max_messages`
   in all), read with Spark's Kafka source (`jobs.spark_source`);
2. decoded on the executors in offset order (`mapInArrow`, `schema_cache.staged_decoding`) with the
   driver's decoder state as of the batch's start, and staged into the consumer's staging table
   (`apply.staging`, one commit that also replaces what an earlier try staged from these offsets);
3. the messages the executors handed back (BOOTSTRAP, DDL, watermarks, rows waiting for their
   structure, bad input) decoded by the driver's decoder in partition and offset order: watermarks to
   the gate, schema changes and rows to the staging table, bad input to the policy;
4. the release: everything of each topic at or below its watermark (offset ordering: everything), in
   runs of one table and structure between schema changes, applied by the same applier (one MERGE of
   net changes per run, built by Spark; DDL barriers, replays, applied points, idempotent writes);
5. dead letters, the release removed from the staging table, the checkpoint (offsets at the batch's
   end: everything before them is staged or applied), Kafka offsets.

Memory on the driver is the messages handed back and one row per run, whatever the lag: waiting
events are in Delta. A crash anywhere loses nothing: a batch not checkpointed is read and staged again
(replacing its first staging), applied events are known by each table's applied point.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping

from pyspark.errors import AnalysisException

from ticdc_delta.apply.applier import ApplySummary
from ticdc_delta.apply.staged_run import StagedRun
from ticdc_delta.apply.staging import StagingTable
from ticdc_delta.exceptions import ConfigError, DecodeError
from ticdc_delta.jobs.pipeline import Pipeline, RunResult
from ticdc_delta.jobs.spark_source import kafka_frame
from ticdc_delta.schema_cache.events import Ordering, RowChange, SchemaChange, TableName, TopicPartition, Watermark
from ticdc_delta.schema_cache.staged_decoding import STAGED_FIELDS, WorkerSpec, decode_arrow

log = logging.getLogger(__name__)

_STAGED_SCHEMA = ", ".join(f"`{name}` {kind}" for name, _, kind in STAGED_FIELDS)


class _Ranges(dict):
    """A batch: per partition, (first offset, offset after the last); its length is its message count."""

    def __len__(self) -> int:
        return sum(end - start for start, end in self.values())

    def __bool__(self) -> bool:
        return len(self) > 0


def plan_ranges(starts: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int], budget: int) -> _Ranges:
    """A batch's offset ranges: per partition from `starts` towards `ends`, at most `budget` messages in all.

    An even share per partition; what a partition does not need goes to the others.
    """
    left = {tp: max(0, ends.get(tp, start) - start) for tp, start in starts.items()}
    ranges = _Ranges()
    pending = sorted((tp for tp in left if left[tp] > 0), key=lambda tp: left[tp])
    while pending and budget > 0:
        share = max(1, budget // len(pending))
        tp = pending.pop(0)
        take = min(left[tp], share)
        ranges[tp] = (starts[tp], starts[tp] + take)
        budget -= take
    return ranges


class SparkPipeline(Pipeline):
    """The batch loop of the Spark engine; lease, checkpoint, applier, metrics as the driver engine's."""

    def __init__(self, config, *, spark, staging: StagingTable, **collaborators) -> None:
        super().__init__(config, **collaborators)
        self._spark = spark
        self._staging = staging
        self._ddl_staged: set[tuple] = set()
        self._staging_cleaned = -1

    # --- start ------------------------------------------------------------------------

    def _start(self) -> None:
        checkpoint = self._checkpoints.load(self._consumer_id)
        if checkpoint is not None:
            log.info("resuming %s from checkpoint batch %d", self._consumer_id, checkpoint.batch)
            self._decoder.restore(checkpoint.decoder_state)
            self._batch = checkpoint.batch
        partitions = self._source.plan(checkpoint.offsets if checkpoint else None)
        log.info("reading %s with Spark's Kafka source from %s", ", ".join(map(str, self._source.next_offsets())),
                 {str(tp): o for tp, o in self._source.next_offsets().items()})
        self._gate = self._gate_factory(self._decoder.ordering, partitions)
        if checkpoint is not None:
            self._gate.restore(checkpoint.watermarks)
        self._committed = self._source.next_offsets()
        self._staging.ensure()
        self._note_applied(self._gate.watermarks(), [])
        if self._progress is not None:
            self._progress.start(self._committed, self._source.end_offsets())

    # --- reading ----------------------------------------------------------------------

    def _collect(self, until_idle: bool) -> _Ranges:
        """The next batch's offset ranges: what is there up to the end offsets, at most a batch in all."""
        ends = self._source.end_offsets() if until_idle else self._source.refresh_end_offsets()
        ranges = plan_ranges(self._source.next_offsets(), ends, self._config.run.batch_max_messages)
        if not ranges and not until_idle:
            self._stop.wait(self._config.run.batch_max_seconds)  # nothing new: look again a batch later
        return ranges

    def _caught_up(self) -> bool:
        ends = self._source.end_offsets()
        return all(offset >= ends.get(tp, 0) for tp, offset in self._source.next_offsets().items())

    # --- one batch --------------------------------------------------------------------

    def _process(self, ranges: _Ranges, result: RunResult) -> tuple[ApplySummary, int]:
        errors: list[DecodeError] = []
        if ranges:
            errors = self._stage(ranges)
        if self._lease is not None:
            self._lease.check("apply a batch")
        holds = self._holds()
        limits = self._gate.watermarks() if self._decoder.ordering is Ordering.COMMIT_TS else None
        with self._times.phase("gate"):
            release = self._staging.release(limits, holds)
        summary = self._applier.apply(release.events, limits or {}, holds)
        self._note_applied(limits or {}, release.events, holds)
        with self._times.phase("dead_letters"):
            self._dead_letters.write(errors)
        with self._times.phase("gate"):
            self._staging.remove(release, ranges, limits, holds)
        self._waiting = release.waiting
        self._save_progress(summary)

        result.batches += 1
        result.messages += len(ranges)
        result.rows_applied += sum(summary.merged_rows.values())
        result.schema_changes += summary.schema_changes
        result.replays_skipped += summary.skipped_replays
        result.dead_letters += len(errors)
        if ranges or summary:
            log.info(
                "round %d (checkpoint %d): %d messages staged, %d runs and schema changes released, %d rows merged "
                "into %d tables, %d DDL, %d replays skipped, %d dead letters, %d waiting; watermarks %s",
                result.batches, self._batch, len(ranges), len(release.events), sum(summary.merged_rows.values()),
                len(summary.merged_rows), summary.schema_changes, summary.skipped_replays, len(errors),
                self._pending_count(), self._gate.watermarks(),
            )
        return summary, len(errors)

    def _stage(self, ranges: _Ranges) -> list[DecodeError]:
        """Read, decode on the executors and stage a batch; decode what they handed back. Bad input found."""
        spec = WorkerSpec(
            self._config.protocol, self._config.types, self._decoder.state(),
            self._config.protocol.worker_payload(self._decoder),
        )
        with self._times.phase("decode"):
            try:
                raw = kafka_frame(self._spark, self._config.kafka, ranges)
            except AnalysisException as err:
                if "kafka" in str(err).lower() and "data source" in str(err).lower():
                    raise ConfigError(
                        "run.engine = 'spark' needs Spark's Kafka source (org.apache.spark:spark-sql-kafka-0-10 for "
                        "this Spark): Databricks has it; with spark-submit add it to --packages"
                    ) from err
                raise
            decoded = raw.mapInArrow(functools.partial(decode_arrow, spec), _STAGED_SCHEMA)
            self._staging.stage(decoded, ranges)
            handed_back = self._staging.handed_back(ranges)
        errors: list[DecodeError] = []
        staged: list = []
        with self._times.phase("decode"):
            for message in handed_back:
                try:
                    events = self._decoder.decode(message)
                except DecodeError as err:
                    self._bad_message(err, errors)
                    continue
                for event in events:
                    self._route(event, staged)
            for err in self._decoder.take_errors():
                self._bad_message(err, errors)
        with self._times.phase("gate"):
            self._staging.append(staged)
        self._source.advance({tp: end for tp, (_, end) in ranges.items()})
        if self._progress is not None:
            self._progress.read(self._source.next_offsets())
        log.debug("staged %d messages; the driver decoded %d of them", len(ranges), len(handed_back))
        return errors

    def _route(self, event, staged: list) -> None:
        if event.__class__ is Watermark:
            self._gate.add(event)
        elif event.__class__ is SchemaChange:
            # DDL comes on every partition: one copy is staged (a later copy, after a restart, is a replay).
            # Without a commitTs (avro's new schema ids, offset ordering) each is its own.
            identity = (event.table, event.commit_ts, event.kind.value) if event.commit_ts > 0 else (event.table, event.position)
            if identity not in self._ddl_staged:
                self._ddl_staged.add(identity)
                staged.append(event)
        elif event.__class__ is RowChange:
            staged.append(event)

    def _save_progress(self, summary) -> None:
        super()._save_progress(summary)
        # The staging table on the checkpoint table's cadence, once per batch number.
        if self._checkpoints.cleanup_due(self._batch) and self._staging_cleaned != self._batch:
            self._staging_cleaned = self._batch
            with self._times.phase("checkpoint_cleanup"):
                self._staging.clean_up(self._checkpoints.retention)

    def _pending_count(self) -> int:
        return getattr(self, "_waiting", 0) + len(self._decoder.parked())

    def _committable_offsets(self) -> dict[TopicPartition, int]:
        # Everything read is staged or applied; only messages parked for their structure (in the
        # decoder's memory) hold their partition back, to be read again after a restart.
        offsets = self._source.next_offsets()
        for parked in self._decoder.parked():
            tp = parked.position.topic_partition
            offsets[tp] = min(offsets.get(tp, parked.position.offset), parked.position.offset)
        return offsets

    def _note_applied(self, through: Mapping[str, int], events: list, holds: Mapping[TableName, int] | None = None) -> None:
        if through or self._decoder.ordering is Ordering.COMMIT_TS:
            super()._note_applied(through, events, holds)
            return
        newest = max((e.commit_ts for e in events if isinstance(e, (StagedRun, SchemaChange))), default=0)
        if newest > (self._applied_ts or 0):
            self._applied_ts = newest

