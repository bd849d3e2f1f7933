"""Batch records: the lag arithmetic, the record's JSON and row forms, and when buffered records are appended."""

from __future__ import annotations

import datetime as dt
import json
import logging

import pytest

from ticdc_delta.apply.base.phases import PhaseTimes
from ticdc_delta.apply.own_tables.metrics import COLUMNS, BatchRecord
from ticdc_delta.exceptions import ConfigError
from ticdc_delta.jobs import batch_metrics, config
from ticdc_delta.jobs.batch_metrics import (
    METRICS_LOGGER,
    MetricsRecorder,
    commit_ts_lag_ms,
    offset_lag,
    tso_physical_ms,
)
from ticdc_delta.schema_cache.events import TableName, TopicPartition

UTC = dt.timezone.utc
MINIMAL = {"kafka": {"topics": ["cdc"]}, "target": {"path": "/tmp/t"}}


def record(round_: int = 1, **changes) -> BatchRecord:
    values = dict(
        consumer="g",
        run_id="r1",
        round=round_,
        checkpoint=7,
        recorded_at=dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC),
        messages=12,
        row_events={(TableName("shop", "items"), "INSERT"): 5, (TableName("shop", "items"), "DELETE"): 1,
                    (TableName("a.b", "c"), "UPDATE"): 2},
        ddl=1,
        dead_letters=0,
        replays_skipped=3,
        waiting=4,
        applied_ts=(1_772_366_400_000 << 18) + 5,
        commit_ts_lag_ms=250,
        offsets={TopicPartition("cdc", 1): 9, TopicPartition("cdc", 0): 10},
        offset_lag={TopicPartition("cdc", 1): 2, TopicPartition("cdc", 0): 0},
        stage_seconds={"decode": 0.5, "merge": 1.25},
        batch_seconds=2.0004,
        table_seconds={TableName("shop", "items"): 0.25, TableName("a.b", "c"): 1.50049, TableName("shop", "logs"): 0.25},
    )
    values.update(changes)
    return BatchRecord(**values)


def test_commit_ts_lag_is_wall_clock_minus_the_tso_physical_time():
    # TiDB TSO: physical milliseconds above 18 logical bits.
    physical = int(dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC).timestamp() * 1000)
    ts = (physical << 18) | 123
    assert tso_physical_ms(ts) == physical
    assert commit_ts_lag_ms(ts, dt.datetime(2026, 3, 1, 12, 0, 1, 500_000, tzinfo=UTC)) == 1500
    assert commit_ts_lag_ms(None, dt.datetime.now(UTC)) is None
    assert commit_ts_lag_ms(0, dt.datetime.now(UTC)) is None


def test_offset_lag_per_partition():
    a, b, c = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)
    # c: never committed (counts as at its end: nothing known to be owed); b: committed past a stale end.
    assert offset_lag({a: 100, b: 5, c: 8}, {a: 60, b: 7}) == {a: 40, b: 0, c: 0}


def test_record_json_has_the_table_columns_and_nesting():
    values = record().to_json()
    assert list(values) == [name for name, _ in COLUMNS]
    assert values["rows_merged"] == 8
    assert values["row_events"] == [
        {"database": "a.b", "table": "c", "op": "UPDATE", "events": 2},
        {"database": "shop", "table": "items", "op": "DELETE", "events": 1},
        {"database": "shop", "table": "items", "op": "INSERT", "events": 5},
    ]
    assert values["offsets"] == {"cdc/0": 10, "cdc/1": 9}
    assert values["offset_lag"] == {"cdc/0": 0, "cdc/1": 2}
    assert values["recorded_at"] == "2026-03-01T12:00:00+00:00"
    assert values["batch_seconds"] == 2.0
    # The tables a batch waited on: slowest first (ties by name).
    assert values["table_seconds"] == [
        {"database": "a.b", "table": "c", "seconds": 1.5},
        {"database": "shop", "table": "items", "seconds": 0.25},
        {"database": "shop", "table": "logs", "seconds": 0.25},
    ]
    assert json.loads(json.dumps(values)) == values


def test_record_row_matches_the_columns():
    row = record().to_row()
    assert len(row) == len(COLUMNS)
    by_name = dict(zip((name for name, _ in COLUMNS), row, strict=True))
    assert by_name["row_events"][0] == ("a.b", "c", "UPDATE", 2)
    assert by_name["table_seconds"][0] == ("a.b", "c", 1.5)
    assert by_name["recorded_at"] == dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


class Appends:
    """Stands in for the metrics table: what was appended, one list per commit."""

    sql_name = "metrics"

    def __init__(self, fail: bool = False) -> None:
        self.commits: list[list[BatchRecord]] = []
        self.fail = fail

    def append(self, records):
        if self.fail:
            raise RuntimeError("storage unavailable")
        self.commits.append(list(records))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_records_wait_until_the_oldest_waited_flush_seconds_then_go_in_one_commit(caplog):
    caplog.set_level(logging.INFO, logger=METRICS_LOGGER)
    table, clock = Appends(), Clock()
    recorder = MetricsRecorder(table, 60.0, clock=clock)
    for i in range(1, 4):
        recorder.record(record(i))
        clock.now += 25  # the third record comes 50 s after the first
    assert table.commits == [] and recorder.waiting == 3
    recorder.record(record(4))  # 75 s after the first
    assert [[r.round for r in commit] for commit in table.commits] == [[1, 2, 3, 4]]
    recorder.record(record(5))
    recorder.flush()  # the end of the run
    assert [[r.round for r in commit] for commit in table.commits] == [[1, 2, 3, 4], [5]]
    recorder.flush()  # nothing waits: no empty commit
    assert len(table.commits) == 2
    lines = [r.getMessage() for r in caplog.records if r.name == METRICS_LOGGER]
    assert [json.loads(line)["round"] for line in lines] == [1, 2, 3, 4, 5]
    assert all("\n" not in line for line in lines)


def test_a_failed_append_keeps_the_records_for_the_next_flush(caplog):
    table = Appends(fail=True)
    recorder = MetricsRecorder(table, 60.0, clock=Clock())
    recorder.record(record(1))
    recorder.flush()
    assert recorder.waiting == 1 and "could not append 1 batch records" in caplog.text
    table.fail = False
    recorder.record(record(2))
    recorder.flush()
    assert [[r.round for r in commit] for commit in table.commits] == [[1, 2]]


def test_after_a_failed_append_retries_wait_a_flush_interval_and_keep_a_bounded_number(caplog, monkeypatch):
    monkeypatch.setattr(batch_metrics, "MAX_WAITING", 3)
    table, clock = Appends(fail=True), Clock()
    recorder = MetricsRecorder(table, 60.0, clock=clock)
    tries = 0

    def counting(records):
        nonlocal tries
        tries += 1
        Appends.append(table, records)

    table.append = counting
    recorder.record(record(1))
    clock.now += 60
    recorder.record(record(2))  # the first flush fails
    for i in range(3, 7):
        clock.now += 10
        recorder.record(record(i))  # within the interval after the failure: no new try
    assert tries == 1
    clock.now += 30
    recorder.record(record(7))  # 60 s after the failure: another try, which fails
    assert tries == 2 and recorder.waiting == 3 and "dropping the 4 oldest" in caplog.text
    table.fail = False
    recorder.flush()
    assert [[r.round for r in commit] for commit in table.commits] == [[5, 6, 7]]


def test_without_a_table_records_are_only_logged(caplog):
    caplog.set_level(logging.INFO, logger=METRICS_LOGGER)
    recorder = MetricsRecorder(None, 60.0)
    recorder.record(record(1))
    recorder.flush()
    assert recorder.waiting == 0
    assert json.loads(caplog.records[-1].getMessage())["consumer"] == "g"


def test_phase_seconds_since_a_mark():
    times = PhaseTimes()
    times.seconds.update({"decode": 1.0, "merge": 2.0})
    mark = times.totals()
    times.seconds.update({"decode": 1.5, "checkpoint": 0.25})
    assert times.since(mark) == {"decode": 0.5, "checkpoint": 0.25}
    assert times.snapshot() == {"decode": 1.5, "merge": 2.0, "checkpoint": 0.25}


def test_metrics_section():
    loaded = config.from_mapping({**MINIMAL, "metrics": {"table": False, "flush_seconds": 5}})
    assert (loaded.metrics.table, loaded.metrics.flush_seconds) == (False, 5)
    assert config.from_mapping(MINIMAL).metrics == config.MetricsConfig(table=True, flush_seconds=60.0)
    with pytest.raises(ConfigError, match=r"metrics.flush_seconds: must be a positive number, got 0"):
        config.from_mapping({**MINIMAL, "metrics": {"flush_seconds": 0}})
    with pytest.raises(ConfigError, match=r"metrics.table: must be true or false, got 'yes'"):
        config.from_mapping({**MINIMAL, "metrics": {"table": "yes"}})
    with pytest.raises(ConfigError, match=r"metrics.interval: unknown key; allowed: table, flush_seconds"):
        config.from_mapping({**MINIMAL, "metrics": {"interval": 5}})
