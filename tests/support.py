"""Helpers for end-to-end tests: publish a simulated changefeed, run the job, compare tables."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from chispa import assert_df_equality

from testbed.changefeed import Changefeed, Message
from testbed.produce import publish_in_order
from tests.readers import log_state
from ticdc_delta.apply.applier import Applier
from ticdc_delta.apply.base.identifiers import quote
from ticdc_delta.apply.base.session import SqlSession
from ticdc_delta.apply.own_tables.tombstones import Tombstones
from ticdc_delta.apply.places.locator import TableLocator
from ticdc_delta.apply.tables.features import COMPATIBLE
from ticdc_delta.apply.writers.delta_writer import DeltaWriter
from ticdc_delta.jobs import config as config_module
from ticdc_delta.jobs.pipeline import Pipeline, RunResult
from ticdc_delta.jobs.tables import table_path
from ticdc_delta.schema_cache.events import Ordering

# The Spark engine's variants run on the oldest pair when both run: its newest-pair side already runs
# most unmarked end-to-end tests, and the engine's Spark statements are the same on both.
SPARK_ENGINE_PAIR = pytest.mark.one_pair(
    "the Spark engine's variant: its Python is the same on both pairs; the benchmark runs it on the newest",
    pair="oldest",
)


# The tests' Spark (their session, and the job processes they start): Spark's interpreted expressions
# instead of generated code. Every Delta statement plans projections over Delta's wide log schema
# anew in each task, and generating (and comment-stripping) that code took a third of the tests' JVM
# CPU; results are the same (Spark's own suites run both ways). Measured on tests/e2e/test_ddl_kinds.py:
# JVM CPU 218 -> 171 s. No version checksum file (`_delta_log/<version>.crc`) after each commit: Delta
# computes it from the new snapshot's state, about a sixth of a small statement's cost here, and nothing
# the product does or the tests check reads it (readers do without it). Measured: test_ddl_kinds and
# test_table_swaps from a cold session, 0.90x the wall time (two pairs of runs). The spark-submit test and
# the notebooks keep Spark's and Delta's defaults.
TEST_SESSION_CONF = {
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.codegen.wholeStage": "false",
    "spark.databricks.delta.writeChecksumFile.enabled": "false",
}
# The tests' session lives for the whole run, busy: the throughput collector, not the product's default
# (the serial collector keeping the heap small, jobs.session.LOCAL_JVM_OPTIONS). Measured against G1, the
# product's default then: 171 -> 144 s on the same file.
TEST_SESSION_JVM_OPTIONS = "-XX:+UseParallelGC"


def spark_variant(*values, id: str):
    """A parameter set (`values`, then the engine "spark") of a test parametrized by engine itself."""
    return pytest.param(*values, "spark", marks=SPARK_ENGINE_PAIR, id=id)


def publish(kafka, topic: str, messages: Iterable[Message], partitions: int = 3) -> int:
    """Send messages in order, as TiCDC does (`testbed.produce.publish_in_order`); those naming their own topic
    (avro protocol, a topic per table) go there."""
    return publish_in_order(kafka.bootstrap_servers, messages, topic, partitions)


def job_config(kafka, topic: str | list[str], target_path: str, group: str, /, *, engine: str = "driver", **sections):
    """The job's configuration; `sections` add to or override each section's keys (`target={...}` included)."""
    topics = [topic] if isinstance(topic, str) else list(topic)
    values = {
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers, "topics": topics, "group_id": group},
        "target": {"path": target_path},
        "run": {"mode": "until-idle", "batch_max_seconds": 2.0, "idle_timeout_seconds": 15.0, "engine": engine},
    }
    for name, section in sections.items():
        values[name] = section if isinstance(section, list) else {**values.get(name, {}), **section}  # ([[tables]])
    return config_module.from_mapping(values)


def run_job(spark, kafka, topic: str | list[str], target_path: str, group: str, /, *, engine: str = "driver",
            **sections) -> RunResult:
    return Pipeline.from_config(job_config(kafka, topic, target_path, group, engine=engine, **sections), spark).run()


def s3_config(kafka, topic: str, target: str, group: str, *, safe_commits: bool = False, **sections):
    """The job's configuration for an s3a:// target on the tests' S3 server: the log store check off unless
    `safe_commits` (tests/e2e/test_object_storage.py's docstring says why)."""
    config = job_config(kafka, topic, target, group, **sections)
    return dataclasses.replace(config, target=dataclasses.replace(config.target, require_safe_commits=safe_commits))


def run_on_s3(spark, kafka, topic: str, target: str, group: str, **sections) -> RunResult:
    return Pipeline.from_config(s3_config(kafka, topic, target, group, **sections), spark).run()


def staged_rows(spark, target: str, group: str) -> int:
    """Row changes and schema changes waiting in the Spark engine's staging table of consumer `group`."""
    from ticdc_delta.apply.base.identifiers import catalog_name

    frame = spark.read.format("delta").load(f"{target}/_ticdc/staging_{catalog_name(group)}")
    return frame.where("kind IN ('row', 'ddl')").count()


_LOCATED: dict[str, tuple[str, dict]] = {}  # local target -> (its registry's newest commit, table -> path)


def located_path(spark, target: str, database: str, table: str) -> str:
    """`jobs.tables.table_path`, remembered per local target until its registry gets a commit (tests read
    tables many times between runs: a registry read is a Spark job)."""
    if "://" in target:
        return table_path(spark, target, database, table)
    state = log_state(Path(target) / "_ticdc" / "tables")
    seen, paths = _LOCATED.get(target, ("", {}))
    if seen != state:
        paths = {}
        _LOCATED[target] = (state, paths)
    key = f"{database}\0{table}"
    if key not in paths:
        paths[key] = table_path(spark, target, database, table)
    return paths[key]


def table_frame(spark, target: str, database: str, table: str):
    """The table as a reader finds it: renamed tables through the registry (`jobs.tables.table_path`)."""
    return spark.read.format("delta").load(located_path(spark, target, database, table))


def assert_table(spark, target: str, feed: Changefeed, database: str, table: str, ddl: str, rows=None):
    """The Delta table equals the upstream model (or `rows`), with the Spark types `ddl` names."""
    actual = table_frame(spark, target, database, table)
    expected_rows = feed.expected_rows(database, table) if rows is None else rows
    expected = spark.createDataFrame(expected_rows, schema=ddl)
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)


def assert_gone(spark, target: str, database: str, table: str) -> None:
    """Upstream dropped or renamed the table away: no reader finds it under its name."""
    with pytest.raises(LookupError):
        table_path(spark, target, database, table)


def table_version(spark, target: str, database: str, table: str) -> int:
    name = f"delta.{quote(located_path(spark, target, database, table))}"
    return spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").collect()[0]["version"]


def applier_for(
    sql: SqlSession, locator: TableLocator, ordering: Ordering = Ordering.COMMIT_TS, *, table_features: str = COMPATIBLE,
    inserts_are_new: bool = False,
) -> Applier:
    """The applier the job builds, on `sql`, for tests that drive apply/ directly (`inserts_are_new`: as for
    Simple, Canal-JSON or Debezium; False: as for Open Protocol)."""
    return Applier(DeltaWriter(sql, locator, table_features=table_features), Tombstones(sql, locator), ordering,
                   inserts_are_new=inserts_are_new)


class MetricsRecords(logging.Handler):
    """Collects the metrics log records of a run in another thread; wakes waiters on each."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[dict] = []
        self.changed = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self.changed:
            self.records.append(json.loads(record.getMessage()))
            self.changed.notify_all()

    def wait_for(self, predicate, timeout: float = 180.0) -> dict:
        with self.changed:
            assert self.changed.wait_for(lambda: any(predicate(r) for r in self.records), timeout), self.records
            return next(r for r in self.records if predicate(r))


@contextmanager
def continuous_run(config, spark) -> Iterator[MetricsRecords]:
    """A continuous run of `config` on `spark` in a thread, yielding its metrics records as they come; stopped when
    the block ends (as SIGTERM stops it), which it must do within 120 s."""
    from ticdc_delta.jobs.batch_metrics import METRICS_LOGGER

    stop = threading.Event()
    pipeline = Pipeline.from_config(config, spark, stop=stop)
    seen = MetricsRecords()
    metrics_logger = logging.getLogger(METRICS_LOGGER)
    metrics_logger.addHandler(seen)
    metrics_logger.setLevel(logging.INFO)
    worker = threading.Thread(target=pipeline.run)
    worker.start()
    try:
        yield seen
    finally:
        stop.set()
        worker.join(timeout=120)
        metrics_logger.removeHandler(seen)
        metrics_logger.setLevel(logging.NOTSET)
    assert not worker.is_alive()
