"""Kafka unreachable when the job starts: waited for like an outage mid-run, then exit 6; librdkafka's
own lines go through the product's logging, one per broker and kind per interval."""

from __future__ import annotations

import logging
import socket
import time

from ticdc_delta.jobs.cli import exit_status
from ticdc_delta.jobs.kafka_log import OnePerInterval


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens there once the socket is closed


def test_no_broker_at_start_exits_6_after_the_configured_wait_naming_brokers_and_limit(tmp_path, caplog, capfd):
    brokers = f"127.0.0.1:{_closed_port()}"
    config = tmp_path / "job.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{brokers}"\ntopics = ["cdc"]\ngroup_id = "g"\nunreachable_timeout_seconds = 3\n'
        f'[target]\npath = "{tmp_path / "lake"}"\n'
    )
    caplog.set_level(logging.INFO)
    started = time.monotonic()

    status = exit_status(["run", "--config", str(config)])

    waited = time.monotonic() - started
    assert status == 6
    assert 3 <= waited < 20  # the configured limit, not the 30 s metadata timeout nor the 300 s default
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and brokers in errors[0] and "kafka.unreachable_timeout_seconds = 3" in errors[0]
    assert "%3|" not in capfd.readouterr().err  # librdkafka printed nothing itself
    from_librdkafka = [r for r in caplog.records if r.name == "ticdc_delta.librdkafka"]
    assert from_librdkafka  # its reconnect failures went through the product's logger ...
    per_key = {}
    for record in from_librdkafka:
        key = (record.args[0], str(record.args[2]).split(": ", 1)[0])
        per_key[key] = per_key.get(key, 0) + 1
    assert max(per_key.values()) == 1  # ... once per broker and kind within the 30 s interval


def test_the_filter_lets_one_line_per_broker_and_kind_through_per_interval_then_counts_the_rest():
    now = [0.0]
    keep = OnePerInterval(interval=30, clock=lambda: now[0])

    def record(facility: str, text: str) -> logging.LogRecord:
        return logging.LogRecord("ticdc_delta.librdkafka", logging.ERROR, __file__, 1, "%s [%s] %s",
                                 (facility, "rdkafka#consumer-1", text), None)

    fail_a = "10.0.0.1:9092/bootstrap: Connect to ipv4#10.0.0.1:9092 failed: Connection refused"
    fail_b = "10.0.0.2:9092/bootstrap: Connect to ipv4#10.0.0.2:9092 failed: Connection refused"
    assert keep.filter(record("FAIL", fail_a))
    assert keep.filter(record("FAIL", fail_b))  # another broker
    assert keep.filter(record("ERROR", fail_a))  # another kind
    now[0] = 10
    assert not keep.filter(record("FAIL", fail_a))
    assert not keep.filter(record("FAIL", fail_a))
    now[0] = 31
    again = record("FAIL", fail_a)
    assert keep.filter(again)
    assert "(and 2 more like it in 31s)" in again.getMessage()
