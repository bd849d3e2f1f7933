"""Data tables kept healthy: a table that gets a small MERGE every batch gains a file or more each time and
keeps every file a MERGE replaced. Compaction (OPTIMIZE) rewrites a table's small files into few once it has
`min_files` of them; VACUUM deletes the files no snapshot of the last `retain_hours` uses.

The job runs a pass every `maintenance.every_batches` batches, between batches (no writer of its own runs
then), within a time budget: a pass that runs out stops before its next table, and the next pass starts
there. `ticdc-delta maintain` runs one pass over every table, with no budget.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import functions as F

from ticdc_delta.apply.base.errors import error_condition
from ticdc_delta.apply.base.session import SqlSession
from ticdc_delta.apply.own_tables.base import NO_VACUUM_LITE
from ticdc_delta.apply.places.locator import TableLocator
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
    # False: nothing was written to it since its last VACUUM, less than its retention ago (nothing to compact, no
    # file a VACUUM could delete that the next one will not): passed over, adding no commit to an idle table; or
    # only a full VACUUM could run, which keeping so little is not safe beside a MERGE (`TableMaintenance._vacuum`).
    vacuumed: bool = True
    retain_hours: float | None = None  # what its VACUUM kept: the longer of the setting and the table's own

    idle: bool = False  # passed over: unchanged since its last VACUUM, less than its retention ago

    def describe(self) -> str:
        if self.idle:
            return f"{self.table}: {self.files_before} files, unchanged since its last vacuum, {self.seconds:.1f}s"
        compacted = f"{self.files_before} -> {self.files_after} files" if self.files_after != self.files_before else \
            f"{self.files_before} files, not compacted"
        return f"{self.table}: {compacted}, {'vacuumed' if self.vacuumed else 'not vacuumed'}, {self.seconds:.1f}s"


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
        """Compact `table` if it has `min_files` files or more, then vacuum it; nothing where nothing was written
        to it since its last VACUUM, less than its retention ago."""
        began = time.monotonic()
        name = self._locator.sql_name(table)
        before, properties = self._detail(name)
        own = retention_hours(properties.get(_TABLE_RETENTION))
        # The longer of the setting and the table's own promise (`[[tables]]` properties may set one): Delta's check
        # refuses a VACUUM shorter than the table's, and turning it off would delete what the table promises to keep.
        hours = self._retain_hours if own is None or own == _UNREAD else max(self._retain_hours, own)
        if self._idle_since_vacuum(name, hours):
            done = Maintained(table, before, before, time.monotonic() - began, vacuumed=False, retain_hours=hours,
                              idle=True)
            log.info("maintenance: %s", done.describe())
            return done
        after = before
        if before >= self._min_files:
            self._sql.run(f"OPTIMIZE {name}", what=f"compact {table}")
            after = self._detail(name)[0]
        vacuumed = self._vacuum(name, table, hours, own)
        done = Maintained(table, before, after, time.monotonic() - began, vacuumed=vacuumed, retain_hours=hours)
        log.info("maintenance: %s", done.describe())
        return done

    def _detail(self, name: str) -> tuple[int, dict[str, str]]:
        """(files of its snapshot, its properties)."""
        rows = self._sql.sql(f"DESCRIBE DETAIL {name}").select("numFiles", "properties").collect()
        if not rows:
            return 0, {}
        return int(rows[0]["numFiles"] or 0), dict(rows[0]["properties"] or {})

    def _idle_since_vacuum(self, name: str, hours: float) -> bool:
        """Whether the table's newest commit is a VACUUM's end, less than `hours` ago."""
        newest = self._sql.sql(f"DESCRIBE HISTORY {name} LIMIT 1")
        age = F.unix_timestamp(F.current_timestamp()) - F.unix_timestamp("timestamp")  # (one session's clock)
        rows = newest.select("operation", age.alias("age")).collect()
        return bool(rows) and rows[0]["operation"] == "VACUUM END" and rows[0]["age"] is not None \
            and rows[0]["age"] < hours * 3600

    def _vacuum(self, name: str, table: TableName, hours: float, own: float | None) -> bool:
        """VACUUM ... LITE (the files the log says were removed); a full VACUUM (every file of the folder no
        snapshot uses) only where LITE cannot run and it keeps at least Delta's default retention: a full VACUUM
        keeping less deletes the files a MERGE committing beside it has written and not yet committed (a running
        job's, under `ticdc-delta maintain`). False: not vacuumed."""
        # Delta's check compares with the table's own retention (its default where it sets none); where this did
        # not read the table's, the check stays on and decides.
        below = own != _UNREAD and hours < (_DEFAULT_RETAIN_HOURS if own is None else own)
        settings = {_RETENTION_CHECK: "false"} if below else {}
        statement, what = f"VACUUM {name} RETAIN {hours:g} HOURS", f"vacuum {table}"
        with self._sql.settings(settings):
            try:
                self._sql.run(f"{statement} LITE", what=what)
                return True
            except Exception as err:
                if error_condition(err) not in NO_VACUUM_LITE:
                    raise
                if hours < _DEFAULT_RETAIN_HOURS:
                    log.warning(
                        "maintenance: %s not vacuumed: VACUUM LITE cannot run here (%s), and a full VACUUM keeping "
                        "less than %g hours could delete the files of a MERGE committing beside it; it runs where "
                        "maintenance.vacuum_retain_hours is %g or more", table, error_condition(err) or err,
                        _DEFAULT_RETAIN_HOURS, _DEFAULT_RETAIN_HOURS)
                    return False
                self._sql.run(statement, what=what)
                return True


# `delta.deletedFileRetentionDuration`: Delta's calendar interval text ("interval 7 days", "interval 36 hours",
# "interval 1 day 12 hours", "30 days").
_TABLE_RETENTION = "delta.deletedFileRetentionDuration"
_INTERVAL_PART = re.compile(
    r"(\d+(?:\.\d+)?)\s*(year|month|week|day|hour|minute|second|millisecond|microsecond)s?", re.I)
# (Delta counts a month as 30 days when it reads a retention)
_UNIT_HOURS = {"year": 8640.0, "month": 720.0, "week": 168.0, "day": 24.0, "hour": 1.0, "minute": 1 / 60,
               "second": 1 / 3600, "millisecond": 1 / 3_600_000, "microsecond": 1 / 3_600_000_000}
_UNREAD = float("inf")  # a retention set in a way this does not read: Delta's own check decides


def retention_hours(text: str | None) -> float | None:
    """A table's `delta.deletedFileRetentionDuration` in hours; None where it sets none; infinite where it says it
    in a way this does not read (then the setting is used and Delta's own check, never turned off, decides)."""
    if not text:
        return None
    body = text.strip().lower().removeprefix("interval").strip()
    parts = _INTERVAL_PART.findall(body)
    if not parts or _INTERVAL_PART.sub("", body).strip():
        return _UNREAD
    return sum(float(amount) * _UNIT_HOURS[unit.lower()] for amount, unit in parts)
