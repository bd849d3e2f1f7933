"""Races: the job's small MERGEs by delta-rs while another writer compacts the same table, at random moments.

The fast writer's MERGE (apply.writers.delta_rs) reads the table, rewrites the files that may hold its keys and commits;
a compaction (delta-rs's optimize, or Spark's OPTIMIZE as `ticdc-delta maintain` and the job's passes run it)
rewrites files without changing their rows. The compactor here Z-orders by the key, which rewrites every file
each time (a plain OPTIMIZE skips a table already in one file, as a table the MERGEs rewrite whole soon is).
Whichever commits second must see the first: a MERGE that committed over a compaction of the files it rewrote
would leave a key's old row beside its new one (a double) or bring a deleted row back. tests/e2e/test_delta_rs_merges.py meets one compaction at one chosen moment; this script meets many at
moments nobody chose, as an operator's compaction job would.

A trial: a table of `--keys` rows in small files, then `--merges` MERGEs by `DeltaRs.merge` (10 changed keys each:
updates, deletes, inserts of new keys) while a process of its own compacts the table in a loop. A MERGE that
returns False (delta-rs gave it to Spark after repeated conflicts) is made again by delta-rs, as Spark's MERGE
would make it. After each trial the table must hold exactly the model's rows, each key once, and the last MERGE's
idempotent-write pair. Prints each trial's figures; the first unequal table ends the section (exit 1).

    .venv/bin/python benchmarks/faults.py --only races                            # delta-rs compacts
    .venv/bin/python benchmarks/faults.py --only races --race-compactor spark --race-trials 2
"""

from __future__ import annotations

import argparse
import logging
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

_COMPACTOR = """
import random, sys, time
from pathlib import Path
path, kind, stop, ready = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
if kind == "spark":
    from ticdc_delta.jobs.session import get_spark
    spark = get_spark("local[1]")
    def compact():
        spark.sql(f"OPTIMIZE delta.`{path}` ZORDER BY (id)").collect()
else:
    from deltalake import DeltaTable
    def compact():
        DeltaTable(path).optimize.z_order(["id"])
compact()  # (the first, before the MERGEs start: a Spark session takes seconds to start)
ready.touch()
done = failed = 0
while not stop.exists():
    try:
        compact()
        done += 1
    except Exception as err:  # a compaction that lost to a MERGE: the next one goes on
        failed += 1
        print(f"compaction failed: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}", file=sys.stderr)
    time.sleep(random.uniform(0, 0.05))
print("compactions", done, failed)
"""


def _held_writer(hold: float, rng: random.Random):
    """`DeltaRs`, each MERGE waiting up to `hold` seconds between its read of the table and its write: a wider
    window for a compaction to commit in (a slow Spark OPTIMIZE otherwise rarely lands inside a 50-ms MERGE)."""
    from ticdc_delta.apply.writers.delta_rs import DeltaRs

    class Held(DeltaRs):
        def _execute(self, table, *args):
            time.sleep(rng.uniform(0, hold))
            return super()._execute(table, *args)

    return Held() if hold > 0 else DeltaRs()


class _Conflicts(logging.Handler):
    """Counts the conflicts the MERGEs met (apply.writers.delta_rs says each in a warning)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += "concurrent commit" in record.getMessage()


def _trial(number: int, keys: int, merges: int, compactor: str, pause: float, hold: float, folder: Path,
           rng: random.Random) -> bool:
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from ticdc_delta.apply.base.session import CommitTags
    from ticdc_delta.schema_cache.events import Column, TableName, TableSchema

    schema = TableSchema(TableName("db", f"raced{number}"), (Column("id", "INT"), Column("v", "STRING")), ("id",))
    path = str(folder / f"raced{number}")
    model = {k: f"0-{k}" for k in range(keys)}
    arrow = pa.schema([pa.field("id", pa.int32()), pa.field("v", pa.string())])
    for start in range(0, keys, 25):  # small files, so that every compaction has work
        chunk = range(start, min(start + 25, keys))
        write_deltalake(path, pa.table([pa.array(list(chunk), pa.int32()), pa.array([model[k] for k in chunk])],
                                       schema=arrow), mode="append")
    stop, ready = folder / f"stop{number}", folder / f"ready{number}"
    # Its output to files: a pipe nobody reads until the end would fill with Spark's and the losers' lines and
    # block the compactor, which would quietly stop racing.
    out_file, err_file = folder / f"compactor{number}.out", folder / f"compactor{number}.err"
    with open(out_file, "w") as out, open(err_file, "w") as err:
        process = subprocess.Popen([sys.executable, "-c", _COMPACTOR, path, compactor, str(stop), str(ready)],
                                   stdout=out, stderr=err)
    while not ready.exists():
        if process.poll() is not None:
            raise SystemExit(f"the compactor ended before its first compaction:\n{err_file.read_text()[-2000:]}")
        time.sleep(0.1)
    writer, again, next_key = _held_writer(hold, rng), 0, keys
    conflicts, said = _Conflicts(), logging.getLogger("ticdc_delta.apply.writers.delta_rs")
    level, propagate = said.level, said.propagate
    said.addHandler(conflicts)
    said.setLevel(logging.WARNING)
    said.propagate = False  # (each conflict's warning is counted, not printed; as before once the MERGEs end)
    started = time.monotonic()
    for merge in range(1, merges + 1):
        changed = rng.sample(sorted(model), min(8, len(model)))
        rows = []
        for k in changed:
            if rng.random() < 0.2:
                rows.append((k, model.pop(k), True))
            else:
                model[k] = f"{merge}-{k}"
                rows.append((k, model[k], False))
        for k in (next_key, next_key + 1):
            model[k] = f"{merge}-{k}"
            rows.append((k, model[k], False))
        next_key += 2
        tags = CommitTags({"appliedThrough": merge}, ("race", merge))
        while not writer.merge(path, schema, rows, tags):
            again += 1
            if again > 10 * merges:
                raise SystemExit(f"trial {number}: delta-rs gave MERGE {merge} back {again} times: it refuses it for good")
        time.sleep(rng.uniform(0, pause))
    elapsed = time.monotonic() - started
    said.removeHandler(conflicts)
    said.setLevel(level)
    said.propagate = propagate
    stop.touch()
    process.wait(timeout=300)
    compactions = ([line.split()[1:] for line in out_file.read_text().splitlines() if line.startswith("compactions ")]
                   or [["?", "?"]])[-1]
    table = DeltaTable(path)
    held = table.to_pyarrow_table().to_pylist()
    counts = Counter(row["id"] for row in held)
    doubled = sorted(k for k, n in counts.items() if n > 1)
    rows_held = {row["id"]: row["v"] for row in held}
    wrong = sorted(k for k in set(model) | set(rows_held) if model.get(k) != rows_held.get(k))
    pair = table.transaction_version("race")
    engines = Counter(commit.get("engineInfo", commit.get("clientVersion", "?")).split("/")[0] or "?"
                      for commit in table.history())
    equal = not doubled and not wrong and pair == merges
    print(f"trial {number}: {merges} MERGEs in {elapsed:.1f} s ({conflicts.count} conflicts met, {again} MERGEs given "
          f"back after five), "
          f"{compactions[0]} compactions committed and {compactions[1]} lost, table version {table.version()} "
          f"({dict(engines)}): {'equal' if equal else 'UNEQUAL'}"
          + ("" if equal else f"; doubled keys {doubled[:10]}, wrong keys {wrong[:10]}, pair {pair}"))
    if not equal:
        print(err_file.read_text()[-2000:], file=sys.stderr)
    sys.stdout.flush()
    return equal


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("races")
    group.add_argument("--race-trials", type=int, default=5, help="tables raced, one after another (default 5)")
    group.add_argument("--race-merges", type=int, default=None, help="MERGEs a trial (default 60; 20 with Spark's)")
    group.add_argument("--race-keys", type=int, default=200, help="rows a table starts with (default 200)")
    group.add_argument("--race-compactor", choices=["delta-rs", "spark"], default="delta-rs",
                       help="who compacts: delta-rs's optimize, or Spark's OPTIMIZE (default delta-rs)")
    group.add_argument("--race-pause", type=float, default=None,
                       help="at most this many seconds between MERGEs (default 0.03; 2 with Spark's compactor, whose "
                            "OPTIMIZE takes most of a second and would otherwise seldom commit first)")
    group.add_argument("--race-hold", type=float, default=None,
                       help="at most this many seconds between a MERGE's read and its write (default 0; 1 with Spark's)")


def run(args) -> bool:
    spark = args.race_compactor == "spark"
    merges = args.race_merges if args.race_merges is not None else (20 if spark else 60)
    pause = args.race_pause if args.race_pause is not None else (2.0 if spark else 0.03)
    hold = args.race_hold if args.race_hold is not None else (1.0 if spark else 0.0)
    print(f"compactor {args.race_compactor}; {args.race_trials} trials of {merges} MERGEs, pauses up to {pause} s, "
          f"holds up to {hold} s", flush=True)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="fault-races-") as folder:
        for number in range(1, args.race_trials + 1):
            if not _trial(number, args.race_keys, merges, args.race_compactor, pause, hold, Path(folder), rng):
                return False
    return True
