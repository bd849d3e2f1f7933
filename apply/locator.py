"""Where materialized tables live: directories under a root, or catalog tables.

Path mode: `<root>/<database>/<table>` (names encoded by `path_segment`), and
the project's own tables under `<root>/_ticdc/`. Catalog mode:
`<catalog>.<database>.<table>` (names mapped by `catalog_name`), and the
project's own tables in `<catalog>.<meta_schema>`.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlparse

from ticdc_delta.apply.identifiers import catalog_name, path_segment, quote, quote_parts
from ticdc_delta.exceptions import ApplyError
from ticdc_delta.schema_cache.events import TableName


class TableLocator(Protocol):
    def sql_name(self, table: TableName) -> str:
        """A quoted name usable in Spark SQL."""
        ...

    def internal_sql_name(self, name: str) -> str:
        """A quoted name for one of the project's own tables (checkpoints, ...)."""
        ...

    def prepare(self, sql, table: TableName) -> None:
        """Create what must exist before the table can be created."""
        ...

    def prepare_internal(self, sql) -> None: ...

    def internal_table_exists(self, sql, name: str) -> bool:
        """True if one of the project's own tables is known to exist without asking Delta (False: missing, or
        not known so cheaply: the caller's CREATE TABLE IF NOT EXISTS decides)."""
        ...

    def drop(self, sql, table: TableName) -> None: ...

    def rename(self, sql, old: TableName, new: TableName) -> None: ...


def _local_dir(root: str) -> str | None:
    parsed = urlparse(root)
    if parsed.scheme in ("", "file"):
        return os.path.abspath(parsed.path if parsed.scheme else root)
    return None


@dataclass(frozen=True)
class PathLocator:
    root: str

    def path(self, table: TableName) -> str:
        return f"{self.root.rstrip('/')}/{path_segment(table.database)}/{path_segment(table.table)}"

    def sql_name(self, table: TableName) -> str:
        return f"delta.{quote(self.path(table))}"

    def internal_path(self, name: str) -> str:
        return self.root.rstrip("/") + "/_ticdc/" + path_segment(name)

    def internal_sql_name(self, name: str) -> str:
        return f"delta.{quote(self.internal_path(name))}"

    def prepare(self, sql, table: TableName) -> None:
        pass  # Delta creates the directory

    def prepare_internal(self, sql) -> None:
        pass

    def internal_table_exists(self, sql, name: str) -> bool:
        # A look at the file system: CREATE TABLE IF NOT EXISTS loads the table's snapshot (about 0.3 s
        # a statement, each run and each of the product's tables). Its first commit, or once old commits
        # are cleaned up the pointer to its log checkpoint: not the log folder alone, which another job
        # creating the table makes before it commits.
        log = self.internal_path(name) + "/_delta_log/"
        return sql.path_exists(log + "00000000000000000000.json") or sql.path_exists(log + "_last_checkpoint")

    def _local_path(self, table: TableName) -> str:
        root = _local_dir(self.root)
        if root is None:
            raise ApplyError(
                f"dropping or renaming path tables needs a local target.path, not {self.root!r}; "
                "use catalog tables (target.catalog) for object stores"
            )
        path = os.path.abspath(os.path.join(root, path_segment(table.database), path_segment(table.table)))
        # path_segment already makes this impossible; checked because a wrong
        # delete here would be unrecoverable.
        if os.path.commonpath([root, path]) != root or path == root:
            raise ApplyError(f"refusing to touch {path!r}: outside target.path {root!r}")
        return path

    def drop(self, sql, table: TableName) -> None:
        shutil.rmtree(self._local_path(table), ignore_errors=True)

    def rename(self, sql, old: TableName, new: TableName) -> None:
        target = self._local_path(new)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.rename(self._local_path(old), target)


@dataclass(frozen=True)
class CatalogLocator:
    catalog: str
    meta_schema: str = "_ticdc"

    def sql_name(self, table: TableName) -> str:
        return quote_parts(self.catalog, catalog_name(table.database), catalog_name(table.table))

    def internal_sql_name(self, name: str) -> str:
        return quote_parts(self.catalog, self.meta_schema, name)

    def prepare(self, sql, table: TableName) -> None:
        sql.sql(f"CREATE SCHEMA IF NOT EXISTS {quote_parts(self.catalog, catalog_name(table.database))}")

    def prepare_internal(self, sql) -> None:
        sql.sql(f"CREATE SCHEMA IF NOT EXISTS {quote_parts(self.catalog, self.meta_schema)}")

    def internal_table_exists(self, sql, name: str) -> bool:
        return False  # the catalog's CREATE TABLE IF NOT EXISTS asks the catalog, not the table's log

    def drop(self, sql, table: TableName) -> None:
        sql.sql(f"DROP TABLE IF EXISTS {self.sql_name(table)}")

    def rename(self, sql, old: TableName, new: TableName) -> None:
        self.prepare(sql, new)
        # The new name is resolved inside the same catalog: schema.table only.
        target = quote_parts(catalog_name(new.database), catalog_name(new.table))
        sql.sql(f"ALTER TABLE {self.sql_name(old)} RENAME TO {target}")
