"""Values the configuration file names instead of holding: `{ env = "NAME" }`, the text of environment variable
NAME, read when the configuration is read (before anything connects).

One form everywhere: any key whose value is a string (a section's keys, and the settings tables
`kafka.properties`, `kafka.java_properties`, `spark.conf`) may be given as such a table, so that a password, a
registry's credentials or a key store's password never has to be written in a file (or uploaded with it, as a
Databricks bundle uploads its `job.toml`). The effective configuration the job logs shows the reference, never
the value.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from typing import Any

from ticdc_delta.exceptions import ConfigError

REFERENCE_KEY = "env"


def reference_name(value: object) -> str | None:
    """The variable a value names (`{ env = "NAME" }`), else None."""
    if isinstance(value, Mapping) and set(value) == {REFERENCE_KEY}:
        name = value[REFERENCE_KEY]
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise ConfigError(f"{{ env = {name!r} }}: the name of an environment variable is required")
        return name
    return None


def resolve(values: Mapping[str, Any], environ: Mapping[str, str] | None = None
            ) -> tuple[dict[str, Any], dict[tuple[str, ...], str]]:
    """The document with each reference replaced by its variable's text, and {key path: variable name} of each
    one replaced. An unset variable is a ConfigError naming the key and the variable."""
    environ = os.environ if environ is None else environ
    references: dict[tuple[str, ...], str] = {}

    def walk(node: Mapping[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
        resolved = {}
        for key, value in node.items():
            at = (*path, key)
            name = reference_name(value) if path else None  # (a whole section is never one value)
            if name is not None:
                if name not in environ:
                    raise ConfigError(
                        f"{'.'.join(at)}: environment variable {name} is not set; set it in the job's environment "
                        "(or give the value in the file)")
                resolved[key] = environ[name]
                references[at] = name
            elif isinstance(value, Mapping):
                resolved[key] = walk(value, at)
            else:
                resolved[key] = value
        return resolved

    return walk(values, ()), references


def shown(described: Mapping[str, Any], references: Mapping[tuple[str, ...], str]) -> dict[str, Any]:
    """The described configuration (nested as the file is) with each value that came from a variable shown as
    its reference."""
    result = copy.deepcopy(dict(described))
    for path, name in references.items():
        node = result
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and path[-1] in node:  # (a key the description leaves out: nothing to show)
            node[path[-1]] = {REFERENCE_KEY: name}
    return result
