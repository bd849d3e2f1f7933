"""Whether the processes that hold a lease have ended, where that can be known (same machine, same pid namespace).

A holder is every process that could still commit for it: the job's Python
process and, in classic PySpark, the Spark driver JVM it started (which may
outlive a killed Python process for a moment). Identities of several
processes are joined with ';', and the holder is gone only once all are.
"""

from __future__ import annotations

import os


def _machine() -> tuple[str, str] | None:
    """(boot id, pid namespace) of this process: pids mean the same thing only where both agree."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot:
            return boot.read().strip(), os.readlink("/proc/self/ns/pid")
    except OSError:  # not Linux, or no /proc: no shortcut
        return None


def _stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks since boot) of a process, None if there is none."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], fields[19]


def process_identity(pid: int | None = None) -> str | None:
    """`boot id/pid namespace/pid/start time` of a process (default: this one); None where unknown.

    The start time tells a pid reused by a later process from the one named.
    """
    machine, pid = _machine(), pid or os.getpid()
    stat = _stat(pid)
    if machine is None or stat is None:
        return None
    return f"{machine[0]}/{machine[1]}/{pid}/{stat[1]}"


def processes_identity(pids: list[int]) -> str | None:
    """The identities of several processes, ';'-joined; None if any is unknown."""
    identities = [process_identity(pid) for pid in pids]
    return None if not identities or None in identities else ";".join(identities)


def process_gone(identity: str | None) -> bool:
    """Whether `identity` names processes of this machine's current boot and pid namespace that have all ended.

    False whenever that cannot be known (another machine or container, no
    /proc): then only the lease's expiry frees it.
    """
    parts = (identity or "").split(";")
    return all(_one_gone(part) for part in parts)


def _one_gone(identity: str) -> bool:
    machine = _machine()
    parts = identity.rsplit("/", 2)
    if machine is None or len(parts) != 3 or parts[0] != f"{machine[0]}/{machine[1]}" or not parts[1].isdigit():
        return False
    stat = _stat(int(parts[1]))
    return stat is None or stat[1] != parts[2] or stat[0] in ("Z", "X")  # none, a newer one, or dead unreaped
