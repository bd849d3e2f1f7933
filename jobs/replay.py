"""Replaying dead letters after their cause is fixed: `ticdc-delta replay-dead-letters`.

Run it with the fixed configuration, while the job is stopped. It re-reads
the dead letters' topics from the checkpoint saved just before the first of
them (its offsets and schema cache) to their end, decodes everything under
the fixed configuration, and lets `apply.replay` decide each dead letter:
applied, superseded by a later change, nothing to do, or refused with the
reason. Decisions are recorded in `_ticdc/dead_letter_replays`; a refused
dead letter stays unresolved and is tried again by the next replay.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from dataclasses import dataclass

from ticdc_delta.apply.base.session import SqlSession
from ticdc_delta.apply.own_tables.checkpoint import Checkpoint, CheckpointStore
from ticdc_delta.apply.own_tables.dead_letters import DeadLetter, DeadLetterTable
from ticdc_delta.apply.places.registry import TableRegistry
from ticdc_delta.apply.places.routing import Routes
from ticdc_delta.apply.replay import REFUSED, Decision, Scan, apply_replay, plan_replay, still_held
from ticdc_delta.apply.writers.delta_writer import DeltaWriter
from ticdc_delta.exceptions import DecodeError
from ticdc_delta.jobs import exit_statuses
from ticdc_delta.jobs.config import Config
from ticdc_delta.jobs.pipeline import locator_for
from ticdc_delta.jobs.runtime import settle, targets_case_sensitive
from ticdc_delta.jobs.topic_reader import TopicReader
from ticdc_delta.schema_cache.decoder import Decoder
from ticdc_delta.schema_cache.events import Position, TableName
from ticdc_delta.schema_cache.protocols import create_decoder

log = logging.getLogger(__name__)

EXIT_REFUSED = exit_statuses.REPLAY_REFUSED.code


@dataclass
class ReplayReport:
    decisions: list[Decision]
    messages_read: int = 0
    dry_run: bool = False

    def counts(self) -> dict[str, int]:
        return dict(Counter(d.outcome for d in self.decisions))

    def refused(self) -> list[Decision]:
        return [d for d in self.decisions if d.outcome == REFUSED]


def _scan(
    config: Config, letters: list[DeadLetter], start: Checkpoint | None, latest: Checkpoint | None, decoder: Decoder
) -> tuple[Scan, int]:
    """Re-read the dead letters' topics from `start` (a checkpoint, or None: the beginning); decode it all.

    `latest`, the job's latest checkpoint, tells which tables the job still held back for messages
    that waited for their structure.
    """
    dead = {d.position for d in letters}
    topics = sorted({p.topic for p in dead})
    kafka = dataclasses.replace(config.kafka, topics=tuple(topics))
    wanted = {tp: offset for tp, offset in (start.offsets if start else {}).items() if tp.topic in topics}
    events, read, failures, blockers = [], set(), {}, []
    parked_seen: dict[Position, TableName] = {}  # every message that waited for its structure while re-reading

    def failed(err: DecodeError) -> None:
        if err.position in dead:
            failures[err.position] = err.reason
        else:
            blockers.append(
                f"message {err.position}, which the job decoded, does not decode under this configuration "
                f"({err.reason}), so what it changed cannot be seen"
            )

    with TopicReader(kafka, idle_timeout_seconds=config.run.idle_timeout_seconds) as reader:
        reader.open(wanted)
        missing = reader.lost({tp: wanted.get(tp, 0) for tp in reader.start})
        if missing:
            where = ", ".join(f"{tp} from {want} (Kafka keeps from {kept})" for tp, (want, kept) in sorted(missing.items()))
            blockers.append(f"Kafka no longer holds what must be re-read to check for later changes: {where}")
        else:
            for message in reader:
                read.add(message.position)
                try:
                    events.extend(decoder.decode(message))
                except DecodeError as err:
                    failed(err)
                for err in decoder.take_errors():
                    failed(err)
                for parked in decoder.parked():
                    if parked.position not in dead:
                        parked_seen[parked.position] = parked.table
    waiting = still_held(parked_seen, latest.offsets if latest else None)
    for parked in decoder.parked():
        if parked.position in dead:
            failures[parked.position] = f"its table's structure ({parked.table}) never arrived"
        else:
            waiting[parked.table] = f"message {parked.position} of {parked.table} still waits for its structure"
    watermarks = dict(start.watermarks) if start else {}
    scan = Scan(events, frozenset(read), failures, blockers, waiting, watermarks)
    return scan, len(read)


def replay_dead_letters(
    config: Config, spark, *, dry_run: bool = False, positions: set[Position] | None = None
) -> ReplayReport:
    """Decide, and unless `dry_run` apply and record, the consumer's unresolved dead letters (or those at `positions`)."""
    config = settle(config, spark)
    sql = SqlSession(spark)
    locator = locator_for(config)
    consumer = config.kafka.group_id
    dead_letters = DeadLetterTable(sql, locator, consumer)
    letters = [d for d in dead_letters.read() if positions is None or d.position in positions]
    if not letters:
        return ReplayReport([], dry_run=dry_run)
    reads = config.kafka.reads
    refused = [Decision(d.position, REFUSED, "its topic is not one the job reads (kafka.topics, kafka.topic_pattern)")
               for d in letters if not reads(d.position.topic)]
    letters = [d for d in letters if reads(d.position.topic)]
    if not letters:
        if not dry_run:
            dead_letters.record_replays([(d.position, d.outcome, d.detail) for d in refused])
        return ReplayReport(refused, dry_run=dry_run)
    checkpoints = CheckpointStore(sql, locator)
    # Nothing read after this checkpoint had been applied when the first dead letter was read.
    start = checkpoints.load(consumer, saved_before=min(d.recorded_at for d in letters))
    latest = checkpoints.load(consumer)
    decoder = create_decoder(config.protocol, config.types)
    if start is not None:
        decoder.restore(start.decoder_state)
    log.info(
        "replaying %d dead letters of %s: re-reading from %s",
        len(letters),
        consumer,
        f"checkpoint batch {start.batch}" if start else "the beginning",
    )
    scan, read = _scan(config, letters, start, latest, decoder)
    scan = _routed(scan, config, latest, lambda: TableRegistry(sql, locator, consumer).tables(),
                   targets_case_sensitive(config, spark))
    plan = plan_replay(
        [d.position for d in letters],
        scan,
        ordering=decoder.ordering,
        tables=DeltaWriter(sql, locator),
        complete_through=_complete_through(latest, {d.position.topic for d in letters}),
    )
    decisions = plan.decisions
    if not dry_run:
        decisions = apply_replay(DeltaWriter(sql, locator), plan, decoder.ordering)
        dead_letters.record_replays([(d.position, d.outcome, d.detail) for d in refused + decisions])
    return ReplayReport(refused + decisions, read, dry_run)


def _routed(scan: Scan, config: Config, latest: Checkpoint | None, materialized, case_sensitive: bool) -> Scan:
    """The scan's events under the job's routes (`apply.places.routing`): the tables' names as the job writes them, those
    of skipped tables left out (their dead letters then carry no change)."""
    routes = Routes(config.tables, case_sensitive=case_sensitive)
    if latest is not None and latest.routes is not None:
        routes.restore(latest.routes, materialized)
    if not routes:
        return scan
    waiting = {target: why for table, why in scan.waiting.items() if (target := routes.target(table)) is not None}
    return dataclasses.replace(scan, events=routes.routed(scan.events), waiting=waiting)


def _complete_through(latest: Checkpoint | None, topics: set[str]) -> dict[str, int]:
    """Per topic, the watermark all its partitions had passed at the latest checkpoint (what has been applied)."""
    if latest is None:
        return {}
    partitions = set(latest.offsets) | set(latest.watermarks)
    return {
        topic: min((latest.watermarks.get(tp, 0) for tp in partitions if tp.topic == topic), default=0)
        for topic in topics
    }


# --- command line (`ticdc-delta replay-dead-letters`, parsed in jobs.cli) -------------------


def print_replay(config: Config, *, dry_run: bool = False) -> int:
    """Replay with the session the job would use; print one line per dead letter; the exit status."""
    from ticdc_delta.jobs.session import spark_for

    spark = spark_for(config)
    report = replay_dead_letters(config, spark, dry_run=dry_run)
    for decision in report.decisions:
        print(f"{decision.position}\t{decision.outcome}\t{decision.detail}")
    log.info(
        "%d dead letters %s (%s) after re-reading %d messages",
        len(report.decisions),
        "decided, nothing written (dry run)" if dry_run else "replayed",
        report.counts() or "none unresolved",
        report.messages_read,
    )
    return EXIT_REFUSED if report.refused() else 0
