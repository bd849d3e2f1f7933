"""The command line: exit codes and messages for bad configuration."""

from __future__ import annotations

import logging

import pytest

from ticdc_delta.exceptions import LeaseHeldError, LeaseLostError
from ticdc_delta.jobs import cli, log_lines
from ticdc_delta.jobs.cli import exit_status


def test_bad_configuration_exits_2_naming_the_key(caplog, tmp_path):
    caplog.set_level(logging.ERROR)
    assert exit_status(["run", "--topics", "cdc", "--target-path", str(tmp_path), "--protocol", "maxwell"]) == 2
    assert "protocol.name: 'maxwell' is not allowed; allowed: avro, canal-json, debezium, open-protocol, simple" in caplog.text


def test_missing_target_exits_2(caplog):
    caplog.set_level(logging.ERROR)
    assert exit_status(["run", "--topics", "cdc"]) == 2
    assert "set exactly one of target.path" in caplog.text


def test_missing_config_file_exits_2(caplog, tmp_path):
    caplog.set_level(logging.ERROR)
    assert exit_status(["run", "--config", str(tmp_path / "nope.toml")]) == 2
    assert "cannot read config file" in caplog.text


@pytest.mark.parametrize("error", [LeaseHeldError, LeaseLostError])
def test_another_job_running_the_consumer_exits_5_with_the_reason(caplog, monkeypatch, error):
    def held_elsewhere(_args):
        raise error("consumer 'shop' is being run by another job (vm pid 12)")

    monkeypatch.setattr(cli, "_command_run", held_elsewhere)
    caplog.set_level(logging.ERROR)
    assert exit_status(["run", "--topics", "cdc", "--target-path", "/tmp/x"]) == 5
    assert "consumer 'shop' is being run by another job (vm pid 12)" in caplog.text


@pytest.mark.parametrize("level", [logging.INFO, logging.ERROR])
def test_py4j_traces_of_a_lost_jvm_show_at_debug_only(level):
    # Py4J logs "Exception while sending command." with its trace through the root logger when the JVM dies: at
    # INFO when it retries, at ERROR when it cannot. The product's own line explains it; the trace is noise.
    from py4j import java_gateway

    root = logging.getLogger()
    lost = root.makeRecord("root", level, java_gateway.__file__, 1056, "Exception while sending command.", (), None)
    ours = root.makeRecord("ticdc_delta", logging.ERROR, cli.__file__, 1, "Spark's JVM stopped answering", (), None)
    named = root.makeRecord("py4j.clientserver", logging.WARNING, java_gateway.__file__, 1, "a warning", (), None)
    assert not log_lines.py4j_root_info(lost)
    assert log_lines.py4j_root_info(ours) and log_lines.py4j_root_info(named)
