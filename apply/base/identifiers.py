"""Quoting of identifiers that come from upstream data.

Database, table and column names are data: they reach SQL only through
`quote`, never pasted raw, reach file paths only through `path_segment`, and
catalog schema/table names only through `catalog_name`.
"""

from __future__ import annotations

import hashlib
import re

_CATALOG_SAFE = re.compile(r"[A-Za-z0-9_]+")


def quote(name: str) -> str:
    """A Spark SQL identifier for `name`, whatever characters it holds."""
    return "`" + name.replace("`", "``") + "`"


def sql_string(text: str) -> str:
    """A Spark SQL string literal holding `text` (a backslash escape: Spark 3.5 does not take a doubled quote)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def quote_parts(*parts: str) -> str:
    return ".".join(quote(p) for p in parts)


def path_segment(name: str) -> str:
    """A file-system-safe, reversible directory name for an upstream name.

    Keeps ASCII letters, digits and '_' (except a leading '_', which marks the
    project's own tables); every other byte of the UTF-8 form becomes '-xx'
    hex, so '..', '/', '%' and ':' can never steer a path.
    """
    out = []
    for i, ch in enumerate(name):
        if ch.isascii() and (ch.isalnum() or (ch == "_" and i > 0)):
            out.append(ch)
        else:
            out.extend(f"-{b:02x}" for b in ch.encode("utf-8"))
    return "".join(out) or "-"


def catalog_name(name: str) -> str:
    """A schema or table name a Spark catalog accepts, for an upstream name.

    Spark's session catalog (and Hive metastores) allow only letters, digits
    and '_' in schema and table names; MySQL allows far more. Names already
    made of those characters are kept; any other name becomes its safe
    characters, '_' for the rest, and a short hash of the original, so two
    different upstream names never share a table.
    """
    if _CATALOG_SAFE.fullmatch(name):
        return name
    readable = re.sub(r"[^A-Za-z0-9_]", "_", name)
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:8]
    return f"{readable}_{digest}"


# Characters Delta refuses in the column names of a table without column
# mapping, and '%', the escape itself (so the mapping can be undone).
_DELTA_NAME_ESCAPED = frozenset(" ,;{}()\n\t=%")
_DELTA_NAME_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")


def delta_column_name(name: str) -> str:
    """The column name for an upstream column in a Delta table without column mapping.

    Delta refuses ' ,;{}()\\n\\t=' there (MySQL allows them in quoted names);
    each of them, and '%', becomes '%XX' (its hex code). Any other name is
    kept as it is, so a name changes only if Delta would refuse it.
    """
    if not _DELTA_NAME_ESCAPED.intersection(name):
        return name
    return "".join(f"%{ord(ch):02X}" if ch in _DELTA_NAME_ESCAPED else ch for ch in name)


def upstream_column_name(name: str) -> str:
    """The upstream name of a column `delta_column_name` named."""
    if "%" not in name:
        return name
    return _DELTA_NAME_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), name)
