"""What the Spark session in use supports, checked before the job reads anything."""

from __future__ import annotations

import os

from ticdc_delta.apply.sql_session import spark_version
from ticdc_delta.exceptions import ConfigError
from ticdc_delta.jobs.config import Config
from ticdc_delta.jobs.session import object_store_scheme

# Delta's own stores for S3 that write a log entry only if absent, across drivers: the DynamoDB-backed
# one (delta-storage-s3-dynamodb). Its default for s3a/s3, S3SingleDriverLogStore, is put-if-absent only
# within one driver: two jobs (a paused lease holder and its successor) could both write version N.
_SAFE_S3_LOG_STORES = {"io.delta.storage.S3DynamoDBLogStore"}
_S3_SCHEMES = ("s3a", "s3", "s3n")


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
