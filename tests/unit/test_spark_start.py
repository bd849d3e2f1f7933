"""What the job says when a local Spark does not start (exit 8): which cause, which remedy."""

from __future__ import annotations

import io
import logging
import os

import pytest

from ticdc_delta.jobs import session


class GatewayExited(Exception):
    def __str__(self) -> str:
        return "[JAVA_GATEWAY_EXITED] Java gateway process exited before sending its port number."


def test_a_jar_not_fetched_names_the_coordinates_and_for_the_kafka_source_the_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("TICDC_DELTA_CACHE", str(tmp_path / "cache"))  # no Ivy resolution completed here
    (tmp_path / "jdk" / "bin").mkdir(parents=True)
    (tmp_path / "jdk" / "bin" / "java").touch()
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    packages = ["io.delta:delta-spark_2.12:3.3.2", "org.apache.spark:spark-sql-kafka-0-10_2.12:3.5.9"]

    text = session._start_failure(packages, GatewayExited())

    assert "fetching io.delta:delta-spark_2.12:3.3.2, org.apache.spark:spark-sql-kafka-0-10_2.12:3.5.9" in text
    assert "set TICDC_DELTA_KAFKA_SOURCE_VERSION" in text and "\n" not in text
    assert "TICDC_DELTA_KAFKA_SOURCE_VERSION" not in session._start_failure(packages[:1], GatewayExited())


@pytest.mark.parametrize("java_home", [None, "/nowhere/jdk"])
def test_no_java_names_java_home(monkeypatch, java_home):
    if java_home:
        monkeypatch.setenv("JAVA_HOME", java_home)
    else:
        monkeypatch.delenv("JAVA_HOME", raising=False)
        monkeypatch.setenv("PATH", "/nonexistent")
    text = session._start_failure(["io.delta:delta-spark_2.12:3.3.2"], GatewayExited())
    assert "install Java 17 or set JAVA_HOME" in text


def test_another_failure_keeps_its_first_line():
    assert session._start_failure([], RuntimeError("bad conf\ndetails")) == "Spark did not start: bad conf"


def test_every_set_of_packages_resolves_into_one_ivy_cache_of_its_spark_line(monkeypatch, tmp_path):
    # Expect: two sets' Ivy homes keep their own jars folders, and their caches are one folder, so the second set
    # fetches nothing the first already has; a home whose cache exists is left as it is.
    monkeypatch.setenv("TICDC_DELTA_CACHE", str(tmp_path))
    delta, kafka = "io.delta:delta-spark_2.13:4.0.0", "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0"

    first, second = session._jar_settings([delta]), session._jar_settings([delta, kafka])

    homes = [tmp_path.resolve() / "ivy" / name for name in (
        "io.delta_delta-spark_2.13_4.0.0",
        "io.delta_delta-spark_2.13_4.0.0+org.apache.spark_spark-sql-kafka-0-10_2.13_4.0.0",
    )]
    assert [first["spark.jars.ivy"], second["spark.jars.ivy"]] == [str(home) for home in homes]
    (homes[0] / "cache" / "a.pom").write_text("fetched once")
    assert (homes[1] / "cache" / "a.pom").read_text() == "fetched once"
    spark_minor, scala = session._spark_line()
    assert (homes[0] / "cache").resolve().name == f"cache-spark-{spark_minor}-scala-{scala}"

    own = tmp_path / "ivy" / "own"
    (own / "cache").mkdir(parents=True)
    session.share_ivy_cache(own)
    assert not (own / "cache").is_symlink()


def _driver_options(monkeypatch, tmp_path, **conf) -> list[str]:
    monkeypatch.setenv("TICDC_DELTA_CACHE", str(tmp_path / "cache"))
    return session.local_conf("local[2]", conf)["spark.driver.extraJavaOptions"].split()


def test_the_users_driver_jvm_options_come_after_the_products_and_keep_its_logging(monkeypatch, tmp_path):
    # Setup: spark.conf's spark.driver.extraJavaOptions naming a compiler setting, then one naming a collector.
    # Expect: the first is added after the product's options (the JVM takes the last of a repeated option);
    # a collector of the user's replaces the product's options (two collectors stop the JVM at start); the
    # logging configuration stays in every case.
    ours = _driver_options(monkeypatch, tmp_path)
    assert ours[0].startswith("-Dlog4j2.configurationFile=file:") and "-XX:+UseSerialGC" in ours

    added = _driver_options(monkeypatch, tmp_path, **{"spark.driver.extraJavaOptions": " -XX:TieredStopAtLevel=1 "})
    assert added == [*ours, "-XX:TieredStopAtLevel=1"]

    collector = _driver_options(monkeypatch, tmp_path, **{"spark.driver.extraJavaOptions": "-XX:+UseParallelGC -Xss4m"})
    assert collector == [ours[0], "-XX:+UseParallelGC", "-Xss4m"]


def test_a_short_runs_quick_compiler_stays_unless_the_user_asks_for_the_full_one(monkeypatch, tmp_path):
    # Setup: the options of a short run's JVM (the product's collector and the quick compiler), with the
    # user's collector, then with the user's full compiler.
    # Expect: the user's collector replaces only the product's; the quick compiler stays, and counts as such
    # (what the start-up line says) until the user's own TieredStopAtLevel comes after it.
    monkeypatch.setenv("TICDC_DELTA_CACHE", str(tmp_path / "cache"))
    short = f"{session.LOCAL_JVM_OPTIONS} {session.QUICK_COMPILER}"

    def options(theirs: str) -> str:
        return session.local_conf("local[2]", {"spark.driver.extraJavaOptions": theirs}, jvm_options=short)[
            "spark.driver.extraJavaOptions"]

    collector = options("-XX:+UseG1GC")
    assert "-XX:+UseSerialGC" not in collector and "-XX:MaxHeapFreeRatio=20" not in collector
    assert session.QUICK_COMPILER in collector and collector.endswith("-XX:+UseG1GC")
    assert session.compiles_quickly(collector) and session.compiles_quickly(short)
    assert not session.compiles_quickly(options("-XX:TieredStopAtLevel=4"))
    assert not session.compiles_quickly(session.LOCAL_JVM_OPTIONS)


@pytest.mark.parametrize("command", ["status", "tables"])
@pytest.mark.parametrize("limit, quick", [(200_000, True), (0, False)])
def test_status_and_tables_start_their_jvm_with_the_quick_compiler_unless_the_setting_says_never(
    monkeypatch, command, limit, quick
):
    # Setup: `status` and `tables` (a few small reads, then the process ends), with
    # spark.quick_compiler_max_backlog at its default and at 0; Spark's start replaced by a recorder.
    # Expect: the quick compiler asked for by default, not with 0 ("never").
    from ticdc_delta.jobs import config as config_module
    from ticdc_delta.jobs.status import print_status
    from ticdc_delta.jobs.tables import print_tables

    asked = []

    class Started(Exception):
        pass

    def spark_for(config, packages=(), *, quick_compiler=False):
        asked.append(quick_compiler)
        raise Started

    monkeypatch.setattr(session, "spark_for", spark_for)
    config = config_module.from_mapping({
        "kafka": {"bootstrap_servers": "localhost:1", "topics": ["t"], "group_id": "g"},
        "target": {"path": "/tmp/lake"},
        "spark": {"quick_compiler_max_backlog": limit},
    })
    with pytest.raises(Started):
        (print_status if command == "status" else print_tables)(config)
    assert asked == [quick]


def test_cached_jars_go_after_a_class_path_the_user_set_and_only_for_the_launch(monkeypatch, tmp_path):
    # Expect: while a local session launches, the launcher's variable holds the user's entries, then the cached
    # jars; afterwards it is as it was (set or not), so later processes this one starts inherit nothing of ours.
    jars = [tmp_path / "a.jar", tmp_path / "b.jar"]
    monkeypatch.delenv("SPARK_DIST_CLASSPATH", raising=False)
    with session._on_class_path(jars):
        assert os.environ["SPARK_DIST_CLASSPATH"] == os.pathsep.join(map(str, jars))
    assert "SPARK_DIST_CLASSPATH" not in os.environ

    monkeypatch.setenv("SPARK_DIST_CLASSPATH", "/hadoop/*")
    with session._on_class_path(jars):
        assert os.environ["SPARK_DIST_CLASSPATH"].split(os.pathsep) == ["/hadoop/*", *map(str, jars)]
    assert os.environ["SPARK_DIST_CLASSPATH"] == "/hadoop/*"


def test_cached_jars_are_named_by_no_setting(monkeypatch, tmp_path):
    # Expect: once a set's jars are cached, neither spark.jars (copied at every start) nor the coordinates.
    monkeypatch.setenv("TICDC_DELTA_CACHE", str(tmp_path))
    packages = ["io.delta:delta-spark_2.13:4.0.0"]
    assert "spark.jars.packages" in session._jar_settings(packages)
    home = session._ivy_home(packages)
    (home / "jars").mkdir(parents=True)
    (home / "jars" / "delta.jar").write_bytes(b"")
    (home / ".complete").touch()
    assert session._jar_settings(packages) == {}
    assert session.cached_jars(packages) == [home / "jars" / "delta.jar"]
    # A JVM that does not launch now (PySpark's, kept from an earlier session; a cluster's executors): by name.
    assert session._jar_settings(packages, on_class_path=False) == {"spark.jars": str(home / "jars" / "delta.jar")}


def test_no_class_archive_where_a_folder_with_files_is_on_the_class_path(monkeypatch, tmp_path):
    # Expect: HotSpot refuses to archive such a class path (and says so at every exit): none is asked for.
    monkeypatch.setenv("TICDC_DELTA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SPARK_DIST_CLASSPATH", raising=False)
    for variable in ("SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "spark"))  # (no conf/ there)
    assert session._class_archive([], {}) is not None
    conf = tmp_path / "hadoop-conf"
    conf.mkdir()
    monkeypatch.setenv("HADOOP_CONF_DIR", str(conf))
    assert session._class_archive([], {}) is not None  # (an empty folder is no obstacle)
    (conf / "core-site.xml").write_text("<configuration/>")
    assert session._class_archive([], {}) is None
    monkeypatch.delenv("HADOOP_CONF_DIR")
    assert session._class_archive([], {"spark.driver.extraClassPath": str(conf)}) is None


@pytest.mark.parametrize("quick", [True, False])
def test_a_short_runs_session_interprets_spark_expressions_unless_the_user_says_otherwise(monkeypatch, quick):
    # Setup: a job's session asked for with and without the quick compiler, the user's spark.conf setting
    # whole-stage code generation on; the session's start replaced by a recorder of its settings.
    # Expect: a short run's session interprets expressions (Spark's factory mode), the user's own key wins;
    # a longer run's session gets neither setting from the product.
    from ticdc_delta.jobs import config as config_module

    started = []
    monkeypatch.setattr(session, "get_spark", lambda master, conf, packages, **options: started.append(conf))
    config = config_module.from_mapping({
        "kafka": {"topics": ["t"]}, "target": {"path": "/tmp/lake"},
        "spark": {"conf": {"spark.sql.codegen.wholeStage": True}},
    })

    session.spark_for(config, quick_compiler=quick)

    expected = {"spark.sql.codegen.factoryMode": "NO_CODEGEN"} if quick else {}
    assert started == [{**expected, "spark.sql.codegen.wholeStage": "true"}]


@pytest.mark.parametrize(("level", "shown"), [(logging.INFO, False), (logging.DEBUG, True)])
def test_refused_statements_are_logged_with_their_trace_at_debug_only(level, shown, monkeypatch):
    # PySpark 4 logs a refused statement at ERROR with its trace from the exception's constructor, through a
    # logger of its own (`_log_exception`): the same call here, after the job asked for its session (an active
    # one here: nothing started) at INFO or at DEBUG.
    logger_module = pytest.importorskip("pyspark.logger", reason="PySpark 3.5 has no query-context logger")
    logger = logger_module.PySparkLogger.getLogger("SQLQueryContextLogger")
    root, written = logging.getLogger(), io.StringIO()
    handler, levels = logging.StreamHandler(written), (root.level, logger.level)
    logger.addHandler(handler)
    try:
        logger.setLevel(logging.CRITICAL if shown else logging.NOTSET)  # the other way round first
        root.setLevel(level)
        active = object()
        monkeypatch.setattr(session.SparkSession, "getActiveSession", staticmethod(lambda: active))
        assert session.get_spark() is active
        logger.exception("[TABLE_OR_VIEW_NOT_FOUND] refused", errorClass="TABLE_OR_VIEW_NOT_FOUND")
        assert ("refused" in written.getvalue()) is shown
    finally:
        logger.removeHandler(handler)
        root.setLevel(levels[0])
        logger.setLevel(levels[1])


def _job(**spark) -> object:
    from ticdc_delta.jobs import config as config_module

    return config_module.from_mapping({
        "kafka": {"bootstrap_servers": "localhost:1", "topics": ["t"], "group_id": "g"},
        "target": {"path": "s3a://lake/tidb"},
        "spark": spark,
    })


def test_extra_packages_and_a_spark_jars_packages_setting_add_to_the_products_own(monkeypatch):
    # Setup: the S3 log-store recipe as object-storage.md writes it: the DynamoDB store's jar in spark.extra_packages,
    # and (as the docs said before) one more among spark.jars.packages in [spark.conf], for an s3a:// target.
    # Expect: the session is asked for the product's packages (the S3 connector: Delta's are get_spark's own) and
    # both added, spark.jars.packages no longer among its settings (it replaced Delta and hadoop-aws before, and
    # the jar cache of the product's list was then marked complete without them); a bad coordinate is exit 2.
    from ticdc_delta.exceptions import ConfigError

    asked = {}

    def get_spark(master, conf, packages, **_):
        asked.update(conf=dict(conf), packages=list(packages))

    monkeypatch.setattr(session, "get_spark", get_spark)
    monkeypatch.setattr(session, "under_existing_runtime", lambda: False)
    config = _job(extra_packages=["io.delta:delta-storage-s3-dynamodb:3.3.2"],
                  conf={"spark.jars.packages": "org.example:store:1.0", "spark.delta.logStore.s3a.impl": "X"})
    session.spark_for(config)
    assert asked["packages"] == [session.hadoop_aws_package(), "io.delta:delta-storage-s3-dynamodb:3.3.2",
                                 "org.example:store:1.0"]
    assert "spark.jars.packages" not in asked["conf"] and asked["conf"]["spark.delta.logStore.s3a.impl"] == "X"
    with pytest.raises(ConfigError, match="spark.extra_packages: 'delta-storage' is not group:artifact:version"):
        _job(extra_packages=["delta-storage"])


def test_settings_for_a_session_the_product_starts_are_said_once_to_be_ignored_where_one_exists(monkeypatch, caplog):
    # Setup: spark-submit (a session exists: the runtime's is used as it is) with [spark.conf] and extra packages.
    # Expect: one WARNING naming them and where to give them instead, however many runs start (continuous mode).
    monkeypatch.setattr(session, "get_spark", lambda *a, **k: None)
    monkeypatch.setattr(session, "under_existing_runtime", lambda: True)
    config = _job(extra_packages=["io.delta:delta-storage-s3-dynamodb:3.3.2"], conf={"spark.sql.shuffle.partitions": "4"})
    caplog.set_level(logging.WARNING, logger="ticdc_delta.jobs.session")
    session.spark_for(config)
    session.spark_for(config)
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("spark.conf (spark.sql.shuffle.partitions); spark.extra_packages "
                           "(io.delta:delta-storage-s3-dynamodb:3.3.2) not applied: this job runs in a Spark session")
    assert "spark-submit --conf and --packages" in line
