"""Data tables kept healthy: a table that gets a small MERGE every batch gains a file or more each time and
keeps every file a MERGE replaced. Compaction (OPTIMIZE) rewrites a table's small files into few once it has
`min_files` of them; VACUUM deletes the files no snapshot of the last `retain_hours` uses.

The job runs a pass every `maintenance.every_batches` batches, between batches (no writer of its own runs
then), within a time budget: a pass that runs out stops before its next table, and the next pass starts
there. `ticdc-delta maintain` runs one pass over every table, with no budget.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ticdc_delta.apply.internal_tables import vacuum_internal_table
from ticdc_delta.apply.locator import TableLocator
from ticdc_delta.apply.spark_errors import error_condition
from ticdc_delta.apply.sql_session import SqlSession
from ticdc_delta.schema_cache.events import TableName

log = logging.getLogger(__name__)

# Delta refuses a VACUUM that keeps less than its default retention (7 days) unless told it is meant.
_DEFAULT_RETAIN_HOURS = 168.0
_RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
# A registered table that is no longer there (a catalog table dropped upstream).
_NOT_THERE = {"TABLE_OR_VIEW_NOT_FOUND", "DELTA_TABLE_NOT_FOUND", "DELTA_MISSING_DELTA_TABLE", "PATH_NOT_FOUND"}


@dataclass(frozen=True)
class Maintained:
    table: TableName
    files_before: int
    files_after: int
    seconds: float

    def describe(self) -> str:
        compacted = f"{self.files_before} -> {self.files_after} files" if self.files_after != self.files_before else \
            f"{self.files_before} files, not compacted"
        return f"{self.table}: {compacted}, vacuumed, {self.seconds:.1f}s"


class TableMaintenance:
    """Compacts and vacuums data tables (those of `locator`), round-robin across passes."""

    def __init__(self, sql: SqlSession, locator: TableLocator, *, min_files: int, retain_hours: float) -> None:
        self._sql, self._locator = sql, locator
        self._min_files, self._retain_hours = min_files, retain_hours
        self._start = 0  # where the next pass begins in the sorted table list

    def run(self, tables: Sequence[TableName], budget_seconds: float | None = None) -> list[Maintained]:
        """Maintain `tables` in order from where the last pass stopped; no table is begun once `budget_seconds`
        have passed (None: every table)."""
        ordered = sorted(tables, key=lambda t: (t.database, t.table))
        if not ordered:
            return []
        start = self._start % len(ordered)
        began, done = time.monotonic(), []
        for offset in range(len(ordered)):
            if budget_seconds is not None and done and time.monotonic() - began >= budget_seconds:
                self._start = start + offset
                log.info("maintenance: %d of %d tables this pass (budget %gs); the next pass goes on from %s",
                         len(done), len(ordered), budget_seconds, ordered[(start + offset) % len(ordered)])
                return done
            table = ordered[(start + offset) % len(ordered)]
            try:
                done.append(self.maintain(table))
            except Exception as err:
                if error_condition(err) not in _NOT_THERE:
                    raise
                log.info("maintenance: %s is not there (dropped upstream): passed over", table)
        self._start = 0
        return done

    def maintain(self, table: TableName) -> Maintained:
        """Compact `table` if it has `min_files` files or more, then vacuum it."""
        began = time.monotonic()
        name = self._locator.sql_name(table)
        before = after = self._files(name)
        if before >= self._min_files:
            self._sql.run(f"OPTIMIZE {name}", what=f"compact {table}")
            after = self._files(name)
        self._vacuum(name, table)
        done = Maintained(table, before, after, time.monotonic() - began)
        log.info("maintenance: %s", done.describe())
        return done

    def _files(self, name: str) -> int:
        rows = self._sql.sql(f"DESCRIBE DETAIL {name}").select("numFiles").collect()
        return int(rows[0][0] or 0) if rows else 0

    def _vacuum(self, name: str, table: TableName) -> None:
        hours = self._retain_hours
        settings = {_RETENTION_CHECK: "false"} if hours < _DEFAULT_RETAIN_HOURS else {}
        with self._sql.settings(settings):
            vacuum_internal_table(self._sql, f"{name} RETAIN {hours:g} HOURS", f"vacuum {table}")
