"""The live progress line of an until-idle drain run on a terminal.

One line on stderr, rewritten in place (carriage return): messages read
against the end offsets noted at start, rows merged, tables touched, time
spent, and the phase under way with what it is about ("merging shop.orders
(3 of 20 tables)"), so a long MERGE does not look like a stall. Nothing is
written when stderr is not a terminal (a scheduler's log) or the job runs
continuously. Log records written to the same stream first
blank the line, so they never run into it; the next update draws it again.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import TextIO

from ticdc_delta.schema_cache.events import TopicPartition

_INTERVAL = 0.2  # seconds between redraws at most; a terminal need not see every poll
_QUICK = {"kafka_poll", "decode", "gate", "collapse", "source_build"}


# How a phase (apply.base.phases.PHASES) reads on the line while it runs.
_DOING = {
    "kafka_poll": "reading", "decode": "decoding", "gate": "ordering", "table_state": "reading applied points",
    "registry": "registering tables", "collapse": "collapsing", "source_build": "preparing", "merge": "merging",
    "ddl": "applying DDL", "dead_letters": "writing dead letters", "checkpoint": "saving the checkpoint",
    "kafka_commit": "committing offsets", "metrics": "writing metrics",
}


def render(read: int, total: int, rows: int, tables: int, seconds: float, doing: str = "") -> str:
    """The progress text (without the carriage return); `doing`: the phase under way, and what about."""
    share = 100.0 if total <= 0 else min(read / total, 1.0) * 100
    text = (
        f"ticdc-delta: {read:,} of {total:,} messages ({share:.0f}%), {rows:,} rows merged, "
        f"{tables:,} table{'' if tables == 1 else 's'}, {seconds:.0f}s"
    )
    return f"{text}; {doing}" if doing else text


def messages_read(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int], position: Mapping[TopicPartition, int]
) -> tuple[int, int]:
    """(read, to read): offsets passed since `start`, and the offsets between `start` and `end`, over all partitions."""
    read = total = 0
    for tp, last in end.items():
        first = start.get(tp, last)
        span = max(last - first, 0)
        total += span
        read += min(max(position.get(tp, first) - first, 0), span)
    return read, total


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


class ProgressLine:
    def __init__(self, stream: TextIO, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._stream = stream
        self._clock = clock
        self._began = clock()
        self._drawn_at = float("-inf")
        self._shown = 0  # characters of the line now on screen; 0: none
        self._start: dict[TopicPartition, int] = {}
        self._end: dict[TopicPartition, int] = {}
        self._position: dict[TopicPartition, int] = {}
        self._rows = 0
        self._tables = 0
        self._doing = ""
        self._handlers: list[logging.Handler] = []

    @classmethod
    def for_run(cls, mode: str, stream: TextIO | None = None) -> ProgressLine | None:
        """A progress line on `stream` (default stderr) for an until-idle run on a terminal; else None."""
        stream = sys.stderr if stream is None else stream
        if mode != "until-idle" or not _is_terminal(stream):
            return None
        return cls(stream)

    def start(self, start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> None:
        """Reading begins at `start`; the drain ends at `end` (the end offsets noted at start)."""
        self._start, self._end, self._position = dict(start), dict(end), dict(start)
        for handler in logging.getLogger().handlers:
            if getattr(handler, "stream", None) is self._stream:
                handler.addFilter(self._blank)
                self._handlers.append(handler)
        self._draw(force=True)

    def read(self, position: Mapping[TopicPartition, int]) -> None:
        """After a poll: the next offset to read per partition."""
        self._position = dict(position)
        self._draw()

    def applied(self, rows: int, tables: int) -> None:
        """After a batch: rows merged and tables touched so far in the run."""
        self._rows, self._tables = rows, tables
        self._doing = ""
        self._draw()

    def doing(self, phase: str, subject: str) -> None:
        """A phase begins (`apply.base.phases.PhaseTimes.watch`): a long one shows what it is working on."""
        if phase == "kafka_poll":
            self._doing = ""  # reading shows in the counts
        else:
            self._doing = f"{_DOING.get(phase, phase)} {subject}".strip()
        # Drawn at once before a phase that waits on Spark or Delta (it may last long); the quick
        # in-memory ones only within the usual interval.
        self._draw(force=phase not in _QUICK)

    def close(self) -> None:
        """Draw the final state and end the line."""
        for handler in self._handlers:
            handler.removeFilter(self._blank)
        self._handlers = []
        self._draw(force=True)
        self._write("\n")
        self._shown = 0

    def _text(self) -> str:
        read, total = messages_read(self._start, self._end, self._position)
        return render(read, total, self._rows, self._tables, self._clock() - self._began, self._doing)

    def _draw(self, force: bool = False) -> None:
        now = self._clock()
        if not force and now - self._drawn_at < _INTERVAL:
            return
        self._drawn_at = now
        text = self._text()[: self._width()]
        # Padding covers what a longer previous line left on screen.
        self._write("\r" + text.ljust(self._shown))
        self._shown = len(text)

    def _width(self) -> int:
        """Characters that fit on the terminal's line (one column spare: no wrap on a full line)."""
        try:
            columns = os.get_terminal_size(self._stream.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
        return columns - 1 if columns > 20 else 200  # 0: a terminal that does not say

    def _blank(self, record: logging.LogRecord) -> bool:
        """Handler filter: blank the line before a log record is written to the same stream."""
        if self._shown:
            self._write("\r" + " " * self._shown + "\r")
            self._shown = 0
            self._drawn_at = float("-inf")  # draw again at the next update
        return True

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):  # the terminal went away: progress is not worth failing for
            pass
