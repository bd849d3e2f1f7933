"""The Spark engine's staging table: decoded events waiting for their watermark, durable in Delta.

One table per consumer among the product's own (`staging_<group>`), holding records in
`jobs.spark_engine.executor_decoding.STAGED_FIELDS` form:

- `row`: a row change (its images as bytes, its structure by `schema_ref`), until applied;
- `ddl`: a schema change (its event as bytes in `value`), until applied;
- `schema`: a table structure rows name (bytes in `value`); kept while rows may name it;
- `message`: a message the executors handed back, until the driver has decoded it.

Staging a batch replaces whatever an earlier try staged from the same offsets on (Delta's
`replaceWhere`, one commit), so a batch read again after a crash or from a held-back offset never
stages an event twice. What a release takes is found and removed by position, with the values
inside DataFrames: no upstream name is pasted into SQL.

Releases: everything of a topic at or below its watermark (commitTs ordering; all of it for
offset ordering), except a table's events from a held commitTs on (a message waiting for its
structure). Released events are grouped into runs: per table, in the protocol's order
(commitTs, partition, offset, index in the message; offset ordering without the commitTs), the
longest stretches of one structure, a schema change being a run of its own (deletes carrying their
key alone join their neighbours' run: `jobs.spark_engine.runs`). Each run of rows becomes one MERGE source of
net changes per key: of rows read into the driver where the release is small (`held_changes`), else built by
Spark (`net_changes`).
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from ticdc_delta.apply.base.identifiers import catalog_name
from ticdc_delta.apply.base.session import SqlSession
from ticdc_delta.apply.changes.table_changes import as_delete_of
from ticdc_delta.apply.ordering.gate import Waiting
from ticdc_delta.apply.own_tables.base import ensure_internal_table, vacuum_internal_table
from ticdc_delta.apply.own_tables.checkpoint import Retention
from ticdc_delta.apply.places.locator import TableLocator
from ticdc_delta.apply.tables.arrow_types import arrow_type, source_type
from ticdc_delta.exceptions import ApplyError, ConcurrentCommitError, MaterializerError
from ticdc_delta.jobs.spark_engine.executor_decoding import MESSAGE, ROW, SCHEMA, STAGED_FIELDS
from ticdc_delta.jobs.spark_engine.runs import Release, StagedRun, fold_key_deletes
from ticdc_delta.schema_cache.events import (
    Op,
    Ordering,
    Position,
    RawMessage,
    RowChange,
    SchemaChange,
    TableName,
    TableSchema,
    TopicPartition,
)
from ticdc_delta.schema_cache.serialized import dump_event, dump_row, load_event, load_row, schema_ref

log = logging.getLogger(__name__)

DDL = "ddl"
_COLUMNS = ", ".join(f"`{name}` {kind}" for name, _, kind in STAGED_FIELDS)
_NAMES = [name for name, _, _ in STAGED_FIELDS]
# Kafka topic names: ASCII letters, digits, '.', '_' and '-' (Kafka refuses others), so they may be
# written into a replaceWhere predicate; anything else is refused before it could be.
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_OPS = ("INSERT", "UPDATE", "DELETE", "UPSERT")


def _order_columns(ordering: Ordering) -> list[str]:
    """A table's events in the protocol's order (a key's changes all come from one partition under offset order)."""
    if ordering is Ordering.COMMIT_TS:
        return ["commit_ts", "partition", "offset", "seq"]
    return ["partition", "offset", "seq"]


def _ranges_predicate(ranges: Mapping[TopicPartition, tuple[int, int]]) -> str:
    return " OR ".join(
        f"(`topic` = {_literal_topic(tp.topic)} AND `partition` = {int(tp.partition)} AND `offset` >= {int(start)} "
        f"AND `offset` < {int(end)})"
        for tp, (start, end) in sorted(ranges.items())
    )


def _release_predicate(limits: Mapping[str, int] | None) -> str:
    """Rows and schema changes a release without holds takes (`StagingTable._released`), as SQL."""
    taken = f"`kind` IN ('{ROW}', '{DDL}')"
    if limits is None:
        return f"({taken})"
    if not limits:
        return "FALSE"
    at_or_below = " OR ".join(
        f"(`topic` = {_literal_topic(topic)} AND `commit_ts` <= {int(limit)})" for topic, limit in sorted(limits.items())
    )
    return f"({taken} AND ({at_or_below}))"


def _taken(limits: Mapping[str, int] | None, holds: Mapping[TableName, int]) -> Column:
    """Whether a staged row or schema change is one a release takes: at or below its topic's limit (`limits`
    None: any), its table not held from its commitTs on."""
    taken = F.lit(True)
    if limits is not None:
        taken = functools.reduce(
            lambda a, b: a | b,
            [(F.col("topic") == F.lit(topic)) & (F.col("commit_ts") <= F.lit(limit)) for topic, limit in limits.items()],
            F.lit(False),
        )
    for table, hold in holds.items():
        taken = taken & ~((F.col("database") == F.lit(table.database)) & (F.col("table") == F.lit(table.table))
                          & (F.col("commit_ts") >= F.lit(hold)))
    return taken


def _literal_topic(topic: str) -> str:
    if not _TOPIC.fullmatch(topic):
        raise ApplyError(f"topic name {topic!r} is not a Kafka topic name")
    return f"'{topic}'"


# A release's row images are read into the driver for its MERGE sources when they are at most this large (the
# staged bytes of its row images), besides at most `in_memory_rows` of them (`StagingTable._held_rows`).
_IN_MEMORY_BYTES = 64 * 1024 * 1024


class StagingTable:
    def __init__(self, sql: SqlSession, locator: TableLocator, consumer: str, ordering: Ordering,
                 in_memory_rows: int = 0) -> None:
        self._sql = sql
        self._name = locator.internal_sql_name(f"staging_{catalog_name(consumer)}")
        self._locator = locator
        self._table = f"staging_{catalog_name(consumer)}"
        self._ordering = ordering
        self._schemas: dict[str, TableSchema] = {}
        self._created = False
        self._properties_set = False
        self._vacuumed_at: float | None = None
        self._released_rows: DataFrame | None = None  # (`_rows_of_release`)
        self._in_memory_rows = in_memory_rows
        self._held: dict[TableName, list] | None = None  # a small release's rows, per table (`_held_rows`)

    @property
    def name(self) -> str:
        return self._name

    def ensure(self) -> None:
        if not self._created:
            ensure_internal_table(self._sql, self._locator, self._table, _COLUMNS)
            self._created = True

    def frame(self) -> DataFrame:
        return self._sql.table(self._name)

    def is_empty(self) -> bool:
        """Whether the table holds no record at all (Delta answers a whole table's count from its log)."""
        self.ensure()
        return self._sql.sql(f"SELECT COUNT(*) FROM {self._name}").collect()[0][0] == 0

    # --- staging a batch ---------------------------------------------------------

    def stage(self, decoded: DataFrame, ranges: Mapping[TopicPartition, tuple[int, int]]) -> None:
        """Write the batch's decoded records, replacing what was staged from these offsets on (one commit)."""
        self.ensure()
        if not ranges:
            return
        predicate = " OR ".join(
            f"(`topic` = {_literal_topic(tp.topic)} AND `partition` = {int(tp.partition)} AND `offset` >= {int(start)})"
            for tp, (start, _) in sorted(ranges.items())
        )
        columns = decoded.select(*_NAMES)
        target = self._name

        def write() -> None:
            (columns.write.format("delta").mode("overwrite").option("replaceWhere", predicate)
             .option("mergeSchema", "false").saveAsTable(target))

        self._sql.run(write, what=f"decode {len(ranges)} partitions' messages on the executors into {self._name}")

    def stage_events(self, events: Iterable, ranges: Mapping[TopicPartition, tuple[int, int]]) -> None:
        """Stage a batch the driver decoded, as `stage` does the executors' records: those of `ranges` replace
        what was staged from these offsets on (one commit, also with none); rows of earlier offsets (released
        from parking: their messages' offsets are held back, so a restart reads them again) are appended."""
        in_ranges: list[tuple] = []
        earlier: list[tuple] = []
        for record in self._records_of(events):
            start = ranges.get(TopicPartition(record[1], record[2]), (None,))[0]
            (in_ranges if start is not None and record[3] >= start else earlier).append(record)
        self.stage(self._sql.spark.createDataFrame(in_ranges, schema=_COLUMNS), ranges)
        self._insert(earlier)

    def append(self, events: Iterable) -> int:
        """Stage events the driver decoded (schema changes, rows released from parking): one commit, if any."""
        records = self._records_of(events)
        self._insert(records)
        return len(records)

    def _insert(self, records: list[tuple]) -> None:
        if records:
            self.ensure()
            with self._sql.view(records, _COLUMNS) as source:
                self._sql.run(f"INSERT INTO {self._name} SELECT * FROM {source}", what=f"append to {self._name}")

    def _records_of(self, events: Iterable) -> list[tuple]:
        """Staged records of events in order: a position's events numbered by `seq`, each structure rows name once."""
        records: list[tuple] = []
        seqs: dict[tuple, int] = {}
        refs: set[str] = set()
        for event in events:
            seq = seqs.get(event.position, 0)
            seqs[event.position] = seq + 1
            records += self._records(event, seq, refs)
        return records

    def _records(self, event, seq: int, refs: set[str]) -> list[tuple]:
        position = event.position
        if isinstance(event, SchemaChange):
            return [(DDL, position.topic, position.partition, position.offset, seq, event.table.database,
                     event.table.table, event.commit_ts, None, None, None, None, None, dump_event(event))]
        ref = schema_ref(event.schema)
        records = []
        if ref not in refs:
            refs.add(ref)
            self._schemas[ref] = event.schema
            records.append((SCHEMA, position.topic, position.partition, position.offset, -1 - seq, event.table.database,
                            event.table.table, None, None, ref, None, None, None, dump_event(event.schema)))
        records.append((ROW, position.topic, position.partition, position.offset, seq, event.table.database,
                        event.table.table, event.commit_ts, event.op.value, ref, dump_row(event.before),
                        dump_row(event.after), None, None))
        return records

    def handed_back(self, ranges: Mapping[TopicPartition, tuple[int, int]]) -> list[RawMessage]:
        """The messages the executors handed back from these ranges, in partition and offset order."""
        if not ranges:
            return []
        rows = (
            self._in_ranges(self.frame().where(F.col("kind") == MESSAGE), ranges)
            .select("topic", "partition", "offset", "key", "value")
            .orderBy("topic", "partition", "offset")
            .collect()
        )
        return [RawMessage(r["topic"], r["partition"], r["offset"], r["key"], r["value"]) for r in rows]

    @staticmethod
    def _in_ranges(frame: DataFrame, ranges: Mapping[TopicPartition, tuple[int, int]]) -> DataFrame:
        condition = functools.reduce(
            lambda a, b: a | b,
            [
                (F.col("topic") == F.lit(tp.topic)) & (F.col("partition") == F.lit(tp.partition))
                & (F.col("offset") >= F.lit(start)) & (F.col("offset") < F.lit(end))
                for tp, (start, end) in ranges.items()
            ],
        )
        return frame.where(condition)

    # --- releasing ---------------------------------------------------------------------

    def _released(self, limits: Mapping[str, int] | None, holds: Mapping[TableName, int]) -> DataFrame:
        """Staged rows and schema changes a release takes: at or below their topic's limit, not held."""
        return self.frame().where(F.col("kind").isin(ROW, DDL)).where(_taken(limits, holds))

    def _waiting(self, limits: Mapping[str, int] | None, holds: Mapping[TableName, int]) -> dict[TopicPartition, Waiting]:
        """Per partition, the staged rows and schema changes a release leaves waiting."""
        left = self.frame().where(F.col("kind").isin(ROW, DDL)).where(~_taken(limits, holds))
        oldest = F.min(F.struct("commit_ts", "database", "table", "kind", "value")).alias("oldest")
        waiting = {}
        for r in left.groupBy("topic", "partition").agg(F.count(F.lit(1)).alias("events"), oldest).collect():
            first = r["oldest"]
            kind = load_event(bytes(first["value"])).kind.value if first["kind"] == DDL else "row"
            waiting[TopicPartition(r["topic"], r["partition"])] = Waiting(
                int(r["events"]), int(first["commit_ts"] or 0), TableName(first["database"], first["table"]), kind)
        return waiting

    def release(self, limits: Mapping[str, int] | None, holds: Mapping[TableName, int]) -> Release:
        """What is complete, as runs and schema changes in order. `limits` None: everything (offset ordering)."""
        self.ensure()
        self._forget_released_rows()
        order = _order_columns(self._ordering)
        released = self._released(limits, holds)
        tag = F.when(F.col("kind") == DDL, F.concat_ws(":", F.lit(DDL), "topic", "partition", "offset", "seq")).otherwise(
            F.col("schema_ref")
        )
        by_table = Window.partitionBy("database", "table").orderBy(*order)
        extra = [] if "commit_ts" in order else ["commit_ts"]
        size = F.coalesce(F.length("before"), F.lit(0)) + F.coalesce(F.length("after"), F.lit(0))
        marked = released.select(*order, *extra, "topic", "kind", "database", "table", "schema_ref", "op", "value",
                                 tag.alias("tag"), size.alias("size"))
        starts = F.when(F.lag("tag").over(by_table).isNull() | (F.lag("tag").over(by_table) != F.col("tag")), 1).otherwise(0)
        runs = marked.withColumn("started", starts).withColumn(
            "run", F.sum("started").over(by_table.rowsBetween(Window.unboundedPreceding, Window.currentRow))
        )
        per_partition = runs.groupBy("database", "table", "run", "topic", "partition").agg(
            F.first("kind").alias("kind"),
            F.first("schema_ref").alias("schema_ref"),
            F.min(F.struct(*order)).alias("first"),
            F.max(F.struct(*order)).alias("last"),
            F.max("offset").alias("max_offset"),
            F.max("commit_ts").alias("max_ts"),
            F.min("commit_ts").alias("min_ts"),
            F.count(F.lit(1)).alias("rows"),
            F.sum("size").alias("bytes"),
            *[F.sum(F.when(F.col("op") == op, 1).otherwise(0)).alias(op) for op in _OPS],
            F.first("value").alias("value"),
        )
        summary = per_partition.groupBy("database", "table", "run").agg(
            F.first("kind").alias("kind"),
            F.first("topic").alias("topic"),
            F.first("schema_ref").alias("schema_ref"),
            F.min("first").alias("first"),
            F.max("last").alias("last"),
            F.max("max_ts").alias("max_ts"),
            F.min("min_ts").alias("min_ts"),
            F.sum("rows").alias("rows"),
            F.sum("bytes").alias("bytes"),
            *[F.sum(op).alias(op) for op in _OPS],
            F.collect_list(F.struct("topic", "partition", "max_offset")).alias("offsets"),
            F.first("value").alias("value"),
        )
        collected = summary.collect()
        refs = {r["schema_ref"] for r in collected if r["kind"] == ROW}
        schemas = self._schema_objects(refs)
        events = []
        for r in collected:
            first, last = tuple(r["first"]), tuple(r["last"])
            if r["kind"] == DDL:
                events.append((first, load_event(bytes(r["value"]))))
                continue
            table = TableName(r["database"], r["table"])
            events.append((first, StagedRun(
                table, r["topic"], schemas[r["schema_ref"]], r["schema_ref"], first, last, int(r["max_ts"] or 0),
                int(r["min_ts"] or 0), int(r["rows"]), {op: int(r[op] or 0) for op in _OPS},
                {TopicPartition(o["topic"], o["partition"]): int(o["max_offset"]) + 1 for o in r["offsets"]},
                self,
            )))
        events.sort(key=lambda item: item[0])
        waiting = self._waiting(limits, holds)
        release = Release(fold_key_deletes([e for _, e in events]), sum(w.events for w in waiting.values()), waiting)
        rows = sum(e.rows for _, e in events if isinstance(e, StagedRun))
        if rows and rows <= self._in_memory_rows and sum(int(r["bytes"] or 0) for r in collected) <= _IN_MEMORY_BYTES:
            self._held = self._held_rows(released, order)
        elif rows:
            self._released_rows = self._rows_of_release(released)
        return release

    def _held_rows(self, released: DataFrame, order: Sequence[str]) -> dict[TableName, list]:
        """A small release's rows read into the driver once (one Spark job), per table in the protocol's order:
        each of its runs then merges a source of rows held in memory, as the driver engine's (`held_changes`),
        instead of a DataFrame of its own, whose MERGE copies it aside and plans and runs a shuffle per table
        (`net_changes`). Small: at most `run.max_pending_events` row events (what the driver engine holds in
        memory) and `_IN_MEMORY_BYTES` of staged images."""
        extra = [] if "commit_ts" in order else ["commit_ts"]
        rows = (released.where(F.col("kind") == ROW)
                .select(*order, *extra, "topic", "database", "table", "schema_ref", "op", "before", "after").collect())
        held: dict[TableName, list] = {}
        for r in rows:
            held.setdefault(TableName(r["database"], r["table"]), []).append(r)
        for table_rows in held.values():
            table_rows.sort(key=lambda r: tuple(r[c] for c in order))
        return held

    def held_changes(self, run: StagedRun) -> list[RowChange] | None:
        """The run's row changes in the protocol's order, all in its structure, where its release was read into the
        driver (`_held_rows`); None where it was not (Spark builds its MERGE source: `net_changes`).

        Rows of its other references (`StagedRun.other_refs`) are of its very structure, or deletes carrying its key
        alone, which take its columns with the key's values (`apply.changes.table_changes.as_delete_of`), as `_run_images` does."""
        if self._held is None:
            return None
        order = _order_columns(self._ordering)
        schemas = {run.ref: run.schema, **dict(run.other_refs)}
        changes = []
        for r in self._held.get(run.table, ()):
            if not run.first <= tuple(r[c] for c in order) <= run.last:
                continue
            schema = schemas[r["schema_ref"]]
            change = RowChange(run.table, r["commit_ts"], Op(r["op"]), load_row(r["before"]), load_row(r["after"]),
                               schema, Position(r["topic"], r["partition"], r["offset"]))
            same = schema is run.schema or schema.same_structure(run.schema)
            changes.append(change._replace(schema=run.schema) if same else as_delete_of(change, run.schema))
        return changes

    @staticmethod
    def _rows_of_release(released: DataFrame) -> DataFrame:
        """The release's rows (`released`: what it takes), read once for all its runs: each run's MERGE source
        would otherwise read the staging table again (its snapshot, its files; all tables' rows, to keep its
        own), once per touched table. Kept in memory (spilling to disk) until the release's rows are removed
        (`remove`); nothing writes the staging table meanwhile. Rows still waiting for a watermark or their
        structure are not kept. Built on first use, by the first run's source."""
        from pyspark import StorageLevel

        return released.where(F.col("kind") == ROW).persist(StorageLevel.MEMORY_AND_DISK)

    def _forget_released_rows(self) -> None:
        self._held = None
        if self._released_rows is not None:
            self._released_rows.unpersist()
            self._released_rows = None

    def _schema_objects(self, refs: set[str]) -> dict[str, TableSchema]:
        missing = refs - set(self._schemas)
        if missing:
            rows = (
                self.frame().where((F.col("kind") == SCHEMA) & F.col("schema_ref").isin(sorted(missing)))
                .select("schema_ref", "value").dropDuplicates(["schema_ref"]).collect()
            )
            for r in rows:
                self._schemas[r["schema_ref"]] = load_event(bytes(r["value"]))
        absent = refs - set(self._schemas)
        if absent:
            raise ApplyError(f"staged rows name table structures {sorted(absent)} that {self._name} does not hold")
        return {ref: self._schemas[ref] for ref in refs}

    def remove(self, release: Release, handled: Mapping[TopicPartition, tuple[int, int]],
               limits: Mapping[str, int] | None, holds: Mapping[TableName, int]) -> None:
        """Delete what a release took, the handed-back messages of `handled` ranges and, once no row waits,
        the structures rows named: one DELETE by predicate (values the product wrote: kinds, Kafka topic
        names, numbers), no scan of what to delete first.

        With holds (rows waiting for their structure), what the release took is found and deleted by a
        MERGE first, so no upstream table name is written into SQL.
        """
        self._forget_released_rows()
        clauses = []
        if handled:
            clauses.append(f"(`kind` = '{MESSAGE}' AND ({_ranges_predicate(handled)}))")
        if release.waiting == 0:
            # Structures are staged with every batch's rows that name them: none is needed once none waits.
            clauses.append(f"`kind` = '{SCHEMA}'")
        if release.events and not holds:
            clauses.append(_release_predicate(limits))
        if release.events and holds:
            taken = self._released(limits, holds).select("kind", "topic", "partition", "offset", "seq")
            with self._sql.frame_view(taken) as source:
                self._sql.run(
                    f"MERGE INTO {self._name} AS t USING {source} AS s ON t.kind = s.kind AND t.topic = s.topic "
                    "AND t.partition = s.partition AND t.offset = s.offset AND t.seq = s.seq WHEN MATCHED THEN DELETE",
                    what=f"remove released events from {self._name}",
                )
        if clauses:
            self._sql.run(f"DELETE FROM {self._name} WHERE " + " OR ".join(clauses),
                          what=f"remove released events from {self._name}")

    # --- keeping it small -------------------------------------------------------------------

    def clean_up(self, retention: Retention) -> None:
        """Compact the table (every batch adds a few small files) and delete the files it stopped using.

        On the checkpoint cleanup's cadence and with its file retention; a failure is logged and left to
        the next time (nothing here is needed for progress), except the product's own errors (a lost lease).
        """
        try:
            if not self._properties_set:
                settings = ", ".join(f"'{k}' = '{v}'" for k, v in retention.table_properties().items())
                self._sql.run(f"ALTER TABLE {self._name} SET TBLPROPERTIES ({settings})", what=f"retention of {self._name}")
                self._properties_set = True
            self._sql.run(f"OPTIMIZE {self._name}", what=f"compact {self._name}")
            now = time.monotonic()
            if self._vacuumed_at is None or now - self._vacuumed_at >= retention.file_seconds:
                vacuum_internal_table(self._sql, self._name, f"vacuum {self._name}")
                self._vacuumed_at = now
        except Exception as err:
            if isinstance(err, MaterializerError) and not isinstance(err, ConcurrentCommitError):
                raise
            log.error("cleaning up %s failed; the next cleanup tries again", self._name, exc_info=True)

    # --- a run's MERGE source ----------------------------------------------------------------

    def net_changes(self, run: StagedRun, schema: TableSchema, keep: Sequence[int], after: Mapping | None) -> DataFrame:
        """The run's net change per key: columns c0.. (the structure's columns at positions `keep`) and ticdc_deleted.

        `after`: only rows after the table's applied point (commitTs: {"ts": n}; offsets: {tp: next}).
        """
        images, width, key_columns = self._run_images(run, keep, after)
        by_key = Window.partitionBy(*key_columns).orderBy(*self._latest_first())
        return (
            images.withColumn("_n", F.row_number().over(by_key)).where(F.col("_n") == 1)
            .select(*[f"c{i}" for i in range(width)], "ticdc_deleted")
        )

    def history_source(self, run: StagedRun, keep: Sequence[int], after: Mapping | None) -> DataFrame:
        """The run's history MERGE source (`apply.changes.history.history_source`, built where the rows are): per key
        and commitTs its last image (an upsert beats a delete), each upsert a state valid until the key's next
        commitTs, and per key a close at its first. commitTs ordering only."""
        images, width, key_columns = self._run_images(run, keep, after)
        per_commit = Window.partitionBy(*key_columns, "commit_ts").orderBy(*self._latest_first())
        states = images.withColumn("_n", F.row_number().over(per_commit)).where(F.col("_n") == 1)
        by_key = Window.partitionBy(*key_columns)
        states = (states.withColumn("h_to", F.lead("commit_ts").over(by_key.orderBy("commit_ts")))
                  .withColumn("h_first", F.min("commit_ts").over(by_key)))
        values = [f"c{i}" for i in range(width)]
        kept = states.where(~F.col("ticdc_deleted")).select(
            *values, F.lit(False).alias("h_close"), F.col("commit_ts").alias("h_from"), "h_to",
            F.col("h_to").isNull().alias("h_current"), "h_op")
        closes = states.where(F.col("commit_ts") == F.col("h_first")).select(
            *[(F.col(c) if c in key_columns else F.lit(None).cast(kept.schema[c].dataType)).alias(c) for c in values],
            F.lit(True).alias("h_close"), F.col("commit_ts").alias("h_from"), F.lit(None).cast("bigint").alias("h_to"),
            F.lit(False).alias("h_current"), F.lit(None).cast("string").alias("h_op"))
        return kept.unionByName(closes)

    def _latest_first(self) -> list:
        """A key's images newest first in the protocol's order."""
        latest = [F.col(c).desc() for c in _order_columns(self._ordering)]
        if self._ordering is Ordering.COMMIT_TS:
            # At one commitTs an upsert of a key beats a delete of it: only a split UPDATE makes both (apply.changes.collapse).
            latest.insert(1, F.col("upsert").desc())
        latest.append(F.col("image").desc())
        return latest

    def _run_images(self, run: StagedRun, keep: Sequence[int], after: Mapping | None) -> tuple[DataFrame, int, list[str]]:
        """The key images the run's rows after `after` leave (`_images`), their value count, their key columns."""
        order = _order_columns(self._ordering)
        bound = F.struct(*order)
        staged = self._released_rows if self._released_rows is not None else self.frame()
        rows = staged.where(
            (F.col("kind") == ROW)
            & (F.col("database") == F.lit(run.table.database)) & (F.col("table") == F.lit(run.table.table))
            & (bound >= _bound(order, run.first)) & (bound <= _bound(order, run.last))
        )
        if after:
            if "ts" in after:
                rows = rows.where(F.col("commit_ts") > F.lit(after["ts"]))
            else:
                for tp, next_offset in after.items():
                    rows = rows.where(~((F.col("topic") == F.lit(tp.topic)) & (F.col("partition") == F.lit(tp.partition))
                                        & (F.col("offset") < F.lit(next_offset))))
        columns = [run.schema.columns[i] for i in keep]
        key_positions = [keep.index(i) for i in run.schema.key_indexes()]
        types = tuple(c.spark_type for c in columns)
        output = ", ".join([*(f"`{c}` {k}" for c, k in _order_types(order)), "image INT", "upsert BOOLEAN",
                            *(f"c{i} {source_type(c.spark_type)}" for i, c in enumerate(columns)),
                            "ticdc_deleted BOOLEAN", "h_op STRING"])
        # The run's own rows, then those of its other references (`StagedRun.other_refs`): of its very
        # structure with all their values; deletes of another with their key values placed in the run's
        # columns, the rest NULL (a delete needs its key alone).
        parts = [(run.ref, tuple(keep), run.schema.key_indexes())]
        parts += [
            (ref, tuple(keep) if schema.same_structure(run.schema) else _key_slots(schema, run.schema, keep),
             schema.key_indexes())
            for ref, schema in run.other_refs
        ]
        images = functools.reduce(DataFrame.unionByName, [
            rows.where(F.col("schema_ref") == F.lit(ref)).select(*order, "op", "before", "after")
            .mapInArrow(functools.partial(_images, slots, key, types), output)
            for ref, slots, key in parts
        ])
        return images, len(columns), [f"c{i}" for i in key_positions]


_ORDER_TYPES = {"commit_ts": "BIGINT", "partition": "INT", "offset": "BIGINT", "seq": "INT"}


def _bound(order: Sequence[str], values: Sequence) -> object:
    """A position in the protocol's order as a struct comparable with the staged columns'."""
    return F.struct(*[F.lit(v).cast(_ORDER_TYPES[c]).alias(c) for c, v in zip(order, values, strict=True)])


def _order_types(order: Sequence[str]) -> list[tuple[str, str]]:
    return [(c, _ORDER_TYPES[c]) for c in order]


def _key_slots(deletes: TableSchema, schema: TableSchema, keep: Sequence[int]) -> tuple[int | None, ...]:
    """For each of `schema`'s columns at `keep`, where a row of `deletes` holds it: key columns by name; None
    for the others (NULL in the image)."""
    positions = {name.lower(): i for i, name in enumerate(deletes.column_names())}
    key = {k.lower() for k in schema.key}
    names = [schema.columns[i].name.lower() for i in keep]
    return tuple(positions.get(name) if name in key else None for name in names)


def _images(keep: tuple[int | None, ...], key: tuple[int, ...], types: tuple[str, ...], batches: Iterator) -> Iterator:
    """mapInArrow: each staged row change as the key images it leaves (an UPDATE moving its key: two).

    `keep`: each output value's position in the row (None: no value, NULL)."""
    import pyarrow as pa

    value_types = [arrow_type(pa, t) for t in types]
    for batch in batches:
        yield _batch_images(pa, batch.to_pydict(), keep, key, value_types)


def _batch_images(pa, columns: dict, keep: tuple[int | None, ...], key: tuple[int, ...], value_types: list):
    order = [c for c in ("commit_ts", "partition", "offset", "seq") if c in columns]
    source: list[int] = []  # the input row of each image
    images: list[int] = []
    deleted: list[bool] = []
    ops: list[str] = []  # what each image is, for history tables: INSERT, UPDATE or DELETE
    values: list[list] = [[] for _ in keep]
    for i, op in enumerate(columns["op"]):
        after, before = load_row(columns["after"][i]), load_row(columns["before"][i])
        if op in ("INSERT", "UPSERT"):
            emitted = [(after, False)]
        elif op == "DELETE":
            emitted = [(before, True)]
        elif tuple(before[k] for k in key) == tuple(after[k] for k in key):
            emitted = [(after, False)]
        else:  # an UPDATE moving the row to another key: the old key is deleted
            emitted = [(before, True), (after, False)]
        for image, (row, is_delete) in enumerate(emitted):
            source.append(i)
            images.append(image)
            deleted.append(is_delete)
            ops.append("DELETE" if is_delete else "INSERT" if op == "INSERT" else "UPDATE")
            for slot, position in enumerate(keep):
                values[slot].append(None if position is None else row[position])
    arrays = [pa.array([columns[c][i] for i in source], type=pa.int64() if c in ("commit_ts", "offset") else pa.int32())
              for c in order]
    arrays += [pa.array(images, type=pa.int32()), pa.array([not d for d in deleted], type=pa.bool_())]
    arrays += [pa.array(v, type=t) for v, t in zip(values, value_types, strict=True)]
    arrays += [pa.array(deleted, type=pa.bool_()), pa.array(ops, type=pa.string())]
    names = [*order, "image", "upsert", *(f"c{i}" for i in range(len(keep))), "ticdc_deleted", "h_op"]
    return pa.RecordBatch.from_arrays(arrays, names=names)
