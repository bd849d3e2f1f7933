"""The product installs as one `ticdc_delta` package built from the repository's top-level folders."""

from __future__ import annotations

import configparser
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from ticdc_delta.schema_cache import events, serialized
from ticdc_delta.schema_cache.events import Column, TableName, TableSchema

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"schema_cache": "ticdc_delta.schema_cache", "apply": "ticdc_delta.apply", "jobs": "ticdc_delta.jobs"}
# An import of a product folder by its bare name: from the checkout's root it would load a second copy of the
# module (two classes of every name), and from the installed wheel it fails.
_BARE_IMPORT = re.compile(r"^\s*(from|import)\s+(schema_cache|apply|jobs)\b", re.M)


def test_setup_cfg_lists_every_product_package_under_ticdc_delta():
    # Expect: each folder holding an __init__.py under the three product folders is a package setup.cfg lists (a
    # package left out would be missing from the wheel), mapped from its folder, and nothing else is listed.
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    listed = set(config["options"]["packages"].split())
    mapping = dict(line.split(" = ") for line in config["options"]["package_dir"].strip().splitlines())
    assert mapping == {package: folder for folder, package in FOLDERS.items()}
    found = {"ticdc_delta"} | {
        ".".join([FOLDERS[init.relative_to(ROOT).parts[0]], *init.relative_to(ROOT).parts[1:-1]])
        for folder in FOLDERS for init in (ROOT / folder).rglob("__init__.py")
    }
    assert listed == found


def test_nothing_imports_a_product_folder_by_its_bare_name():
    # Expect: product, tests, testbed, benchmarks and notebooks import the product as `ticdc_delta.*` only.
    texts = {path: path.read_text() for path in _sources(ROOT)}
    for notebook in (ROOT / "notebooks").glob("*.ipynb"):
        cells = json.loads(notebook.read_text())["cells"]
        texts[notebook] = "\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "code")
    assert len(texts) > 100 and any(p.suffix == ".ipynb" for p in texts)
    offenders = [f"{path.relative_to(ROOT)}: {m.group(0).strip()}" for path, text in texts.items()
                 for m in _BARE_IMPORT.finditer(text)]
    assert offenders == []


def _sources(root: Path) -> list[Path]:
    """The checkout's Python files, not descending into hidden folders: `.cache` holds the downloads (Ivy, Maven,
    uv), whose temporary folders another test's install may remove while the walk is in them (a clean clone's run, 2026-12-02)."""
    found = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [name for name in subfolders if not name.startswith(".")]
        found += [Path(folder) / name for name in files if name.endswith(".py")]
    return found


def test_a_users_own_jobs_package_does_not_shadow_the_product(tmp_path):
    # Setup: a folder with the user's own `jobs` and `apply` packages (common in Databricks Repos and notebook
    # folders), first on sys.path and the current folder, as a notebook beside them has it.
    # Expect: the product's modules import from the product, and the user's packages stay importable by their names.
    for name in ("jobs", "apply"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"WHOSE = 'the user\\'s {name}'\n")
    probe = (
        "import jobs, apply, ticdc_delta.jobs.cli as cli, ticdc_delta.apply.applier as applier\n"
        "print(jobs.WHOSE, apply.WHOSE, callable(cli.main), applier.Applier.__name__)"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["the", "user's", "jobs", "the", "user's", "apply", "True", "Applier"]


def test_a_structure_staged_before_the_rename_still_loads(monkeypatch):
    # Setup: a table structure pickled as a release before the `ticdc_delta` namespace staged it: its classes
    # named by the module `schema_cache.events`.
    # Expect: it loads as today's classes.
    schema = TableSchema(TableName("shop", "items"), (Column("id", "INT"),), ("id",))
    with monkeypatch.context() as before:
        before.setitem(sys.modules, "schema_cache.events", events)
        for cls in (TableSchema, TableName, Column):
            before.setattr(cls, "__module__", "schema_cache.events")
        staged = serialized.dump_event(schema)
    assert b"schema_cache.events" in staged and b"ticdc_delta" not in staged
    assert serialized.load_event(staged) == schema
