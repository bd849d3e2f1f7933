"""Which folder under `target.path` holds each table: chosen once, when the job first creates the table.

Object stores cannot move or delete a folder in one step (S3 copies and deletes every object), so a RENAME
is one commit to the product's table registry (the new name takes over the old name's folder) and a DROP
one commit marking the name gone; the folders stay where they are. A name's folder is
`<database>/<table>` (names encoded by `path_segment`), where readers look for it, unless that folder is
held by another table (one renamed away from this name): then `<database>/<table>.<n>`, `.` being a
character `path_segment` never writes. Folders no name holds any more (a dropped table, or one a
re-create did not take back) are deleted after the batch's checkpoint (`PathLocator.clean_up`).

Folders are kept relative to the root, so a lake copied elsewhere (a local folder to a bucket) still
resolves. Registry rows of releases before this one name no folder: those tables are at their usual one
(those releases moved the folder on a rename).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from typing import NamedTuple

from ticdc_delta.apply.base.identifiers import path_segment
from ticdc_delta.exceptions import ApplyError
from ticdc_delta.schema_cache.events import TableName


class Entry(NamedTuple):
    """One registry row: `folder` None with `removed` False is a row of an older release (the usual folder)."""

    table: TableName
    folder: str | None
    removed: bool
    seq: int  # rows of one commit share it; a later commit's rows win; older releases' rows are 0
    consumer: str = ""  # who registered it (`status` lists a consumer's tables); folders are the root's


# What `usual_folder` and `choose` make: a registry row naming anything else (`..`, an absolute path) is
# refused, never followed (the job deletes folders no name holds).
_FOLDER = re.compile(r"[A-Za-z0-9_-]+/[A-Za-z0-9_-]+(\.[0-9]+)?")


def usual_folder(table: TableName) -> str:
    return f"{path_segment(table.database)}/{path_segment(table.table)}"


class TablePlaces:
    """The registry's answer for every name this consumer has registered, kept current as the job records more."""

    def __init__(self) -> None:
        # Of every consumer writing under the root: a second consumer (a replay under a new group) finds
        # the tables where the first put them. None: the name is gone (dropped or renamed away).
        self._folders: dict[TableName, str | None] = {}
        self._consumers: dict[TableName, set[str]] = {}
        self._freed: set[str] = set()  # folders a name left while this process ran
        self._seq = 0
        self._lock = threading.Lock()
        self.loaded = False

    def load(self, entries: Iterable[Entry]) -> None:
        with self._lock:
            for entry in sorted(entries, key=lambda e: e.seq):
                self._take(entry)
                self._seq = max(self._seq, entry.seq)
            self.loaded = True

    def _take(self, entry: Entry) -> None:
        if entry.folder is not None and not _FOLDER.fullmatch(entry.folder):
            raise ApplyError(f"the table registry gives {entry.table} the folder {entry.folder!r}, which this "
                             "product never writes; refusing to read or delete it: restore `_ticdc/tables`")
        if entry.removed:
            # Also from commits before this process: whether their folders were deleted is not recorded.
            before = self._folders.get(entry.table) or entry.folder
            if before is not None:
                self._freed.add(before)
        self._folders[entry.table] = None if entry.removed else (entry.folder or usual_folder(entry.table))
        self._consumers.setdefault(entry.table, set()).add(entry.consumer)

    def folder(self, table: TableName) -> str:
        """Where `table` is (a name never registered, or gone: its usual folder)."""
        return self._folders.get(table) or usual_folder(table)

    def known(self, table: TableName, consumer: str) -> bool:
        """Whether `consumer` has registered `table`."""
        return consumer in self._consumers.get(table, ())

    def live(self, table: TableName) -> bool:
        return self._folders.get(table) is not None

    def gone(self, table: TableName) -> bool:
        """Dropped or renamed away (and not created again since): whatever its folder holds is not it."""
        return table in self._folders and self._folders[table] is None

    def names(self, consumer: str) -> list[TableName]:
        """The names `consumer` registered that hold a table, sorted."""
        return sorted((t for t, f in self._folders.items() if f is not None and consumer in self._consumers[t]),
                      key=lambda t: (t.database, t.table))

    def held(self) -> dict[TableName, str]:
        """Every consumer's names that hold a table, and their folders."""
        return {t: f for t, f in self._folders.items() if f is not None}

    def choose(self, table: TableName) -> str:
        """The folder for `table` about to be created: its own if it holds one, else its usual folder unless
        another name holds that, else the first free `<usual>.<n>`."""
        current = self._folders.get(table)
        if current is not None:
            return current
        held = {f for t, f in self._folders.items() if f is not None and t != table}
        folder, n = usual_folder(table), 2
        while folder in held:
            folder, n = f"{usual_folder(table)}.{n}", n + 1
        return folder

    def next_seq(self) -> int:
        with self._lock:
            self._seq += 1
            return self._seq

    def record(self, entries: Iterable[Entry]) -> None:
        """What a registry commit just recorded."""
        with self._lock:
            for entry in entries:
                self._take(entry)

    def freed(self) -> bool:
        """Whether a name left a folder since the last `take_freed`."""
        return bool(self._freed)

    def take_freed(self) -> list[str]:
        """Folders no name holds any more (each handed out once), for deletion."""
        with self._lock:
            held = {f for f in self._folders.values() if f is not None}
            freed = sorted(self._freed - held)
            self._freed.clear()
            return freed
