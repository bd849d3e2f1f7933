"""Which version of each table holds upstream at a commitTs, for one table and consistently for several."""

from __future__ import annotations

import datetime as dt

import pytest

from ticdc_delta.apply.as_of import ExactSpan, commit_ts_at, consistent_point, exact_spans
from ticdc_delta.apply.progress import AppliedVersion, upstream_time
from ticdc_delta.apply.tables.points import AppliedPoint, PendingBackfill
from ticdc_delta.exceptions import ApplyError
from ticdc_delta.schema_cache.events import TopicPartition

_AT = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def _version(version: int, applied: int | None, first: int | None = None, *, pending: bool = False,
             operation: str = "MERGE") -> AppliedVersion:
    return AppliedVersion(
        version, _AT, operation, None if applied is None else AppliedPoint(ts=applied),
        PendingBackfill("ddl", ("c",)) if pending else None, {"firstTs": first} if first is not None else None,
    )


def test_a_version_holds_upstream_until_the_next_versions_oldest_change():
    # Setup: v0 create (unmarked), v1 through 10, v2 (oldest change 15) through 20, v3 a DDL step with a
    # pending backfill, v4 (no firstTs: a DDL or an older release's commit) through 30, v5 (firstTs 41) through 50.
    # v6 an OPTIMIZE, v7 an unmarked structure alignment, v8 (firstTs 70) through 80.
    history = [_version(8, 80, 70), _version(7, None, operation="ADD COLUMNS"), _version(6, None, operation="OPTIMIZE"),
               _version(5, 50, 41), _version(4, 30), _version(3, 25, pending=True), _version(2, 20, 15),
               _version(1, 10, 1), _version(0, None)]
    # Expect: v1 from 10 up to 14; v2 only at 20 (the pending step follows it); v4 from 30 to 40; v5's rows only
    # at 50 (the alignment follows it; the OPTIMIZE does not count), read at v6 (the OPTIMIZE: the same rows in
    # the files a VACUUM keeps, where v5's may be gone); v8 at 80.
    assert exact_spans(history) == [ExactSpan(1, 10, 14), ExactSpan(2, 20, 20), ExactSpan(4, 30, 40),
                                    ExactSpan(6, 50, 50), ExactSpan(8, 80, 80)]


def test_tables_applied_in_offset_order_are_refused():
    entry = AppliedVersion(1, _AT, "MERGE", AppliedPoint.at_offsets({TopicPartition("t", 0): 5}))
    with pytest.raises(ApplyError, match="offset order"):
        exact_spans([entry])


def test_the_consistent_point_is_the_newest_every_table_holds_exactly():
    spans = {
        "a": [ExactSpan(1, 10, 14), ExactSpan(2, 20, 29), ExactSpan(3, 30, 30)],
        "b": [ExactSpan(7, 12, 22), ExactSpan(8, 25, 25)],
    }
    assert consistent_point(spans, 100).commit_ts == 25 and consistent_point(spans, 100).versions == {"a": 2, "b": 8}
    assert consistent_point(spans, 24).commit_ts == 22 and consistent_point(spans, 24).versions == {"a": 2, "b": 7}
    assert consistent_point(spans, 19).commit_ts == 14 and consistent_point(spans, 19).versions == {"a": 1, "b": 7}
    assert consistent_point(spans, 13).commit_ts == 13
    with pytest.raises(ApplyError, match="no commitTs at or before 11"):
        consistent_point(spans, 11)
    with pytest.raises(ApplyError, match="c: no version"):
        consistent_point({**spans, "c": []}, 100)
    # A dead-letter replay: a newer version at the same applied point, the one read.
    replayed = {"a": [ExactSpan(1, 10, 10), ExactSpan(2, 10, 10)]}
    assert consistent_point(replayed, 10).versions == {"a": 2}


def test_a_time_means_every_commit_in_its_millisecond():
    ts = commit_ts_at(dt.datetime(2026, 3, 1, 12, 0, 0, 5000, tzinfo=dt.timezone.utc))
    assert upstream_time(ts) == dt.datetime(2026, 3, 1, 12, 0, 0, 5000, tzinfo=dt.timezone.utc)
    assert upstream_time(ts + 1) > upstream_time(ts)
    assert commit_ts_at(dt.datetime(2026, 3, 1, 12, 0, 0, 5000)) == ts  # naive: UTC
