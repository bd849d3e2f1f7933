"""Tables merged at once (`apply.writers.table_pool`): each thread its own writer, all work ends before a failure is raised."""

from __future__ import annotations

import threading
import time

import pytest

from ticdc_delta.apply.writers.table_pool import TablePool


class _Writer:
    """Stands in for a DeltaWriter: what matters here is that each worker forks its own."""

    def __init__(self, name: str = "job") -> None:
        self.name = name
        self.forks: list[_Writer] = []

    def fork(self) -> _Writer:
        twin = _Writer(f"fork-{len(self.forks)}")
        self.forks.append(twin)
        return twin


def test_tables_run_at_once_each_thread_with_a_writer_of_its_own():
    # Setup: 6 tables' work on a pool of 3; each waits until 3 are running at once (or 5 s).
    # Expect: 3 ran at the same time: the caller on the job's writer, two helpers on writers forked from it;
    #    every table's work ran once.
    job, running, peak, lock = _Writer(), [0], [0], threading.Lock()
    pool, seen = TablePool(job, 3), {}

    def work(table: str) -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            seen[table] = pool.writer()
        deadline = time.monotonic() + 5
        while peak[0] < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        with lock:
            running[0] -= 1

    try:
        pool.run_each([f"t{i}" for i in range(6)], work)
    finally:
        pool.close()
    assert peak[0] == 3 and sorted(seen) == [f"t{i}" for i in range(6)]
    # The calling thread is one of the three, on the job's writer; the two helpers forked theirs.
    assert len(job.forks) == 2 and {w.name for w in seen.values()} <= {"job", *(f.name for f in job.forks)}
    assert pool.writer() is job  # outside the helpers: the job's writer


def test_a_failing_table_lets_the_others_finish_then_its_error_is_raised():
    # Setup: three tables; the first fails at once, the others take a moment and record that they ended.
    # Expect: both others ended before run_each raised the first table's error.
    pool, ended = TablePool(_Writer(), 3), []

    def work(table: str) -> None:
        if table == "a":
            raise RuntimeError("a's MERGE failed")
        time.sleep(0.2)
        ended.append(table)

    with pytest.raises(RuntimeError, match="a's MERGE failed"):
        pool.run_each(["a", "b", "c"], work)
    pool.close()
    assert sorted(ended) == ["b", "c"]


def test_one_thread_runs_in_the_caller_in_order_on_the_job_s_writer():
    job = _Writer()
    pool, order = TablePool(job, 1), []
    pool.run_each(["x", "y", "z"], lambda table: order.append((table, pool.writer(), threading.current_thread())))
    assert [t for t, _, _ in order] == ["x", "y", "z"]
    assert all(w is job and th is threading.current_thread() for _, w, th in order) and not job.forks
