"""Where a run's time goes: seconds and counts per phase of the batch loop.

The pipeline and the Delta writer time their phases here; the totals are
logged at the end of a run, returned in its result, and printed by the
benchmark as the time split.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

# The phases, in the order a batch goes through them.
PHASES = (
    "kafka_poll",  # waiting for and copying messages out of librdkafka
    "decode",  # bytes -> typed events
    "gate",  # ordering by watermarks, releasing complete events
    "table_state",  # a table's applied point read back from its history (once per table per run)
    "collapse",  # net change per key
    "source_build",  # the MERGE source handed to Spark
    "merge",  # MERGE statements
    "ddl",  # CREATE / ALTER / rewrite / truncate / drop / rename
    "dead_letters",
    "checkpoint",
    "kafka_commit",
)


class PhaseTimes:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start
            self.counts[name] += 1

    def snapshot(self) -> dict[str, float]:
        """Seconds per phase, in batch order, only phases that ran."""
        ordered = [p for p in PHASES if p in self.seconds] + sorted(set(self.seconds) - set(PHASES))
        return {p: round(self.seconds[p], 3) for p in ordered}

    def describe(self) -> str:
        return ", ".join(f"{p} {s:.2f}s" for p, s in self.snapshot().items())
