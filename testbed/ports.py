"""Ports for the local servers tests start (Kafka, its controller, Apicurio, MariaDB).

Taken below the kernel's ephemeral range, never from it. A client of a stopped server keeps reconnecting to
its port (librdkafka every few seconds through a broker outage); had that port been an ephemeral one, the
kernel could hand it to the next listening socket bound to port 0, such as the one PySpark's `collect()`
opens for its results: the client's bytes then fail PySpark's authentication and the collect fails with
CANNOT_OPEN_SOCKET. That is what a failure seen once in a clean-clone run looked like (the JVM's "serve-
DataFrame" thread reporting a failed authentication, then the refused connection, on the side whose broker
tests stop and restart a broker).
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _below_ephemeral() -> tuple[int, int]:
    try:
        first = int(_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        first = 32768  # Linux's default
    return 10000, max(10001, first - 1)


def free_port(*, besides: tuple[int | None, ...] = ()) -> int:
    """A port below the ephemeral range that nothing on 127.0.0.1 listens on now, and none of `besides` (ports
    taken for the same server and not bound yet: two picks once gave a broker's two listeners one port)."""
    low, high = _below_ephemeral()
    for _ in range(200):
        port = random.randint(low, high)
        if port in besides:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port between {low} and {high}")
