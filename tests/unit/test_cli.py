"""The command line: exit codes and messages for bad configuration."""

from __future__ import annotations

import logging

from jobs.cli import main


def test_bad_configuration_exits_2_naming_the_key(caplog, tmp_path):
    caplog.set_level(logging.ERROR)
    assert main(["run", "--topics", "cdc", "--target-path", str(tmp_path), "--protocol", "maxwell"]) == 2
    assert "protocol.name: 'maxwell' is not allowed; allowed: avro, canal-json, debezium, open-protocol, simple" in caplog.text


def test_missing_target_exits_2(caplog):
    caplog.set_level(logging.ERROR)
    assert main(["run", "--topics", "cdc"]) == 2
    assert "set exactly one of target.path" in caplog.text


def test_missing_config_file_exits_2(caplog, tmp_path):
    caplog.set_level(logging.ERROR)
    assert main(["run", "--config", str(tmp_path / "nope.toml")]) == 2
    assert "cannot read config file" in caplog.text
