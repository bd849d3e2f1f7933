"""The environment of the job processes that tests and the fault script start (`python -m ticdc_delta.jobs.cli ...`)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Such a process lives a minute or two: its JVM's optimizing compiler (C2) never pays back its own work.
# The quick compiler alone (C1) halves their CPU (measured: the two jobs of a lease test, 213 -> 106 CPU
# seconds), which counts on the 2-core machine both CI pairs share. The tests' own Spark session, which
# lives for the whole run, keeps the JVM's default: C1 alone made a long suite a third slower there.
# C1 alone gets a 48 MB code cache by default, which Spark and Delta fill within a minute; the JVM then
# stops compiling and a job runs interpreted, several times slower (seen: "CodeCache is full. Compiler has
# been disabled" in killed jobs' logs). The cache tiered compilation would have avoids that.
_SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"


# The servers tests and the demo start (the Kafka broker and its log-dir formatter, Apicurio Registry, the
# Debezium capture): light work after a start that is mostly class loading and compilation. The quick
# compiler alone and the serial collector cut a start's CPU (measured: a broker's format, start and stop
# 9.2 -> 7.4 CPU-seconds, Apicurio's start 7.3 -> 3.6) on the 2-core machine the two CI sides share.
SERVER_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


def maven_environment() -> dict[str, str]:
    """This process's environment for a Maven build of the tests' servers (the broker's jars, the Debezium
    capture, Apicurio Registry): Maven's JVM on the servers' options, a build's CPU about halved (Apicurio's
    from downloaded dependencies: 29 -> 13 CPU-seconds), which CI's set-up shares with the unit tests."""
    options = " ".join(filter(None, (os.environ.get("MAVEN_OPTS"), *SERVER_JVM_OPTIONS)))
    return {**os.environ, "MAVEN_OPTS": options}


@contextlib.contextmanager
def one_builder(name: str) -> Iterator[None]:
    """Held by one process at a time per `name` (a lock file under the cache folder): a build of the tests'
    servers that CI's set-up runs in the background while the tests start (scripts/test) is waited for by
    a test that needs it, never run twice at once (`@one_builder(name)` on the build function). Where the
    platform has no `fcntl`, nothing is held."""
    from ticdc_delta.jobs.paths import cache_dir

    try:
        import fcntl
    except ImportError:  # (Windows: the tests' servers are built by one process there)
        yield
        return
    folder = cache_dir() / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # said once, so that a test standing still shows what it waits for
            logging.getLogger(__name__).warning("waiting for another process's build of %s (%s)", name, lock.name)
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def short_lived_jvm(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with the JVM option for a process that lives a minute or two (added to any already set)."""
    options = " ".join(filter(None, (env.get("JAVA_TOOL_OPTIONS"), _SHORT_LIVED_JVM)))
    return {**env, "JAVA_TOOL_OPTIONS": options}


def job_environment() -> dict[str, str]:
    """This process's environment for a job process: the checkout importable, a short-lived JVM."""
    return short_lived_jvm({**os.environ, "PYTHONPATH": str(ROOT)})


# How a Databricks `python_wheel_task` starts the job: it looks the wheel's entry point up, puts the task's
# parameters in sys.argv and calls the function; what the function returns is ignored, only the process's
# exit status counts.
_WHEEL_TASK = (
    "import sys; from importlib.metadata import entry_points; "
    "(entry,) = [e for e in entry_points(group='console_scripts') if e.name == 'ticdc-delta']; "
    "sys.argv = ['ticdc-delta', *sys.argv[1:]]; entry.load()()"
)


def wheel_task_command(python: str | Path, *parameters: str) -> list[str]:
    """The command that calls `python`'s installed `ticdc-delta` entry point as a Databricks wheel task does."""
    return [str(python), "-c", _WHEEL_TASK, *parameters]


@contextlib.contextmanager
def job_lines_to(log: Path, *also: logging.Handler) -> Iterator[None]:
    """A job run in this process logs its lines (INFO and up) to the end of `log` as a job process's output
    has them (`jobs.log_lines`' format), and to the handlers `also`; as before once the block ends."""
    from ticdc_delta.jobs.log_lines import LOG_FORMAT

    product = logging.getLogger("ticdc_delta")
    to_file = logging.FileHandler(log)
    to_file.setFormatter(logging.Formatter(LOG_FORMAT))
    handlers, level = [to_file, *also], product.level
    product.setLevel(logging.INFO)
    for handler in handlers:
        product.addHandler(handler)
    try:
        yield
    finally:
        for handler in handlers:
            product.removeHandler(handler)
            handler.close()
        product.setLevel(level)
