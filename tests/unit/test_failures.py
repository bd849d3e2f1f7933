"""The one line and exit status for errors the product did not raise itself (jobs.failures)."""

from __future__ import annotations

from py4j.protocol import Py4JNetworkError

from jobs.failures import OTHER, SPARK_GONE, STORAGE, explain


def test_a_jvm_that_stopped_answering_is_spark_gone_naming_memory_and_the_resume():
    # (What PySpark raises once the driver's JVM has exited: the gateway's socket is closed.)
    failure = explain(Py4JNetworkError("Answer from Java side is empty"))
    assert failure.status == SPARK_GONE
    assert "Spark's JVM stopped answering" in failure.line and "spark.driver.memory" in failure.line
    assert "resumes from its last checkpoint" in failure.line and "\n" not in failure.line


def test_a_refusal_of_the_file_system_anywhere_in_the_chain_is_storage():
    try:
        try:
            raise OSError("[Errno 30] Read-only file system: '/lake/_ticdc'")
        except OSError as inner:
            raise RuntimeError("could not save the checkpoint") from inner
    except RuntimeError as outer:
        failure = explain(outer)
    assert failure.status == STORAGE and "check target.path" in failure.line


def test_anything_else_is_unexpected_in_one_line_pointing_at_the_debug_trace():
    failure = explain(ValueError("first line\nsecond line\n" + "x" * 500))
    assert failure.status == OTHER and "\n" not in failure.line
    assert failure.line.startswith("unexpected error: ValueError: first line") and "--log-level DEBUG" in failure.line
