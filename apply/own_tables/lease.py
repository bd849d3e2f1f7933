"""One writer per consumer: a lease in the product's own `leases` table.

Two jobs running the same consumer (`kafka.group_id`) into the same target
would both apply every change, interleaved with each other's checkpoints.
So a job holds the consumer's lease while it runs: one row per consumer in
`<target>/_ticdc/leases` (catalog mode: `<catalog>.<meta_schema>.leases`)
with the holder's `owner` id (random, one per process: a restarted job is a
new owner), an `epoch` that grows by one whenever the lease changes hands,
a `revision` that grows with every write, and `expires_at`.

- Taking it: where the leases table is missing, create it holding this
  job's row (one commit; of two jobs creating it at once, one commit wins
  and the other job goes on as below). Otherwise read the row; if it is
  free (none, released, or expired) write
  the new owner with one UPDATE that changes the row only if its revision is
  still the one read (Delta reports the rows it changed). Of two jobs taking
  it at once, Delta's optimistic concurrency refuses one commit (a
  concurrent-modification error): that one takes it as "someone else wrote
  first", reads the row again and decides again (the UPDATE is not simply run
  again: against a holder that keeps renewing, it could lose every race).
  The job's first read (its checkpoint) runs while the take is written where
  nobody can write meanwhile (`acquire`).
- Held by a live job: the newcomer waits, re-reading, until the lease is
  renewed (its holder is running: refuse with LeaseHeldError), released, or
  expired (its holder was killed: take it over). A killed job's lease
  therefore blocks the next run for at most `run.lease_seconds`; on the
  machine it ran on, not at all: the row names the holder's processes (its
  Python process and Spark driver JVM: boot, pid namespace, pid, start time),
  and a holder whose processes have all ended is taken over at once (a job
  restarted after a crash, a supervisor's restart). Not on Spark Connect,
  whose server may still run a statement of a client that died.
- Renewing: a heartbeat thread, on a Spark session of its own, renews every
  quarter of the lease (the same conditional UPDATE: a renewal that finds
  another owner or epoch means the lease was lost), so even a MERGE that
  takes longer than the lease does not lose it. (On Spark Connect the
  session cannot be forked: renewals wait for the job's statement, and the
  job warns that run.lease_seconds must exceed its longest one.)
- The guard (`check`), asked before every write the job makes: refused once
  the lease is known lost; otherwise the lease counts as held for half its
  time after the start of the last successful renewal (by this process's
  monotonic clock). Past that (the heartbeat stalled: a long pause of the
  whole process, storage unreachable) the guard renews before answering, and
  a renewal that finds a new owner stops the job before it writes.
- Released (owner cleared) when the job stops, normally or on an error, so
  the next run starts at once.

Clocks: expiry is wall-clock time written by the holder and read by other
machines; the holder stops trusting its lease after half of it, so clocks may
disagree by up to half the lease before two jobs could both believe they
hold it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from ticdc_delta.apply.own_tables.lease_store import LeaseRecord, LeaseStore, micros, shown
from ticdc_delta.apply.own_tables.process_identity import process_gone, processes_identity
from ticdc_delta.exceptions import ApplyError, LeaseHeldError, LeaseLostError

log = logging.getLogger(__name__)

T = TypeVar("T")

# Whoever writes a row's revision that is a multiple of this vacuums the table (one row renewed
# every 15 s: about every 8 hours), from the heartbeat thread.
_TIDY_EVERY_REVISIONS = 2000
# The guard trusts a renewal for this share of the lease; the rest is margin for clocks of
# other machines that run ahead, and for a pause between the guard and the commit it guards.
_TRUSTED_SHARE = 0.5
_HEARTBEATS_PER_LEASE = 4
# A renewal whose write met another commit to the table (another consumer's lease) is tried
# again this many times before the renewal fails.
_RENEWAL_ATTEMPTS = 5

def committing_processes(spark, isolated: bool) -> str | None:
    """The identity of the processes that commit for a job on `spark`: this one and its Spark driver JVM.

    None on Spark Connect (`isolated` False: statements run on a server that
    outlives its client), so a dead client's lease is only taken over at its expiry.
    """
    if not isolated:
        return None
    try:
        jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    except Exception:  # noqa: BLE001 - no local JVM to name: no shortcut
        return None
    return processes_identity(sorted({os.getpid(), jvm_pid}))


class ConsumerLease:
    """This process's hold on one consumer's lease (see the module's description)."""

    def __init__(
        self,
        store: LeaseStore,
        consumer: str,
        seconds: float,
        *,
        wall: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        gone: Callable[[str | None], bool] = process_gone,
        process: str | None = None,
        overlap: bool = True,
    ) -> None:
        """`process`: what `apply.own_tables.process_identity` knows of the processes that commit for this job
        (written into the row; None: only the lease's expiry frees it when the job dies). `overlap` False:
        the job's first read runs after the take, not alongside it (`acquire`: a session that cannot be
        forked runs one statement at a time)."""
        self._store = store
        self._consumer = consumer
        self._seconds = seconds
        self._wall = wall
        self._clock = clock
        self._sleep = sleep
        self._gone = gone
        self._overlap = overlap
        self.owner = uuid.uuid4().hex
        self.holder = f"{socket.gethostname()} pid {os.getpid()}"
        self.process = process
        self._record: LeaseRecord | None = None
        self._confirmed_at = 0.0  # monotonic time at the start of the last successful take or renewal
        self._lost: LeaseLostError | None = None
        self._lock = threading.RLock()  # one take, renewal or release at a time
        self._stopping = threading.Event()
        self._warned_slow = False

    @property
    def epoch(self) -> int | None:
        return None if self._record is None else self._record.epoch

    # --- taking it ------------------------------------------------------------------

    def acquire(self, meanwhile: Callable[[], T] | None = None) -> T | None:
        """Take the lease, waiting while a holder that may be gone has not yet expired; then `meanwhile`'s result.

        `meanwhile`: the job's first read once it holds the lease (its
        checkpoint). Where the lease was seen released, never taken, or held by
        processes that have ended, nobody can write until the take lands, and a
        holder coming in between would change the row and fail the take: so the
        read runs while the take is written (on a session of its own), and is
        discarded and made again with the next attempt where the take fails
        (about 0.3-0.45 s a run on a warm session, measured). After an expired
        lease (a holder that may be paused mid-commit), and where the session
        cannot be forked, it runs after the take. If it fails, the lease is
        given back and its error raised.

        Raises LeaseHeldError when the holder shows it is alive (it renews or
        re-takes the lease meanwhile), or when the lease stays valid beyond
        twice this job's lease time (a job with a longer lease).
        """
        return self._then(self._take_with(meanwhile))

    def _take_with(self, meanwhile: Callable[[], T] | None) -> _Alongside:
        """Take the lease (see `acquire`); `meanwhile`'s read, made or under way."""
        now_us, started = micros(self._wall()), self._clock()
        first = self._successor(None, now_us)
        if self._store.prepare(first):  # a new table, made holding this job's row: nothing to read or decide
            self._taken(first, None, now_us, started)
            return _Alongside(meanwhile)
        observed: LeaseRecord | None = None
        give_up_at = 0.0
        while True:
            seen = self._store.read(self._consumer)
            now_us = micros(self._wall())
            gone = seen is not None and self._gone(seen.process)
            if seen is None or seen.free_at(now_us) or gone:
                quiet = seen is None or seen.owner is None or gone  # (not merely expired)
                alongside = _Alongside(meanwhile if quiet and self._overlap else None)
                if not self._take(seen, now_us):
                    alongside.discard()
                    continue  # someone else changed the row between our read and our write: decide again
                return alongside if alongside.started else _Alongside(meanwhile)
            if observed is None:
                observed = seen
                wait = min((seen.expires_us - now_us) / 1e6, 2 * self._seconds)
                give_up_at = self._clock() + wait + self._poll_seconds()
                log.warning(
                    "consumer %s: another job holds its lease (%s) until %s; waiting up to %.0fs to see whether it "
                    "renews it (that job is running: this one stops) or lets it expire (that job was killed: this "
                    "one takes over)",
                    self._consumer, seen.describe(), shown(seen.expires_us), wait,
                )
            elif seen.revision != observed.revision:
                raise LeaseHeldError(
                    f"consumer {self._consumer!r} is being run by another job ({seen.describe()}): it renewed its "
                    "lease while this job waited. Two jobs would apply every change twice; this one stops without "
                    "writing anything. Stop the other job first, or give this one another kafka.group_id."
                )
            if self._clock() >= give_up_at:
                raise LeaseHeldError(
                    f"consumer {self._consumer!r}: its lease is held by another job ({seen.describe()}) until "
                    f"{shown(seen.expires_us)}, longer than this job waits (twice run.lease_seconds = "
                    f"{2 * self._seconds:g}s); this one stops without writing anything. Run it again after that "
                    f"time, or once that job has stopped."
                )
            self._sleep(self._poll_seconds())

    def _then(self, alongside: _Alongside) -> object:
        """The read made with the take; if it failed, the lease is given back (the read commits nothing, so
        also after an interruption) and its error raised."""
        try:
            return alongside.outcome()
        except BaseException:
            self.release()
            raise

    def _poll_seconds(self) -> float:
        return min(2.0, max(0.2, self._seconds / 8))

    def _successor(self, seen: LeaseRecord | None, now_us: int) -> LeaseRecord:
        """This job's row taking over from `seen` (None: no row yet)."""
        return LeaseRecord(
            self._consumer,
            self.owner,
            (seen.epoch if seen else 0) + 1,
            (seen.revision if seen else 0) + 1,
            self.holder,
            self.process,
            now_us,
            now_us,
            now_us + micros(self._seconds),
        )

    def _take(self, seen: LeaseRecord | None, now_us: int) -> bool:
        started = self._clock()
        new = self._successor(seen, now_us)
        with self._lock:  # (the write and the record it leaves, at once: as the heartbeat sees them)
            if not self._store.write(new, seen):
                return False
            self._taken(new, seen, now_us, started)
        return True

    def _taken(self, new: LeaseRecord, seen: LeaseRecord | None, now_us: int, started: float) -> None:
        with self._lock:
            self._record, self._confirmed_at, self._lost = new, started, None
        if seen is not None and seen.owner is not None and seen.free_at(now_us):
            log.warning(
                "consumer %s: the lease of %s expired at %s without being released (that job was killed or hung); "
                "took it over (epoch %d)",
                self._consumer, seen.describe(), shown(seen.expires_us), new.epoch,
            )
        elif seen is not None and seen.owner is not None:
            log.warning(
                "consumer %s: the lease of %s was not released, and its process has ended (that job was killed); "
                "took it over (epoch %d)",
                self._consumer, seen.describe(), new.epoch,
            )
        else:
            log.info("consumer %s: took its lease (epoch %d, %gs, renewed every %gs)",
                     self._consumer, new.epoch, self._seconds, self._seconds / _HEARTBEATS_PER_LEASE)

    # --- keeping it -----------------------------------------------------------------

    def check(self, what: str = "a write") -> None:
        """Raise LeaseLostError unless this job still holds the lease; asked before every write."""
        if self._lost is not None:
            raise self._lost
        if self._record is None:
            raise LeaseLostError(f"consumer {self._consumer!r}: {what} without holding the consumer's lease")
        if self._trusted():
            return
        with self._lock:  # the heartbeat may be renewing right now: then its renewal is enough
            if self._trusted():
                return
            log.warning(
                "consumer %s: the lease was last renewed %.1fs ago (run.lease_seconds = %g); renewing it before %s",
                self._consumer, self._clock() - self._confirmed_at, self._seconds, what,
            )
            self.renew()

    def _trusted(self) -> bool:
        return self._clock() - self._confirmed_at < self._seconds * _TRUSTED_SHARE

    def renew(self) -> None:
        """Move the expiry on; LeaseLostError if another job took the lease meanwhile."""
        with self._lock:
            for attempt in range(1, _RENEWAL_ATTEMPTS + 1):
                if self._renewed():
                    return
                self._sleep(random.uniform(0, 0.2 * 2**attempt))
            raise ApplyError(
                f"consumer {self._consumer!r}: could not renew the lease in {_RENEWAL_ATTEMPTS} attempts (other commits "
                f"to {getattr(self._store, 'sql_name', 'the leases table')} kept coming first)"
            )

    def _renewed(self) -> bool:
        """One conditional renewal: True if it landed, False if it did not but the lease is still ours."""
        if self._lost is not None:
            raise self._lost
        if self._record is None:
            raise LeaseLostError(f"consumer {self._consumer!r}: the lease is not held")
        started, now_us = self._clock(), micros(self._wall())
        new = dataclasses.replace(
            self._record,
            revision=self._record.revision + 1,
            renewed_us=now_us,
            expires_us=now_us + micros(self._seconds),
        )
        if self._store.write(new, self._record):
            self._record, self._confirmed_at = new, started
            self._note_duration(self._clock() - started)
            return True
        back = self._store.read(self._consumer)
        if back is None or back.owner != self.owner or back.epoch != self._record.epoch:
            self._lost = LeaseLostError(self._lost_message(back))
            raise self._lost
        # Still ours: another commit came first (another consumer's lease), or an earlier write of
        # ours landed unreported. The next try is conditional on what is there now.
        self._record = back
        return False

    def _note_duration(self, seconds: float) -> None:
        """Say once if renewals are too slow for the lease: the job's writes then wait for them."""
        if seconds > self._seconds / _HEARTBEATS_PER_LEASE and not self._warned_slow:
            self._warned_slow = True
            log.warning(
                "consumer %s: renewing the lease took %.1fs, more than a quarter of run.lease_seconds (%g): writes "
                "will often wait for a renewal; a longer run.lease_seconds avoids that",
                self._consumer, seconds, self._seconds,
            )

    def _lost_message(self, back: LeaseRecord | None) -> str:
        now = "released" if back is None or back.owner is None else f"held by {back.describe()}"
        return (
            f"consumer {self._consumer!r}: lost the lease (epoch {self._record.epoch}), now {now}; this job last "
            f"renewed it {self._clock() - self._confirmed_at:.0f}s ago (run.lease_seconds = {self._seconds:g}: "
            "the process was paused, or storage was slow or unreachable) and another job took over. "
            "Stopping before writing anything more."
        )

    def _heartbeat(self) -> None:
        interval = self._seconds / _HEARTBEATS_PER_LEASE
        # Due a quarter of the lease after the last confirmation (by a renewal of the guard's too),
        # not after the end of the last renewal: a slow renewal does not stretch the period.
        delay = max(0.0, self._confirmed_at + interval - self._clock())
        while not self._stopping.wait(delay):
            try:
                self.renew()
            except LeaseLostError as err:
                log.error("%s", err)
                return
            except Exception as err:  # noqa: BLE001 - storage hiccups: the guard stops writes if they last
                if self._stopping.is_set():
                    return  # the job is ending (its Spark session may already be stopped): the release follows
                log.warning("consumer %s: could not renew the lease (%s); trying again in %gs",
                            self._consumer, err, interval)
                delay = interval
                continue
            delay = max(0.0, self._confirmed_at + interval - self._clock())
            self._tidy_now_and_then()

    def _tidy_now_and_then(self) -> None:
        record = self._record
        if record is None or record.revision % _TIDY_EVERY_REVISIONS:
            return
        try:
            self._store.tidy()
        except Exception as err:  # noqa: BLE001 - only old files are left behind
            log.warning("could not vacuum the leases table: %s", err)

    # --- giving it back -------------------------------------------------------------

    def release(self) -> None:
        """Clear the owner, so the next run need not wait for the expiry. Best effort: it expires anyway."""
        with self._lock:
            record, self._record = self._record, None
            if record is None or self._lost is not None:
                return
            now_us = micros(self._wall())
            released = dataclasses.replace(
                record, owner=None, revision=record.revision + 1, renewed_us=now_us, expires_us=now_us
            )
            try:
                if not self._store.write(released, record):
                    back = self._store.read(self._consumer)
                    if back is not None and back.owner not in (None, self.owner):
                        log.warning("consumer %s: the lease (epoch %d) had been taken over, now held by %s",
                                    self._consumer, record.epoch, back.describe())
                        return
                    # Another consumer's commit to the table came first: it expires by itself.
                    log.warning("consumer %s: could not release the lease (another commit came first); it expires "
                                "at %s", self._consumer, shown(record.expires_us))
                    return
            except Exception as err:  # noqa: BLE001 - the lease expires by itself
                log.warning("consumer %s: could not release the lease (%s); it expires at %s",
                            self._consumer, err, shown(record.expires_us))
                return
        log.info("consumer %s: released its lease (epoch %d)", self._consumer, record.epoch)

    @contextmanager
    def held(self, meanwhile: Callable[[], T] | None = None) -> Iterator[T | None]:
        """Take the lease, renew it from a thread of its own while the block runs, release it after; the block
        gets what `meanwhile` read (see `acquire`).

        Released when the block ends normally or with an error. Not after an
        interruption (KeyboardInterrupt, SystemExit): a statement the JVM may
        still be running could commit after another job took the lease; it
        expires instead.
        """
        reading = self._take_with(meanwhile)
        self._stopping.clear()
        beat = threading.Thread(target=self._heartbeat, name=f"lease-{self._consumer}", daemon=True)
        beat.start()  # (before the read is waited for: a slow read does not let the lease lapse)
        interrupted = False
        try:
            yield self._then(reading)
        except Exception:
            raise
        except BaseException:
            interrupted = True
            raise
        finally:
            self._stopping.set()
            beat.join(self._seconds)
            if not interrupted:
                self.release()


class _Alongside:
    """A read run in a thread of its own while the caller writes (nothing to run: None); its result after."""

    def __init__(self, read: Callable[[], object] | None) -> None:
        self._result: object = None
        self._error: BaseException | None = None
        self._thread = None
        if read is not None:
            self._thread = threading.Thread(target=self._run, args=(read,), name="lease-meanwhile", daemon=True)
            self._thread.start()

    def _run(self, read: Callable[[], object]) -> None:
        try:
            self._result = read()
        except BaseException as err:  # noqa: BLE001 - raised in the caller's thread (`outcome`)
            self._error = err

    def outcome(self) -> object:
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        return self._result

    @property
    def started(self) -> bool:
        return self._thread is not None

    def discard(self) -> None:
        """Wait for the read, and forget it (the take it went with did not land)."""
        if self._thread is not None:
            self._thread.join()
