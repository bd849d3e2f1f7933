"""The fault script: reliability under faults and hostile input, measured on real components.

    .venv/bin/python benchmarks/faults.py                        # every section
    .venv/bin/python benchmarks/faults.py --only kills --kills 5 # some sections, shorter
    .venv/bin/python benchmarks/faults.py --only kills,growth --target s3  # their tables on a local S3 server

Prints what it measured; a section that finds a fault it must not (a run not equal to the upstream
model, a crash of a decoder, an unbounded checkpoint table) ends the script with exit status 1.
Sections, each in its own module beside this one:

- kills (`fault_kills`): the job killed with SIGKILL at random points of chosen kill sites and restarted;
  prints `N/N runs equal` and the distinct kill sites hit.
- fuzz (`fault_fuzz`): mutated and random messages through every decoder; prints the crash count (any
  exception other than the product's typed decode error) and the throughput.
- growth (`fault_growth`): the checkpoint table's size after many batches, with its retention and
  compaction.
- exits (`fault_exits`): each way a job that used delta-rs ends (done, a bad message, SIGTERM, Kafka or
  Spark gone, configuration, storage), repeated on each pair; prints `N/N as documented` per path.
- races (`fault_races`): delta-rs's small MERGEs while another process compacts the table at random moments;
  prints each trial's conflicts and whether the table ends exact.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TICDC_DELTA_CACHE", str(ROOT / ".cache"))

# section name -> module beside this file; each module has `add_arguments(parser)` and `run(args) -> bool`
# (True when everything it measured is as it must be).
SECTIONS = {"kills": "fault_kills", "fuzz": "fault_fuzz", "growth": "fault_growth", "exits": "fault_exits",
            "races": "fault_races"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated: {', '.join(SECTIONS)}")
    parser.add_argument("--seed", type=int, default=None, help="random seed (printed when not given)")
    parser.add_argument("--target", choices=("local", "s3"), default="local",
                        help="where the kills' and growth's tables go: local folders, or s3a:// on a local S3-compatible "
                             "server (moto: testbed/s3_server.py; logs stay local)")
    parser.add_argument("--s3-fast-listing", choices=("on", "off"), default="on",
                        help="with --target s3: spark.hadoop.delta.enableFastS3AListFrom (docs/object-storage.md)")
    chosen = [name.strip() for name in parser.parse_known_args(argv)[0].only.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown sections: {', '.join(unknown)}")
    # Only the chosen sections are imported: each brings its own dependencies.
    modules = {name: importlib.import_module(f"benchmarks.{SECTIONS[name]}") for name in chosen}
    for module in modules.values():
        module.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(4), "big")
    print(f"seed {args.seed}", flush=True)
    ok = True
    for name in chosen:
        print(f"\n== {name} ==", flush=True)
        ok = modules[name].run(args) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
