"""How a job's log lines look, wherever it runs: the command line, a wheel task, the test bed's job logs."""

from __future__ import annotations

import logging
import os

# A job's lines: its time, level and logger, then the message.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_lines_at(level: str) -> None:
    """The process's log lines in the job's format at `level` (a level's name); Py4J's noise at DEBUG only."""
    logging.basicConfig(level=level, format=LOG_FORMAT)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    if level != "DEBUG":
        for handler in logging.getLogger().handlers:
            handler.addFilter(py4j_root_info)


def py4j_root_info(record: logging.LogRecord) -> bool:
    # Py4J reports a lost JVM connection through the root logger, with its trace: at INFO when it retries, at
    # ERROR ("Exception while sending command.") when it cannot. Either way the product's own error line says what
    # happened and what to do, so those records show at DEBUG only; Py4J's named loggers keep WARNING and above.
    return record.name != "root" or f"{os.sep}py4j{os.sep}" not in record.pathname
