"""ticdc-delta: TiCDC change streams from Kafka into Delta Lake tables.

The product's packages install under this one name (`ticdc_delta.schema_cache`, `ticdc_delta.apply`,
`ticdc_delta.jobs`; `setup.cfg` maps them from the repository's top-level folders), so a user's own
`jobs/` or `apply/` package on `sys.path` cannot shadow them.
"""

from __future__ import annotations

import importlib.metadata


def _version() -> str:
    try:
        return importlib.metadata.version("ticdc-delta")
    except importlib.metadata.PackageNotFoundError:
        return "0+checkout"  # imported from a checkout that was never installed


__version__ = _version()
