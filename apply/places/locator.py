"""Where materialized tables live: folders under a root, or catalog tables.

Path mode: `<root>/<database>/<table>` (names encoded by `path_segment`), unless the table registry
records another folder for the name (`apply.places.folders`: a RENAME or DROP moves no folder), and
the project's own tables under `<root>/_ticdc/`. Catalog mode:
`<catalog>.<database>.<table>` (names mapped by `catalog_name`), and the
project's own tables in `<catalog>.<meta_schema>`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ticdc_delta.apply.base.identifiers import catalog_name, path_segment, quote, quote_parts
from ticdc_delta.apply.own_tables.base import OwnDeltaRs
from ticdc_delta.apply.places.folders import Entry, TablePlaces
from ticdc_delta.apply.places.registry import append_entries, read_entries
from ticdc_delta.schema_cache.events import TableName

log = logging.getLogger(__name__)


class TableLocator(Protocol):
    # Path tables' folders as the table registry records them; None where tables are named, not placed.
    places: TablePlaces | None
    # Reads and writes of the product's own tables besides Spark's (path tables on the local file system).
    own_delta_rs: OwnDeltaRs | None

    def sql_name(self, table: TableName) -> str:
        """A quoted name usable in Spark SQL."""
        ...

    def internal_sql_name(self, name: str) -> str:
        """A quoted name for one of the project's own tables (checkpoints, ...)."""
        ...

    def internal_location(self, name: str) -> str | None:
        """The folder of one of the project's own tables (None: a catalog table)."""
        ...

    def load(self, sql) -> None:
        """Read where the tables are, once per process, before naming any."""
        ...

    def record(self, sql, entries: Sequence[Entry]) -> None:
        """One commit of table registry rows (path tables)."""
        ...

    def gone(self, table: TableName) -> bool:
        """The name was dropped or renamed away (what may still be at its place is not it)."""
        ...

    def prepare(self, sql, table: TableName) -> None:
        """Create what must exist before the table can be created."""
        ...

    def holds_leftover(self, sql, table: TableName) -> bool:
        """A table no name holds is still where `table` is about to be created (so it is replaced)."""
        ...

    def clear_cut_short(self, sql, table: TableName) -> None:
        """Remove what a creation of `table` cut short left where it is about to be created (a log folder without
        a commit, which Delta's CREATE refuses as a location that is not empty)."""
        ...

    def prepare_internal(self, sql) -> None: ...

    def internal_table_exists(self, sql, name: str) -> bool:
        """True if one of the project's own tables is known to exist without asking Delta (False: missing, or
        not known so cheaply: the caller's CREATE TABLE IF NOT EXISTS decides)."""
        ...

    def drop(self, sql, table: TableName) -> None: ...

    def rename(self, sql, old: TableName, new: TableName) -> None: ...

    def clean_up(self, sql) -> list[str]:
        """Delete what no table is any more (after a checkpoint: no replay needs it); what was deleted."""
        ...


def _has_commits(sql, path: str) -> bool:
    # Its first commit, or once old commits are cleaned up the pointer to its log checkpoint: not the
    # log folder alone, which another job creating the table makes before it commits.
    log = path + "/_delta_log/"
    return sql.path_exists(log + "00000000000000000000.json") or sql.path_exists(log + "_last_checkpoint")


@dataclass(frozen=True)
class PathLocator:
    root: str
    consumer: str = ""  # who the registry rows it writes are of (every consumer's say where tables are)
    places: TablePlaces = field(default_factory=TablePlaces, compare=False, repr=False)
    _registry: dict = field(default_factory=dict, compare=False, repr=False)  # its shape (`table_registry`)
    own_delta_rs: OwnDeltaRs | None = field(default=None, compare=False, repr=False)

    def path(self, table: TableName) -> str:
        return f"{self.root.rstrip('/')}/{self.places.folder(table)}"

    def sql_name(self, table: TableName) -> str:
        return f"delta.{quote(self.path(table))}"

    def internal_path(self, name: str) -> str:
        return self.root.rstrip("/") + "/_ticdc/" + path_segment(name)

    def internal_sql_name(self, name: str) -> str:
        return f"delta.{quote(self.internal_path(name))}"

    def internal_location(self, name: str) -> str | None:
        return self.internal_path(name)

    def load(self, sql) -> None:
        if not self.places.loaded:
            entries, self._registry["shape"] = read_entries(sql, self)
            self.places.load(entries)

    def record(self, sql, entries: Sequence[Entry]) -> None:
        self.load(sql)
        self._registry["shape"] = append_entries(sql, self, self.consumer, entries, self._registry.get("shape"))
        self.places.record(entries)

    def gone(self, table: TableName) -> bool:
        return self.places.gone(table)

    def prepare(self, sql, table: TableName) -> None:
        # A name the batch's registration did not cover (dropped and created again within the batch, or
        # made by a caller without a registry): its folder recorded before the table is made there.
        self.load(sql)
        if not self.places.live(table):
            self.record(sql, [Entry(table, self.places.choose(table), False, self.places.next_seq(), self.consumer)])

    def holds_leftover(self, sql, table: TableName) -> bool:
        return _has_commits(sql, self.path(table))

    def clear_cut_short(self, sql, table: TableName) -> None:
        # A process (or its JVM) killed during the CREATE leaves `_delta_log/` holding its commit's temporary file
        # only; Delta takes the folder for a table and refuses to create one there. Nothing in it is any table's
        # (no commit names it), and the consumer's lease makes this job the only writer of its tables.
        path = self.path(table)
        if sql.path_exists(path + "/_delta_log") and not _has_commits(sql, path):
            sql.check_write(f"remove what a cut-short creation of {table} left")
            log.warning("%s: removing what a creation cut short left at %s (no commit) before creating it", table, path)
            sql.delete_folder(path)

    def prepare_internal(self, sql) -> None:
        pass

    def internal_table_exists(self, sql, name: str) -> bool:
        # A look at the file system: CREATE TABLE IF NOT EXISTS loads the table's snapshot (about 0.3 s
        # a statement, each run and each of the product's tables).
        return _has_commits(sql, self.internal_path(name))

    def drop(self, sql, table: TableName) -> None:
        self.load(sql)
        self.record(sql, [Entry(table, self.places.folder(table), True, self.places.next_seq(), self.consumer)])

    def rename(self, sql, old: TableName, new: TableName) -> None:
        self.load(sql)
        folder, seq = self.places.folder(old), self.places.next_seq()
        self.record(sql, [Entry(old, folder, True, seq, self.consumer), Entry(new, folder, False, seq, self.consumer)])

    def clean_up(self, sql) -> list[str]:
        deleted = []
        for folder in self.places.take_freed():
            path = f"{self.root.rstrip('/')}/{folder}"
            if sql.path_exists(path):
                sql.delete_folder(path)
                deleted.append(path)
        return deleted


@dataclass(frozen=True)
class CatalogLocator:
    catalog: str
    meta_schema: str = "_ticdc"
    places = None  # the catalog says where its tables are
    own_delta_rs = None  # (Spark's: a catalog table is read and written through its catalog)

    def load(self, sql) -> None:
        pass

    def record(self, sql, entries: Sequence[Entry]) -> None:
        raise NotImplementedError("catalog tables have no folders to record")

    def gone(self, table: TableName) -> bool:
        return False  # DROP and RENAME are the catalog's own

    def holds_leftover(self, sql, table: TableName) -> bool:
        return False

    def clear_cut_short(self, sql, table: TableName) -> None:
        pass  # (the catalog places its tables: a creation that did not commit named no table)

    def clean_up(self, sql) -> list[str]:
        return []

    def sql_name(self, table: TableName) -> str:
        return quote_parts(self.catalog, catalog_name(table.database), catalog_name(table.table))

    def internal_sql_name(self, name: str) -> str:
        return quote_parts(self.catalog, self.meta_schema, name)

    def internal_location(self, name: str) -> str | None:
        return None

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
