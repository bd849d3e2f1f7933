"""A class-data-sharing archive for the job processes' JVMs (tests and the fault script start dozens).

A job process's JVM loads, parses and verifies some 20,000 of Spark's and Delta's classes before its first
batch; with a dynamic CDS archive (JDK 13+) it maps them ready-made. Measured on the 2-core machine, two cold
jobs' worth of Spark side by side (start, a Delta write, a MERGE, a read): 21 s -> 15 s each.

The archive is made once per Spark installation and Java (its name says which) by a warm-up process that does
a job's kind of work and dumps what it loaded at exit (`python -m testbed.class_archive`, or `start_making`
in the background). A JVM whose class path does not match (another Python's pyspark, spark-submit's launcher)
ignores it; its logging about that is off. Product runs are not affected: only `testbed.processes` adds it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# A mismatched archive is skipped with a warning on stdout, which tests reading a job's output would see.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else (Path(shutil.which("java")) if shutil.which("java") else None)
    return found.resolve() if found is not None and found.exists() else None


def archive_path() -> Path | None:
    """Where this Python's Spark and this Java keep their archive (None without either)."""
    spec = importlib.util.find_spec("pyspark")
    java = _java()
    if spec is None or spec.origin is None or java is None:
        return None
    jars = Path(spec.origin).parent / "jars"
    key = hashlib.sha256(f"{jars}|{sorted(p.name for p in jars.glob('*.jar'))}|{java}|{java.stat().st_mtime_ns}".encode())
    cache = Path(os.environ.get("TICDC_DELTA_CACHE", ROOT / ".cache"))
    return cache / "jvm-class-archives" / f"{key.hexdigest()[:16]}.jsa"


def options() -> str:
    """The JVM options that use the archive, if it was made; else none."""
    archive = archive_path()
    return f"-XX:SharedArchiveFile={archive} {QUIET}" if archive is not None and archive.is_file() else ""


def make(timeout: float = 300) -> Path | None:
    """Make the archive unless it exists (the warm-up process, then an atomic rename); None if it cannot."""
    archive = archive_path()
    if archive is None or archive.is_file():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=archive.parent) as folder:
        dumped = Path(folder) / "archive.jsa"
        from testbed.processes import short_lived_jvm  # (the job processes' own JVM options)

        env = short_lived_jvm({**os.environ, "PYTHONPATH": str(ROOT)}, archive=False)
        env["JAVA_TOOL_OPTIONS"] += f" -XX:ArchiveClassesAtExit={dumped} {QUIET}"
        done = subprocess.run([sys.executable, "-m", "testbed.class_archive", "--warm-up", folder], env=env, cwd=folder,
                              capture_output=True, timeout=timeout)
        if done.returncode != 0 or not dumped.is_file():
            return None
        os.replace(dumped, archive)
    return archive


def start_making() -> threading.Thread:
    """`make` in a background thread (the tests' first minutes need no archive yet)."""
    thread = threading.Thread(target=make, name="class-archive", daemon=True)
    thread.start()
    return thread


def _warm_up(folder: Path) -> None:
    """A job's kind of Spark work, so that the classes it loads are the ones a job needs."""
    from jobs.session import get_spark

    spark = get_spark("local[2]")
    table = f"delta.`{folder / 't'}`"
    spark.range(100).selectExpr("id", "CAST(id AS STRING) AS s", "CAST(id AS DECIMAL(20, 2)) AS d").write.format("delta").save(str(folder / "t"))
    spark.range(50, 150).selectExpr("id", "CAST(id AS STRING) AS s", "CAST(id AS DECIMAL(20, 2)) AS d").createOrReplaceTempView("src")
    spark.sql(f"MERGE INTO {table} t USING src s ON t.id = s.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    spark.sql(f"UPDATE {table} SET s = 'x' WHERE id = 1")
    spark.sql(f"ALTER TABLE {table} ADD COLUMNS (extra INT)")
    spark.sql(f"DESCRIBE HISTORY {table}").collect()
    spark.read.format("delta").load(str(folder / "t")).where("id > 10").count()
    spark.stop()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--warm-up"]:
        _warm_up(Path(sys.argv[2]))
    else:
        print(make() or "no archive: no pyspark or no java here")
