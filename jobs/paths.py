"""Where the product runs (its own local Spark, or a runtime's), and where it keeps downloaded jars and local state."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Downloads cache: $TICDC_DELTA_CACHE, else ~/.cache/ticdc-delta."""
    configured = os.environ.get("TICDC_DELTA_CACHE")
    path = Path(configured) if configured else Path.home() / ".cache" / "ticdc-delta"
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


def under_existing_runtime() -> bool:
    """True where a Spark session exists before the job (its JVM is not the job's to configure)."""
    # spark-submit starts the Python driver with a gateway to its JVM;
    # Databricks and Spark Connect announce themselves in the environment.
    return any(v in os.environ for v in ("PYSPARK_GATEWAY_PORT", "DATABRICKS_RUNTIME_VERSION", "SPARK_REMOTE"))
