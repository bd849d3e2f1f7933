"""The one place a SparkSession is obtained.

Under Databricks, spark-submit or Spark Connect the session already exists (or
is described by the environment) and is used as it is: the product never
reconfigures a session it did not create. Otherwise it builds a local one with
Delta, whose jars come from Maven Central on first use and are cached.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import logging
import os
import shutil
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from pyspark import SparkContext
from pyspark.sql import SparkSession

from ticdc_delta.apply.base.session import INTERPRETED_EXPRESSIONS
from ticdc_delta.exceptions import SparkStartError
from ticdc_delta.jobs.class_archive import ClassArchive, archive_key
from ticdc_delta.jobs.paths import cache_dir, under_existing_runtime

log = logging.getLogger(__name__)

# Local-mode settings: small shuffles and snapshot reconstruction (the data per
# batch is small and there are 2 cores), no UI.
LOCAL_DEFAULTS = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "2g",
    # How long the JVM waits for Python to fetch a collect's rows (its default: 15 s). A busy machine
    # stalled Python that long once (CI, both pairs at once); the rows are then lost with "Can not open
    # socket ... Connection refused", failing the statement.
    "spark.python.authenticate.socketTimeout": "120s",
}

# Ivy's own default for an m2-compatible ibiblio resolver is Maven Central; only
# that one is asked (Spark's built-in settings also try repositories this
# deployment may not reach).
_IVY_SETTINGS = """<ivysettings>
  <settings defaultResolver="central"/>
  <resolvers>
    <ibiblio name="central" m2compatible="true"/>
  </resolvers>
</ivysettings>
"""

# Spark's and its libraries' lines a job run does not need, and the level they are kept at: a local
# session's logging configuration says so, and under spark-submit the job sets them (`_quiet_spark_submit`).
_QUIETED_LOGGERS = {
    "org.apache.parquet": "error",
    "org.apache.spark.util.Utils": "error",
    "org.apache.hadoop.util.NativeCodeLoader": "error",
    # Logged at ERROR for every deletion-vector scan; harmless (Delta falls back).
    "org.apache.spark.sql.delta.DeltaParquetFileFormat": "off",
    # MERGE checkpoints its source locally and says so at WARN on every run.
    "org.apache.spark.rdd.MapPartitionsRDD": "error",
    # "Truncated the string representation of a plan" (Spark 4's name, then Spark 3.5's)
    "org.apache.spark.util.SparkStringUtils": "error",
    "org.apache.spark.sql.catalyst.util.SparkStringUtils": "error",
    # Spark 3.5's Kafka source warns of KAFKA-1894 for every fetch outside an uninterruptible thread.
    "org.apache.spark.sql.kafka010.consumer.KafkaDataConsumer": "error",
    # The Kafka source's admin client lists the consumer settings it does not use, at every start.
    "org.apache.kafka.clients.admin.AdminClientConfig": "error",
}

_LOG4J = """rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
""" + "".join(
    f"logger.quiet{n}.name = {name}\nlogger.quiet{n}.level = {level}\n" for n, (name, level) in enumerate(_QUIETED_LOGGERS.items())
)


# The serial collector, its heap kept within a fifth of what it holds after a collection: G1 (Java's
# default) grows the heap towards `spark.driver.memory` under eight MERGEs at once to keep its own time
# low, whatever the job keeps (about 150 MB, plus ~0.7 MB a table), so a many-table run's peak was the
# heap's limit (2.4x one table's at 500 tables). The serial collector, measured against G1 in one JVM
# (bare MERGEs of 20 and 100 tables, eight at once, runs alternating): half the peak (830 vs 1,525-1,783
# MiB at 20 tables, ~1,000 vs 2,250 at 100) for the same CPU and wall time on two cores; as whole jobs, 500
# tables peak at 1.26-1.34x one table's (docs/performance.md). A driver of many cores or a large heap is a
# cluster's, set up by its runtime.
LOCAL_JVM_OPTIONS = "-XX:+UseSerialGC -XX:MinHeapFreeRatio=5 -XX:MaxHeapFreeRatio=20"

# The JVM's quick compiler only (C1; no C2), for a short run (`spark.quick_compiler_max_backlog`): a fresh
# JVM's compilers used 23 s of CPU in a 23-s run on two cores, most of it C2 optimizing code the run
# leaves soon after; C1 alone about halves a short run's JVM CPU (docs/performance-history.md has the runs). C1
# alone gets a 48 MB code cache by default, which Spark and Delta fill within a minute; the JVM then stops
# compiling and runs interpreted, several times slower: the cache tiered compilation would have avoids it.
QUICK_COMPILER = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
# A short run's session also interprets Spark's expressions (`spark_for`: apply.base.session.INTERPRETED_EXPRESSIONS,
# each key unless `spark.conf` sets it): every plan a short run makes is new to its JVM (docs/performance.md).


KAFKA_SOURCE_VERSION_ENV = "TICDC_DELTA_KAFKA_SOURCE_VERSION"


def _spark_line() -> tuple[str, str]:
    """(Spark's major.minor, its Scala binary version) as installed."""
    import pyspark

    spark_minor = ".".join(pyspark.__version__.split(".")[:2])
    jars = Path(pyspark.__file__).parent / "jars"
    scala = next(
        (".".join(j.name.removeprefix("scala-library-").split(".")[:2]) for j in jars.glob("scala-library-*.jar")),
        "2.12" if spark_minor.startswith("3.") else "2.13",
    )
    return spark_minor, scala


def delta_package() -> str:
    """The Maven coordinate of the Delta jar matching the installed pyspark and delta-spark.

    Delta 3.x and 4.0 publish one artifact per Scala version; from 4.1 on, one per Spark
    release as well (a Delta release supports several Spark releases)."""
    spark_minor, scala = _spark_line()
    delta_version = importlib.metadata.version("delta-spark")
    major, minor = (int(part) for part in delta_version.split(".")[:2])
    if (major, minor) < (4, 1):
        return f"io.delta:delta-spark_{scala}:{delta_version}"
    return f"io.delta:delta-spark_{spark_minor}_{scala}:{delta_version}"


# Hadoop's S3 connector, for a target on S3 (or an S3-compatible store). OSS Hadoop has no `s3://` file
# system of its own (Databricks and EMR do): a local session maps that scheme to s3a as well.
_S3_SCHEMES = ("s3a", "s3")


def object_store_scheme(location: str | None) -> str:
    """`s3a`, `s3`, `gs`, ... of a location; "" for a local path."""
    scheme, sep, _ = (location or "").partition("://")
    return scheme.lower() if sep else ""


def hadoop_aws_package() -> str:
    """hadoop-aws of the Hadoop release pyspark bundles (its SDK comes with it as a dependency)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    found = sorted(jars.glob("hadoop-client-api-*.jar"))
    if not found:
        raise SparkStartError(f"cannot tell pyspark's Hadoop release (no hadoop-client-api jar in {jars}) "
                              "to fetch its S3 connector: add org.apache.hadoop:hadoop-aws to spark.jars.packages")
    return f"org.apache.hadoop:hadoop-aws:{found[0].name.removeprefix('hadoop-client-api-').removesuffix('.jar')}"


def spark_for(config, packages: Sequence[str] = (), *, quick_compiler: bool = False) -> SparkSession:
    """`get_spark` for a job's configuration: a local session also gets the S3 connector when the
    target is on S3, with `quick_compiler` a JVM that compiles with C1 only and interprets Spark's expressions, and with
    `spark.class_data_sharing` an archive of its classes (a surrounding runtime's session is used as it is)."""
    conf = {**(INTERPRETED_EXPRESSIONS if quick_compiler else {}), **config.spark.conf}
    extra = list(packages)
    if object_store_scheme(config.target.path) in _S3_SCHEMES and not under_existing_runtime():
        extra.append(hadoop_aws_package())
        conf.setdefault("spark.hadoop.fs.s3.impl", "org.apache.hadoop.fs.s3a.S3AFileSystem")
    extra += [p for p in config.spark.extra_packages if p not in extra]
    if SparkSession.getActiveSession() is not None or under_existing_runtime():
        _ignored(config)
    jvm_options = f"{LOCAL_JVM_OPTIONS} {QUICK_COMPILER}" if quick_compiler else LOCAL_JVM_OPTIONS
    return get_spark(config.spark.master, conf, extra, jvm_options=jvm_options,
                     class_archive=config.spark.class_data_sharing)


_TOLD_IGNORED: set[str] = set()


def _ignored(config) -> None:
    """Say once that `[spark]`'s settings for a session the product starts do not reach one that exists."""
    ignored = [f"spark.conf ({', '.join(sorted(config.spark.conf))})" if config.spark.conf else "",
               f"spark.extra_packages ({', '.join(config.spark.extra_packages)})" if config.spark.extra_packages else ""]
    said = "; ".join(filter(None, ignored))
    if said and said not in _TOLD_IGNORED:
        _TOLD_IGNORED.add(said)
        log.warning("%s not applied: this job runs in a Spark session that exists already (spark-submit, Databricks, "
                    "a notebook's), which is used as it is; give them to what starts it (spark-submit --conf and "
                    "--packages, the cluster's Spark configuration and libraries)", said)


def quick_for_a_few_reads(config) -> bool:
    """Whether a command that reads a few small tables and ends (`status`, `tables`) starts its local JVM with
    the quick compiler, as a small run does: unless `spark.quick_compiler_max_backlog` is 0 (never)."""
    return config.spark.quick_compiler_max_backlog > 0


def kafka_source_package() -> str:
    """Spark's own Kafka source for the installed pyspark (the Spark engine; the benchmark's baseline).

    Its version is pyspark's unless `TICDC_DELTA_KAFKA_SOURCE_VERSION` names another release of the
    same line (patch releases keep the source's interfaces), for a repository that lacks the exact one.
    """
    import pyspark

    version = os.environ.get(KAFKA_SOURCE_VERSION_ENV) or pyspark.__version__
    return f"org.apache.spark:spark-sql-kafka-0-10_{_spark_line()[1]}:{version}"


def _ivy_home(packages: Sequence[str]) -> Path:
    # One Ivy home per set of coordinates, so its jars folder holds exactly the
    # jars of that resolution.
    name = "+".join(p.replace(":", "_") for p in sorted(packages))
    if len(name) > 120:
        name = hashlib.sha256(name.encode()).hexdigest()[:16]
    return cache_dir() / "ivy" / name


def share_ivy_cache(home: Path) -> None:
    """Make `home`'s Ivy cache (Spark puts it at `<home>/cache`) the one every set of packages of this Spark
    line shares: a set resolves from what another already fetched (Delta's jars for the Kafka source's set,
    ...). Fetching is mostly the round trips of a few hundred POMs, one after another: a fresh set took
    21 s to resolve, 1.2 s from the shared cache (measured, Delta alone). One cache per line: two Spark
    lines share few artifacts, and Ivy does not lock its cache against another JVM resolving into it."""
    spark_minor, scala = _spark_line()
    shared = home.parent / f"cache-spark-{spark_minor}-scala-{scala}"
    shared.mkdir(parents=True, exist_ok=True)  # (again, should it have been deleted since a home linked it)
    cache = home / "cache"
    if cache.is_symlink() or cache.exists():
        return
    home.mkdir(parents=True, exist_ok=True)
    try:
        cache.symlink_to(shared, target_is_directory=True)
    except FileExistsError:  # another process linked it first
        pass
    except OSError as err:  # a file system without symbolic links: this set keeps a cache of its own
        log.debug("Ivy cache of %s not shared: %s", home, err)


def cached_jars(packages: Sequence[str]) -> list[Path]:
    """The jars of `packages` (with their dependencies) once a local session has resolved them, else []."""
    home = _ivy_home(packages)
    return sorted((home / "jars").glob("*.jar")) if (home / ".complete").exists() else []


def _jar_settings(packages: Sequence[str], on_class_path: bool = True) -> dict[str, str]:
    """The Maven coordinates for Spark to resolve, until a session has cached their jars: from then on the
    jars go on the JVM's class path instead (`_on_class_path`) and no setting names them. Not
    `on_class_path` (a JVM already running, a cluster's executors): `spark.jars` names them."""
    jars = cached_jars(packages)
    if jars:
        return {} if on_class_path else {"spark.jars": ",".join(map(str, jars))}
    home = _ivy_home(packages)
    share_ivy_cache(home)
    ivy_settings = cache_dir() / "ivysettings.xml"
    ivy_settings.write_text(_IVY_SETTINGS)
    return {
        "spark.jars.packages": ",".join(packages),
        "spark.jars.ivy": str(home),
        "spark.jars.ivySettings": str(ivy_settings),
    }


_LAUNCH_CLASS_PATH = "SPARK_DIST_CLASSPATH"


@contextlib.contextmanager
def _on_class_path(jars: Sequence[Path]) -> Iterator[None]:
    """`jars` after Spark's own on the class path of the JVM a local session launches meanwhile.

    Not `spark.jars`: a PySpark driver in local mode copies each of those jars into the session's temporary
    folder at every start (700 MB with the S3 connector's SDK bundle: 4-5 s of each start, measured, and
    left behind whenever the JVM is killed; a CI run's disk filled with them). After Spark's jars rather
    than before them (`spark.driver.extraClassPath`): where both hold a library (Jackson), Spark's release
    wins, as it does over the class loader `spark.jars` gets. Spark's launcher appends this variable to the
    class path; a value the user set (a Hadoop-free build's) stays first."""
    before = os.environ.get(_LAUNCH_CLASS_PATH)
    if not jars:
        yield
        return
    os.environ[_LAUNCH_CLASS_PATH] = os.pathsep.join([*filter(None, [before]), *map(str, jars)])
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_LAUNCH_CLASS_PATH, None)
        else:
            os.environ[_LAUNCH_CLASS_PATH] = before


def _check_delta_loaded(session: SparkSession) -> None:
    """Delta's classes must have reached the JVM's class path; a `spark-env.sh` that sets the launcher's
    variable outright would have dropped them, and Spark only warns when an extension's class is missing."""
    try:
        session.sparkContext._jvm.java.lang.Class.forName("io.delta.sql.DeltaSparkSessionExtension")
    except Exception as err:  # noqa: BLE001 - Py4J's error for a missing class
        session.stop()
        raise SparkStartError(
            f"Delta's jars did not reach the local Spark's class path (something replaced {_LAUNCH_CLASS_PATH}, "
            "such as a spark-env.sh in SPARK_CONF_DIR): append to that variable there instead of setting it"
        ) from err


def local_conf(
    master: str,
    extra: Mapping[str, str] | None = None,
    packages: Sequence[str] = (),
    jvm_options: str = LOCAL_JVM_OPTIONS,
    jars_on_class_path: bool = True,
) -> dict[str, str]:
    log4j = cache_dir() / "log4j2-spark.properties"
    log4j.write_text(_LOG4J)
    extra = dict(extra or {})
    jvm_options = driver_jvm_options(jvm_options, extra.pop(_DRIVER_JVM_OPTIONS, ""))
    conf = {
        "spark.master": master,
        "spark.app.name": "ticdc-delta",
        **_jar_settings([delta_package(), *packages], jars_on_class_path),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # The collector keeps the heap near what the job holds (`LOCAL_JVM_OPTIONS`), so a long run's
        # footprint stays that of a batch.
        _DRIVER_JVM_OPTIONS: f"-Dlog4j2.configurationFile=file:{log4j} {jvm_options}",
        # Not `spark-warehouse/` in whatever folder the job was started from: a local session's catalog
        # lives in memory (no Hive), so its managed tables outlive it nowhere else either.
        "spark.sql.warehouse.dir": str(cache_dir() / "spark-warehouse"),
        **LOCAL_DEFAULTS,
    }
    conf.update(extra)
    return conf


_DRIVER_JVM_OPTIONS = "spark.driver.extraJavaOptions"


def _collector_option(option: str) -> bool:
    return option.startswith("-XX:+Use") and option.endswith("GC")


def driver_jvm_options(ours: str, theirs: str) -> str:
    """The local driver JVM's options: the user's (`spark.conf`'s spark.driver.extraJavaOptions) after ours,
    so theirs win; where theirs name a garbage collector (the JVM refuses two), ours without our collector
    and its tuning (`LOCAL_JVM_OPTIONS`, or a collector of the caller's).

    Replacing ours outright would also drop the logging configuration that keeps a run's log readable."""
    theirs = theirs.strip()
    if not theirs:
        return ours
    if any(_collector_option(option) for option in theirs.split()):
        tuning = set(LOCAL_JVM_OPTIONS.split())
        ours = " ".join(o for o in ours.split() if not _collector_option(o) and o not in tuning)
    return f"{ours} {theirs}".strip()


def compiles_quickly(options: str) -> bool:
    """Whether a JVM started with `options` has only its quick compiler (the last TieredStopAtLevel counts)."""
    levels = [o.partition("=")[2] for o in options.split() if o.startswith("-XX:TieredStopAtLevel=")]
    return bool(levels) and levels[-1] == "1"


def _quiet_spark_submit(session: SparkSession) -> None:
    """Under spark-submit, Spark's own INFO lines (a dozen per Spark job, thousands a run) off.

    spark-submit's default logging is INFO, which buries the product's lines. Left as it is when
    the user asked for Spark's level (`spark.log.level`) or for the product's DEBUG lines, and on
    Databricks, whose driver log keeps Spark's lines apart.
    """
    if "PYSPARK_GATEWAY_PORT" not in os.environ or "DATABRICKS_RUNTIME_VERSION" in os.environ:
        return
    if session.sparkContext.getConf().contains("spark.log.level") or log.isEnabledFor(logging.DEBUG):
        return
    session.sparkContext.setLogLevel("WARN")
    # The lines a local session's logging leaves out (KAFKA-1894 once per fetch of the Spark engine's Kafka
    # source on Spark 3.5, ...): in the driver's JVM, which also runs the tasks in local mode. (A cluster's
    # executors keep them in their own logs.)
    try:
        jvm = session.sparkContext._jvm
        for name, level in _QUIETED_LOGGERS.items():
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, jvm.org.apache.logging.log4j.Level.valueOf(level))
    except Exception as err:  # noqa: BLE001 - only noise is at stake
        log.debug("could not quiet Spark's noisy loggers: %s", err)


def _start_failure(packages: Sequence[str], err: Exception) -> str:
    """One line on why a local Spark did not start, and what to do."""
    if "JAVA_GATEWAY_EXITED" not in str(err):
        return f"Spark did not start: {str(err).splitlines()[0] if str(err) else type(err).__name__}"
    java_home = os.environ.get("JAVA_HOME")
    if _launch_java() is None:
        where = f"JAVA_HOME={java_home} has no bin/java" if java_home else "no java on PATH and JAVA_HOME unset"
        return f"Spark could not start its JVM ({where}): install Java 17 or set JAVA_HOME to one"
    if not (_ivy_home(packages) / ".complete").exists():
        kafka = [p for p in packages if "spark-sql-kafka" in p]
        remedy = (
            f"; if it is Spark's Kafka source ({kafka[0]}), set {KAFKA_SOURCE_VERSION_ENV} to a release of "
            "the same Spark line your repository has" if kafka else ""
        )
        return (
            f"Spark's JVM exited while fetching {', '.join(packages)} from Maven Central (its own lines above say "
            f"which could not be resolved): check the network or proxy settings{remedy}"
        )
    return "Spark's JVM exited at start (its own lines above say why): check that Java 17 is installed (JAVA_HOME)"


def quiet_query_context_loggers() -> None:
    """PySpark 4 logs every statement Spark refuses at ERROR with the JVM's trace, from the exception's
    constructor (a logger with its own handler): the refusals the job expects and handles too (a table another
    job created first, an INSERT into an internal table of an earlier release). A failure the job does not handle
    ends in its own one-line error, so those lines show at DEBUG only. (PySpark 3.5 has no such logger.)"""
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:
        return
    level = logging.NOTSET if logging.getLogger().isEnabledFor(logging.DEBUG) else logging.CRITICAL
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(level)


def get_spark(
    master: str = "local[*]",
    conf: Mapping[str, str] | None = None,
    packages: Sequence[str] = (),
    *,
    jvm_options: str = LOCAL_JVM_OPTIONS,
    class_archive: bool = False,
) -> SparkSession:
    """The active session, the surrounding runtime's, or a local one with Delta (and `packages`).

    `jvm_options`: the local driver JVM's options besides its logging (the default keeps a long run's
    footprint small). `class_archive`: the JVM maps an archive of its classes, or writes one at its exit
    (`jobs.class_archive`), once the jars are cached."""
    quiet_query_context_loggers()
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    if under_existing_runtime():
        log.info("using the Spark session of the surrounding runtime")
        session = SparkSession.builder.getOrCreate()
        _quiet_spark_submit(session)
        return session
    # Python workers run this interpreter, not whichever `python3` is first on PATH
    # (PySpark refuses workers of another minor version); read when the context starts.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    # The class path reaches a JVM launched now, for a local master only (a cluster's executors need
    # `spark.jars`; a JVM PySpark launched earlier in this process keeps its class path).
    launching = SparkContext._gateway is None and master.startswith("local")
    jars = cached_jars([delta_package(), *packages]) if launching else []
    # (only once the jars are on the class path: classes of Spark's own loader for `spark.jars` are not archived)
    archive: ClassArchive | None = None
    try:
        archive = _class_archive(jars, conf or {}) if class_archive and jars else None
        archive_options = archive.options() if archive is not None else ""
    except Exception as err:  # noqa: BLE001 - (a folder it cannot write...: the JVM starts as it would without)
        log.debug("no class archive: %s", err)
        archive, archive_options = None, ""
    settings = local_conf(master, conf, packages, f"{jvm_options} {archive_options}".strip(), launching)
    for key, value in settings.items():
        builder = builder.config(key, value)
    log.info("starting local Spark (%s) with %s%s%s", master, ", ".join([delta_package(), *packages]),
             " (the JVM's quick compiler only)" if compiles_quickly(settings[_DRIVER_JVM_OPTIONS]) else "",
             _describe_archive(archive, archive_options))
    try:
        with _on_class_path(jars):
            session = builder.getOrCreate()
    except Exception as err:  # noqa: BLE001 - PySparkRuntimeError's class moved between releases
        raise SparkStartError(_start_failure([delta_package(), *packages], err)) from err
    if jars:  # (resolved by Spark instead, the jars are its own class loader's, which the check cannot see)
        _check_delta_loaded(session)
    if archive is not None and archive.writing is not None:
        _note_archive_writer(session, archive)
    home = _ivy_home([delta_package(), *packages])
    if (home / "jars").is_dir():
        (home / ".complete").touch()
    _quiet_accumulator_server(session)
    return session


def _launch_java() -> Path | None:
    """The java Spark's launcher runs: JAVA_HOME's, else the first on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    java = Path(java_home) / "bin" / "java" if java_home else shutil.which("java")
    return Path(java) if java is not None and Path(java).exists() else None


def _class_archive(jars: Sequence[Path], conf: Mapping[str, str]) -> ClassArchive | None:
    """The class archive of the class path a local session launches with (pyspark's jars, then `jars`);
    None where HotSpot would refuse to write one or the product cannot tell when its writer has ended."""
    import pyspark

    java = _launch_java()
    if java is None or os.name == "nt":  # (the start fails and says why; Windows: os.kill would end the writer)
        return None
    spark_home = Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)
    folders = [os.environ.get("SPARK_CONF_DIR") or spark_home / "conf", os.environ.get("HADOOP_CONF_DIR"),
               os.environ.get("YARN_CONF_DIR"), *os.environ.get(_LAUNCH_CLASS_PATH, "").split(os.pathsep),
               *conf.get("spark.driver.extraClassPath", "").split(os.pathsep)]
    for folder in filter(None, folders):
        if Path(folder).is_dir() and any(Path(folder).iterdir()):
            # HotSpot writes no archive of a class path holding a folder with files, and says so at exit.
            log.debug("no class archive: %s, a folder with files, is on the class path", folder)
            return None
    class_path = [*sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar")), *jars]
    return ClassArchive(cache_dir() / "class-archives", archive_key(java, class_path))


def _describe_archive(archive: ClassArchive | None, options: str) -> str:
    if archive is None or not options:
        return ""
    return " (writing a class archive at exit)" if archive.writing is not None else f" (classes mapped from {archive.final.name})"


def _note_archive_writer(session: SparkSession, archive: ClassArchive) -> None:
    try:
        jvm = session.sparkContext._jvm
        archive.note_writer(
            int(jvm.java.lang.ProcessHandle.current().pid()),
            str(jvm.java.lang.System.getProperty("java.home")),
            [str(a) for a in jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()],
            str(jvm.java.lang.System.getProperty("java.class.path")),
        )
    except Exception as err:  # noqa: BLE001 - without the note the candidate is removed later, never used
        log.debug("could not note the class archive's writer: %s", err)


def _quiet_accumulator_server(session: SparkSession) -> None:
    """PySpark's accumulator server (a thread of this process) prints a Python trace to stderr when the local
    JVM dies mid-run (its socket closes); the job's own one line says what happened, the trace goes to DEBUG."""
    server = getattr(session.sparkContext, "_accumulatorServer", None)
    if server is not None:
        server.handle_error = lambda request, address: log.debug("PySpark's accumulator server lost the JVM", exc_info=True)
