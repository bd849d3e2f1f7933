"""The Spark session the job's statements run on, and how they are tagged, staged and retried.

- Isolation. Delta takes a commit's `userMetadata` and idempotent-write pair
  (txnAppId, txnVersion) from the session's SQL configuration at commit time.
  The job therefore runs its statements on a session of its own
  (`SparkSession.newSession()`: same application, own SQL configuration and
  temporary views), carrying over what the user configured on theirs. Two
  pipelines in one notebook, or concurrent per-table writers each with their
  own `fork()`, never see each other's tags or views. Where a session cannot
  be forked (Spark Connect), the given one is used and statements of this
  object are serialized.
- Tags are set for exactly one statement and removed after it.
- Temporary views get a unique name per use; values travel inside
  DataFrames, never as SQL text.
- A commit that loses a race with another writer (Delta's concurrent
  modification errors: an OPTIMIZE, another job) did not happen; it is run
  again, a few times with jittered backoff, then ConcurrentCommitError.
  Running it again is safe because each statement is idempotent on its own:
  table commits carry their applied point and Delta's idempotent-write pair,
  and the product's own tables are written by MERGE or by rows a reader
  takes once.
- A write guard (the consumer's lease, `apply.own_tables.lease`), when installed, is
  asked before every attempt of every writing statement: a job that lost
  its lease stops before its next commit, retries included.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from ticdc_delta.apply.base.errors import error_condition
from ticdc_delta.exceptions import ConcurrentCommitError

log = logging.getLogger(__name__)

USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
_TAG_KEYS = (USER_METADATA, TXN_APP_ID, TXN_VERSION)

# Spark's expressions interpreted instead of compiled. Each Delta statement plans its projections anew
# (over Delta's wide log schema too), and generating their code, then compiling it with Janino and the
# JVM's compilers, costs more than evaluating it on a few thousand rows: a short run's session (`jobs.session`)
# and a small MERGE's statement use it (docs/performance.md has both measured). `factoryMode` is Spark's
# internal switch, which its own suites run both ways; results are the same, and the product's tests run on it.
INTERPRETED_EXPRESSIONS = {"spark.sql.codegen.factoryMode": "NO_CODEGEN", "spark.sql.codegen.wholeStage": "false"}

_CONFLICT_ATTEMPTS = 5

# Spark 3.x refuses by default (EXCEPTION) to write dates before 1582-10-15 and timestamps before
# 1900 to Parquet, asking whether to shift them to the Julian calendar for Spark 2 readers; a MERGE
# of DATE '1000-01-01' failed. Delta's dates are proleptic Gregorian, as TiDB's and MariaDB's are and
# as Spark 3+, Spark 4's default and delta-rs read them: written as they are (CORRECTED), unless the
# user chose otherwise on their session.
_REBASE_IN_WRITE = ("spark.sql.parquet.datetimeRebaseModeInWrite", "spark.sql.parquet.int96RebaseModeInWrite")


@dataclass(frozen=True, slots=True)
class CommitTags:
    """What one statement's Delta commit records: user metadata, and an idempotent-write pair."""

    user_metadata: dict | None = None
    txn: tuple[str, int] | None = None

    def settings(self) -> dict[str, str]:
        settings = {}
        if self.user_metadata is not None:
            settings[USER_METADATA] = json.dumps(self.user_metadata)
        if self.txn is not None:
            settings[TXN_APP_ID] = self.txn[0]
            settings[TXN_VERSION] = str(self.txn[1])
        return settings


def _conflict_types() -> tuple[type[BaseException], ...]:
    # Importing delta.exceptions also makes PySpark raise these typed errors.
    try:
        from delta import exceptions as delta_errors
    except ImportError:  # pragma: no cover - delta-spark is a dependency
        return ()
    return tuple(
        getattr(delta_errors, name)
        for name in (
            "ConcurrentWriteException",
            "MetadataChangedException",
            "ProtocolChangedException",
            "ConcurrentAppendException",
            "ConcurrentDeleteReadException",
            "ConcurrentDeleteDeleteException",
            "ConcurrentTransactionException",
            "DeltaConcurrentModificationException",
        )
        if hasattr(delta_errors, name)
    )


_CONFLICTS = _conflict_types()


def is_commit_conflict(err: BaseException) -> bool:
    """Whether `err` is Delta's "another writer committed first" (the statement did not commit)."""
    if _CONFLICTS and isinstance(err, _CONFLICTS):
        return True
    if isinstance(err, ConcurrentCommitError):
        return False  # ours: the retries are already spent
    # Spark Connect and older releases raise the generic class; the condition still says it.
    return error_condition(err).startswith("DELTA_CONCURRENT") or type(err).__name__.startswith("Concurrent")


def spark_version(spark) -> tuple[int, int]:
    """(major, minor) of a session's Spark: what its SQL and Delta can do depends on it."""
    major, minor = spark.version.split(".")[:2]
    return int(major), int(minor)


def _settings(spark) -> dict[str, str]:
    try:
        return dict(spark.conf.getAll)
    except Exception:  # noqa: BLE001 - older PySpark has no getAll
        return {row[0]: row[1] for row in spark.sql("SET").collect()}


# What a new session of an application starts with (its configuration when it started: the same for every
# new session of it), by application. Reading a session's settings is a call into the JVM per setting (PySpark
# 4's getAll) or a Spark job (`SET`): 0.05-0.3 s, and a job forks several sessions a run.
_NEW_SESSION_SETTINGS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _new_session_settings(spark, session) -> dict[str, str]:
    try:
        context = spark.sparkContext
    except Exception:  # noqa: BLE001 - some shared runtimes deny the context: read each time
        return _settings(session)
    if context not in _NEW_SESSION_SETTINGS:
        _NEW_SESSION_SETTINGS[context] = _settings(session)
    return _NEW_SESSION_SETTINGS[context]


def _isolated(spark, settings: Mapping[str, str] | None = None):
    """(session, forked, settings carried): a new session of `spark`'s application carrying `settings`
    (default: what `spark` has now), or `spark` itself where it cannot be forked."""
    try:
        session = spark.newSession()
    except Exception:  # noqa: BLE001 - Spark Connect and some runtimes cannot fork a session
        log.info("this Spark session cannot be forked; the job's statements share it")
        return spark, False, {}
    # Carry over what the user set on their session (shuffle partitions, storage credentials,
    # catalogs, Delta defaults, ...). getAll gives real values; `SET` shows secrets redacted,
    # so its redacted values are never copied. Keys the new session refuses keep its default.
    if settings is None:
        settings = _settings(spark)
    inherited = _new_session_settings(spark, session)
    for key, value in settings.items():
        if key in _TAG_KEYS or value is None or "(redacted)" in str(value):
            continue
        if inherited.get(key) == value:
            continue  # already so (the application's own configuration): a call into the JVM each saved
        try:
            session.conf.set(key, value)
        except Exception:  # noqa: BLE001 - static or unknown to the new session
            log.debug("not carried over to the job's session: %s", key)
    for key in _REBASE_IN_WRITE:
        if settings.get(key, "EXCEPTION") == "EXCEPTION":
            session.conf.set(key, "CORRECTED")
    return session, True, settings


class SqlSession:
    def __init__(
        self,
        spark,
        *,
        isolate: bool = True,
        sleep: Callable[[float], None] = time.sleep,
        _carried: Mapping[str, str] | None = None,
    ) -> None:
        # The settings carried over from `spark` are read once: forks carry the same (the user's session as
        # this job found it).
        self.spark, self.isolated, self._carried = _isolated(spark, _carried) if isolate else (spark, False, {})
        self._parent = spark
        self._sleep = sleep
        # One statement at a time: tags are session settings.
        self._lock = threading.RLock()
        self._write_guard: Callable[[str], None] | None = None
        self._global_database: str | None = None

    def fork(self) -> SqlSession:
        """Another session of this application, for work running concurrently with this one's.

        The fork has the write guard this session has now.
        """
        if not self.isolated:
            return self
        forked = SqlSession(self._parent, sleep=self._sleep, _carried=self._carried)
        forked._write_guard = self._write_guard
        return forked

    def guard_writes(self, check: Callable[[str], None]) -> None:
        """Call `check(what)` before every attempt of every writing statement; it raises to refuse the write."""
        self._write_guard = check

    def check_write(self, what: str) -> None:
        """Ask the write guard about a write that is not a statement of `run` (a directory removed or moved)."""
        if self._write_guard is not None:
            self._write_guard(what)

    def path_exists(self, path: str) -> bool:
        """Whether `path` exists, asked of its Hadoop file system with this session's settings.

        False where the session gives no JVM access (Spark Connect) or the file system cannot say: the
        callers then take the slower way that needs no answer.
        """
        try:  # (no JVM access, as on Spark Connect, raises AttributeError: the same answer)
            fs, hadoop_path = self._file_system(path)
            return bool(fs.exists(hadoop_path))
        except Exception as err:  # noqa: BLE001 - the caller's statement reports what is wrong with the path
            log.debug("could not look for %s: %s", path, err)
            return False

    def qualified(self, path: str) -> str | None:
        """`path` as this session's Hadoop configuration resolves it, scheme and authority included (a path
        without a scheme: against `fs.defaultFS`, HDFS on YARN, DBFS on Databricks); None where the session gives
        no JVM access (Spark Connect: its server resolves paths)."""
        try:
            fs, hadoop_path = self._file_system(path)
        except AttributeError:
            return None
        return str(fs.makeQualified(hadoop_path).toString())

    def _file_system(self, path: str):
        """(Hadoop file system, Hadoop path) of `path`, with this session's settings."""
        hadoop_path = self.spark._jvm.org.apache.hadoop.fs.Path(path)
        return hadoop_path.getFileSystem(self.spark._jsparkSession.sessionState().newHadoopConf()), hadoop_path

    def delete_folder(self, path: str) -> None:
        """Delete a folder of a table no name holds (`TableLocator.clean_up`): its files, then its log last,
        so a deletion cut short leaves a log a later REPLACE still reads, not a log without its start."""
        fs, folder = self._file_system(path)
        for status in fs.listStatus(folder):
            if status.getPath().getName() != "_delta_log":
                fs.delete(status.getPath(), True)
        fs.delete(folder, True)

    def sql(self, statement: str):
        """A statement that commits nothing of ours (reads, DDL without tags), run now."""
        with self._lock:
            return self.spark.sql(statement)

    def run(self, statement: str | Callable[[], object], tags: CommitTags | None = None, *, what: str = ""):
        """Run a writing statement (SQL text, or a callable issuing it) with `tags` on its commit.

        Retried when another writer committed to the table first; the write
        guard is asked before every attempt.
        """
        return self._run(statement, tags, what, guarded=True, retry_conflicts=True)

    def run_unguarded(self, statement: str | Callable[[], object], *, what: str = "", retry_conflicts: bool = True):
        """A write the write guard is not asked about: the lease's own (the guard itself asks the lease).

        `retry_conflicts` False: a lost race is raised, for the caller to
        decide again from what is there now.
        """
        return self._run(statement, None, what, guarded=False, retry_conflicts=retry_conflicts)

    def _run(self, statement, tags: CommitTags | None, what: str, *, guarded: bool, retry_conflicts: bool):
        execute = (lambda: self.spark.sql(statement)) if isinstance(statement, str) else statement
        for attempt in range(1, _CONFLICT_ATTEMPTS + 1):
            if guarded:
                self.check_write(what or "a write")
            try:
                with self._lock, self._tagged(tags), self._described(what):
                    return execute()
            except Exception as err:
                if not is_commit_conflict(err) or not retry_conflicts:
                    raise
                if attempt == _CONFLICT_ATTEMPTS:
                    raise ConcurrentCommitError(
                        f"{what or 'a write'}: another writer committed first {attempt} times in a row; giving up "
                        f"({type(err).__name__})"
                    ) from err
                delay = random.uniform(0, 0.2 * 2**attempt)
                log.warning(
                    "%s: concurrent commit (%s), attempt %d of %d; running it again in %.2fs",
                    what or "write", type(err).__name__, attempt, _CONFLICT_ATTEMPTS, delay,
                )
                self._sleep(delay)

    @contextmanager
    def settings(self, settings: Mapping[str, str], *, unless_set: Collection[str] = ()) -> Iterator[None]:
        """The session's `settings` for the duration of the block; what they were is restored after it.

        For settings that only make a statement cheaper: one the runtime does not let a session change
        (Databricks serverless allows few) is left as it is, and so is one named in `unless_set` that the
        session already has a value of (the user's `spark.conf`, a cluster's settings)."""
        with self._lock:
            before = {}
            for key, value in settings.items():
                try:
                    current = self.spark.conf.get(key, None)
                    if current is not None and key in unless_set:
                        continue
                    self.spark.conf.set(key, value)
                except Exception as err:  # noqa: BLE001 - the runtime's refusal; the statement runs as it would
                    log.debug("session setting %s left as it is: %s", key, err)
                    continue
                before[key] = current
            try:
                yield
            finally:
                for key, value in before.items():
                    if value is None:
                        self.spark.conf.unset(key)
                    else:
                        self.spark.conf.set(key, value)

    @contextmanager
    def _described(self, what: str) -> Iterator[None]:
        """The Spark jobs of the block named `ticdc-delta: <what>` in the Spark UI and the event log (the
        job description, a property of this thread), instead of their call site in the product's code."""
        context = None
        if what:
            try:
                context = self.spark.sparkContext
                context.setJobDescription(f"ticdc-delta: {what}")
            except Exception as err:  # noqa: BLE001 - (Spark Connect has no SparkContext: its UI names the call site)
                log.debug("Spark jobs not described: %s", err)
                context = None
        try:
            yield
        finally:
            if context is not None:
                context.setLocalProperty("spark.job.description", None)

    @contextmanager
    def _tagged(self, tags: CommitTags | None) -> Iterator[None]:
        settings = tags.settings() if tags is not None else {}
        for key, value in settings.items():
            self.spark.conf.set(key, value)
        try:
            yield
        finally:
            for key in settings:
                self.spark.conf.unset(key)

    @contextmanager
    def view(self, rows: Sequence[tuple], schema: str, prefix: str = "ticdc_delta") -> Iterator[str]:
        """`rows` as a temporary view with a name of its own, for the duration of the block."""
        name = f"{prefix}_{uuid.uuid4().hex}"
        with self._lock:
            self.spark.createDataFrame(rows, schema=schema).createOrReplaceTempView(name)
        try:
            yield name
        finally:
            with self._lock:
                self.spark.catalog.dropTempView(name)

    @contextmanager
    def frame_view(self, frame, prefix: str = "ticdc_delta") -> Iterator[str]:
        """A DataFrame of this application as a view with a name of its own, for the duration of the block.

        A global temporary view: the frame may have been built on another session of the application than
        the one the statement runs on (a table's MERGE on a thread of its own, `apply.writers.table_pool`, from runs
        the staging table's session describes)."""
        name = f"{prefix}_{uuid.uuid4().hex}"
        frame.createOrReplaceGlobalTempView(name)
        try:
            yield f"{self._global_views()}.{name}"
        finally:
            frame.sparkSession.catalog.dropGlobalTempView(name)

    def _global_views(self) -> str:
        """The database of the application's global temporary views (a static setting)."""
        if self._global_database is None:
            self._global_database = self.spark.conf.get("spark.sql.globalTempDatabase", "global_temp")
        return self._global_database

    def table(self, name: str):
        return self.spark.table(name)
