"""The product as users install it: a wheel built from setup.cfg, holding the product only,
installed without Spark, and run by spark-submit against the local broker and the demo stream."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pyspark
import pytest

from testbed.demo import demo_changefeed
from testbed.ports import free_port
from testbed.processes import short_lived_jvm, wheel_task_command
from testbed.spark_cluster import StandaloneCluster, submit_command, submit_environment, task_ends
from tests.installed import virtualenv
from tests.support import assert_table, publish
from tests.workloads import DEMO_TABLE_DDLS
from ticdc_delta.jobs.paths import cache_dir
from ticdc_delta.jobs.session import LOCAL_DEFAULTS, share_ivy_cache

pytestmark = [pytest.mark.e2e, pytest.mark.both_pairs("the wheel as each supported Python builds and installs it")]

ROOT = Path(__file__).resolve().parents[2]
# What a local session of the product sets and a cluster's session leaves at Spark's and Delta's defaults.
_PARTITION_SETTINGS = ("spark.sql.shuffle.partitions", "spark.databricks.delta.snapshotPartitions")


@pytest.fixture(scope="module")
def cluster_python(wheel, tmp_path_factory) -> Path:
    """A Python like a cluster's: the wheel and its dependencies, no pyspark (Spark brings its own)."""
    return virtualenv(sys.executable, tmp_path_factory.mktemp("cluster-venv"), str(wheel))


def test_the_wheel_holds_the_product_and_its_entry_point_only(wheel):
    # Expect: one top-level package, `ticdc_delta`, holding the three product packages (no test stand-ins,
    # demo, benchmarks), the console script, and no pyspark/delta-spark requirement outside the `local` extra.
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry_points = archive.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    top_level = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top_level == {"ticdc_delta"}
    assert {n.split("/")[1] for n in names if n.startswith("ticdc_delta/") and n.count("/") > 1} == {
        "schema_cache", "apply", "jobs"}
    assert not [n for n in names if "testbed" in n or "/tests/" in n or "encoders" in n]
    assert "ticdc-delta = ticdc_delta.jobs.cli:main" in entry_points
    assert "ticdc_delta/jobs/spark_submit.py" in names  # spark-submit's primary resource travels with the wheel
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE") for n in names)
    requirements = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    spark_requirements = [r for r in requirements if r.startswith(("pyspark", "delta-spark"))]
    assert spark_requirements and all('extra == "local"' in r for r in spark_requirements)


def test_the_installed_wheel_does_not_bring_spark(cluster_python):
    found = subprocess.run([str(cluster_python), "-c", "import pyspark"], capture_output=True)
    assert found.returncode != 0
    help_text = subprocess.run([str(cluster_python.parent / "ticdc-delta"), "run", "--help"],
                               check=True, capture_output=True, text=True).stdout
    assert "--config" in help_text
    # `demo` runs only in a checkout (its broker and stream are the repository's testbed/): not listed here.
    commands = subprocess.run([str(cluster_python.parent / "ticdc-delta"), "--help"], check=True, capture_output=True,
                              text=True, cwd=cluster_python.parent).stdout
    assert "replay-dead-letters" in commands and "demo" not in commands


def _installed_spark_submit_file(python: Path) -> str:
    """The primary resource the wheel installed, as docs/running.md says to find it."""
    # (run outside the checkout: `python -m` looks in the current folder first)
    found = subprocess.run([str(python), "-m", "ticdc_delta.jobs.spark_submit", "--path"], check=True, capture_output=True,
                           text=True, cwd=python.parent)
    path = found.stdout.strip()
    assert path.startswith(str(python.parent.parent)) and path.endswith("jobs/spark_submit.py")  # not the checkout's
    return path


def test_the_wheel_task_call_pattern_ends_the_process_with_each_documented_status(cluster_python, kafka, tmp_path, unique):
    # Setup: the installed wheel's entry point called as a Databricks python_wheel_task calls it (what it
    # returns is ignored there: only the process's status counts), in a Python without Spark.
    # Expect: 0 for --version; 2 for a bad configuration; 6 when no broker answers within the configured
    # wait; 8 when the job gets past Kafka and finds no pyspark; each ends in one error line, no traceback.
    # (5, another job holding the lease, is this call pattern's status in tests/e2e/test_job_lease.py.)
    def status(*parameters: str, config: str = "") -> tuple[int, str]:
        if config:
            (tmp_path / "job.toml").write_text(config)
            parameters = (*parameters, "--config", str(tmp_path / "job.toml"))
        done = subprocess.run(wheel_task_command(cluster_python, *parameters), capture_output=True, text=True,
                              cwd=tmp_path, timeout=120)
        return done.returncode, done.stdout + done.stderr

    code, output = status("--version")
    assert code == 0 and output.startswith("ticdc-delta 0.1.0")

    code, output = status("run", config='[kafka]\ntopics = ["cdc"]\n[target]\npath = "lake"\n[run]\nmode = "sometimes"\n')
    assert code == 2 and "run.mode" in output and "Traceback" not in output

    nobody = f"127.0.0.1:{free_port()}"
    code, output = status("run", config=f'[kafka]\nbootstrap_servers = "{nobody}"\ntopics = ["cdc"]\n'
                                        'unreachable_timeout_seconds = 2\n[target]\npath = "lake"\n')
    assert code == 6 and f"Kafka at {nobody} unreachable" in output and "Traceback" not in output

    topic = f"wheel-task-{unique}"
    publish(kafka, topic, demo_changefeed(seed=3, changes=5).messages)
    code, output = status("run", config=f'[kafka]\nbootstrap_servers = "{kafka.bootstrap_servers}"\n'
                                        f'topics = ["{topic}"]\n[target]\npath = "lake"\n')
    assert code == 8 and "pyspark is not installed" in output and "Traceback" not in output
    assert not (tmp_path / "lake").exists()


@pytest.mark.process
@pytest.mark.one_pair(
    "a cluster of JVMs and spark-submit's own; on the oldest pair: Spark 3.5 driven by Python 3.12 is Databricks "
    "Runtime 16.x, and the newest runs the same job code in every other end-to-end test",
    pair="oldest",
)
def test_spark_submit_to_a_standalone_cluster_decodes_on_executors_of_other_jvms(runtime_python, spark, kafka, tmp_path,
                                                                                  unique):
    """On a cluster, not local mode: the job's Python code reaches executors in JVMs of their own (replaced the
    local[2] spark-submit test of the driver engine, 81 s of the oldest side's CI time)."""
    # Setup: the demo stream on the local broker; a standalone master and a one-core worker, each a JVM
    # started from pyspark's spark-class (testbed.spark_cluster); the product, pyarrow and pandas in a
    # Python 3.12 without pyspark (spark-submit brings its own), as on Databricks Runtime 16.x, given to
    # the driver and the executors (`spark.pyspark.python`: every node has it at that path, as a cluster
    # image or a bootstrap script would install it). spark-submit in client mode with Delta and the Kafka
    # source as --packages, the Spark engine decoding every message on the executors, the event log on.
    # Expect: spark-submit exits 0; the Delta tables equal the upstream model; the decoding Spark job is
    # described by its name ("ticdc-delta: decode ...") and its tasks ran on the worker's executor only,
    # never in the driver's JVM; no Spark INFO line per Spark job in the output.
    feed = demo_changefeed(seed=11, changes=80)
    topic, target, events = f"submit-{unique}", tmp_path / "lake", tmp_path / "events"
    publish(kafka, topic, feed.messages)
    config = tmp_path / "job.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{kafka.bootstrap_servers}"\ntopics = ["{topic}"]\ngroup_id = "g-{unique}"\n'
        f'[target]\npath = "{target}"\n[run]\nengine = "spark"\ndriver_decode_max_messages = 0\n'
    )
    events.mkdir()
    ivy = cache_dir() / "ivy" / f"spark-submit-{pyspark.__version__}"
    share_ivy_cache(ivy)  # what the local sessions fetched: resolved without a round trip (CI time)
    env = short_lived_jvm(submit_environment(str(runtime_python)))
    # One worker: its executor is a JVM of its own, which is what the test is about; a second cost the oldest
    # side about two JVMs' start and CPU (2026-12-06, CI time; `bench.py --only cluster` runs two and kills one).
    with StandaloneCluster(tmp_path / "cluster", workers=1) as cluster:
        command = [
            *submit_command(cluster.url, _installed_spark_submit_file(runtime_python), python=str(runtime_python),
                            events=events, ivy=ivy, conf={
                                "spark.executor.memory": "1g",
                                # A one-core cluster: as many partitions as local sessions take, not Spark's
                                # 200 and Delta's 50 tasks a shuffle and a snapshot (141 -> 75 s alone)
                                **{key: LOCAL_DEFAULTS[key] for key in _PARTITION_SETTINGS},
                                # (the executors' JVMs live a minute: the quick compiler, as the job processes' JVMs)
                                "spark.executor.extraJavaOptions": env["JAVA_TOOL_OPTIONS"]}),
            "run", "--config", str(config), "--until-idle",
        ]
        run = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)

    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    ends = task_ends(events)
    decoding = [end for end in ends if end["description"].startswith("ticdc-delta: decode")]
    assert decoding, sorted({end["description"] for end in ends})
    assert {end["executor"] for end in decoding} == {"0"}, decoding  # the worker's executor, not "driver"
    assert all(end["reason"] == "Success" for end in decoding), decoding
    # Readable: Spark's own INFO lines of each Spark job (spark-submit's default level: a dozen per job,
    # thousands a run) are off once the job has the session; spark-submit's start-up lines are its own.
    per_job = re.findall(r"^.* INFO (?:DAGScheduler|TaskSetManager): .*$", output, re.M)
    assert per_job == [], per_job[:5]
    assert "Truncated the string representation" not in output
    assert re.search(rf"ticdc-delta \S+ on Python 3\.12\.\d+, Spark {re.escape(pyspark.__version__)}", output), output[-3000:]
    for table, ddl in DEMO_TABLE_DDLS.items():
        assert_table(spark, str(target), feed, "shop", table, ddl)


@pytest.mark.process
@pytest.mark.one_pair("how the product reports a Spark that does not start; the same Python on both pairs")
def test_a_spark_that_cannot_start_ends_in_one_line_naming_the_remedy_and_exit_8(kafka, tmp_path, unique):
    # Setup: the job from the development environment, in a folder of its own, with Kafka reachable and
    # JAVA_HOME naming a folder without Java.
    # Expect: exit 8, one error line naming the cause and the remedy, no Python traceback. (A jar that
    # cannot be fetched: tests/unit/test_spark_start.py; a real run of it takes 40 s of Ivy.)
    topic = f"no-spark-{unique}"
    publish(kafka, topic, demo_changefeed(seed=3, changes=5).messages)
    (tmp_path / "job.toml").write_text(
        f'[kafka]\nbootstrap_servers = "{kafka.bootstrap_servers}"\ntopics = ["{topic}"]\n'
        f'[target]\npath = "{tmp_path / "lake"}"\n'
    )
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_GATEWAY_PORT"}
    done = subprocess.run([sys.executable, "-m", "ticdc_delta.jobs.cli", "run", "--config", str(tmp_path / "job.toml")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**env, "PYTHONPATH": str(ROOT), "JAVA_HOME": str(tmp_path / "no-java")})
    output = done.stdout + done.stderr
    errors = [line for line in output.splitlines() if " ERROR ticdc_delta: " in line]
    assert "Traceback" not in output, output[-3000:]
    assert done.returncode == 8 and len(errors) == 1 and "install Java 17 or set JAVA_HOME" in errors[0], errors
