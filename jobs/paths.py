"""Where the product keeps downloaded jars and local state."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Downloads cache: $TICDC_DELTA_CACHE, else ~/.cache/ticdc-delta."""
    configured = os.environ.get("TICDC_DELTA_CACHE")
    path = Path(configured) if configured else Path.home() / ".cache" / "ticdc-delta"
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()
