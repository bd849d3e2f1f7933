"""The consumer's lease: who may take it, when a waiting job refuses or takes over, when a holder stops.

The decisions run against an in-memory store with the Delta store's conditional write,
and a clock the test moves (the e2e tests run two real jobs against the Delta table).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import sys
import threading

import pytest

from ticdc_delta.apply.own_tables.lease import ConsumerLease
from ticdc_delta.apply.own_tables.lease_store import LeaseRecord
from ticdc_delta.apply.own_tables.process_identity import process_gone, process_identity, processes_identity
from ticdc_delta.exceptions import ApplyError, LeaseHeldError, LeaseLostError


class _Time:
    """Wall clock and monotonic clock together; sleeping moves both, and runs what should happen meanwhile."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0
        self.during_sleep = []  # callables run once each sleep, e.g. the other job renewing

    def wall(self) -> float:
        return self.now

    def clock(self) -> float:
        return self.now - 1_700_000_000.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        for action in list(self.during_sleep):
            action()


class _Store:
    """Rows by consumer; a write lands only if the row is still the revision expected (the MERGE's condition)."""

    def __init__(self, created: bool = True) -> None:
        self.rows: dict[str, LeaseRecord] = {}
        self.writes = 0
        self.before_write = None  # another writer's commit landing between a read and a write
        self.beaten = 0  # writes still to be refused because another commit to the table came first
        self.created = created  # the table is there (the tests below mostly start from an empty one)

    def prepare(self, first: LeaseRecord) -> bool:
        # A missing table is made holding the first row (Delta's CREATE TABLE AS SELECT; two at once: one wins).
        if self.created:
            return False
        self.created = True
        self.writes += 1
        self.rows[first.consumer] = first
        return True

    def tidy(self) -> None:
        pass

    def read(self, consumer: str) -> LeaseRecord | None:
        return self.rows.get(consumer)

    def write(self, record: LeaseRecord, expected: LeaseRecord | None) -> bool:
        if self.before_write is not None:
            action, self.before_write = self.before_write, None
            action()
        self.writes += 1
        if self.beaten:
            self.beaten -= 1
            return False
        current = self.rows.get(record.consumer)
        if (current is None and expected is None) or (
            current is not None and expected is not None and current.revision == expected.revision
        ):
            self.rows[record.consumer] = record
            return True
        return False


def _lease(store: _Store, clock: _Time, seconds: float = 60.0) -> ConsumerLease:
    return ConsumerLease(store, "shop", seconds, wall=clock.wall, clock=clock.clock, sleep=clock.sleep)


def test_a_free_lease_is_taken_checked_without_io_and_released():
    # Setup: no row. Expect: epoch 1 taken; checks within half the lease write nothing;
    # release clears the owner and keeps the epoch (the next holder gets 2).
    store, clock = _Store(), _Time()
    lease = _lease(store, clock)
    lease.acquire()
    assert store.rows["shop"].owner == lease.owner and lease.epoch == 1
    writes = store.writes
    clock.now += 29
    lease.check("merge")
    assert store.writes == writes
    lease.release()
    assert store.rows["shop"].owner is None and store.rows["shop"].epoch == 1
    nxt = _lease(store, clock)
    nxt.acquire()
    assert nxt.epoch == 2


def test_a_missing_table_is_made_holding_the_first_job_and_a_second_job_finds_it_held():
    # Setup: no leases table; job A starts, then B while A renews. Expect: A's row is the new table's
    # (one write, nothing read first); B waits on it, then refuses with LeaseHeldError; A releases normally.
    store, clock = _Store(created=False), _Time()
    a, b = _lease(store, clock), _lease(store, clock)
    a.acquire()
    assert store.created and store.writes == 1
    assert store.rows["shop"].owner == a.owner and a.epoch == 1 and store.rows["shop"].revision == 1
    clock.during_sleep.append(a.renew)
    with pytest.raises(LeaseHeldError):
        b.acquire()
    a.release()
    assert store.rows["shop"].owner is None


def test_a_job_that_finds_a_live_holder_refuses_once_it_renews(caplog):
    # Setup: job A holds the lease and renews it (its heartbeat) while job B waits.
    # Expect: B says why it waits, then refuses with LeaseHeldError naming A; A still holds it.
    caplog.set_level(logging.WARNING)
    store, clock = _Store(), _Time()
    a, b = _lease(store, clock), _lease(store, clock)
    a.acquire()
    clock.during_sleep.append(a.renew)
    with pytest.raises(LeaseHeldError, match=r"being run by another job \(.* pid .*, epoch 1.*renewed its lease"):
        b.acquire()
    assert "waiting up to 60s to see whether it renews it" in caplog.text
    assert store.rows["shop"].owner == a.owner
    a.check("merge")


def test_a_killed_holder_is_taken_over_after_its_expiry_and_cannot_write_again(caplog):
    # Setup: job A takes the lease and stops renewing (killed, or paused as a whole). Job B starts
    # 10 s later. Expect: B waits until A's expiry (60 s after A's last renewal), takes the lease
    # with epoch 2 and says it took it over. A, resuming, is refused at its next write, and its
    # release leaves B's lease alone.
    caplog.set_level(logging.WARNING)
    store, clock = _Store(), _Time()
    a, b = _lease(store, clock), _lease(store, clock)
    a.acquire()
    taken_at = clock.now
    clock.now += 10
    b.acquire()
    assert taken_at + 60 <= clock.now <= taken_at + 63
    assert b.epoch == 2 and store.rows["shop"].owner == b.owner
    assert "expired at" in caplog.text and "took it over (epoch 2)" in caplog.text
    with pytest.raises(LeaseLostError, match=r"lost the lease \(epoch 1\), now held by .*epoch 2"):
        a.check("save the checkpoint")
    with pytest.raises(LeaseLostError):
        a.check("merge")  # and stays refused
    a.release()
    assert store.rows["shop"].owner == b.owner


def test_a_holder_past_half_its_lease_renews_before_writing():
    # Setup: the heartbeat did not run for 40 s of a 60 s lease, and nobody took the lease.
    # Expect: the next check renews (a write) and lets the write go ahead.
    store, clock = _Store(), _Time()
    lease = _lease(store, clock)
    lease.acquire()
    expiry = store.rows["shop"].expires_us
    clock.now += 40
    lease.check("merge")
    assert store.rows["shop"].expires_us > expiry and store.rows["shop"].owner == lease.owner


def test_a_holder_renewing_between_a_takers_read_and_write_keeps_the_lease():
    # Setup: A's lease has expired (A was paused); B reads the row, and A's renewal lands before
    # B's write; A's heartbeat goes on. Expect: B's conditional write changes nothing; B then
    # finds a live lease, sees it renewed and refuses; A holds it.
    store, clock = _Store(), _Time()
    a, b = _lease(store, clock), _lease(store, clock)
    a.acquire()
    clock.now += 61
    store.before_write = a.renew
    clock.during_sleep.append(a.renew)
    with pytest.raises(LeaseHeldError):
        b.acquire()
    assert store.rows["shop"].owner == a.owner
    a.check("merge")


def test_a_lease_valid_far_beyond_this_jobs_wait_is_refused_with_its_expiry():
    # Setup: a job with a one-hour lease was killed; this job's lease is 60 s.
    # Expect: it waits twice its own lease, then refuses naming the expiry.
    store, clock = _Store(), _Time()
    _lease(store, clock, seconds=3600).acquire()
    started = clock.now
    with pytest.raises(LeaseHeldError, match=r"until .* UTC, longer than this job waits \(twice run.lease_seconds = 120s\)"):
        _lease(store, clock).acquire()
    assert 120 <= clock.now - started <= 125


def test_a_released_lease_is_taken_at_once():
    store, clock = _Store(), _Time()
    a = _lease(store, clock)
    a.acquire()
    a.release()
    started = clock.now
    b = _lease(store, clock)
    b.acquire()
    assert clock.now == started and b.epoch == 2
    with pytest.raises(LeaseLostError, match="without holding"):
        a.check("merge")


def test_a_holder_whose_process_ended_on_this_machine_is_taken_over_at_once(caplog):
    # Setup: job A holds a fresh 60 s lease; its process (here: a child process) then ends.
    # Expect: job B takes over without waiting for the expiry, and says why.
    caplog.set_level(logging.WARNING)
    store, clock = _Store(), _Time()
    a = _lease(store, clock)
    a.acquire()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        store.rows["shop"] = dataclasses.replace(store.rows["shop"], process=process_identity(child.pid))
    finally:
        child.kill()
        child.wait()
    started = clock.now
    b = ConsumerLease(store, "shop", 60.0, wall=clock.wall, clock=clock.clock, sleep=clock.sleep)
    b.acquire()
    assert clock.now == started and b.epoch == 2
    assert "its process has ended (that job was killed); took it over (epoch 2)" in caplog.text


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process identities are read from /proc")
def test_a_process_is_gone_once_it_ended_and_never_for_a_live_or_foreign_one():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    identity = process_identity(child.pid)
    assert identity is not None and not process_gone(identity)
    child.kill()
    child.wait()
    assert process_gone(identity)
    mine = process_identity()
    assert mine == process_identity(os.getpid()) and not process_gone(mine)
    boot, namespace, pid, started = mine.split("/")
    assert process_gone(f"{boot}/{namespace}/{pid}/{int(started) + 1}")  # the pid, reused by another process
    assert not process_gone(f"another-boot/{namespace}/{child.pid}/{started}")  # another machine: unknown
    assert not process_gone(None) and not process_gone("garbage")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process identities are read from /proc")
def test_a_holder_of_two_processes_is_gone_only_once_both_ended():
    # The job's Python process and its Spark driver JVM: a commit may still come from whichever lives.
    first, second = (subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2))
    try:
        identity = processes_identity([first.pid, second.pid])
        assert identity is not None and identity.count(";") == 1 and not process_gone(identity)
        first.kill()
        first.wait()
        assert not process_gone(identity)
        second.kill()
        second.wait()
        assert process_gone(identity)
    finally:
        for child in (first, second):
            child.kill()
            child.wait()
    assert processes_identity([first.pid]) is None  # an ended process: unknown, so no identity at all


def test_held_releases_after_an_error_but_not_after_an_interruption():
    # Setup: the lease held around a block that raises an error, then one interrupted (KeyboardInterrupt).
    # Expect: released after the error (the next run starts at once); after the interruption it stays held
    # (a statement the JVM may still run could commit; the lease expires instead).
    store, clock = _Store(), _Time()
    with pytest.raises(ValueError):
        with _lease(store, clock).held():
            raise ValueError("a failed batch")
    assert store.rows["shop"].owner is None
    interrupted = _lease(store, clock)
    with pytest.raises(KeyboardInterrupt):
        with interrupted.held():
            raise KeyboardInterrupt
    assert store.rows["shop"].owner == interrupted.owner and store.rows["shop"].epoch == 2


def test_a_release_after_a_takeover_says_so_and_leaves_the_new_holder(caplog):
    # Setup: job A's lease expired while it was paused and job B took it over; A then releases.
    # Expect: B keeps it, and A's log says it had been taken over (not "released").
    caplog.set_level(logging.INFO)
    store, clock = _Store(), _Time()
    a, b = _lease(store, clock), _lease(store, clock)
    a.acquire()
    clock.now += 61
    b.acquire()
    a.release()
    assert store.rows["shop"].owner == b.owner
    assert "had been taken over, now held by" in caplog.text and "released its lease" not in caplog.text


def test_a_write_beaten_by_another_commit_is_decided_again():
    # Setup: two jobs taking a free lease at once: B's write meets A's commit (Delta refuses it).
    # Expect: B reads again, finds A's fresh lease and waits (it does not take it). A renewal of A's
    # that meets another commit (another consumer's lease in the same table) is tried again and
    # lands; one beaten five times in a row fails without losing the lease.
    store, clock = _Store(), _Time()
    a, b = _lease(store, clock), _lease(store, clock)
    # A's take commits first; Delta then refuses B's write (a concurrent-modification error).
    store.before_write = lambda: (a.acquire(), setattr(store, "beaten", 1))
    clock.during_sleep.append(a.renew)
    with pytest.raises(LeaseHeldError):
        b.acquire()
    assert store.rows["shop"].owner == a.owner and store.rows["shop"].epoch == 1
    clock.during_sleep.clear()
    expiry = store.rows["shop"].expires_us
    clock.now += 1
    store.beaten = 2
    a.renew()
    assert store.rows["shop"].expires_us > expiry
    store.beaten = 5
    with pytest.raises(ApplyError, match="could not renew the lease in 5 attempts"):
        a.renew()
    a.check("merge")  # still held: the last confirmed renewal is recent


def test_the_first_read_runs_while_the_take_is_written_and_is_made_again_when_a_holder_came_in_between():
    # Setup: the job's first read (its checkpoint) handed to the take as `meanwhile`, on a released lease:
    # the read waits for the take's write to begin, and the write for the read to begin.
    # Expect: both proceed (they overlap: a read made before or after the take would time out) and the
    # read's result is the block's. Then a holder taking and releasing the lease between a job's read of
    # the row and its write: the take fails, its read is discarded, and the next attempt's read is used.
    store, clock = _Store(created=False), _Time()
    with _lease(store, clock).held():
        pass
    reading, writing = threading.Event(), threading.Event()

    def overlapping_read() -> str:
        reading.set()
        assert writing.wait(10), "the take was not written while the read ran"
        return "checkpoint"

    def begin_write() -> None:
        assert reading.wait(10), "the read did not run while the take was written"
        writing.set()

    store.before_write = begin_write
    with _lease(store, clock).held(meanwhile=overlapping_read) as read:
        assert read == "checkpoint"

    reads = []
    rival = _lease(store, clock)
    store.before_write = lambda: (rival.acquire(), rival.release())
    with _lease(store, clock).held(meanwhile=lambda: reads.append(store.rows["shop"].epoch) or len(reads)) as read:
        assert read == 2 and store.rows["shop"].epoch == 4  # (the rival took it at 3 in between)


def test_after_an_expired_lease_or_without_a_fork_the_first_read_runs_after_the_take():
    # Setup: (1) a holder that was not released and expired (it may be paused mid-commit, its process
    # still there); (2) a released lease taken by a job whose session cannot be forked (`overlap` False).
    # Expect: the read begins only once the take has landed (the row is this job's when it reads).
    store, clock = _Store(), _Time()
    _lease(store, clock).acquire()
    clock.now += 61
    late = _lease(store, clock)
    assert late.acquire(meanwhile=lambda: store.rows["shop"].owner) == late.owner
    late.release()
    unforked = ConsumerLease(store, "shop", 60.0, wall=clock.wall, clock=clock.clock, sleep=clock.sleep, overlap=False)
    assert unforked.acquire(meanwhile=lambda: store.rows["shop"].owner) == unforked.owner


@pytest.mark.parametrize("error", [OSError("storage unreachable"), KeyboardInterrupt()])
def test_a_first_read_that_fails_gives_the_lease_back_and_raises_its_error(error):
    # The read commits nothing, so the lease is given back also after an interruption, not left to expire.
    store, clock = _Store(), _Time()

    def failing() -> None:
        raise error

    with pytest.raises(type(error)):
        with _lease(store, clock).held(meanwhile=failing):
            pytest.fail("the block ran without the read")
    assert store.rows["shop"].owner is None and store.rows["shop"].epoch == 1  # taken, then given back
