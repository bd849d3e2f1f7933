"""Where a run's time goes: seconds and counts per phase of the batch loop.

The pipeline and the Delta writer time their phases here; the totals are
logged at the end of a run, returned in its result, and printed by the
benchmark as the time split; each batch's share goes into its metrics record
(`jobs.batch_metrics`).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

# The phases, in the order a batch goes through them.
PHASES = (
    "kafka_poll",  # waiting for and copying messages out of librdkafka
    "decode",  # bytes -> typed events
    "gate",  # ordering by watermarks, releasing complete events
    "table_state",  # a table's applied point read back from its history (once per table per run)
    "registry",  # recording tables a batch may create (apply.places.registry), before it writes them
    "collapse",  # net change per key
    "source_build",  # the MERGE source handed to Spark
    "merge",  # MERGE statements
    "ddl",  # CREATE / ALTER / rewrite / truncate / drop / rename
    "dead_letters",
    "checkpoint",
    "kafka_commit",
    "metrics",  # appending batch records to the metrics table (every metrics.flush_seconds, and at the end)
)


class PhaseTimes:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)
        self._watcher: Callable[[str, str], None] | None = None
        self._subject = ""
        self._lock = threading.Lock()

    def watch(self, watcher: Callable[[str, str], None]) -> None:
        """Tell `watcher(phase, subject)` each phase as it begins (the live progress line)."""
        self._watcher = watcher

    def working_on(self, subject: str) -> None:
        """What the phases that follow are about (e.g. a table, "3 of 20"); "" when nothing in particular."""
        self._subject = subject

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if self._watcher is not None:
            self._watcher(name, self._subject)
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            with self._lock:  # phases of tables merged at once (apply.writers.table_pool) end on several threads
                self.seconds[name] += elapsed
                self.counts[name] += 1

    def snapshot(self) -> dict[str, float]:
        """Seconds per phase, in batch order, only phases that ran."""
        return self.since({})

    def totals(self) -> dict[str, float]:
        """Seconds per phase so far, unrounded: what `since` takes to tell one batch's share."""
        return dict(self.seconds)

    def since(self, earlier: Mapping[str, float]) -> dict[str, float]:
        """Seconds per phase spent after `earlier` (a `totals()`), in batch order, only phases that ran."""
        spent = {p: s - earlier.get(p, 0.0) for p, s in self.seconds.items() if s > earlier.get(p, 0.0)}
        ordered = [p for p in PHASES if p in spent] + sorted(set(spent) - set(PHASES))
        return {p: round(spent[p], 3) for p in ordered}

    def describe(self) -> str:
        return ", ".join(f"{p} {s:.2f}s" for p, s in self.snapshot().items())
