"""`ticdc-delta status`: where a consumer stands, read from its own tables and Kafka's end offsets.

- Partitions: the offset the consumer's checkpoint committed, the partition's
  end offset asked of Kafka now (nothing is assigned, read or committed), and
  the lag between them.
- Tables: every table the consumer registered (`apply.places.registry`), with
  the upstream commitTs its newest marked commit says it is applied through
  (offset-ordered protocols: the next offset per partition) and its Delta
  version, from the table's history.

Spark reads only the product's tables and the tables' histories; it runs no
other job. Output: a human-readable table, or JSON (`--json`).
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from dataclasses import dataclass, field

from pyspark.errors import AnalysisException

from ticdc_delta.apply.base.errors import is_missing_table
from ticdc_delta.apply.base.session import SqlSession
from ticdc_delta.apply.own_tables.checkpoint import CheckpointStore
from ticdc_delta.apply.own_tables.tombstones import Tombstones
from ticdc_delta.apply.places.registry import TableRegistry
from ticdc_delta.apply.progress import applied_history, upstream_time
from ticdc_delta.jobs.config import Config
from ticdc_delta.jobs.kafka_source import KafkaSource
from ticdc_delta.jobs.pipeline import locator_for
from ticdc_delta.jobs.runtime import settle
from ticdc_delta.jobs.waits import age_seconds
from ticdc_delta.jobs.waits import decode as decode_waits
from ticdc_delta.schema_cache.events import TableName

# The history read per table: the applied marker is on one of its newest commits.
_HISTORY_DEPTH = 200


@dataclass(frozen=True)
class PartitionStatus:
    topic: str
    partition: int
    committed: int | None  # None: the consumer never committed this partition
    end: int

    @property
    def lag(self) -> int | None:
        return None if self.committed is None else max(self.end - self.committed, 0)


@dataclass(frozen=True)
class TableStatus:
    database: str
    table: str
    exists: bool
    version: int | None = None  # the table's current Delta version
    applied_ts: int | None = None  # upstream commitTs the table is applied through
    applied_offsets: dict[str, int] | None = None  # offset-ordered protocols: next offset per "topic/partition"
    applied_version: int | None = None  # the version whose commit records the applied point
    removed_ts: int | None = None  # a missing table: the commitTs of the DDL that dropped or renamed it

    @property
    def name(self) -> str:
        return f"{self.database}.{self.table}"


@dataclass(frozen=True)
class StatusReport:
    consumer: str
    checkpoint: int | None
    checkpoint_saved_at: dt.datetime | None
    partitions: list[PartitionStatus]
    tables: list[TableStatus]
    # What waited at the checkpoint, and for what (`jobs.waits`): {"newest_watermark", "partitions": [...]}
    waiting: dict = field(default_factory=dict)

    @property
    def total_lag(self) -> int | None:
        lags = [p.lag for p in self.partitions]
        return None if any(lag is None for lag in lags) else sum(lags)


def _table_status(sql: SqlSession, locator, tombstones: Tombstones, table) -> TableStatus:
    try:
        history = applied_history(sql, locator.sql_name(table), limit=_HISTORY_DEPTH)
    except AnalysisException as err:
        if not is_missing_table(err):
            raise
        return TableStatus(table.database, table.table, exists=False, removed_ts=tombstones.removed_at(table))
    marked = next((entry for entry in history if entry.point is not None), None)
    if marked is None and len(history) == _HISTORY_DEPTH:  # (an idle table under many maintenance commits)
        marked = next((entry for entry in applied_history(sql, locator.sql_name(table)) if entry.point is not None), None)
    point = marked.point if marked is not None else None
    return TableStatus(
        table.database,
        table.table,
        exists=True,
        version=history[0].version if history else None,
        applied_ts=None if point is None else point.ts,
        applied_offsets={str(tp): o for tp, o in point.offsets} if point is not None and point.offsets else None,
        applied_version=None if marked is None else marked.version,
    )


def gather_status(config: Config, spark) -> StatusReport:
    """The consumer's committed offsets and lag per partition, and its tables' applied points."""
    config = settle(config, spark)
    sql = SqlSession(spark)
    locator = locator_for(config)
    consumer = config.kafka.group_id
    checkpoint = CheckpointStore(sql, locator).load(consumer)
    source = KafkaSource(config.kafka)
    try:
        ranges = source.offset_ranges()
    finally:
        source.close()
    committed = checkpoint.offsets if checkpoint is not None else {}
    partitions = [
        PartitionStatus(tp.topic, tp.partition, committed.get(tp), end) for tp, (_, end) in sorted(ranges.items())
    ]
    tombstones = Tombstones(sql, locator)
    # Each table, then its history table if it keeps one: the history's applied point can trail the
    # table's (a crash between their MERGEs) until the next batch catches it up.
    history = config.history.choice()
    named: list[TableName] = []
    for table in TableRegistry(sql, locator, consumer).tables():
        # (Path tables' history tables are registered as well, as every table the job creates: once each.)
        for listed in (table, history.history_of(table)) if history.wants(table) else (table,):
            if listed not in named:
                named.append(listed)
    tables = [_table_status(sql, locator, tombstones, t) for t in named]
    saved_at = None
    if checkpoint is not None and checkpoint.saved_at is not None:
        saved_at = checkpoint.saved_at.astimezone(dt.timezone.utc)  # Spark gives local wall-clock time
    return StatusReport(consumer, checkpoint.batch if checkpoint else None, saved_at, partitions, tables,
                        decode_waits(checkpoint.waiting) if checkpoint is not None else {})


# --- output --------------------------------------------------------------------------


def _upstream_text(commit_ts: int | None) -> str | None:
    return None if commit_ts is None else upstream_time(commit_ts).isoformat(timespec="milliseconds")


def to_json(report: StatusReport) -> dict:
    return {
        "consumer": report.consumer,
        "checkpoint": report.checkpoint,
        "checkpoint_saved_at": None if report.checkpoint_saved_at is None else report.checkpoint_saved_at.isoformat(),
        "total_lag": report.total_lag,
        "partitions": [
            {"topic": p.topic, "partition": p.partition, "committed": p.committed, "end": p.end, "lag": p.lag}
            for p in report.partitions
        ],
        "tables": [
            {
                "database": t.database,
                "table": t.table,
                "exists": t.exists,
                "version": t.version,
                "applied_ts": t.applied_ts,
                "applied_time": _upstream_text(t.applied_ts),
                "applied_offsets": t.applied_offsets,
                "applied_version": t.applied_version,
                "removed_ts": t.removed_ts,
            }
            for t in report.tables
        ],
        "waiting": report.waiting.get("partitions", []),
        "newest_watermark": report.waiting.get("newest_watermark"),
    }


def _grid(header: tuple[str, ...], rows: list[tuple[str, ...]], right: set[int]) -> list[str]:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=False)]
    lines = []
    for cells in [header, *rows]:
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        lines.append("  ".join(parts).rstrip())
    return lines


def _dash(value) -> str:
    return "-" if value is None else f"{value:,}" if isinstance(value, int) else str(value)


def render(report: StatusReport) -> str:
    if report.checkpoint is None:
        head = f"consumer {report.consumer}: no checkpoint yet"
    else:
        saved = report.checkpoint_saved_at.strftime("%Y-%m-%d %H:%M:%S UTC") if report.checkpoint_saved_at else "?"
        head = f"consumer {report.consumer}: checkpoint {report.checkpoint}, saved {saved}"
    partition_rows = [
        (f"{p.topic}/{p.partition}", _dash(p.committed), _dash(p.end), _dash(p.lag)) for p in report.partitions
    ]
    partition_rows.append(("total", "", "", _dash(report.total_lag)))
    lines = [head, "", *_grid(("partition", "committed", "end", "lag"), partition_rows, {1, 2, 3}), ""]
    if not report.tables:
        lines.append("no tables yet")
    else:
        table_rows = []
        for t in report.tables:
            if not t.exists:
                gone = f"dropped or renamed at commitTs {t.removed_ts}" if t.removed_ts else "not created yet"
                table_rows.append((t.name, "-", "-", gone))
            elif t.applied_offsets is not None:
                offsets = ", ".join(f"{k}:{v}" for k, v in sorted(t.applied_offsets.items()))
                table_rows.append((t.name, _dash(t.version), "-", f"offsets {offsets}"))
            else:
                when = "" if t.applied_ts is None else upstream_time(t.applied_ts).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
                table_rows.append((t.name, _dash(t.version), str(t.applied_ts or "-"), when and f"{when} UTC"))
        lines.extend(_grid(("table", "version", "applied commitTs", "upstream time"), table_rows, {1, 2}))
    waiting = report.waiting.get("partitions", [])
    if waiting:
        newest = report.waiting.get("newest_watermark") or 0
        lines += ["", f"waiting at the checkpoint (newest watermark read: {newest or '-'}):"]
        rows = [(w["partition"], _dash(w["events"]), str(w["oldest_ts"]),
                 f"{age_seconds(w['oldest_ts'], newest):.0f} s" if newest else "-", w["table"], w["kind"])
                for w in waiting]
        lines.extend(_grid(("partition", "events", "oldest commitTs", "behind", "table", "kind"), rows, {1, 2, 3}))
        for reason in dict.fromkeys(w["waits_for"] for w in waiting):
            held = ", ".join(w["partition"] for w in waiting if w["waits_for"] == reason)
            lines.append(f"  {held}: waits for {reason}")
    return "\n".join(lines) + "\n"


# --- command line ---------------------------------------------------------------------


def print_status(config: Config, *, as_json: bool = False) -> int:
    """`ticdc-delta status`: gather and print; exit status 0."""
    from ticdc_delta.jobs.session import quick_for_a_few_reads, spark_for

    report = gather_status(config, spark_for(config, quick_compiler=quick_for_a_few_reads(config)))
    sys.stdout.write(json.dumps(to_json(report), indent=2) + "\n" if as_json else render(report))
    sys.stdout.flush()
    return 0
