"""What a failure outside the product's own errors means to the user: one line, and an exit status.

The product's own errors (`ticdc_delta.exceptions`) already name cause and remedy. What is left comes
from Spark, Delta, the JVM or the file system, with a trace of a hundred lines whose cause is at the
end; the command line logs this module's one line instead (the trace at DEBUG).
"""

from __future__ import annotations

import re
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

from ticdc_delta.apply.base.errors import error_condition
from ticdc_delta.jobs import exit_statuses

STORAGE = exit_statuses.STORAGE.code  # the target's storage refused or is in the way
SPARK_GONE = exit_statuses.SPARK_GONE.code  # the runtime lacks Spark, or its JVM did not start or stopped
OTHER = exit_statuses.OTHER.code

# Delta's and Spark's conditions for a location the job cannot use as its table's.
_STORAGE_CONDITIONS = {
    "DELTA_CANNOT_CREATE_LOG_PATH": "the Delta log folder cannot be created",
    "DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION": "a folder that is not a Delta table is where a table goes",
    "DELTA_CREATE_TABLE_SCHEMA_MISMATCH": "a Delta table with other columns is where a table goes",
    "DELTA_PATH_EXISTS": "something is already where a table goes",
    # (Spark 3.5 with Delta 3.3 for a folder of other files where a path table goes)
    "TABLE_OR_VIEW_ALREADY_EXISTS": "something the job did not create is where a table goes",
    "PATH_ALREADY_EXISTS": "something is already where a table goes",
    "DELTA_TABLE_LOCATION_MISMATCH": "a catalog table of that name points elsewhere",
    "UNSUPPORTED_DATASOURCE_FOR_DIRECT_QUERY": "a file where a table goes",
}
# Java exceptions (by class name) that say the file system refused.
_STORAGE_EXCEPTIONS = (
    "java.nio.file.AccessDeniedException",
    "org.apache.hadoop.security.AccessControlException",
    "org.apache.hadoop.fs.ParentNotDirectoryException",
    "org.apache.hadoop.fs.FileAlreadyExistsException",
)
_STORAGE_WORDS = ("Permission denied", "Mkdirs failed", "Not a directory", "Read-only file system", "Access Denied")
_STORAGE_REMEDY = (
    "check target.path (or target.catalog): the job's user must be able to create and write folders there, and "
    "nothing the job did not create may sit where its tables go (<root>/<database>/<table>, <root>/_ticdc)"
)


@dataclass(frozen=True)
class Failure:
    status: int
    line: str


def explain(err: BaseException) -> Failure:
    """The one line and exit status for an error the product did not raise itself."""
    gone = _spark_gone(err) or _workers_of_another_python(err)
    if gone is not None:
        return gone
    cause = _storage_cause(err)
    if cause is not None:
        said = _first_line(err)
        detail = "" if said.startswith("An error occurred while calling") else f" ({said})"  # (Py4J's, says nothing)
        return Failure(STORAGE, f"the target's storage cannot be used: {cause}{detail}; {_STORAGE_REMEDY}")
    return Failure(
        OTHER,
        f"unexpected error: {type(err).__name__}: {_first_line(err)} (run with --log-level DEBUG for its trace, and "
        "report it with that trace if the cause is not clear from it)",
    )


def _spark_gone(err: BaseException) -> Failure | None:
    try:
        from py4j.protocol import Py4JError, Py4JJavaError
    except ImportError:  # no pyspark: reported before any of this runs
        return None
    for current in _chain(err):
        # Py4J's own errors (its network error among them), not a Java exception it carries back; or the
        # socket's refusal when Py4J opens a new connection to a JVM already gone (what surfaces when the job's
        # clean-up ran Spark statements after the first error).
        if (isinstance(current, Py4JError) and not isinstance(current, Py4JJavaError)) or (
            isinstance(current, ConnectionError) and _raised_in_py4j(current)
        ):
            return Failure(
                SPARK_GONE,
                f"Spark's JVM stopped answering ({_first_line(current)}): it exited or was killed, most often for "
                "memory (its own lines above say why); give the driver more memory (spark.driver.memory) or smaller "
                "batches (run.batch_max_messages), then run the job again: it resumes from its last checkpoint",
            )
    return None


def _workers_of_another_python(err: BaseException) -> Failure | None:
    # PySpark refuses Python workers of another minor version than the driver's; the worker's trace says so.
    for current in _chain(err):
        found = re.search(r"\[PYTHON_VERSION_MISMATCH\][^\n]*", str(current))
        if found:
            return Failure(
                SPARK_GONE,
                f"Spark's Python workers run another Python than the job ({found.group(0)}): set PYSPARK_PYTHON to the "
                f"job's Python ({sys.executable}) or unset it, where the job is started",
            )
    return None


def _raised_in_py4j(err: BaseException) -> bool:
    return any("py4j" in Path(frame.f_code.co_filename).parts for frame, _ in traceback.walk_tb(err.__traceback__))


def _storage_cause(err: BaseException) -> str | None:
    for current in _chain(err):
        condition = error_condition(current)
        if condition in _STORAGE_CONDITIONS:
            return _STORAGE_CONDITIONS[condition]
        for name, message in _java_causes(getattr(current, "java_exception", None)):
            if name in _STORAGE_EXCEPTIONS or any(word in message for word in _STORAGE_WORDS):
                return f"the file system refused ({name.rsplit('.', 1)[-1]}: {message.splitlines()[0] if message else ''})"
        if any(word in str(current) for word in _STORAGE_WORDS):
            return "the file system refused"
    return None


def _java_causes(java, depth: int = 12):
    """(class name, message) of a Java exception and its causes: the file system's is often a few down."""
    try:
        while java is not None and depth > 0:
            yield java.getClass().getName(), java.getMessage() or ""
            java, depth = java.getCause(), depth - 1
    except Exception:  # noqa: BLE001 - the JVM may be gone
        return


def _chain(err: BaseException):
    seen = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    line = text.splitlines()[0] if text else type(err).__name__
    return line if len(line) <= 300 else line[:297] + "..."
