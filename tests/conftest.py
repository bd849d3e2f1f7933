"""Session fixtures: one real Kafka broker and one local Spark + Delta session."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from testbed.spark_packages import use_resolvable_kafka_source
from tests.support import SPARK_ENGINE_PAIR, TEST_SESSION_CONF, TEST_SESSION_JVM_OPTIONS

# Downloads (broker jars, Delta jars) are cached in the checkout unless told otherwise.
os.environ.setdefault("TICDC_DELTA_CACHE", str(Path(__file__).resolve().parent.parent / ".cache"))
use_resolvable_kafka_source()  # (testbed.spark_packages: the exact release is not on Maven Central here)


# Fixtures that start a JVM (Spark, the Kafka broker): a test using one is end to end,
# so `-m "not e2e"` never starts one.
_HEAVY_FIXTURES = {"spark", "sql", "kafka", "apicurio"}


# When scripts/test runs both pairs side by side (CI), the oldest runs only what can differ between them:
# the unit tests (Python 3.10 vs 3.13) and the end-to-end tests marked `both_pairs` (what Spark and Delta
# do: MERGE, schema evolution, table features, history, conflicts, checkpoint cleanup, spark-submit). Every
# other end-to-end test runs on the newest pair, unless `one_pair(pair="oldest")` puts it on the oldest to
# even out the two sides' time.
_DEFAULT_REASON = (
    "exercises the product's own logic (Kafka, decoding, ordering, the batch loop), the same Python on both pairs; "
    "what Spark and Delta do with its statements runs on both pairs in the tests marked both_pairs"
)


def _pair_of(item) -> tuple[str, str]:
    """Which pair runs an end-to-end test when both run ("both", "newest" or "oldest"), and why."""
    # The closest marker decides: a parameter's (the Spark engine's variant) over its test's over its module's.
    callspec = getattr(item, "callspec", None)
    for marker in [*(callspec.marks if callspec else ()), *item.iter_markers()]:
        if marker.name == "both_pairs":
            return "both", ""
        if marker.name == "one_pair":
            return marker.kwargs.get("pair", "newest"), marker.args[0]
    return "newest", _DEFAULT_REASON


def pytest_collection_modifyitems(items):
    split, this_pair = os.environ.get("TICDC_DELTA_SPLIT_PAIRS") == "1", os.environ.get("TICDC_DELTA_PAIR")
    for item in items:
        if _HEAVY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)
        if not split or not this_pair or item.get_closest_marker("e2e") is None:
            continue
        pair, why = _pair_of(item)
        if pair not in ("both", this_pair):
            item.add_marker(
                pytest.mark.skip(
                    reason=f"{why}: run on the {pair} pair only when both pairs run (CI time); "
                    f"`scripts/test --pair {this_pair}` runs it here"
                )
            )
    # The unit tests first: meanwhile the Spark session's jars are fetched (pytest_collection_finish).
    items.sort(key=lambda item: item.get_closest_marker("e2e") is not None)


# The background fetch of the tests' Spark packages (process, log), while the unit tests run (`spark` waits).
_FETCHING = []


def _end(fetching: subprocess.Popen) -> int:
    os.killpg(fetching.pid, signal.SIGKILL)  # its Spark JVM too (a session of its own)
    return fetching.wait()


def pytest_sessionfinish(session):
    for fetching, _ in _FETCHING:  # a run that ended before its first end-to-end test leaves no process behind
        if fetching.poll() is None:
            _end(fetching)
    for made in _INSTALLS.values():  # (a run that ended early waits for the one being made)
        made.cancel() or made.exception()
    for root in _INSTALL_ROOTS:
        shutil.rmtree(root, ignore_errors=True)


# The wheel and the Python 3.12 virtualenvs holding it, made one after another on a thread of their own from
# the end of collection, while the unit tests run (CI time: about 45 s of the oldest side's, most of it uv
# downloading Python 3.12's pyarrow, pandas and numpy); each fixture waits for its own.
_INSTALLS: dict[str, Future] = {}
_INSTALL_ROOTS: list[Path] = []


def _start_installs(session) -> None:
    wanted = {name for item in session.items if not item.get_closest_marker("skip") for name in item.fixturenames
              if name in ("wheel", "runtime_python", "runtime_python_with_spark")}
    if not wanted:
        return
    from tests.installed import build_wheel, runtime_venv, runtime_venv_with_spark

    root = Path(tempfile.mkdtemp(prefix="ticdc-delta-installs-"))  # (removed at the session's end)
    _INSTALL_ROOTS.append(root)

    def folder(name: str) -> Path:
        (root / name).mkdir()
        return root / name

    pool = ThreadPoolExecutor(1, thread_name_prefix="installs")
    wheel = _INSTALLS["wheel"] = pool.submit(lambda: build_wheel(folder("source"), folder("dist")))
    # (in the order the oldest side's tests ask: test_job_lease, then test_packaging)
    if "runtime_python_with_spark" in wanted:
        _INSTALLS["runtime_python_with_spark"] = pool.submit(
            lambda: runtime_venv_with_spark(wheel.result(), folder("runtime-spark-venv")))
    if "runtime_python" in wanted:
        _INSTALLS["runtime_python"] = pool.submit(lambda: runtime_venv(wheel.result(), folder("runtime-venv")))
    pool.shutdown(wait=False)


def _installed(name: str) -> Path:
    if name not in _INSTALLS:
        raise AssertionError(f"{name} was not started at the end of collection (tests/conftest.py: _start_installs)")
    return _INSTALLS[name].result()


def pytest_collection_finish(session):
    _start_installs(session)
    if any(item.get_closest_marker("e2e") and not item.get_closest_marker("skip") for item in session.items):
        import pyspark

        from testbed.spark_packages import start_fetching_test_session_packages
        from ticdc_delta.jobs.paths import cache_dir

        log = cache_dir() / f"fetch-spark-{pyspark.__version__}.log"
        fetching = start_fetching_test_session_packages(log)
        if fetching is not None:
            _FETCHING.append((fetching, log))


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "both_pairs(why): an end-to-end test of what differs between the Python/Spark/Delta pairs (why says "
        "what); run on both when scripts/test runs both (the others run on one: see one_pair)",
    )
    config.addinivalue_line(
        "markers",
        "one_pair(why, pair=...): an end-to-end test exercising nothing that differs between the pairs (why says "
        "so), run on `pair` (default newest) when scripts/test runs both; unmarked end-to-end tests run on the newest",
    )
    config.addinivalue_line(
        "markers",
        "process: the test starts job processes of its own (a Spark JVM each, 10-20 s before any work); "
        '`-m "e2e and not process"` leaves them out',
    )
    config.addinivalue_line(
        "markers",
        "spark_only_tables(reason): the test writes Delta tables non-Spark readers cannot open on purpose "
        "(target.table_features = 'full', hand-made tables); delta-rs does not read them back",
    )


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"report_{report.when}", report)


# Delta tables already compared (or left alone), by directory: the newest commit seen.
_SEEN_TABLES: dict[Path, str] = {}
# What the read-back cost: tables compared, seconds, materialized tables opened (each changed one).
_READ_BACK = [0, 0.0, 0]
# The product's own tables (`_ticdc/<kind>`) have one fixed schema per kind: a few read-backs of each kind
# per session check them; reading every one after every test cost about a minute per CI pair (three of each
# kind: 2026-11-27, two since).
_OWN_TABLE_READS_PER_KIND = 2
_OWN_TABLES_READ: dict[str, int] = {}


# The materialized tables: many tests apply the same workloads (the demo's tables above all), so a few
# read-backs of each shape (columns and types, protocol and table features, table properties) and of each
# state of it (its current files with or without deletion vectors) check it; every table was read after
# every test at first, 0.3 s each, about a minute per CI pair; two of each shape until 2026-11-27 (20-24 s a
# pair), one since (CI time): a second table of a shape differs from the first in its values only.
_READS_PER_SHAPE = 1
_SHAPES_READ: dict[str, int] = {}


def _table_shape(table: Path) -> str:
    from deltalake import DeltaTable

    delta = DeltaTable(str(table))
    protocol = delta.protocol()
    actions = delta.get_add_actions(flatten=True)
    with_vectors = any(
        name.startswith("deletionVector") and actions.column(name).null_count < len(actions) for name in actions.column_names
    )
    return json.dumps([
        delta.schema().to_json(), protocol.min_reader_version, protocol.min_writer_version,
        sorted(protocol.reader_features or []), sorted(protocol.writer_features or []),
        sorted(delta.metadata().configuration.items()), with_vectors,
    ])


def _worth_reading(table: Path) -> bool:
    """Whether to compare the rows of `table`; a materialized table is opened with delta-rs here either way
    (`_table_shape`), so every one is checked to open."""
    if table.parent.name == "_ticdc":
        counts, limit = _OWN_TABLES_READ, _OWN_TABLE_READS_PER_KIND
        kind = "staging" if table.name.startswith("staging_") else table.name  # one per consumer, one schema
    else:
        counts, limit, kind = _SHAPES_READ, _READS_PER_SHAPE, _table_shape(table)
    read = counts.get(kind, 0)
    counts[kind] = read + 1
    return read < limit


def pytest_terminal_summary(terminalreporter):
    # Where this side's time went, by test file (set-up, call and tear-down of its tests): the budgets in
    # tests/README.md are per file.
    seconds: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if isinstance(report, pytest.TestReport):
                path = report.nodeid.split("::", 1)[0]
                seconds[path] = seconds.get(path, 0.0) + report.duration
    slowest = [item for item in sorted(seconds.items(), key=lambda item: -item[1]) if item[1] >= 5]
    if slowest:
        terminalreporter.write_sep("=", "time per test file (those over 5 s)")
        for path, spent in slowest:
            terminalreporter.write_line(f"{spent:7.1f} s  {path}")
    if _READ_BACK[0]:
        terminalreporter.write_line(
            f"delta-rs read-back: {_READ_BACK[2]} materialized tables opened; {_READ_BACK[0]} tables (those and the "
            f"product's own) compared with Spark's read; {_READ_BACK[1]:.1f} s"
        )


@pytest.fixture(autouse=True)
def delta_rs_reads_every_table(request, tmp_path_factory):
    """After each end-to-end test, every Delta table it created or changed is read with delta-rs and Spark.

    Tables are found under pytest's base temporary directory: each test's `tmp_path` (path tables), the
    warehouse of catalog tables and module fixtures' folders; the product's own tables under `_ticdc`
    included (a few of each kind per session). Under the default `target.table_features` ("compatible") both readers must give the same
    columns and rows (`tests.readers`). A test that fails on its own is not checked again.
    """
    if request.node.get_closest_marker("e2e") is None:
        yield
        return
    # Requested before the test runs: pytest refuses fixtures first asked for during teardown, and an
    # end-to-end test without Spark of its own (spark-submit in a subprocess) still leaves tables to read.
    spark = request.getfixturevalue("spark")
    yield
    report = getattr(request.node, "report_call", None)
    if report is None or not report.passed:
        return
    from tests.readers import assert_delta_rs_reads_as_spark, delta_tables_under, log_state

    changed = []
    for table in delta_tables_under(tmp_path_factory.getbasetemp()):
        state = log_state(table)
        if _SEEN_TABLES.get(table) != state:
            _SEEN_TABLES[table] = state
            changed.append(table)
    if not changed or request.node.get_closest_marker("spark_only_tables") is not None:
        return
    started = time.perf_counter()
    compared = [table for table in changed if _worth_reading(table)]
    for table in compared:
        assert_delta_rs_reads_as_spark(spark, table)
    _READ_BACK[0] += len(compared)
    _READ_BACK[1] += time.perf_counter() - started
    _READ_BACK[2] += len([table for table in changed if table.parent.name != "_ticdc"])


@pytest.fixture(scope="session")
def _starting_broker(tmp_path_factory):
    """The session's Kafka broker, started in a thread: its two JVMs (the KRaft format, the broker) start
    while the Spark session does (about 10 s of each side's CI time)."""
    from testbed.local_kafka import LocalKafka

    broker = LocalKafka(tmp_path_factory.mktemp("kafka"))
    with ThreadPoolExecutor(1, thread_name_prefix="kafka-start") as pool:
        started = pool.submit(broker.start)
        yield broker, started
        started.exception()  # (waits: a broker half-started is stopped too)
    broker.stop()


@pytest.fixture(scope="session")
def kafka(_starting_broker):
    broker, started = _starting_broker
    started.result()
    return broker


@pytest.fixture(scope="session")
def spark(tmp_path_factory, _starting_broker):
    from testbed.spark_packages import test_session_packages
    from ticdc_delta.jobs.session import get_spark

    for fetching, log in _FETCHING:
        try:
            status = fetching.wait(timeout=600)
        except subprocess.TimeoutExpired:
            status = _end(fetching)
        if status != 0:  # the session's own start below fetches them again, or says why it cannot
            print(f"fetching the Spark packages in the background failed: see {log}")

    session = get_spark(
        "local[2]",
        {
            "spark.sql.shuffle.partitions": "1",
            "spark.default.parallelism": "1",
            # Catalog-mode tests create managed tables: keep them out of the checkout.
            "spark.sql.warehouse.dir": str(tmp_path_factory.mktemp("warehouse")),
            **TEST_SESSION_CONF,
        },
        # Spark's Kafka source: the Spark engine's tests read with it; Hadoop's S3 connector: the
        # object-storage tests (tests/e2e/test_object_storage.py) write through it.
        packages=test_session_packages(),
        jvm_options=TEST_SESSION_JVM_OPTIONS,
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def wheel() -> Path:
    """The product's wheel, built from setup.cfg (`tests.installed.build_wheel`)."""
    return _installed("wheel")


@pytest.fixture(scope="session")
def runtime_python() -> Path:
    """Python 3.12 with the wheel, no pyspark (`tests.installed.runtime_venv`)."""
    return _installed("runtime_python")


@pytest.fixture(scope="session")
def runtime_python_with_spark() -> Path:
    """Python 3.12 with the wheel and pyspark (`tests.installed.runtime_venv_with_spark`)."""
    return _installed("runtime_python_with_spark")


@pytest.fixture(scope="session")
def sql(spark):
    """The job's kind of SQL session (a fork of the test session), for tests that drive apply/ directly."""
    from ticdc_delta.apply.base.session import SqlSession

    return SqlSession(spark)


@pytest.fixture(params=["driver", pytest.param("spark", marks=SPARK_ENGINE_PAIR)])
def engine(request):
    """The run engine (`run.engine`) of a test run against both: the driver's and the Spark engine."""
    return request.param


@pytest.fixture
def unique():
    """A short unique suffix for topic and consumer-group names."""
    return uuid.uuid4().hex[:8]


@pytest.fixture(scope="session")
def s3(spark, tmp_path_factory):
    """A real S3-compatible server (testbed/s3_server.py) with a bucket `lake`, and the shared Spark
    session's s3a connector pointed at it."""
    from testbed.s3_server import S3Server

    server = S3Server(tmp_path_factory.mktemp("s3") / "moto.log")
    server.start()
    server.create_bucket("lake")
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in server.hadoop_settings().items():
        hadoop.set(key, value)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def apicurio(tmp_path_factory):
    """A real Schema Registry server (Apicurio Registry, testbed/apicurio.py), shared by the session."""
    from testbed.apicurio import ApicurioRegistry

    server = ApicurioRegistry(tmp_path_factory.mktemp("apicurio"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(params=["emulator", pytest.param("apicurio", marks=[pytest.mark.e2e, pytest.mark.conformance])])
def schema_registry(request):
    """A Confluent-compatible registry: the emulator, and (end to end) Apicurio Registry, a real server.

    For tests of what any registry does; those injecting faults use `registry` (the emulator) alone.
    """
    return request.getfixturevalue("registry" if request.param == "emulator" else "apicurio")


@pytest.fixture(scope="session")
def registry():
    """The Schema Registry emulator (tests/registry_server.py), shared by the session: for injected
    faults (outages, errors, garbage), basic auth and https, which the real server here cannot do."""
    from tests.registry_server import FakeSchemaRegistry

    server = FakeSchemaRegistry()
    server.start()
    yield server
    server.stop()
