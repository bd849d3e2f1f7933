"""The short-runs section (`bench.py --only short-runs`): whole scheduled runs of the job, the product's
settings against others, alternating.

Per round: `--short-events` new row events (inserts of new keys, 50-row transactions, 3 partitions) for each of
two targets of one table, then `ticdc-delta run --until-idle` as a process of its own on each (`--short-engine`),
the order alternating from round to round so that a slow minute of the machine falls on both. The first round
creates each target's tables and is left out of the medians. The second configuration is the product's
defaults plus the `--short-vs KEY=VALUE` settings (as `--table-also`: a [run] key, or SECTION.KEY); by default
Spark's own code generation (what short runs did before session 20). Printed per round and as medians: the
job's wall time, when Spark was up, the batch, what the run spends outside it, the batch's phases (the metrics
record's `stage_seconds`); then the ratio of the medians.
Each table is then compared with the stream's model.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from benchmarks import streams
from benchmarks.measure import section
from benchmarks.tables import check_tables, job_run, settings_of

_SPARK_CODEGEN = 'spark.conf={"spark.sql.codegen.factoryMode": "FALLBACK", "spark.sql.codegen.wholeStage": true}'


def add_arguments(parser) -> None:
    parser.add_argument("--short-events", type=int, default=200, help="new row events per run of the short-runs section")
    parser.add_argument("--short-rounds", type=int, default=7, help="runs per configuration (the first left out)")
    parser.add_argument("--short-engine", default="driver", help="engine of the short-runs section: driver or spark")
    parser.add_argument("--short-vs", metavar="KEY=VALUE", action="append", default=[],
                        help=f"the other configuration's settings (repeatable; default: {_SPARK_CODEGEN})")


def bench_short_runs(args, lake) -> None:
    events, rounds = args.short_events, max(2, args.short_rounds)
    vs = args.short_vs or [_SPARK_CODEGEN]
    section(f"short runs: {args.short_engine} engine, {events:,} new row events a run, one table, {rounds} runs each (the first left out of "
            "the medians), the product's defaults against " + ", ".join(vs) + ", alternating; a job process per run")
    configurations = {"defaults": {}, "vs": settings_of(vs)}
    with tempfile.TemporaryDirectory(dir=lake.work) as scratch:
        work = Path(scratch)
        runs: dict[str, list[dict]] = {name: [] for name in configurations}
        models: dict[str, dict] = {name: {} for name in configurations}
        for number in range(rounds):
            stream = streams.build(events, events, inserts_only=True, first_key=number * events, seed=number,
                                   first_commit_ts=streams.FIRST_COMMIT_TS + (number * (events + 2) << 18))
            order = list(configurations) if number % 2 == 0 else list(reversed(configurations))
            for name in order:
                topic = f"short-{name}"
                lake.publish(topic, stream)
                run = job_run(lake, topic, topic, work / name, args.short_engine, 8, work, settings=configurations[name])
                runs[name].append(run)
                models[name].update(stream.rows)
                print(f"  round {number}, {name:8}: job {run['wall']:5.1f}s, Spark up at {run['spark_up']:4.1f}s, "
                      f"batch {run['batch']:5.1f}s, outside the batch {run['wall'] - run['batch']:5.1f}s", flush=True)
        medians = {}
        for name, measured in runs.items():
            check_tables(lake.spark, work / name, streams.Stream([], {streams.TABLE: models[name]}, 0, streams.PARTITIONS))
            later = measured[1:]
            medians[name] = {key: statistics.median(run[key] if key != "outside" else run["wall"] - run["batch"]
                                                    for run in later)
                             for key in ("wall", "spark_up", "batch", "outside")}
            m = medians[name]
            print(f"  {name:8} medians: job {m['wall']:5.1f}s, Spark up at {m['spark_up']:4.1f}s, batch {m['batch']:5.1f}s, "
                  f"outside the batch {m['outside']:5.1f}s; tables equal upstream", flush=True)
            phases = sorted({phase for run in later for phase in run["phases"]})
            medians_of_phases = {p: statistics.median(run["phases"].get(p, 0.0) for run in later) for p in phases}
            print(f"  {name:8} the batch's phases (medians): " + ", ".join(
                f"{p} {s:.1f}s" for p, s in sorted(medians_of_phases.items(), key=lambda item: -item[1]) if s >= 0.05),
                flush=True)
        print("  defaults / vs: job {:.2f}x, outside the batch {:.2f}x".format(
            medians["defaults"]["wall"] / medians["vs"]["wall"], medians["defaults"]["outside"] / medians["vs"]["outside"]),
            flush=True)
