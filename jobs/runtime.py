"""What the Spark session in use supports, checked before the job reads anything."""

from __future__ import annotations

import dataclasses
import logging
import os

from ticdc_delta.apply.base.session import spark_version
from ticdc_delta.apply.tables.delta_rs_base import local_path
from ticdc_delta.exceptions import ConfigError
from ticdc_delta.jobs.config import DELTA_RS_WRITER, SPARK_WRITER, Config
from ticdc_delta.jobs.session import object_store_scheme

log = logging.getLogger(__name__)

# Delta's own stores for S3 that write a log entry only if absent, across drivers: the DynamoDB-backed
# one (delta-storage-s3-dynamodb). Its default for s3a/s3, S3SingleDriverLogStore, is put-if-absent only
# within one driver: two jobs (a paused lease holder and its successor) could both write version N.
_SAFE_S3_LOG_STORES = {"io.delta.storage.S3DynamoDBLogStore"}
_S3_SCHEMES = ("s3a", "s3", "s3n")


def settle(config: Config, spark) -> Config:
    """`config` as this session places it: what every command does with its session before any table is read or
    written (`run` then also checks what the session can honour: `check_session`).

    A target path is qualified once, as Spark's Hadoop configuration resolves it: `/lake` is `file:/lake` on a
    local session and `hdfs://namenode/lake` (or `dbfs:/lake`, `viewfs://...`) where `fs.defaultFS` says so.
    delta-rs, which knows the local disk only, then writes a target only where that gives `file:`; under Spark
    Connect (no Hadoop configuration to ask) a path without a scheme is left to Spark. Said once, at INFO."""
    return _placed(config, spark)


_SAID: set[tuple[str, str | None]] = set()  # (path, where) said already: a continuous job's runs each settle


def _placed(config: Config, spark) -> Config:
    """`config` with its target path qualified (or, under Spark Connect, left to Spark)."""
    from ticdc_delta.apply.base.session import SqlSession

    path = config.target.path
    if not path:
        return config
    qualified = SqlSession(spark, isolate=False).qualified(path)
    target = config.target
    if qualified is None:
        if local_path(path) is not None and target.small_merge_writer != SPARK_WRITER:
            if target.small_merge_writer == DELTA_RS_WRITER:
                raise ConfigError(f"target.small_merge_writer = \"delta-rs\": target.path {path} is on this Spark "
                                  "Connect session's server, which delta-rs here cannot write; set it to \"auto\" or \"spark\"")
            target = dataclasses.replace(target, small_merge_writer=SPARK_WRITER)
            _say(path, None, "target.path %s: a Spark Connect session resolves it on its server, so Spark writes every "
                 "table there (as target.small_merge_writer = \"spark\")", path)
    elif qualified != path and not (local_path(qualified) is not None and local_path(path) == local_path(qualified)):
        # (a path that is this disk's to Spark as to delta-rs stays as written: it names that place already)
        target = dataclasses.replace(target, path=qualified)
        _say(path, qualified, "target.path %s is %s to this session's Hadoop configuration%s", path, qualified,
             "" if local_path(qualified) is not None else ": Spark writes every table there (delta-rs writes the "
             "local file system only)")
    return dataclasses.replace(config, target=target) if target is not config.target else config


def _say(path: str, where: str | None, message: str, *args) -> None:
    if (path, where) not in _SAID:
        _SAID.add((path, where))
        log.info(message, *args)


def check_session(config: Config, spark) -> None:
    """Refuse settings the session cannot honour, naming the key, instead of failing mid-stream."""
    version = spark_version(spark)
    if config.types.json == "variant" and version < (4, 0):
        raise ConfigError(
            f"types.json: 'variant' needs Spark 4.0 or later (VARIANT columns); this session runs Spark "
            f"{spark.version}: use 'string'"
        )
    _check_commit_safety(config, spark)


def _log_store(spark, scheme: str) -> str | None:
    for key in (f"spark.delta.logStore.{scheme}.impl", "spark.delta.logStore.class"):
        value = spark.conf.get(key, None)
        if value:
            return value
    return None


def _check_commit_safety(config: Config, spark) -> None:
    """Refuse an S3 target whose commits are not put-if-absent (the lease and exactly-once rest on it)."""
    scheme = object_store_scheme(config.target.path)
    if scheme not in _S3_SCHEMES or not config.target.require_safe_commits:
        return
    if "DATABRICKS_RUNTIME_VERSION" in os.environ:
        return  # Databricks commits to S3 through its own commit service
    store = _log_store(spark, scheme)
    if store in _SAFE_S3_LOG_STORES:
        return
    raise ConfigError(
        f"target.path is on S3 ({scheme}://) and Delta's log store there is {store or 'its default, S3SingleDriverLogStore'}, "
        "whose commits are not put-if-absent across drivers (two jobs could write one table version): set "
        f"spark.delta.logStore.{scheme}.impl = io.delta.storage.S3DynamoDBLogStore (docs: Object storage), or "
        "target.require_safe_commits = false if nothing but this job ever writes under target.path"
    )


def targets_case_sensitive(config: Config, spark) -> bool:
    """Whether two target names that differ only by case are two tables: in a catalog that compares names as
    they are (`spark.sql.caseSensitive = true`). A catalog's default ignores case, and so may a path's file
    system: `apply.places.routing.Routes` then refuses two upstream tables routed to such names."""
    return bool(config.target.catalog) and str(spark.conf.get("spark.sql.caseSensitive", "false")).lower() == "true"

