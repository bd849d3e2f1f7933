"""ticdc-delta: TiCDC change streams from Kafka into Delta Lake tables.

The product's packages install under this one name (`ticdc_delta.schema_cache`, `ticdc_delta.apply`,
`ticdc_delta.jobs`; `setup.cfg` maps them from the repository's top-level folders), so a user's own
`jobs/` or `apply/` package on `sys.path` cannot shadow them.
"""

from __future__ import annotations

import importlib.metadata
import os

# Imported from a checkout that is not installed (the set-up scripts run testbed/ with the system's Python
# before any virtualenv exists): the subpackages are the repository's top-level folders beside this one.
# Installed (a wheel, or editable), they are inside this package, or its finder maps them.
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not os.path.isdir(os.path.join(__path__[0], "jobs")) and os.path.isfile(os.path.join(_CHECKOUT, "setup.cfg")) \
        and os.path.isdir(os.path.join(_CHECKOUT, "jobs")):
    __path__.append(_CHECKOUT)


def _version() -> str:
    try:
        return importlib.metadata.version("ticdc-delta")
    except importlib.metadata.PackageNotFoundError:
        return "0+checkout"  # imported from a checkout that was never installed


__version__ = _version()
