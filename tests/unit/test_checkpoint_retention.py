"""The checkpoint table's retention settings (`[checkpoint]`) and when a cleanup is due."""

from __future__ import annotations

import pytest

from ticdc_delta.apply.own_tables.checkpoint import Retention
from ticdc_delta.exceptions import ConfigError
from ticdc_delta.jobs import config

MINIMAL = {"kafka": {"topics": ["cdc"]}, "target": {"path": "/data/delta"}}


def test_defaults_and_toml_values(tmp_path):
    # Expect: keep 100 and a cleanup every 100 batches unless set; TOML values are taken and logged.
    defaults = config.from_mapping(MINIMAL).checkpoint
    assert (defaults.keep, defaults.cleanup_every) == (100, 100)
    path = tmp_path / "job.toml"
    path.write_text('[kafka]\ntopics = ["cdc"]\n[target]\npath = "/lake"\n[checkpoint]\nkeep = 7\ncleanup_every = 25\n')
    loaded = config.load(str(path))
    assert (loaded.checkpoint.keep, loaded.checkpoint.cleanup_every) == (7, 25)
    assert loaded.describe()["checkpoint"] == {"keep": 7, "cleanup_every": 25}


@pytest.mark.parametrize("key", ["keep", "cleanup_every"])
@pytest.mark.parametrize("value", [0, -1, 1.5, True, "10"])
def test_bad_values_are_refused_naming_the_key(key, value):
    with pytest.raises(ConfigError, match=rf"checkpoint\.{key}: must be a whole number of at least 1"):
        config.from_mapping({**MINIMAL, "checkpoint": {key: value}})


def test_unknown_key_is_refused():
    with pytest.raises(ConfigError, match=r"checkpoint\.retain: unknown key; allowed: keep, cleanup_every"):
        config.from_mapping({**MINIMAL, "checkpoint": {"retain": 3}})


def test_a_cleanup_is_due_at_every_multiple_of_cleanup_every_whichever_run_saves_it():
    # Expect: due by batch number (a scheduled run of a few batches gets its share), not by saves of a process.
    retention = Retention(keep=5, cleanup_every=3)
    assert [batch for batch in range(1, 13) if retention.due(batch)] == [3, 6, 9, 12]
    assert [batch for batch in range(1, 4) if Retention(keep=1, cleanup_every=1).due(batch)] == [1, 2, 3]


def test_table_properties_keep_replaced_files_for_the_file_retention_and_commits_a_day():
    assert Retention(5, 3, file_seconds=600).table_properties() == {
        "delta.deletedFileRetentionDuration": "interval 600 seconds",
        "delta.logRetentionDuration": "interval 1 days",
    }
    with pytest.raises(ValueError):
        Retention(keep=0, cleanup_every=3)
