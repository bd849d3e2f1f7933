"""The one line and exit status for errors the product did not raise itself (jobs.failures)."""

from __future__ import annotations

from py4j.protocol import Py4JNetworkError

from ticdc_delta.jobs.failures import OTHER, SPARK_GONE, STORAGE, explain


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


def test_a_refused_connection_inside_py4j_is_spark_gone():
    # (A JVM killed mid-run: the first call fails with Py4J's network error, which the job's clean-up may have
    # handled; its next Spark call opens a new connection, the socket refuses, and that error reaches the
    # command line.)
    def py4j_connects():
        raise ConnectionRefusedError(111, "Connection refused")

    py4j_connects.__code__ = py4j_connects.__code__.replace(co_filename="/site-packages/py4j/clientserver.py")
    try:
        py4j_connects()
    except ConnectionRefusedError as err:
        failure = explain(err)
    assert failure.status == SPARK_GONE and "Connection refused" in failure.line and "\n" not in failure.line


def test_a_refused_connection_outside_py4j_is_not_spark_gone():
    try:
        raise ConnectionRefusedError(111, "Connection refused")
    except ConnectionRefusedError as err:
        failure = explain(err)
    assert failure.status == OTHER


def test_python_workers_of_another_version_name_pyspark_python():
    # (What Spark raises through Py4J when PYSPARK_PYTHON names another Python: the worker's trace in its text.)
    failure = explain(RuntimeError(
        "An error occurred while calling o54.sql.\n: org.apache.spark.SparkException: Job aborted ...\n"
        "pyspark.errors.exceptions.base.PySparkRuntimeError: [PYTHON_VERSION_MISMATCH] Python in worker has different "
        "version (3, 10) than that in driver 3.12, PySpark cannot run with different minor versions.\nPlease check"
    ))
    assert failure.status == SPARK_GONE and "set PYSPARK_PYTHON" in failure.line and "(3, 10)" in failure.line
    assert "\n" not in failure.line
