"""Progress and metrics end to end: batch records in the log and the metrics table, the live
progress line on a real pseudo-terminal, and `ticdc-delta status`, on a real broker, Spark and Delta."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import os
import pty
import shutil
import threading
from collections import Counter

import pytest

from testbed.changefeed import Changefeed
from testbed.tables import column
from tests.support import applier_for, continuous_run, job_config, publish, table_version
from tests.workloads import item, items_feed
from ticdc_delta.apply.applier import Applier
from ticdc_delta.apply.base.identifiers import quote
from ticdc_delta.apply.own_tables.metrics import COLUMNS as METRICS_COLUMNS
from ticdc_delta.apply.own_tables.tombstones import Tombstones
from ticdc_delta.apply.places.locator import CatalogLocator, PathLocator
from ticdc_delta.apply.places.registry import TableRegistry
from ticdc_delta.apply.writers.delta_writer import DeltaWriter
from ticdc_delta.jobs import session as session_module
from ticdc_delta.jobs.batch_metrics import METRICS_LOGGER
from ticdc_delta.jobs.caught_up import LookedOnce, commit_tag, nothing_new
from ticdc_delta.jobs.cli import exit_status
from ticdc_delta.jobs.kafka_source import KafkaSource
from ticdc_delta.jobs.pipeline import Pipeline
from ticdc_delta.schema_cache.events import (
    Column,
    Op,
    Position,
    RowChange,
    SchemaChange,
    SchemaChangeKind,
    TableName,
    TableSchema,
)

pytestmark = pytest.mark.e2e


def _write_config(path, kafka, topic: str, group: str, target: dict, **sections) -> str:
    """A TOML job file; `sections` add to (or override) the defaults. JSON scalars and lists are TOML too."""
    values = {
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers, "topics": [topic], "group_id": group},
        "target": target,
        "run": {"mode": "until-idle", "batch_max_seconds": 2.0, "idle_timeout_seconds": 15.0},
    }
    for name, section in sections.items():
        values[name] = {**values.get(name, {}), **section}
    lines = []
    for name, section in values.items():
        lines.append(f"[{name}]")
        lines.extend(f"{key} = {json.dumps(value)}" for key, value in section.items())
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _two_tables_feed() -> tuple[Changefeed, Counter]:
    """Inserts, updates and deletes into shop.items, inserts into shop.logs, an ADD COLUMN; the row events by op."""
    feed = items_feed()
    feed.create_table("shop", "logs", [column("id", "int", nullable=False), column("msg", "text")], primary_key=["id"])
    published: Counter = Counter()
    for start in range(0, 40, 10):
        with feed.transaction() as txn:
            for i in range(start, start + 10):
                txn.insert("shop", "items", item(i))
                published["shop", "items", "INSERT"] += 1
            txn.insert("shop", "logs", {"id": start, "msg": f"log {start}"})
            published["shop", "logs", "INSERT"] += 1
    for i in range(0, 40, 4):
        with feed.transaction() as txn:
            txn.update("shop", "items", [i], {"name": f"renamed {i}"})
            published["shop", "items", "UPDATE"] += 1
    feed.add_column("shop", "items", column("stock", "int"))
    with feed.transaction() as txn:
        for i in range(0, 40, 5):
            txn.delete("shop", "items", [i])
            published["shop", "items", "DELETE"] += 1
    return feed, published


def _end_offsets(kafka, topic: str) -> dict[str, int]:
    source = KafkaSource(job_config(kafka, topic, "/unused", "status-probe").kafka)
    try:
        return {str(tp): end for tp, (_, end) in source.offset_ranges().items()}
    finally:
        source.close()


def _metrics_logged(caplog) -> list[dict]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == METRICS_LOGGER]


def test_a_drain_records_every_batch_status_shows_where_the_consumer_stands_and_a_run_after_it_ends_at_once(
    spark, kafka, tmp_path, unique, caplog, capsys, monkeypatch
):
    # Setup: two tables over 3 partitions, with inserts, updates, deletes and an ADD COLUMN,
    # drained through the CLI from a TOML file in batches of at most 25 messages; metrics
    # records wait up to 60 s (the default), longer than the run.
    # Expect: one JSON log line per batch, the same records as rows of _ticdc/metrics written in
    # one commit at the end; row events per table and op as published; the last batch's offsets
    # are the end offsets with lag 0 and its applied commitTs is the feed's last watermark. The
    # progress line stays off (stderr is not a terminal). `status` first shows no checkpoint and
    # no tables, then committed offsets equal to the end offsets, lag 0, and both tables with the
    # last watermark as applied commitTs and their current Delta version. A run then, with nothing new, ends at
    # once (one line naming the consumer and partitions), without asking for Spark: its job never starts (no
    # effective configuration logged) and no product table gets a commit (lease, checkpoints). The group's commits do not count for
    # another target, nor once a message is published after them; the count of messages a run has to read (which
    # picks its JVM's compiler) is unknown for another target, 1 after that message, all for a new group.
    caplog.set_level(logging.INFO)
    feed, published = _two_tables_feed()
    topic, group, target = f"metrics-{unique}", f"g-{unique}", str(tmp_path / "lake")
    publish(kafka, topic, feed.messages)
    toml = _write_config(tmp_path / "job.toml", kafka, topic, group, {"path": target}, run={"batch_max_messages": 25})

    assert exit_status(["status", "--config", toml, "--json"]) == 0
    before = json.loads(capsys.readouterr().out)
    assert before["checkpoint"] is None and before["tables"] == [] and before["total_lag"] is None
    assert [p["committed"] for p in before["partitions"]] == [None, None, None]

    assert exit_status(["run", "--config", toml]) == 0
    assert "ticdc-delta: " not in capsys.readouterr().err  # no progress line off a terminal

    logged = _metrics_logged(caplog)
    assert len(logged) >= len(feed.messages) // 25
    assert [r["round"] for r in logged] == sorted(r["round"] for r in logged)
    assert sum(r["messages"] for r in logged) == len(feed.messages)
    by_op = Counter()
    for record in logged:
        for entry in record["row_events"]:
            by_op[entry["database"], entry["table"], entry["op"]] += entry["events"]
    assert by_op == published
    assert sum(r["ddl"] for r in logged) == 3  # two CREATE TABLE, one ADD COLUMN
    last = logged[-1]
    ends = _end_offsets(kafka, topic)
    assert last["offsets"] == ends and set(last["offset_lag"].values()) == {0}
    assert last["applied_ts"] == feed.last_ts
    recorded_ms = int(dt.datetime.fromisoformat(last["recorded_at"]).timestamp() * 1000)
    assert last["commit_ts_lag_ms"] == recorded_ms - (feed.last_ts >> 18)
    stages = set().union(*(r["stage_seconds"] for r in logged))
    assert {"kafka_poll", "decode", "registry", "merge", "ddl", "checkpoint"} <= stages
    for record in logged:  # each table the batch applied rows to, with the time its work took, slowest first
        timed = [(t["database"], t["table"]) for t in record["table_seconds"]]
        assert {(e["database"], e["table"]) for e in record["row_events"]} <= set(timed)
        seconds = [t["seconds"] for t in record["table_seconds"]]
        assert seconds == sorted(seconds, reverse=True) and all(s >= 0 for s in seconds)  # (a replay: ~0)

    metrics = f"delta.`{target}/_ticdc/metrics`"
    rows = spark.sql(f"SELECT * FROM {metrics} ORDER BY round").collect()
    assert [r["round"] for r in rows] == [r["round"] for r in logged]
    assert {r["run_id"] for r in rows} == {logged[0]["run_id"]} and {r["consumer"] for r in rows} == {group}
    table_counts = spark.sql(
        f"SELECT e.database, e.table, e.op, sum(e.events) AS n FROM {metrics} LATERAL VIEW inline(row_events) e "
        "GROUP BY e.database, e.table, e.op"
    ).collect()
    assert Counter({(r["database"], r["table"], r["op"]): r["n"] for r in table_counts}) == published
    assert [[(t["database"], t["table"], t["seconds"]) for t in r["table_seconds"]] for r in rows] == [
        [(t["database"], t["table"], t["seconds"]) for t in r["table_seconds"]] for r in logged
    ]
    assert dict(rows[-1]["offset_lag"]) == last["offset_lag"] and rows[-1]["applied_ts"] == feed.last_ts
    assert spark.sql(f"DESCRIBE HISTORY {metrics}").count() == 1  # buffered: one commit for every batch

    assert exit_status(["status", "--config", toml, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["checkpoint"] == rows[-1]["checkpoint"]
    assert {f"{p['topic']}/{p['partition']}": p["committed"] for p in status["partitions"]} == ends
    assert {p["lag"] for p in status["partitions"]} == {0} and status["total_lag"] == 0
    assert [(t["database"], t["table"]) for t in status["tables"]] == [("shop", "items"), ("shop", "logs")]
    for entry in status["tables"]:
        assert entry["exists"] and entry["applied_ts"] == feed.last_ts
        assert entry["version"] == entry["applied_version"] == table_version(spark, target, "shop", entry["table"])

    assert exit_status(["status", "--config", toml]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"consumer {group}: checkpoint {status['checkpoint']}, saved ")
    assert "\ntotal " in text and text.split("\ntotal ")[1].split("\n")[0].strip() == "0"
    items_line = next(line for line in text.splitlines() if line.startswith("shop.items "))
    assert items_line.split()[1:3] == [str(status["tables"][0]["version"]), str(feed.last_ts)]

    def versions() -> list[int]:
        return [spark.sql(f"DESCRIBE HISTORY delta.`{target}/_ticdc/{t}` LIMIT 1").collect()[0]["version"]
                for t in ("leases", "checkpoints")]

    before = versions()
    caplog.clear()

    def no_spark(*_args, **_kwargs):
        raise AssertionError("a run with nothing new asked for Spark")

    monkeypatch.setattr(session_module, "spark_for", no_spark)
    assert exit_status(["run", "--config", toml]) == 0
    monkeypatch.undo()
    said = [r.getMessage() for r in caplog.records]
    assert (
        f"nothing new for consumer {group}: the offsets its last run committed are the end of all 3 partitions of "
        f"{topic}; not starting Spark (run.skip_when_caught_up)"
    ) in said
    assert not [m for m in said if m.startswith(("effective configuration", "done: "))]
    assert versions() == before

    def skips(job) -> tuple[bool, int | None]:
        """Whether a run of `job` would end at once, and the backlog that picks its JVM's compiler: from one look
        at the group, as the command line asks (`LookedOnce`), and the same from the source's own questions."""
        source = KafkaSource(job.kafka)
        try:
            looked = LookedOnce(source, count=True)
            answer = nothing_new(job, looked), looked.backlog(commit_tag(job.target))
            assert answer == (nothing_new(job, source), source.backlog(commit_tag(job.target)))
            return answer
        finally:
            source.close()

    # Another target's run cannot tell how far its checkpoint is (None: the full compiler).
    assert skips(job_config(kafka, topic, str(tmp_path / "another"), group)) == (False, None)
    publish(kafka, topic, feed.messages[-1:])  # (a watermark: the run after it would apply nothing, but read it)
    assert skips(job_config(kafka, topic, target, group)) == (False, 1)
    # A group without commits reads from the first offset: every message published; from the end offsets
    # (start_from = "latest"), where its checkpoint says: unknown.
    assert skips(job_config(kafka, topic, target, f"new-{group}")) == (False, len(feed.messages) + 1)
    new_group = job_config(kafka, topic, target, f"new-{group}")
    latest = dataclasses.replace(new_group, kafka=dataclasses.replace(new_group.kafka, start_from="latest"))
    assert skips(latest) == (False, None)


def test_a_drain_on_a_terminal_shows_a_live_progress_line(spark, kafka, tmp_path, unique):
    # Setup: 60 inserts into one table; the job runs until idle with its progress stream on the
    # slave side of a real pseudo-terminal, in batches of at most 30 messages.
    # Expect: a line redrawn in place (carriage returns, no newline until the end) whose final
    # state says every message up to the end offsets noted at start was read, 60 rows merged,
    # one table; then a newline.
    feed = items_feed()
    for start in range(0, 60, 6):
        with feed.transaction() as txn:
            for i in range(start, start + 6):
                txn.insert("shop", "items", item(i))
    topic = f"progress-{unique}"
    publish(kafka, topic, feed.messages)
    master, slave = pty.openpty()
    terminal = os.fdopen(slave, "w", encoding="utf-8")
    received = bytearray()

    def drain_master() -> None:
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the slave side closed
                return
            if not chunk:
                return
            received.extend(chunk)

    reader = threading.Thread(target=drain_master, daemon=True)
    reader.start()
    config = job_config(kafka, topic, str(tmp_path), f"g-{unique}", run={"batch_max_messages": 30})
    try:
        result = Pipeline.from_config(config, spark, progress_stream=terminal).run()
    finally:
        terminal.close()
        reader.join(timeout=10)
        os.close(master)
    shown = received.decode()
    assert result.rows_applied == 60
    assert shown.startswith("\rticdc-delta: 0 of ") and shown.endswith("\r\n")
    assert "\n" not in shown[:-2]
    final = shown[:-2].rsplit("\r", 1)[1]
    total = len(feed.messages)
    assert final.startswith(f"ticdc-delta: {total:,} of {total:,} messages (100%), 60 rows merged, 1 table, ")


@pytest.mark.both_pairs("catalog tables (CREATE SCHEMA, managed Delta tables) in each pair's session catalog")
def test_catalog_tables_metrics_and_status(spark, kafka, tmp_path, unique, capsys):
    # Setup: catalog mode (spark_catalog), the product's own tables in a schema of their own, its metrics
    # table already there as an earlier release made it (without `table_seconds`); 20 inserts into one table
    # of a database named for this test; metrics flushed after every batch.
    # Expect: the metrics rows in <catalog>.<meta_schema>.metrics, appended in more than one commit, the
    # column added (each row names the table and its time); status reads the checkpoint and the registry
    # there, and the table by its catalog name.
    database, meta = f"shop_{unique}", f"meta_{unique}"
    feed = Changefeed(3)
    feed.create_table(database, "items", [column("id", "int", nullable=False), column("v", "int")], primary_key=["id"])
    for i in range(20):
        with feed.transaction() as txn:
            txn.insert(database, "items", {"id": i, "v": i})
    topic, group = f"catalog-{unique}", f"g-{unique}"
    publish(kafka, topic, feed.messages)
    toml = _write_config(
        tmp_path / "job.toml",
        kafka,
        topic,
        group,
        {"catalog": "spark_catalog", "meta_schema": meta},
        run={"batch_max_messages": 40},
        metrics={"flush_seconds": 0.001},
    )
    metrics = f"spark_catalog.{meta}.metrics"
    spark.sql(f"CREATE SCHEMA spark_catalog.{meta}")
    earlier = ", ".join(f"{quote(name)} {kind}" for name, kind in METRICS_COLUMNS if name != "table_seconds")
    spark.sql(f"CREATE TABLE {metrics} ({earlier}) USING DELTA")
    assert exit_status(["run", "--config", toml]) == 0

    rows = spark.sql(f"SELECT round, rows_merged, table_seconds FROM {metrics} ORDER BY round").collect()
    assert sum(r["rows_merged"] for r in rows) == 20 and len(rows) >= 2
    assert {(t["database"], t["table"]) for r in rows for t in r["table_seconds"]} == {(database, "items")}
    # A record waits until the next batch finds it older than flush_seconds (or the run ends); the column
    # added in a commit of its own.
    assert 1 + 2 < spark.sql(f"DESCRIBE HISTORY {metrics}").count() <= len(rows) + 2  # (+ CREATE, ADD COLUMNS)

    assert exit_status(["status", "--config", toml, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["total_lag"] == 0
    (entry,) = status["tables"]
    assert (entry["database"], entry["table"], entry["applied_ts"]) == (database, "items", feed.last_ts)
    name = CatalogLocator("spark_catalog", meta).sql_name(TableName(database, "items"))
    assert entry["version"] == spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").collect()[0]["version"]


def test_a_continuous_run_reports_lag_of_new_messages_and_appends_every_record_when_stopped(
    spark, kafka, tmp_path, unique
):
    # Setup: a continuous run (batches of at most 10 messages, records waiting up to an hour) on a
    # topic with 30 inserts; once those are applied, 60 more inserts are published.
    # Expect: a batch after the second publish reports offset lag above 0 (end offsets newer than
    # those noted at start, as fetches bring them; never beyond the real end); the run catches up to
    # lag 0; stopped as SIGTERM does, it appends every record logged, in one commit.
    def inserts(feed, ids):
        for start in range(ids.start, ids.stop, 3):
            with feed.transaction() as txn:
                for i in range(start, start + 3):
                    txn.insert("shop", "items", item(i))

    feed = items_feed()
    inserts(feed, range(0, 30))
    topic, target = f"continuous-{unique}", str(tmp_path)
    publish(kafka, topic, feed.messages)
    first = len(feed.messages)
    config = job_config(
        kafka, topic, target, f"g-{unique}", run={"mode": "continuous", "batch_max_messages": 10},
        metrics={"flush_seconds": 3600},
    )
    with continuous_run(config, spark) as seen:
        seen.wait_for(lambda r: sum(r["offsets"].values()) == first and not r["waiting"])
        already = len(seen.records)
        inserts(feed, range(30, 90))
        publish(kafka, topic, feed.messages[first:])
        ends = _end_offsets(kafka, topic)
        lagging = seen.wait_for(lambda r: r["round"] > already and sum(r["offset_lag"].values()) > 0)
        # Each partition's end as the consumer's last fetch of it saw it: at most the end offset now.
        for name, lag in lagging["offset_lag"].items():
            assert 0 <= lag <= ends[name] - lagging["offsets"][name]
        seen.wait_for(lambda r: r["offsets"] == ends and not r["waiting"])
    metrics = f"delta.`{target}/_ticdc/metrics`"
    rows = spark.sql(f"SELECT round, rows_merged FROM {metrics} ORDER BY round").collect()
    assert [r["round"] for r in rows] == [r["round"] for r in seen.records]
    assert sum(r["rows_merged"] for r in rows) == 90
    assert spark.sql(f"DESCRIBE HISTORY {metrics}").count() == 1


def test_tables_made_before_the_registry_existed_are_registered_when_next_touched(sql, tmp_path):
    # Setup: two tables made by an applier without a registry (a release before it); then the job's
    # applier, with a registry, changes one of them and creates a third.
    # Expect: the registry lists the touched old table and the new one, not the untouched one; a second
    # batch on the same tables writes nothing more to the registry.
    locator = PathLocator(str(tmp_path))
    at = Position("topic", 0, 0)
    old, untouched, new = TableName("db", "old"), TableName("db", "untouched"), TableName("db", "new")
    schemas = {t: TableSchema(t, (Column("id", "INT"),), ("id",)) for t in (old, untouched, new)}

    def create(table, ts):
        return [SchemaChange(table, ts, SchemaChangeKind.CREATE, schemas[table], at), insert(table, ts + 1, 1)]

    def insert(table, ts, key):
        return RowChange(table, ts, Op.INSERT, None, (key,), schemas[table], at)

    applier_for(sql, locator).apply([*create(old, 10), *create(untouched, 20)], {"topic": 21})
    # A release before the registry left the tables in their usual folders and no registry.
    shutil.rmtree(tmp_path / "_ticdc" / "tables")
    locator = PathLocator(str(tmp_path))
    registry = TableRegistry(sql, locator, "g")
    job = Applier(DeltaWriter(sql, locator), Tombstones(sql, locator), registry=registry)
    job.apply([insert(old, 30, 2), *create(new, 40)], {"topic": 41})
    assert registry.tables() == [new, old]
    registry_versions = sql.spark.sql(f"DESCRIBE HISTORY {registry.sql_name}").count()
    job.apply([insert(old, 50, 3), insert(new, 51, 3)], {"topic": 51})
    assert sql.spark.sql(f"DESCRIBE HISTORY {registry.sql_name}").count() == registry_versions
