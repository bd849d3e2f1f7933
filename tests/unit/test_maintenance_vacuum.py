"""Maintenance's VACUUM without Spark: what it runs where VACUUM LITE cannot (`apply.maintenance`)."""

from __future__ import annotations

from contextlib import nullcontext

import pytest

from ticdc_delta.apply.maintenance import TableMaintenance
from ticdc_delta.apply.places.locator import PathLocator
from ticdc_delta.schema_cache.events import TableName


class _NoLite(Exception):
    """What Delta raises where VACUUM LITE cannot run (a Delta before 3.3, or a log that no longer covers every file
    to delete)."""

    def getCondition(self) -> str:  # noqa: N802 - PySpark's name
        return "DELTA_CANNOT_VACUUM_LITE"


class _Session:
    def __init__(self) -> None:
        self.statements: list[str] = []

    def run(self, statement: str, tags=None, *, what: str = ""):
        self.statements.append(statement)
        if statement.endswith(" LITE"):
            raise _NoLite(statement)

    def settings(self, settings):
        return nullcontext()


@pytest.mark.parametrize("hours, full", [(0, False), (24, False), (168, True)])
def test_a_full_vacuum_runs_only_where_it_keeps_what_a_merge_beside_it_may_be_writing(monkeypatch, hours, full):
    # Setup: a table of few files (no compaction), a session whose Delta cannot VACUUM LITE.
    # Expect: the full VACUUM (every file of the folder no snapshot uses, written a moment ago by an uncommitted
    # MERGE of a job running beside `maintain` included) only where it keeps at least 168 hours; below, the table
    # is not vacuumed, and says so.
    session = _Session()
    maintenance = TableMaintenance(session, PathLocator("/lake"), min_files=100, retain_hours=hours)
    monkeypatch.setattr(maintenance, "_detail", lambda name: (3, {}))
    monkeypatch.setattr(maintenance, "_idle_since_vacuum", lambda name, hours: False)
    done = maintenance.maintain(TableName("db", "t"))
    assert done.vacuumed is full and "vacuumed" in done.describe()
    fulls = [s for s in session.statements if not s.endswith(" LITE")]
    assert fulls == ([f"VACUUM delta.`/lake/db/t` RETAIN {hours} HOURS"] if full else [])
