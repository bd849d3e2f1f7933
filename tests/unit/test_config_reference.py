"""The configuration reference is made from the configuration code and cannot drift from it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ticdc_delta.exceptions import ConfigError
from ticdc_delta.jobs import config, config_reference

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_every_key_has_one_meaning_and_every_meaning_a_key():
    # Expect: the keys read from the configuration's types and the meanings kept for them are the same set.
    names = [key.name for key in config_reference.keys()]
    assert len(names) == len(set(names))
    assert set(names) == set(config_reference.MEANINGS)


def test_the_table_shows_each_keys_default_from_the_code():
    # Expect: one row per key; the defaults are the dataclasses' (a changed default changes the page).
    rows = {line.split(" | ")[0].strip("| `"): line for line in config_reference.table().splitlines()[2:]}
    assert set(rows) == set(config_reference.MEANINGS)
    run = config.RunConfig()
    assert f"| `{int(run.batch_max_seconds)}` |" in rows["run.batch_max_seconds"]
    assert f"| `{config.KafkaConfig.__dataclass_fields__['start_from'].default}` |" in rows["kafka.start_from"]
    assert rows["protocol.encoding"].endswith("| simple: `json` or `avro` (Simple's own Avro schema; no registry involved) |")
    assert "(`decimal`, `string`)" in rows["types.bigint_unsigned"]


@pytest.mark.parametrize("key", [k.name for k in config_reference.keys() if not k.name.startswith(("protocol.", "registry."))])
def test_every_listed_key_is_one_the_configuration_accepts(key):
    # Expect: each section key of the reference is a field of its section (an unknown key would be refused).
    section, name = key.split(".", 1)
    holder = {f.name: f.type for f in dataclasses.fields(config.Config)}
    assert section in holder
    values = {"kafka": {"topics": ["t"]}, "target": {"path": "/tmp/lake"}}
    if key in ("kafka.topics", "kafka.topic_pattern"):
        return  # the keys of which one must be set: topics is, above
    section_type = type(getattr(config.from_mapping(values), section))
    assert name in {f.name for f in dataclasses.fields(section_type)}
    with pytest.raises(ConfigError):
        config.from_mapping({**values, section: {**values.get(section, {}), f"{name}_not_a_key": 1}})


def test_the_configuration_page_has_no_hand_kept_table():
    # Expect: the page holds the generated table's marker, and no row of a table kept by hand.
    page = (DOCS / "configuration.md").read_text()
    assert "<!-- the configuration table: made from the configuration code at build time" in page
    assert "| `kafka.bootstrap_servers` |" not in page
