"""`ticdc-delta` with a kill switch: the job SIGKILLs itself (and its Spark JVM) at one chosen point.

    python -m benchmarks.fault_job --site merge --hit 2 --delay 0.3 --log kills.log -- run --config job.toml

The fault script (`fault_kills`) starts the job through this module in a session of its own, so the kill
takes the whole process group: Python and the JVM, as a lost machine would. Kill sites wrap product
functions from outside; the product carries no fault hooks:

- decode: before the `hit`-th message of the process is decoded;
- merge: while the `hit`-th MERGE into a target table runs (`delay` seconds into it; a MERGE done sooner
  moves the kill to the next one);
- after_table_commit: right after the `hit`-th target-table MERGE committed (the batch's checkpoint not saved);
- after_checkpoint: right after the `hit`-th checkpoint was saved, before its Kafka offsets are committed;
- backfill: writing an added column's default into existing rows (after the ADD COLUMN committed): at its
  start or `delay` seconds into it (right after it if it took less);
- rewrite: `delay` seconds into a table rewrite (a column renamed, dropped or retyped), or right after it if
  it took less;
- rename: at the start of, `delay` seconds into, or right after a table rename;
- stage (the Spark engine, `run.engine = "spark"`): `delay` seconds into the `hit`-th staging write, which
  reads the batch from Kafka and decodes it on the executors as it writes (a kill mid-batch).

Each kill is first appended to `--log` ("killed <site>"); DDL sites the process passes without being
killed are logged too ("passed <site>"), so the fault script knows which are behind the stream's position.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SITES = ("decode", "merge", "after_table_commit", "after_checkpoint", "backfill", "rewrite", "rename", "stage")
# Sites met once per stream (a DDL); the others recur every batch.
DDL_SITES = ("backfill", "rewrite", "rename")
MOMENTS = ("start", "during", "after")


class KillSwitch:
    def __init__(self, site: str, hit: int, delay: float, moment: str, log: Path) -> None:
        self.site, self.hit, self.delay, self.moment, self._log = site, hit, delay, moment, log
        self._seen = 0
        self._lock = threading.Lock()
        # Tables are applied several at once (run.apply_concurrency): two of them can reach a kill together, and
        # the second's line would land before the first's SIGKILL does. The first holds this until the signal.
        self._killing = threading.Lock()

    def note(self, line: str) -> None:
        with open(self._log, "a") as out:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())

    def kill(self) -> None:
        """One kill, one line: whoever comes second waits here for the signal that ends the process."""
        self._killing.acquire()
        self.note(f"killed {self.site}")
        os.killpg(os.getpgrp(), signal.SIGKILL)

    def due(self) -> bool:
        """Count one occurrence of the site; True from the `hit`-th on."""
        with self._lock:
            self._seen += 1
            return self._seen >= self.hit

    def around(self, function, *, moment: str, once: bool = False, delay_scale: float = 1.0):
        """Run `function` with a kill at `moment`: "start", "during" (after `delay` s, if still running), "after".

        `once`: the site occurs once in the stream (a DDL), so a kill "during" it that finished sooner than
        `delay` is made right after it, not at a next occurrence that never comes (how long a rewrite takes
        varies with the machine: a kill planned 1.2 s into a shorter rewrite was once not made at all).
        `delay_scale`: the site's own share of `delay` (a delta-rs MERGE lasts tens of milliseconds, not seconds)."""

        @functools.wraps(function)
        def wrapped(*args, **kwargs):
            if not self.due():
                return function(*args, **kwargs)
            if moment == "start":
                self.kill()
            running = [True]
            timer = None
            if moment == "during":
                timer = threading.Timer(self.delay * delay_scale, self._kill_if, args=(running,))
                timer.daemon = True
                timer.start()
            try:
                result = function(*args, **kwargs)
            finally:
                with self._lock:
                    running[0] = False
                if timer is not None:
                    timer.cancel()
            if moment == "after" or (moment == "during" and once):
                self.kill()
            return result

        return wrapped

    def _kill_if(self, running: list[bool]) -> None:
        # Done before the delay: nothing here; the next occurrence (due as well) arms the kill again.
        with self._lock:
            if running[0]:
                self.kill()


class _CountingDecoder:
    """The job's decoder with the kill switch counting the messages it decodes."""

    def __init__(self, inner, switch: KillSwitch) -> None:
        self._inner, self._switch = inner, switch

    def decode(self, message):
        if self._switch.due():
            self._switch.kill()
        return self._inner.decode(message)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def _passing(switch: KillSwitch, site: str, function):
    @functools.wraps(function)
    def wrapped(*args, **kwargs):
        result = function(*args, **kwargs)
        switch.note(f"passed {site}")
        return result

    return wrapped


def install(switch: KillSwitch) -> None:
    from ticdc_delta.apply.base.session import SqlSession
    from ticdc_delta.apply.own_tables.checkpoint import CheckpointStore
    from ticdc_delta.apply.writers import delta_writer
    from ticdc_delta.jobs.intake import DriverIntake

    writer = delta_writer.DeltaWriter
    for site, name in (("backfill", "_write_defaults"), ("rewrite", "_rewrite"), ("rename", "rename")):
        original = getattr(writer, name)
        if switch.site == site:
            setattr(writer, name, switch.around(original, moment=switch.moment, once=True))
        else:
            setattr(writer, name, _passing(switch, site, original))

    if switch.site in ("merge", "after_table_commit", "stage"):
        original_run = SqlSession.run
        moment = "after" if switch.site == "after_table_commit" else "during"
        prefix = "decode " if switch.site == "stage" else "merge "  # (the staging write: jobs.spark_engine.staging)

        def run(self, statement, tags=None, *, what=""):
            if what.startswith(prefix):
                return switch.around(original_run, moment=moment)(self, statement, tags, what=what)
            return original_run(self, statement, tags, what=what)

        SqlSession.run = run
        if switch.site != "stage":  # small MERGEs committed by delta-rs (target.small_merge_writer)
            from ticdc_delta.apply.writers.delta_rs import DeltaRs

            DeltaRs.merge = switch.around(DeltaRs.merge, moment=moment, delay_scale=0.05)
    elif switch.site == "after_checkpoint":
        CheckpointStore.save = switch.around(CheckpointStore.save, moment="after")
    elif switch.site == "decode":
        original_take = DriverIntake.take

        def take(self, batch, gate, bad_input):
            if not isinstance(self._decoder, _CountingDecoder):
                self._decoder = _CountingDecoder(self._decoder, switch)
            return original_take(self, batch, gate, bad_input)

        DriverIntake.take = take


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", choices=SITES, required=True)
    parser.add_argument("--hit", type=int, default=1, help="kill at the site's hit-th occurrence in this process")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds into the site, for kills during it")
    parser.add_argument("--moment", choices=MOMENTS, default="during", help="DDL sites: when to kill")
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("job", nargs=argparse.REMAINDER, help="-- then ticdc-delta's arguments")
    args = parser.parse_args(argv)
    job_args = args.job[1:] if args.job[:1] == ["--"] else args.job
    install(KillSwitch(args.site, args.hit, args.delay, args.moment, args.log))
    from ticdc_delta.jobs.cli import exit_status

    return exit_status(job_args)


if __name__ == "__main__":
    sys.exit(main())
