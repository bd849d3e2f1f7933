"""Work on many tables at once: per-table statements on a bounded pool of threads, each with a Spark session
of its own.

A batch that touches many tables spends most of its time waiting: per table its applied point read from the
Delta log, then its MERGE planned, written and committed, each a few tenths of a second of mostly driver-side
latency. Delta commits of different tables are independent, so they are overlapped here; one table's work
stays on one thread, in order, so its changes and its applied point move as before. The calling thread works
too, on the job's writer; each helper thread writes through a DeltaWriter on a session of its own
(`SqlSession.fork`: commit tags are session settings), sharing what the writer knows of each table's layout.

A failure of one table's work does not stop the others already running: every table's work ends (committed
or not), then the first failure in the tables' order is raised. Committed tables hold their applied point, so
the batch run again (after a restart) skips their changes as replays and applies the rest.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from ticdc_delta.apply.writers.delta_writer import DeltaWriter

T = TypeVar("T")


class TablePool:
    def __init__(self, writer: DeltaWriter, size: int = 1) -> None:
        if size < 1:
            raise ValueError(f"a table pool needs at least one thread, not {size}")
        self._writer = writer
        self._size = size
        self._local = threading.local()
        self._executor: ThreadPoolExecutor | None = None

    @property
    def size(self) -> int:
        return self._size

    def writer(self) -> DeltaWriter:
        """The writer of the calling thread: a worker's own, or the job's outside the pool."""
        return getattr(self._local, "writer", None) or self._writer

    def run_each(self, items: Iterable[T], work: Callable[[T], object]) -> None:
        """`work(item)` for every item, up to `size` at once (the calling thread is one of them, on the job's
        writer: a fresh session's first statement costs about half a second); returns when all ended, raising
        the first failure (in the items' order) if any failed."""
        items = list(items)
        if self._size == 1 or len(items) < 2:
            for item in items:
                work(item)
            return
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self._size - 1, thread_name_prefix="ticdc-table",
                                                initializer=self._start_worker)
        todo, lock, failures = iter(enumerate(items)), threading.Lock(), {}

        def drain() -> None:
            while True:
                with lock:
                    number, item = next(todo, (None, None))
                if number is None:
                    return
                try:
                    work(item)
                except BaseException as err:  # noqa: BLE001 - raised below, once every table's work ended
                    failures[number] = err

        helpers = [self._executor.submit(drain) for _ in range(min(self._size, len(items)) - 1)]
        drain()
        for helper in helpers:
            helper.result()
        if failures:
            raise failures[min(failures)]

    def _start_worker(self) -> None:
        self._local.writer = self._writer.fork()

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
