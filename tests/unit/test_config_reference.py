"""The configuration reference is made from the configuration code and cannot drift from it."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
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
    if section == "tables":  # an array of rules: each rule's keys
        rule = config.from_mapping({**values, "tables": [{"match": "a.b"}]}).tables[0]
        assert name in {f.name for f in dataclasses.fields(rule)}
        with pytest.raises(ConfigError):
            config.from_mapping({**values, "tables": [{"match": "a.b", f"{name}_not_a_key": 1}]})
        return
    section_type = type(getattr(config.from_mapping(values), section))
    assert name in {f.name for f in dataclasses.fields(section_type)}
    with pytest.raises(ConfigError):
        config.from_mapping({**values, section: {**values.get(section, {}), f"{name}_not_a_key": 1}})


def _reference_script():
    spec = importlib.util.spec_from_file_location("reference", DOCS.parent / "scripts" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_configuration_table_is_the_one_the_code_makes():
    # Expect: docs/configuration.md holds the generated table as the code makes it now (a changed key, default
    # or meaning without `scripts/reference.py` fails here), once, between its markers.
    reference = _reference_script()
    for name in reference.BLOCKS:  # (the exit status table in running.md too)
        page = (DOCS / name).read_text()
        assert page == reference.filled(name, page), f"docs/{name} is stale: run scripts/reference.py"
    page = (DOCS / "configuration.md").read_text()
    assert page.count("| `kafka.bootstrap_servers` |") == 1
    with pytest.raises(ValueError, match="lost its generated block's markers"):
        reference.filled("configuration.md", page.replace(reference.markers("configuration.md")[1], ""))


@pytest.mark.skipif(sys.version_info[:2] != (3, 13), reason="argparse wraps usage lines differently on other Python "
                    "versions; the page is the newest pair's (Python 3.13), and the flags are the same on both")
def test_the_committed_command_line_page_is_every_commands_help():
    # Expect: docs/cli.md is every command's --help as the code makes it now; each command has its section.
    reference = _reference_script()
    page = (DOCS / "cli.md").read_text()
    assert page == reference.cli_page(), "docs/cli.md is stale: run scripts/reference.py"
    for command in ("run", "status", "replay-dead-letters", "snapshot", "as-of", "tables"):
        assert f"## ticdc-delta {command}\n" in page
    assert "--topic-pattern TOPIC_PATTERN" in page and "## ticdc-delta demo" not in page


def test_the_committed_api_page_is_the_public_apis_docstrings():
    # Expect: docs/api.md is the public API's signatures and docstrings as the code has them now; an entry
    # without a docstring is refused rather than shown empty.
    reference = _reference_script()
    assert (DOCS / "api.md").read_text() == reference.api_page(), "docs/api.md is stale: run scripts/reference.py"
    reference.API["ticdc_delta.apply.own_tables.checkpoint"] = ("CheckpointStore",)  # (no docstring of its own)
    try:
        with pytest.raises(ValueError, match="without a docstring"):
            reference.api_page()
    finally:
        del reference.API["ticdc_delta.apply.own_tables.checkpoint"]


def test_the_readme_names_every_exit_status_the_code_has():
    # Expect: the README's list of exit statuses is the code's table's, none left out (0 aside: done).
    import re

    from ticdc_delta.jobs import exit_statuses

    readme = (DOCS.parent / "README.md").read_text()
    listed = re.search(r"a documented exit status \(([^)]*)", readme.replace("\n", " "))[1]
    assert [int(n) for n in re.findall(r"(?:^|, )(\d+) ", listed)] == [s.code for s in exit_statuses.STATUSES[1:]]
