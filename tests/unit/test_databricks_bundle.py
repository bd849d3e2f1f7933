"""deploy/databricks/databricks.yml against the bundle's documented structure.

Jobs are checked with Databricks' own typed bundle model (the databricks-bundles package,
generated from the bundle schema: unknown fields and wrong types are refused); the rest of
the file against the documented top-level keys; and the job against this project: the wheel's
name and console script, the config file it ships, no library replacing the runtime's Spark.
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import pytest
import yaml
from databricks.bundles.jobs import Job

from ticdc_delta.jobs import config as config_module

ROOT = Path(__file__).resolve().parents[2]
BUNDLE_DIR = ROOT / "deploy" / "databricks"
# Top-level mappings of a bundle configuration file (docs: "Databricks Asset Bundle configuration").
TOP_LEVEL_KEYS = {
    "bundle", "include", "variables", "workspace", "artifacts", "sync", "resources",
    "targets", "permissions", "run_as", "presets", "experimental", "scripts", "python",
}
# A runtime's spark_version: <major>.<minor>.x-[cpu-ml-]scala2.1x
RUNTIME = re.compile(r"^(?P<release>\d+\.\d+)\.x-(cpu-ml-)?scala2\.1[23]$")
# docs/running.md's table of runtimes: | 16.4 LTS | Python 3.12 | Spark 3.5 | Delta 3.3 | what CI runs |
RUNTIME_ROW = re.compile(r"^ *\| (?P<release>\d+\.\d+) LTS \|(?P<rest>.*)$", re.M)


@pytest.fixture(scope="module")
def bundle() -> dict:
    return yaml.safe_load((BUNDLE_DIR / "databricks.yml").read_text())


@pytest.fixture(scope="module")
def setup_cfg() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    return parser


def _resolve(value: str, bundle: dict) -> str:
    """${var.x} replaced by the variable's default (what the deployed job gets without overrides)."""
    return re.sub(r"\$\{var\.(\w+)\}", lambda m: str(bundle["variables"][m.group(1)]["default"]), value)


def _tasks(bundle: dict):
    for job in bundle["resources"]["jobs"].values():
        yield from job["tasks"]


def test_top_level_and_targets_follow_the_documented_structure(bundle):
    assert set(bundle) <= TOP_LEVEL_KEYS
    assert bundle["bundle"]["name"]
    assert [name for name, target in bundle["targets"].items() if target.get("default")] == ["dev"]
    assert {target.get("mode") for target in bundle["targets"].values()} <= {"development", "production"}
    for variable in bundle["variables"].values():
        assert set(variable) <= {"description", "default", "type", "lookup"} and "default" in variable


def test_every_job_is_valid_for_databricks_own_bundle_model(bundle):
    for name, job in bundle["resources"]["jobs"].items():
        parsed = Job.from_dict(job)  # raises on an unknown field or a wrong type
        assert parsed.as_dict()["tasks"], name


def _cluster_environment(bundle: dict) -> dict[str, str]:
    variables = {}
    for job in bundle["resources"]["jobs"].values():
        for cluster in job["job_clusters"]:
            variables.update(cluster["new_cluster"].get("spark_env_vars", {}))
    return variables


def test_the_job_runs_the_wheels_console_script_with_a_shipped_config(bundle, setup_cfg, monkeypatch):
    for name in _cluster_environment(bundle):
        monkeypatch.setenv(name, "placeholder")
    console_scripts = dict(
        line.split("=", 1) for line in setup_cfg["options.entry_points"]["console_scripts"].strip().splitlines()
    )
    distribution = setup_cfg["metadata"]["name"].replace("-", "_")
    for task in _tasks(bundle):
        wheel_task = task["python_wheel_task"]
        assert wheel_task["package_name"] == distribution
        assert wheel_task["entry_point"].strip() in {name.strip() for name in console_scripts}
        parameters = wheel_task["parameters"]
        assert parameters[0] == "run" and "--until-idle" in parameters
        shipped = parameters[parameters.index("--config") + 1]
        assert shipped.startswith("${workspace.file_path}/")
        config = config_module.load(str(BUNDLE_DIR / shipped.removeprefix("${workspace.file_path}/")))
        assert config.target.catalog, "on Databricks the tables go to a catalog"


def test_the_wheel_is_built_from_setup_cfg_and_is_the_only_library(bundle):
    (artifact,) = bundle["artifacts"].values()
    assert artifact["type"] == "whl" and "build --wheel" in artifact["build"]
    project = (BUNDLE_DIR / artifact["path"]).resolve()
    assert (project / "setup.cfg").is_file()
    for task in _tasks(bundle):
        libraries = task["libraries"]
        assert [lib["whl"] for lib in libraries if "whl" in lib] == [str(Path(artifact["path"]) / "dist" / "*.whl")]
        # The runtime's own Spark and Delta are used: nothing may replace them.
        for library in libraries:
            package = str(library.get("pypi", {}).get("package", "")) + str(library.get("maven", {}).get("coordinates", ""))
            assert not re.search(r"pyspark|delta-spark|io\.delta", package)


def test_the_shipped_config_names_its_secrets_and_the_cluster_sets_them_from_a_secret_scope(bundle, monkeypatch):
    # Setup: job.toml as the bundle uploads it; the cluster's environment variables.
    # Expect: every { env = "NAME" } of the file is a variable the cluster sets from a secret scope
    # ({{secrets/<scope>/<key>}}, resolved by Databricks at cluster start), no secret-looking key of the file
    # holds a value, and the logged configuration shows the reference.
    environment = _cluster_environment(bundle)
    for value in environment.values():
        assert re.fullmatch(r"\{\{secrets/[^/{}]+/[^/{}]+\}\}", _resolve(value, bundle)), value
    text = (BUNDLE_DIR / "job.toml").read_text()
    settings = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    referenced = set(re.findall(r'\{ env = "(\w+)" \}', settings))
    assert referenced and referenced <= set(environment)
    for line in text.splitlines():
        key = line.split("=", 1)[0].lower()
        if "=" in line and not line.lstrip().startswith("#") and re.search(r"password|secret|user_info|token", key):
            assert "{ env =" in line, line
    for name in referenced:
        monkeypatch.setenv(name, "the-secret-value")
    described = repr(config_module.load(str(BUNDLE_DIR / "job.toml")).describe())
    assert "the-secret-value" not in described and all(f"'env': '{name}'" in described for name in referenced)


def test_the_default_runtime_is_one_ci_runs_and_the_docs_map_every_runtime(bundle):
    # docs/running.md lists each Databricks runtime with the Python/Spark/Delta pair it maps to and whether CI
    # runs that pair end to end; the bundle's default must be one it runs (supported = what CI runs).
    rows = {m["release"]: m["rest"] for m in RUNTIME_ROW.finditer((ROOT / "docs" / "running.md").read_text())}
    default = RUNTIME.match(_resolve("${var.spark_version}", bundle))
    assert default and default["release"] in rows, (default, sorted(rows))
    assert "CI runs" in rows[default["release"]] and "not run" not in rows[default["release"]]
    # The pair CI runs for that runtime: tests/installed.py's Python 3.12 with Spark 3.5 (the oldest pair's).
    assert "Python 3.12" in rows[default["release"]] and "Spark 3.5" in rows[default["release"]]


def test_the_cluster_runs_a_supported_runtime_on_one_node(bundle):
    for job in bundle["resources"]["jobs"].values():
        assert job["max_concurrent_runs"] == 1
        assert len(job["schedule"]["quartz_cron_expression"].split()) >= 6 or "${var." in job["schedule"]["quartz_cron_expression"]
        for cluster in job["job_clusters"]:
            spec = cluster["new_cluster"]
            assert RUNTIME.match(_resolve(spec["spark_version"], bundle))
            assert spec["num_workers"] == 0 and spec["spark_conf"]["spark.databricks.cluster.profile"] == "singleNode"
    assert len(_resolve("${var.schedule}", bundle).split()) == 6


def test_production_targets_meet_the_clis_production_mode_rules(bundle):
    # The Databricks CLI (bundle/config/mutator/process_target_mode.go, validateProductionMode) refuses a
    # `mode: production` target deployed by a user unless it sets workspace.root_path (one copy per target)
    # and every job runs as an explicit identity (run_as); its templates also grant CAN_MANAGE explicitly.
    # The CLI itself cannot validate here: it needs the workspace it deploys to.
    production = {name: target for name, target in bundle["targets"].items() if target.get("mode") == "production"}
    assert production
    for name, target in production.items():
        root = target.get("workspace", {}).get("root_path", "")
        assert root.startswith("/Workspace/") and "${bundle.target}" in root, name
        identity = target.get("run_as") or bundle.get("run_as") or {}
        assert set(identity) & {"user_name", "service_principal_name"}, name
        permissions = target.get("permissions") or bundle.get("permissions") or []
        assert any(p.get("level") == "CAN_MANAGE" for p in permissions), name


def test_no_automatic_retry_runs_a_configuration_or_credential_error_again(bundle):
    # Databricks retries a task whatever its exit status; the next scheduled run is the retry.
    for task in _tasks(bundle):
        assert task.get("max_retries", 0) == 0
