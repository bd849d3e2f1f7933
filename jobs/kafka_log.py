"""librdkafka's own log lines through the product's logging, rate-limited.

Left alone, librdkafka writes to stderr itself: a broker that is down gives a
`%3|...|FAIL|` line per reconnect attempt, hundreds while the job waits for it.
Given to confluent-kafka as its `logger`, the lines go through the
`ticdc_delta.librdkafka` logger instead (the job's format and level, errors
as warnings), at most one per broker and kind of line per interval; the next
one says how many were left out.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

INTERVAL_SECONDS = 30.0


class OnePerInterval(logging.Filter):
    """Lets through one record per (facility, broker) per `interval` seconds."""

    def __init__(self, interval: float = INTERVAL_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}  # key -> (last let through, left out since)

    def filter(self, record: logging.LogRecord) -> bool:
        key = _key(record)
        now = self._clock()
        with self._lock:
            last, left_out = self._seen.get(key, (None, 0))
            if last is not None and now - last < self._interval:
                self._seen[key] = (last, left_out + 1)
                return False
            self._seen[key] = (now, 0)
        if left_out:
            record.msg = f"{record.msg} (and {left_out} more like it in {now - last:.0f}s)"
        if record.levelno > logging.WARNING:
            # What librdkafka calls an error (a failed connection) is the job's to judge: it waits for the
            # broker, and ends with one error line of its own if it gives up.
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def _key(record: logging.LogRecord) -> tuple[str, str]:
    # confluent-kafka logs `logger.log(level, "%s [%s] %s", facility, client, text)`; librdkafka's text
    # begins with the broker it is about ("127.0.0.1:9092/bootstrap: Connect to ... failed").
    args = record.args if isinstance(record.args, tuple) else ()
    if len(args) != 3:
        return str(record.msg), ""
    facility, _client, text = args
    return str(facility), str(text).split(": ", 1)[0]


def librdkafka_logger() -> logging.Logger:
    """The logger to give confluent-kafka clients (`logger` setting)."""
    logger = logging.getLogger("ticdc_delta.librdkafka")
    if not any(isinstance(f, OnePerInterval) for f in logger.filters):
        logger.addFilter(OnePerInterval())
    return logger
