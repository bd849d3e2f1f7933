"""Each batch's record: one JSON log line, and a row of the metrics table appended in few commits.

The log line goes to the `ticdc_delta.metrics` logger at INFO, the record's
JSON alone as the message, so a scheduler can pick it out of the job's log.
The table rows are buffered: a Delta commit costs about as much as a small
batch's MERGE, so records wait in memory until the oldest has waited
`metrics.flush_seconds`, then all are appended in one commit. Whatever waits
is appended when the run stops, normally or on an error; a crash loses the
records still waiting (never data or checkpoints: they are written first).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Callable, Mapping

from ticdc_delta.apply.base.phases import PhaseTimes
from ticdc_delta.apply.own_tables.metrics import BatchRecord, MetricsTable
from ticdc_delta.schema_cache.events import TopicPartition

METRICS_LOGGER = "ticdc_delta.metrics"
metrics_log = logging.getLogger(METRICS_LOGGER)
log = logging.getLogger(__name__)


def tso_physical_ms(commit_ts: int) -> int:
    """The wall-clock milliseconds since the epoch in a TiDB TSO (its bits above the 18 logical ones)."""
    return commit_ts >> 18


def commit_ts_lag_ms(applied_ts: int | None, now: dt.datetime) -> int | None:
    """How far the tables (applied through upstream commitTs `applied_ts`) are behind `now`, in ms."""
    if not applied_ts:
        return None
    return int(now.timestamp() * 1000) - tso_physical_ms(applied_ts)


def offset_lag(ends: Mapping[TopicPartition, int], committed: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Per partition, the messages between the committed offset and the end offset."""
    return {tp: max(end - committed.get(tp, end), 0) for tp, end in ends.items()}


# Records kept for the metrics table while appending to it fails.
MAX_WAITING = 10_000


class MetricsRecorder:
    def __init__(
        self,
        table: MetricsTable | None,
        flush_seconds: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        times: PhaseTimes | None = None,
    ) -> None:
        self._table = table
        self._times = times or PhaseTimes()
        self._flush_seconds = flush_seconds
        self._clock = clock
        self._waiting: list[BatchRecord] = []
        self._oldest = 0.0

    @property
    def waiting(self) -> int:
        """Records not yet appended to the table."""
        return len(self._waiting)

    def record(self, record: BatchRecord) -> None:
        metrics_log.info("%s", json.dumps(record.to_json(), sort_keys=False, separators=(",", ":")))
        if self._table is None:
            return
        if not self._waiting:
            self._oldest = self._clock()
        self._waiting.append(record)
        if self._clock() - self._oldest >= self._flush_seconds:
            self.flush()

    def flush(self) -> None:
        """Append every waiting record in one commit; on failure they wait for the next flush."""
        if not self._waiting or self._table is None:
            return
        try:
            with self._times.phase("metrics"):
                self._table.append(self._waiting)
        except Exception as err:  # noqa: BLE001 - metrics never stop the job; the records are kept
            log.warning("could not append %d batch records to %s (kept for the next try): %s",
                        len(self._waiting), self._table.sql_name, err)
            # Try again after another flush interval, not on every batch; keep a bounded number (every
            # record is also in the log).
            self._oldest = self._clock()
            if len(self._waiting) > MAX_WAITING:
                log.warning("dropping the %d oldest batch records not appended (they are in the log above)",
                            len(self._waiting) - MAX_WAITING)
                del self._waiting[: len(self._waiting) - MAX_WAITING]
            return
        self._waiting = []
