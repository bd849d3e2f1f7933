"""A table's applied point read back from its history: how deep the read goes."""

from __future__ import annotations

import json

import pytest

from ticdc_delta.apply.tables.markers import read_progress
from ticdc_delta.apply.tables.points import AppliedPoint, TableProgress


class _History:
    """DESCRIBE HISTORY of a table whose commits (newest first) carry these userMetadata; records each statement."""

    def __init__(self, metadata: list[str | None]) -> None:
        self.metadata = metadata
        self.statements: list[str] = []

    def sql(self, statement: str):
        self.statements.append(statement)
        limit = int(statement.rsplit("LIMIT ", 1)[1]) if "LIMIT " in statement else None
        rows = [{"userMetadata": m} for m in self.metadata[:limit]]
        return type("Frame", (), {"select": lambda self, *_: self, "collect": lambda self: rows})()


def _marked(ts: int) -> str:
    return json.dumps({"ticdc_delta": {"appliedTs": ts}})


@pytest.mark.parametrize("metadata, depths, progress", [
    # The job's own commit last: one commit read.
    ([_marked(30), _marked(20)], [1], TableProgress(True, AppliedPoint(ts=30))),
    # Another writer's commits last (an OPTIMIZE, a user's statement, someone else's metadata): read deeper.
    ([None, json.dumps({"theirs": 1}), _marked(20)], [1, 200], TableProgress(True, AppliedPoint(ts=20))),
    # Unmarked all the way down: the deeper read, nothing found.
    ([None] * 3, [1, 200], TableProgress(True)),
    # An idle table under hundreds of maintenance commits (OPTIMIZE, VACUUM START/END of passes, none marked):
    # its whole history, where the marker is (before: the 200 newest only, and the table replayed from scratch).
    ([None] * 350 + [_marked(20)], [1, 200, None], TableProgress(True, AppliedPoint(ts=20))),
    ([None] * 350, [1, 200, None], TableProgress(True)),
])
def test_the_newest_commit_alone_is_read_first_and_deeper_only_past_other_writers(metadata, depths, progress):
    history = _History(metadata)
    assert read_progress(history, "delta.`/t`") == progress
    assert history.statements == ["DESCRIBE HISTORY delta.`/t`" + ("" if depth is None else f" LIMIT {depth}")
                                  for depth in depths]
