"""A pytest plugin for the CI budget (tests/README.md): each test's CPU-seconds beside its wall seconds.

    scripts/test -p tests.cpu_per_test            # both sides; each prints its 25 dearest tests by CPU

CPU is that of pytest's process tree, read from /proc at each test's start and end: pytest itself, its live
descendants (the session's Spark JVM, brokers, job processes and their Spark JVMs) and the children they have
reaped. A process that outlives its parent (a job process's JVM killed with its group, then reparented)
goes uncounted. The two sides share the machine's cores, so a side's wall seconds depend on the other's
load; its CPU-seconds much less: compare tests by CPU. `TICDC_DELTA_CPU_JSON=<file>` also writes every
test's (node id, wall, CPU) there (`<file>.<pair>` when both pairs run). Linux only.
"""

from __future__ import annotations

import json
import os
import time

_TICKS = os.sysconf("SC_CLK_TCK")
_started: dict[str, tuple[float, float]] = {}
_spent: list[tuple[str, float, float]] = []


def _stats() -> dict[int, tuple[int, int]]:
    """Per process: its parent and its CPU ticks (its own and its reaped children's)."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as stat:
                text = stat.read()
        except OSError:  # ended meanwhile
            continue
        fields = text[text.rindex(")") + 2:].split()  # after the command's name, which may hold spaces
        found[int(name)] = (int(fields[1]), sum(int(f) for f in fields[11:15]))  # ppid; utime stime cutime cstime
    return found


def _tree_cpu_seconds() -> float:
    stats = _stats()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    ticks, waiting, seen = 0, [os.getpid()], set()
    while waiting:
        pid = waiting.pop()
        if pid in seen or pid not in stats:
            continue
        seen.add(pid)
        ticks += stats[pid][1]
        waiting.extend(children.get(pid, ()))
    return ticks / _TICKS


def pytest_runtest_logstart(nodeid, location):
    _started[nodeid] = (time.perf_counter(), _tree_cpu_seconds())


def pytest_runtest_logfinish(nodeid, location):
    wall, cpu = _started.pop(nodeid)
    _spent.append((nodeid, time.perf_counter() - wall, _tree_cpu_seconds() - cpu))


def pytest_terminal_summary(terminalreporter):
    if not _spent:
        return
    terminalreporter.write_sep("=", f"CPU per test (the 25 dearest of {len(_spent)}; {sum(c for *_, c in _spent):.0f} CPU-s in all)")
    for nodeid, wall, cpu in sorted(_spent, key=lambda spent: -spent[2])[:25]:
        terminalreporter.write_line(f"{cpu:7.1f} CPU-s {wall:7.1f} s  {nodeid}")
    if path := os.environ.get("TICDC_DELTA_CPU_JSON"):
        if pair := os.environ.get("TICDC_DELTA_PAIR"):  # (both sides at once: a file each)
            path = f"{path}.{pair}"
        with open(path, "w") as out:
            json.dump(_spent, out)
