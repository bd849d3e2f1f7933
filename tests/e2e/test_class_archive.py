"""The class archive with real JVMs: written at a JVM's exit, checked whole before use, mapped by the next JVM.

The class path is pyspark's jars and the JVM Spark's launcher would run, as a local session's (a job run's
archive also holds Delta's classes, on the same class path: docs/performance.md has its effect on whole runs).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pyspark
import pytest

from ticdc_delta.jobs.class_archive import ClassArchive, archive_key
from ticdc_delta.jobs.session import _launch_java

pytestmark = pytest.mark.e2e

_MAIN = "org.apache.spark.deploy.SparkSubmit"  # `--version` loads a few thousand of Spark's classes, then exits


def _jvm(java: Path, options: str, class_path: str, *extra: str) -> tuple[int, int, str]:
    """(the JVM's process id, its exit status, its output) once it has ended."""
    jvm = subprocess.Popen([str(java), *options.split(), *extra, "-cp", class_path, _MAIN, "--version"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output, _ = jvm.communicate(timeout=300)
    return jvm.pid, jvm.returncode, output


def test_an_archive_written_at_exit_is_checked_whole_then_mapped_and_a_truncated_one_removed(tmp_path):
    java = _launch_java()
    assert java is not None
    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    class_path = os.pathsep.join(map(str, jars))
    key = archive_key(java, jars)
    folder = tmp_path / "class-archives"

    writer = ClassArchive(folder, key)
    options = writer.options()
    assert writer.writing is not None
    pid, status, output = _jvm(java, options, class_path)
    assert status == 0, output[-2000:]
    assert "cds" not in output  # the JVM's own archive warnings are quiet
    writer.note_writer(pid, str(java.resolve().parent.parent), options.split(), class_path)  # (it has ended)
    assert writer.writing.stat().st_size > 1_000_000

    # A writer killed mid-dump leaves a truncated file: mapping that would crash a JVM. (Checked first: its
    # name sorts before the real one's.)
    cut = folder / f"{key}.000000000000.part"
    cut.write_bytes(writer.writing.read_bytes()[: writer.writing.stat().st_size // 2])
    cut.with_suffix(".json").write_text(writer.writing.with_suffix(".json").read_text())

    reader = ClassArchive(folder, key)
    mapped = reader.options()

    assert mapped.startswith(f"-XX:SharedArchiveFile={reader.final} ") and reader.writing is None
    assert sorted(p.name for p in folder.iterdir()) == [f"{key}.jsa", f"{key}.size"]
    loaded = tmp_path / "classes.txt"
    _, status, output = _jvm(java, mapped, class_path, f"-Xlog:class+load=info:file={loaded}")
    assert status == 0, output[-2000:]
    lines = loaded.read_text().splitlines()
    assert any(f" {_MAIN} source: shared objects file (top)" in line for line in lines), lines[-20:]
