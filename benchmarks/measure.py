"""What the benchmark sections share to measure and print: section headings with the machine's load, and the
memory of a process tree read from /proc."""

from __future__ import annotations

import os


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


def section(title: str) -> None:
    print(f"\n== {title} ({load()})", flush=True)


def rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def descendants(pid: int) -> list[int]:
    found, stack = [], [pid]
    while stack:
        current = stack.pop()
        try:
            with open(f"/proc/{current}/task/{current}/children") as children:
                kids = [int(c) for c in children.read().split()]
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        found.extend(kids)
        stack.extend(kids)
    return found


def log_tail(path, lines: int = 30) -> str:
    """The last `lines` lines of a job's log, for an error: the log itself is deleted with the section's scratch."""
    try:
        with open(path, errors="replace") as log:
            kept = log.read().splitlines()[-lines:]
    except OSError as err:
        return f"(its log {path} could not be read: {err})"
    return "\n".join(f"  | {line}" for line in kept)
