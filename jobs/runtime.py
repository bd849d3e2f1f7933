"""What the Spark session in use supports, checked before the job reads anything."""

from __future__ import annotations

from ticdc_delta.apply.sql_session import spark_version
from ticdc_delta.exceptions import ConfigError
from ticdc_delta.jobs.config import Config


def check_session(config: Config, spark) -> None:
    """Refuse settings the session cannot honour, naming the key, instead of failing mid-stream."""
    version = spark_version(spark)
    if config.types.json == "variant" and version < (4, 0):
        raise ConfigError(
            f"types.json: 'variant' needs Spark 4.0 or later (VARIANT columns); this session runs Spark "
            f"{spark.version}: use 'string'"
        )
