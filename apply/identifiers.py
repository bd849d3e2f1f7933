"""Quoting of identifiers that come from upstream data.

Database, table and column names are data: they reach SQL only through
`quote`, never pasted raw, and reach file paths only through `path_segment`.
"""

from __future__ import annotations


def quote(name: str) -> str:
    """A Spark SQL identifier for `name`, whatever characters it holds."""
    return "`" + name.replace("`", "``") + "`"


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
