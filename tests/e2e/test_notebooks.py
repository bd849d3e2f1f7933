"""The notebooks, executed top to bottom with nbclient against a fresh demo (real broker, real Spark + Delta).

Each notebook runs in a kernel of this interpreter (a kernelspec written to a temporary
JUPYTER_PATH); a cell error fails the test. The outputs are checked against the demo stream.
"""

from __future__ import annotations

import json
import os
import re
import sys
import uuid
from collections import Counter
from pathlib import Path

import nbformat
import pytest
from jupyter_client import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from benchmarks.fault_kills import write_config
from testbed.demo import load_demo
from testbed.processes import short_lived_jvm

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.process,
    pytest.mark.one_pair("the notebooks call the product APIs the other tests run on both pairs", pair="oldest"),
]

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
# Before each notebook: a clean namespace, in the notebooks' folder, on the demo (not a CONFIG left set).
RESET = f"%reset -f\nimport os\nos.chdir({str(NOTEBOOKS)!r})\nos.environ.pop('TICDC_DELTA_CONFIG', None)"
KERNEL = "ticdc-delta-tests"


@pytest.fixture(scope="module")
def demo(kafka, spark, tmp_path_factory):
    """The demo stream in a topic of its own, applied into a temporary folder; the notebooks' settings."""
    workdir = tmp_path_factory.mktemp("demo")
    suffix = uuid.uuid4().hex[:8]
    topic, group = f"ticdc-demo-{suffix}", f"ticdc-delta-demo-{suffix}"
    feed, _ = load_demo(kafka.bootstrap_servers, str(workdir / "delta"), topic=topic, group=group, spark=spark)
    settings = {
        "TICDC_DEMO_WORKDIR": str(workdir),
        "TICDC_DEMO_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        "TICDC_DEMO_TOPIC": topic,
        "TICDC_DEMO_GROUP_ID": group,
    }
    return settings, feed


@pytest.fixture(scope="module")
def jupyter_path(tmp_path_factory) -> Path:
    """A kernelspec that runs this very interpreter (the one with the product's dependencies)."""
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"}))
    return root


@pytest.fixture(scope="module")
def kernel(demo, jupyter_path):
    """One kernel for the module's notebooks, each run after `%reset -f` (a notebook that leaned on another's
    names would fail): one Spark JVM started for all of them, not one per notebook (CI time)."""
    settings, _ = demo
    with pytest.MonkeyPatch.context() as env:
        for key, value in settings.items():
            env.setenv(key, value)
        env.setenv("JUPYTER_PATH", str(jupyter_path))
        # The kernel starts a Spark JVM of its own that lives a minute or two.
        env.setenv("JAVA_TOOL_OPTIONS", short_lived_jvm(os.environ)["JAVA_TOOL_OPTIONS"])
        manager = KernelManager(kernel_name=KERNEL)
        yield manager
        if manager.has_kernel:
            manager.shutdown_kernel(now=True)


@pytest.fixture
def run_notebook(kernel):
    def run(name: str, first: str = RESET):
        notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
        notebook.cells.insert(0, nbformat.v4.new_code_cell(first))
        client = NotebookClient(
            notebook, km=kernel, timeout=600, resources={"metadata": {"path": str(NOTEBOOKS)}}
        )
        client.execute()  # raises CellExecutionError on any cell error
        return notebook

    return run


def output(notebook, tag: str) -> str:
    """The text a tagged cell showed (printed, and its value)."""
    (cell,) = [c for c in notebook.cells if tag in c.metadata.get("tags", [])]
    parts = []
    for out in cell.outputs:
        if out.output_type == "stream":
            parts.append(out.text)
        elif "data" in out and "text/plain" in out.data:
            parts.append(out.data["text/plain"])
    return "".join(parts)


def test_exploring_the_topic_counts_every_change_and_shows_no_lag(run_notebook, demo):
    # Expect: row changes per table and operation as the stream holds them (counted here from the
    # raw JSON, not with the decoder), every partition fully committed by the demo's job, a plot.
    _, feed = demo
    notebook = run_notebook("01_explore_topic.ipynb")

    expected = Counter()
    for message in feed.messages:
        body = json.loads(message.value)
        if body["type"] in ("INSERT", "UPDATE", "DELETE"):
            expected[f"{body['database']}.{body['table']}", body["type"]] += 1
    shown = {}
    for line in output(notebook, "events-per-table").splitlines()[1:]:
        table, operation, count = re.match(r"(\S+)\s+(.+?)\s+(\d+)$", line).groups()
        shown[table, operation] = int(count)
    assert {k: v for k, v in shown.items() if k in expected} == dict(expected)
    assert shown["-", "WATERMARK"] == sum(1 for m in feed.messages if m.kind == "WATERMARK")

    per_partition = Counter(m.partition for m in feed.messages)
    lag_lines = output(notebook, "lag").splitlines()[1:]
    assert len(lag_lines) == len(per_partition)
    for line in lag_lines:
        partition, committed, end, lag = (int(v) for v in line.split()[:4])
        assert committed == end == per_partition[partition] and lag == 0
    (plot,) = [c for c in notebook.cells if "plot" in c.metadata.get("tags", [])]
    assert any("image/png" in out.get("data", {}) for out in plot.outputs)


def test_history_lists_applied_commit_ts_and_reads_the_table_before_its_alter(run_notebook):
    # Expect: versions newest first with their applied commitTs; as of just before the ALTER the
    # table has no `tier` column, as of the ALTER it has; customers and orders read consistently at a
    # commitTs no newer than the ALTER's.
    notebook = run_notebook("02_table_history.ipynb")

    versions = [int(line.split()[0]) for line in output(notebook, "history").splitlines()[1:]]
    assert versions == sorted(versions, reverse=True) and len(versions) > 3
    as_of = output(notebook, "as-of")
    before, after = re.findall(r"columns (\[.*?\])", as_of)
    assert "tier" not in before and before.startswith("['id', 'name', 'balance', 'signed_up'")
    assert after.endswith("'tier']")
    consistent = output(notebook, "consistent")
    asked, landed = map(int, re.findall(r"commitTs (\d+)", consistent)[:2])
    assert landed <= asked and consistent.count("VERSION AS OF") == 2


def test_dead_letters_are_made_and_replayed_only_where_safe(run_notebook, demo, spark):
    # Expect: three claim-checked changes dead-lettered; the replay writes customer 1's and
    # skips both of customer 2's (re-registered later in a change the job applied); the table
    # then equals upstream (checked in the notebook against the upstream model, and here).
    settings, _ = demo
    notebook = run_notebook("03_checkpoints_and_dead_letters.ipynb")

    assert output(notebook, "dead-letters").count("claim_check_root is not set") == 3
    assert "customer 1: name in Delta 'customer 1'" in output(notebook, "before-replay")
    dry_run = output(notebook, "dry-run")
    assert dry_run.count(": applied: ") == 1 and dry_run.count(": superseded: ") == 2
    assert "customers equals upstream" in output(notebook, "after-replay")

    target = f"{settings['TICDC_DEMO_WORKDIR']}/delta"
    outcomes = Counter(r["outcome"] for r in spark.table(f"delta.`{target}/_ticdc/dead_letter_replays`").collect())
    assert outcomes == {"applied": 1, "superseded": 2}
    names = {r["id"]: r["name"] for r in spark.table(f"delta.`{target}/shop/customers`").where("id <= 2").collect()}
    assert names[1].startswith("a customer name far longer") and names[2] == "customer 2, again"


def test_pointed_at_a_deployment_from_outside_the_checkout_they_only_read(run_notebook, demo, tmp_path):
    # Setup: the demo job's configuration as a TOML file, as a deployment's would be; the notebooks run
    # from a folder outside the checkout, with the product as installed (the checkout's stand-ins, testbed,
    # out of reach), CONFIG given by TICDC_DELTA_CONFIG.
    # Expect: 01 and 02 run through on that deployment; 03 shows its checkpoint, then stops at its first
    # write, saying it writes to the demo only; no table got a new version.
    settings, _ = demo
    target = Path(settings["TICDC_DEMO_WORKDIR"]) / "delta"
    config = tmp_path / "job.toml"
    write_config(config, {
        "kafka": {"bootstrap_servers": settings["TICDC_DEMO_BOOTSTRAP_SERVERS"], "topics": [settings["TICDC_DEMO_TOPIC"]],
                  "group_id": settings["TICDC_DEMO_GROUP_ID"]},
        "target": {"path": str(target)},
        # (the claim-checked messages 03 publishes are in the topic when the module's notebooks ran before)
        "protocol": {"claim_check_root": str(Path(settings["TICDC_DEMO_WORKDIR"]) / "claim-check")},
    })
    logs_before = sorted(p.name for p in target.rglob("_delta_log/*.json"))
    away = (
        "%reset -f\n"
        "import os, sys\n"
        f"os.chdir({str(tmp_path)!r})\n"
        f"sys.path[:] = [p for p in sys.path if p != {str(NOTEBOOKS.parent)!r}]\n"
        "for module in [m for m in sys.modules if m.split('.')[0] == 'testbed']:\n"
        "    del sys.modules[module]\n"
        f"os.environ['TICDC_DELTA_CONFIG'] = {str(config)!r}\n"
    )
    explored = run_notebook("01_explore_topic.ipynb", first=away)
    assert "WATERMARK" in output(explored, "events-per-table")
    history = run_notebook("02_table_history.ipynb", first=away)
    assert len(output(history, "history").splitlines()) > 3
    with pytest.raises(CellExecutionError, match="demo only"):
        run_notebook("03_checkpoints_and_dead_letters.ipynb", first=away)
    assert sorted(p.name for p in target.rglob("_delta_log/*.json")) == logs_before
