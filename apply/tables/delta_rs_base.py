"""delta-rs (the `deltalake` package) as every writer of the product uses it: whether it is there and checked,
which locations it writes (the local file system only), its commit conflicts retried, and the log checkpointed
as Spark would. The small MERGEs of data tables are `apply.writers.delta_rs`'s, the product's own tables
`apply.own_tables.delta_rs`'s."""

from __future__ import annotations

import logging
import os
import random
import re
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
# As Spark's MERGE (apply.base.session): a commit that lost a race is run again a few times, with jittered backoff.
_CONFLICT_ATTEMPTS = 5
# delta-rs's CommitFailedError says why; these are "another writer committed first" (it retries the rest itself).
CONFLICT_WORDS = ("concurrent", "changed since last commit", "already exists")
# String statistics are cut to this many bytes (the least upper bound raised), as Parquet writers do by default:
# delta-rs's Python writer would otherwise record whole values, however long, in every commit and checkpoint.
STATISTICS_PREFIX_BYTES = 64


def local_path(location: str) -> str | None:
    """The file-system path of a table location on the local file system (a path, or a `file:` URL); None for
    any other store."""
    scheme = _SCHEME.match(location)
    if scheme is None:
        return location
    if scheme.group(1).lower() != "file":
        return None
    rest = location[scheme.end():]
    return "/" + rest.lstrip("/") if rest.startswith("//") else rest


def _drop_stale_checksum(path: str) -> None:
    # Spark writes `_last_checkpoint` through Hadoop's local file system, which keeps a checksum file beside it;
    # delta-rs rewrites `_last_checkpoint` alone. Left there, the stale checksum fails Spark's next read of it:
    # Delta retries three times a second apart, then lists the whole log, at every first read of the table
    # (3-4 s and a page of warnings each). Without a checksum file Hadoop reads the file unchecked.
    try:
        os.remove(os.path.join(path, "_delta_log", "._last_checkpoint.crc"))
    except FileNotFoundError:
        pass
    except OSError as err:
        log.warning("%s: could not remove the stale checksum of _last_checkpoint: %s", path, err)


def checkpoint_as_spark_would(table, path: str, location: str) -> None:
    # Spark checkpoints a table's log every `delta.checkpointInterval` commits (10 unless set); delta-rs only
    # every 100. Without one every 10, each first read of the table (a restart's applied point, Spark's next
    # MERGE or DDL) would replay up to 100 commit files, and so would each of delta-rs's own loads.
    interval = int(table.metadata().configuration.get("delta.checkpointInterval", "10"))
    if interval > 0 and table.version() % interval == 0:
        try:
            table.create_checkpoint()
        except Exception as err:  # noqa: BLE001 - as Spark's: the commit is made; a later one checkpoints
            log.warning("%s: checkpoint of version %d failed: %s", location, table.version(), err)
            return
        _drop_stale_checksum(path)


def with_conflict_retries(attempt: Callable[[], bool | None], check_write: Callable[[], None] | None, location: str,
                          instead: str) -> bool:
    """`attempt()` (True done, False Spark's to do, None another writer committed first) until it is not None, at
    most a few times with jittered backoff, asking `check_write` (the job's lease) before each; False after the last
    (`instead`, Spark's statement, runs)."""
    for number in range(1, _CONFLICT_ATTEMPTS + 1):
        if check_write is not None:
            check_write()
        outcome = attempt()
        if outcome is not None:
            return outcome
        if number == _CONFLICT_ATTEMPTS:
            log.warning("%s: another writer committed first %d times in a row; %s instead", location, number, instead)
            return False
        delay = random.uniform(0, 0.2 * 2**number)
        log.warning("%s: concurrent commit (delta-rs), attempt %d of %d; again in %.2fs",
                    location, number, _CONFLICT_ATTEMPTS, delay)
        time.sleep(delay)
    return False  # (not reached)


# The deltalake releases whose writes were checked against Spark's (tests/e2e/test_delta_rs_reads.py): another
# release may record statistics or encode columns otherwise, so it leaves the MERGEs to Spark.
CHECKED_RELEASES = ((1, 6), (2, 0))


def unavailable() -> str | None:
    """Why delta-rs cannot take MERGEs in this Python (None: it can)."""
    try:
        import deltalake
        import pyarrow  # noqa: F401
    except ImportError:
        return "the deltalake package is not installed: pip install 'ticdc-delta[delta-rs]'"
    version = tuple(int(part) for part in re.findall(r"\d+", deltalake.__version__)[:2])
    low, high = CHECKED_RELEASES
    if not low <= version < high:
        return (f"deltalake {deltalake.__version__} is installed, and this release checked its writes with "
                f"{low[0]}.{low[1]} up to {high[0]}.{high[1]} (exclusive): pip install 'deltalake>={low[0]}.{low[1]},<{high[0]}'")
    return None


# Delta's primitive type names as Spark's simpleString names them (the product's column types only).
