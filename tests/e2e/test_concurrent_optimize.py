"""Another writer on a target table (a user's OPTIMIZE, a compaction job) while the job MERGEs into it."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from tests.support import assert_table, publish, run_job
from tests.workloads import ITEMS_DDL, item, items_feed
from ticdc_delta.apply.places.locator import PathLocator
from ticdc_delta.apply.progress import applied_history
from ticdc_delta.apply.writers.delta_writer import DeltaWriter
from ticdc_delta.schema_cache.events import TableName

pytestmark = [pytest.mark.e2e, pytest.mark.both_pairs(
    "OPTIMIZE and the conflict errors a losing MERGE gets differ between Delta releases"
)]


def _held_until_raced(gate: str):
    """A filter for a MERGE's source: in the Spark task reading it (after the MERGE took its snapshot of
    the target), it waits until the OPTIMIZE started for that MERGE has committed. Files carry the
    signals: the task runs in a Python worker, not in the test's process."""

    def hold(token):  # no type hints: PySpark would take it for a pandas UDF
        reading, raced = Path(gate, f"{token}.reading"), Path(gate, f"{token}.raced")
        if not raced.exists():
            reading.touch()
            deadline = time.time() + 300
            while not raced.exists() and time.time() < deadline:
                time.sleep(0.05)
        return True

    return F.udf(hold, "BOOLEAN").asNondeterministic()


class _OptimizeDuringEachMerge:
    """A compaction loop that commits an OPTIMIZE of the table in the middle of each of the job's MERGEs.

    While a MERGE's source is read (its snapshot of the table taken), the loop,
    in a thread of its own on the test's session, runs OPTIMIZE and commits;
    the MERGE goes on afterwards, so its commit meets a concurrent one, as it
    would with a user's OPTIMIZE or a compaction job. A retried MERGE is not
    held again. Only MERGEs are held (a batch into a table known empty is a
    blind append, which an OPTIMIZE cannot conflict with).
    """

    def __init__(self, spark, table: str, gate: Path, monkeypatch) -> None:
        self._spark = spark
        self._table = table
        self._gate = gate
        self._stop = threading.Event()
        self._token = threading.local()
        self.compactions = 0  # OPTIMIZE commits that replaced files
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._compact, name="optimize-loop", daemon=True)
        self._hold_merges(monkeypatch)

    def _hold_merges(self, monkeypatch) -> None:
        hold, tokens, token = _held_until_raced(str(self._gate)), itertools.count(1), self._token
        merge, create = DeltaWriter.merge, type(self._spark).createDataFrame

        def held_merge(writer, *args, into_empty=False, **kwargs):
            token.value = None if into_empty else next(tokens)
            try:
                return merge(writer, *args, into_empty=into_empty, **kwargs)
            finally:
                token.value = None

        def held_source(session, *args, **kwargs):
            frame = create(session, *args, **kwargs)
            # Set in the job's thread only, while it merges; the MERGE's source is the first frame made
            # there (a renewal of the lease the MERGE's guard may make comes after it).
            held, token.value = getattr(token, "value", None), None
            return frame if held is None else frame.where(hold(F.lit(held)))

        monkeypatch.setattr(DeltaWriter, "merge", held_merge)
        monkeypatch.setattr(type(self._spark), "createDataFrame", held_source)

    def __enter__(self) -> _OptimizeDuringEachMerge:
        self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._stop.set()
        self._thread.join(300)

    def _compact(self) -> None:
        while not self._stop.is_set():
            for reading in sorted(self._gate.glob("*.reading")):
                raced = reading.with_suffix(".raced")
                if raced.exists():
                    continue
                try:
                    metrics = self._spark.sql(f"OPTIMIZE {self._table}").collect()[0]["metrics"]
                    self.compactions += metrics["numFilesRemoved"] > 0
                except Exception as err:  # noqa: BLE001 - reported by the test
                    self.errors.append(err)
                raced.touch()
            self._stop.wait(0.05)


# Four or five MERGEs, each met by an OPTIMIZE: a conflict and a retry each time (40 transactions and a
# dozen MERGEs until 2026-12-06: the same behaviour twice over, 14-18 s more of each CI side).
TRANSACTIONS = 20


def _items_stream():
    """Many small transactions into one table. All but two only insert new keys: such a MERGE adds a data
    file and leaves the others, so the table always has small files for OPTIMIZE to compact. Two also
    update and delete older keys (their files are rewritten)."""
    feed = items_feed()
    for t in range(TRANSACTIONS):
        with feed.transaction() as txn:
            for i in range(4 * t, 4 * t + 4):
                txn.insert("shop", "items", item(i))
            if t in (TRANSACTIONS // 2 - 1, TRANSACTIONS - 1):
                txn.update("shop", "items", [t], {"price": Decimal("7.77")})
                txn.delete("shop", "items", [t + 1])
    return feed


def test_a_concurrent_optimize_makes_merges_retry_never_fail_or_lose_or_double(
    spark, kafka, tmp_path, unique, caplog, monkeypatch
):
    # Setup: 20 transactions (inserts, updates, deletes) into shop.items read in batches of 20
    # messages, so the job makes four or five MERGE commits; during each MERGE, after it read the
    # table, a compaction thread on the test's session commits an OPTIMIZE of the table.
    # Expect: Delta refuses those MERGE commits (ConcurrentAppendException or
    # ConcurrentDeleteReadException, by release); the job logs each and runs the MERGE again, and
    # finishes; the table equals upstream; no applied commitTs has two Delta versions.
    feed = _items_stream()
    topic, target, gate = f"optimize-{unique}", tmp_path / "delta", tmp_path / "gate"
    gate.mkdir()
    publish(kafka, topic, feed.messages)
    table = PathLocator(str(target)).sql_name(TableName("shop", "items"))
    caplog.set_level(logging.WARNING, logger="ticdc_delta.apply.base.session")

    with _OptimizeDuringEachMerge(spark, table, gate, monkeypatch) as optimize:
        # Spark's MERGEs (its conflict errors and retries); delta-rs's, which the default would commit these small
        # batches with, meet other writers in tests/e2e/test_delta_rs_merges.py.
        run_job(spark, kafka, topic, str(target), f"g-{unique}", run={"batch_max_messages": 20},
                target={"small_merge_writer": "spark"})

    assert optimize.errors == []
    merges_held = len(list(gate.glob("*.raced")))
    retries = [r.getMessage() for r in caplog.records if "merge shop.items: concurrent commit" in r.getMessage()]
    assert merges_held >= 3 and optimize.compactions >= 2, (merges_held, optimize.compactions)
    # Each OPTIMIZE that replaced files made the MERGE it interrupted run again, once.
    assert len(retries) == optimize.compactions, retries
    assert all("attempt 1 of 5" in r for r in retries), retries
    assert_table(spark, str(target), feed, "shop", "items", ITEMS_DDL)
    history = applied_history(spark, table)
    per_ts = Counter(v.applied_ts for v in history if v.applied_ts is not None)
    assert [ts for ts, n in per_ts.items() if n > 1] == []
    assert {v.operation for v in history} >= {"MERGE", "OPTIMIZE"}
