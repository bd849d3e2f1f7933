"""Kill points: the job SIGKILLed at random points of chosen sites, restarted, and checked against upstream.

A run is one protocol's workload published to a topic of its own, applied into a fresh target by a fresh
consumer group: the job (`benchmarks.fault_job`, a process group with its Spark JVM) is killed at a random
site and occurrence, restarted, killed again, ... then restarted without a kill switch until idle (that
last restart in the checking process, on its Spark session). A run is equal when every table equals the
upstream model (rows and columns, and no other table exists) and no table has more Delta versions for one
applied point (commitTs, or offsets for the avro protocol) than an uninterrupted run of the same workload
made (one, or two for ADD COLUMN ... DEFAULT: the column, then its backfill).

Workloads: for every protocol that carries DDL, a table changed over many transactions, then ADD COLUMN
with and without default, DROP, RENAME and MODIFY COLUMN, RENAME TABLE, TRUNCATE, DROP and re-CREATE
TABLE, then more changes on every table (`tests.workloads.ddl_evolution` between them); the most-altered
table keeps a history table (`[history]`), which must end as the uninterrupted run's. On one topic, or
(`--kill-topics`) a topic per table as TiCDC's router writes them: each DDL on its table's old name's topic. TiCDC's avro
protocol carries no DDL (and refuses history tables): it gets the demo stream (two tables, key changes, a
column added mid-stream).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from decimal import Decimal
from pathlib import Path

from benchmarks.fault_job import DDL_SITES
from testbed.processes import job_environment, job_lines_to

ROOT = Path(__file__).resolve().parent.parent
PROTOCOLS = ("simple-json", "simple-avro", "avro", "debezium", "canal-json", "open-protocol")
_JOB_TIMEOUT = 600
# The product's default: a killed job's lease is taken over at once on this machine (its processes have
# ended), so its expiry never counts here. A short one cost the job a core: each renewal is a Delta MERGE,
# and at a 10 s lease (renewed every 2.5 s) renewals on the job's one local core took 2.6-2.9 s each.
LEASE_SECONDS = 60.0


def add_arguments(parser) -> None:
    parser.add_argument("--kills", type=int, default=54, help="kills in all, spread over the protocols' runs")
    parser.add_argument("--kills-per-run", type=int, default=5, help="kills before a run's final restart")
    parser.add_argument("--kill-protocols", default=",".join(PROTOCOLS), help=f"comma-separated: {', '.join(PROTOCOLS)}")
    parser.add_argument("--kill-workdir", type=Path, default=None, help="where targets and logs go (default: a temp dir)")
    parser.add_argument("--kill-sites", default="", help="comma-separated: kill only at these sites (default: the "
                        "DDL sites first, then any at random)")
    parser.add_argument("--kill-small-merge-writer", choices=("auto", "spark", "delta-rs"), default="auto",
                        help="the jobs' target.small_merge_writer (the product's default: auto)")
    parser.add_argument("--kill-topics", choices=("one", "per-table", "both"), default="both",
                        help="the workloads' topics: one for all tables, a topic per table as TiCDC's router writes "
                        "them (read by pattern), or each protocol's runs alternating between the two")


# --- workloads ------------------------------------------------------------------------------


@dataclasses.dataclass
class Scenario:
    protocol: str
    feed: object  # testbed.changefeed.Changefeed: its messages and the upstream model
    settings: dict  # the job's config sections besides kafka/target/run
    topic: str
    carries_ddl: bool
    carries_defaults: bool = True  # column defaults in the stream: an ADD COLUMN ... DEFAULT backfills
    # A topic per table, as TiCDC's event router writes them (`testbed.changefeed`): the job reads them by pattern.
    topic_per_table: bool = False

    def ddl_sites(self) -> list[str]:
        """The DDL kill sites this stream reaches (no backfill where the protocol carries no defaults)."""
        if not self.carries_ddl:
            return []
        return [s for s in DDL_SITES if self.carries_defaults or s != "backfill"]

    def topics(self) -> list[str]:
        return self.feed.topics() if self.protocol == "avro" or self.topic_per_table else [self.topic]

    def topic_pattern(self) -> str | None:
        """The pattern the job reads a topic per table by (None: a list of topics)."""
        return f"{self.topic}_.*" if self.topic_per_table else None


def _changes(feed, table: tuple[str, str], rng: random.Random, live: set, keys: range, make_row: Callable, txns: int) -> None:
    """`txns` transactions of inserts, updates and deletes on `table`, a few keys each."""
    for _ in range(txns):
        with feed.transaction() as txn:
            for key in rng.sample(keys, 4):
                if key not in live:
                    txn.insert(*table, make_row(key))
                    live.add(key)
                elif rng.random() < 0.25:
                    txn.delete(*table, [key])
                    live.discard(key)
                else:
                    row = make_row(key)
                    del row["id"]
                    txn.update(*table, [key], row)


def _cents(value: Decimal) -> Decimal:
    """A DECIMAL(10,2) value as TiDB stores it (25 is 25.00): protocols that carry decimals as text send it so."""
    return value.quantize(Decimal("0.01"))


def ddl_workload(feed, rng: random.Random, *, carries_defaults: bool, txns: int):
    from tests.workloads import ddl_evolution, item

    items: set = set()
    _changes(feed, ("shop", "items"), rng, items, range(100, 140), lambda k: item(k, f"{rng.randrange(1, 999)}.25"), txns)
    ddl_evolution(feed, carries_defaults=carries_defaults)
    archive = {k for k in items} | set(range(8))
    logs: set = {100}
    tmp: set = {1}
    for _ in range(txns // 3):
        _changes(
            feed, ("archive", "items_2025"), rng, archive, range(100, 140),
            lambda k: {"id": k, "title": f"t{k}-{rng.randrange(99)}", "price": _cents(Decimal(rng.randrange(1, 999)) / 4),
                       "stock": rng.randrange(-5, 2**40), "note": rng.choice([None, "n"])},
            1,
        )
        _changes(feed, ("shop", "logs"), rng, logs, range(100, 130), lambda k: {"id": k, "msg": f"m{rng.randrange(99)}"}, 1)
        _changes(feed, ("shop", "tmp"), rng, tmp, range(0, 30), lambda k: {"id": k, "v": rng.random()}, 1)
    return feed


# History tables (`[history] tables`) for the workload's most-altered table, before and after its rename.
HISTORY_TABLES = ("shop.items", "archive.items_2025")


def scenario(protocol: str, rng: random.Random, registry_url: str | None, txns: int = 24, *, history: bool = False,
             topic_per_table: bool = False) -> Scenario:
    """`protocol`'s workload; `history`: with history tables (HISTORY_TABLES; not avro, which refuses them);
    `topic_per_table`: a topic per table (`<topic>_<database>_<table>`, TiCDC's router: DDL on the old name's topic,
    watermarks to the tables' topics only; avro always has one)."""
    from testbed.demo import demo_changefeed
    from testbed.encoders.canal import CanalJsonWriter
    from testbed.encoders.debezium import DebeziumWriter
    from testbed.encoders.open_protocol import OpenProtocolWriter
    from testbed.encoders.ticdc_avro import TiCDCAvroWriter
    from tests.workloads import items_feed

    suffix = uuid.uuid4().hex[:8]
    topic = f"faults-{protocol}-{suffix}"
    routed = {"topic_per_table": f"{topic}_{{schema}}_{{table}}"} if topic_per_table and protocol != "avro" else {}
    if protocol == "avro":
        writer = TiCDCAvroWriter(registry_url, enable_tidb_extension=True, timestamp_zone="UTC")
        feed = demo_changefeed(seed=rng.randrange(1000), changes=250, avro_writer=writer, topic_prefix=f"f{suffix}")
        settings = {"protocol": {"name": "avro", "enable_tidb_extension": True, "timestamp_zone": "UTC"},
                    "registry": {"url": registry_url}}
        return Scenario(protocol, feed, settings, topic, carries_ddl=False)
    feeds = {
        "simple-json": (lambda: items_feed(**routed), {}, True),
        "simple-avro": (lambda: items_feed(encoding="avro", **routed), {"encoding": "avro"}, True),
        "debezium": (lambda: items_feed(debezium_writer=DebeziumWriter(), **routed),
                     {"name": "debezium", "enable_tidb_extension": True}, True),
        "canal-json": (
            lambda: items_feed(canal_writer=CanalJsonWriter(content_compatible=True), **routed),
            {"name": "canal-json", "enable_tidb_extension": True, "timestamp_zone": "UTC"},
            False,
        ),
        "open-protocol": (lambda: items_feed(open_writer=OpenProtocolWriter(), **routed), {"name": "open-protocol"}, False),
    }
    make_feed, protocol_settings, carries_defaults = feeds[protocol]
    feed = ddl_workload(make_feed(), rng, carries_defaults=carries_defaults, txns=txns)
    settings = {"protocol": protocol_settings} if protocol_settings else {}
    if history:
        settings["history"] = {"tables": list(HISTORY_TABLES)}
    return Scenario(protocol, feed, settings, topic, carries_ddl=True, carries_defaults=carries_defaults,
                    topic_per_table=bool(routed))


# --- the job's configuration -------------------------------------------------------------------


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):  # an inline table: { env = "NAME" }
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(str(value))  # a TOML basic string is a JSON string


def job_sections(bootstrap_servers: str, scene: Scenario, target: str | Path, group: str, batch_messages: int) -> dict:
    pattern = scene.topic_pattern()
    topics = {"topic_pattern": pattern} if pattern else {"topics": scene.topics()}
    return {
        "kafka": {"bootstrap_servers": bootstrap_servers, **topics, "group_id": group},
        "target": {"path": str(target)},
        "run": {"mode": "until-idle", "batch_max_messages": batch_messages, "batch_max_seconds": 2.0,
                "idle_timeout_seconds": 15.0, "lease_seconds": LEASE_SECONDS},
        **scene.settings,
    }


def write_config(path: Path, sections: dict, master: str = "local[1]") -> Path:
    """A job's TOML file; `master` unless `sections` has its own [spark]. Dotted section names are nested
    tables (`kafka.properties`); dotted keys (librdkafka's `security.protocol`) are quoted."""
    sections = {"spark": {"master": master}, **sections}
    lines = []
    for name, values in sections.items():
        lines.append(f"[{name}]")
        lines += [f"{json.dumps(key) if '.' in key else key} = {_toml_value(value)}" for key, value in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


# --- checks ---------------------------------------------------------------------------------------


def _point_key(user_metadata: str | None) -> str | None:
    """The applied point a commit of the job records (None: not a commit of the job, or marks nothing)."""
    if not user_metadata:
        return None
    try:
        marker = json.loads(user_metadata)["ticdc_delta"]
    except (ValueError, KeyError, TypeError):
        return None
    if marker.get("pendingBackfill"):
        # ADD COLUMN with a default: the schema change restates the point applied before it, and
        # the backfill that follows records the DDL's own; no row is applied by this commit.
        return None
    point = {k: marker.get(k) for k in ("appliedTs", "appliedOffsets") if marker.get(k) is not None}
    return json.dumps(point, sort_keys=True) if point else None


def located(spark, target: str | Path) -> dict[tuple[str, str], str]:
    """Every table the registry says is under `target` (a folder or an s3a:// location; upstream names), and
    its location: renamed tables stay in their folder (`apply.places.folders`)."""
    from ticdc_delta.apply.base.session import SqlSession
    from ticdc_delta.apply.places.locator import PathLocator

    locator = PathLocator(str(target))
    locator.load(SqlSession(spark, isolate=False))
    return {(t.database, t.table): f"{str(target).rstrip('/')}/{folder}" for t, folder in locator.places.held().items()}


def versions_per_point(spark, target: str | Path, feed) -> dict[tuple[str, str], Counter]:
    """Per upstream table, how many Delta versions record each applied point."""
    folders = located(spark, target)
    out = {}
    for database, table in feed.table_names():
        rows = spark.sql(f"DESCRIBE HISTORY delta.`{folders[(database, table)]}`").select("userMetadata").collect()
        out[(database, table)] = Counter(k for k in (_point_key(r["userMetadata"]) for r in rows) if k is not None)
    return out


def _table_dirs(spark, target: str | Path) -> set[str]:
    """The folders holding a Delta table, but the product's own, as `located` names them (relative to
    `target`): listed through Hadoop's file system API, the same for a local folder and s3a://."""
    jvm = spark.sparkContext._jvm
    root = jvm.org.apache.hadoop.fs.Path(str(target))
    fs = root.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def folders(path):
        return [status.getPath() for status in fs.listStatus(path) if status.isDirectory()]

    return {f"{database.getName()}/{table.getName()}" for database in folders(root) if database.getName() != "_ticdc"
            for table in folders(database) if fs.exists(jvm.org.apache.hadoop.fs.Path(table, "_delta_log"))}


def _is_history(name: tuple[str, str]) -> bool:
    return name[0].endswith("_history")  # `apply.changes.history`'s default suffix


def _history_tables(spark, target: str | Path) -> dict[tuple[str, str], str]:
    return {name: folder for name, folder in located(spark, target).items() if _is_history(name)}


def history_differences(spark, target: str | Path, reference: str | Path) -> list[str]:
    """Where the history tables under `target` differ from those of `reference` (an uninterrupted run's
    target): the same tables, each with the same columns and the same states (rows), nothing else."""
    problems = []
    tables, expected_tables = _history_tables(spark, target), _history_tables(spark, reference)
    if set(tables) != set(expected_tables):
        return [f"history tables {sorted(tables)}, uninterrupted {sorted(expected_tables)}"]
    for name in sorted(expected_tables):
        database, table = name
        actual, expected = (spark.read.format("delta").load(str(folders[name])) for folders in (tables, expected_tables))
        if sorted(actual.columns) != sorted(expected.columns):
            problems.append(f"{database}.{table}: columns {sorted(actual.columns)}, uninterrupted {sorted(expected.columns)}")
            continue
        columns = sorted(expected.columns)
        rows = [sorted(map(repr, frame.select(*columns).collect())) for frame in (actual, expected)]
        if rows[0] != rows[1]:
            missing = [r for r in rows[1] if r not in rows[0]][:2]
            extra = [r for r in rows[0] if r not in rows[1]][:2]
            problems.append(f"{database}.{table}: {len(rows[0])} states, uninterrupted {len(rows[1])}; "
                            f"missing {missing}, extra {extra}")
    return problems


def differences(spark, target: str | Path, feed, baseline: dict | None) -> list[str]:
    """What is wrong with the target against the upstream model (and the uninterrupted run's versions)."""
    problems = []
    folders = located(spark, target)
    tables = {name for name in folders if not _is_history(name)}
    if tables != set(feed.table_names()):
        problems.append(f"tables {sorted(tables)}, upstream {sorted(feed.table_names())}")
        return problems
    # Nothing left behind: every table folder is a registered table's (dropped ones' are deleted).
    held = {location.removeprefix(str(target).rstrip("/") + "/") for location in folders.values()}
    left = sorted(_table_dirs(spark, target) - held)
    if left:
        problems.append(f"folders no table holds: {left}")
    for database, table in feed.table_names():
        frame = spark.read.format("delta").load(str(folders[(database, table)]))
        if frame.columns != feed.column_names(database, table):
            problems.append(f"{database}.{table}: columns {frame.columns}, upstream {feed.column_names(database, table)}")
            continue
        expected = spark.createDataFrame(feed.expected_rows(database, table), schema=frame.schema).collect()
        actual = frame.collect()
        if sorted(map(repr, actual)) != sorted(map(repr, expected)):
            missing = [r for r in expected if r not in actual][:2]
            extra = [r for r in actual if r not in expected][:2]
            problems.append(f"{database}.{table}: {len(actual)} rows, upstream {len(expected)}; missing {missing}, extra {extra}")
    if baseline is not None:
        for table, counts in versions_per_point(spark, target, feed).items():
            allowed = baseline.get(table, Counter())
            over = {p: n for p, n in counts.items() if n > max(1, allowed.get(p, 0))}
            if over:
                problems.append(f"{table}: more versions per applied point than an uninterrupted run: {over}")
    return problems


# --- runs ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class KillPlan:
    site: str
    hit: int = 1
    delay: float = 0.0
    moment: str = "during"

    def arguments(self) -> list[str]:
        return ["--site", self.site, "--hit", str(self.hit), "--delay", f"{self.delay:.3f}", "--moment", self.moment]


NON_DDL_SITES = ("decode", "merge", "after_table_commit", "after_checkpoint")


def choose_kill(rng: random.Random, ddl_sites_ahead: list[str], site: str | None = None, *, early: bool = False) -> KillPlan:
    """A random kill point at `site` (default: a random site; DDL sites only while the stream has not passed them).

    `early`: a recurring site at its first occurrence (in the first batch, before any DDL of the workloads).
    """
    if early and site not in DDL_SITES:
        site = site or rng.choice(NON_DDL_SITES)
        return KillPlan(site, hit=1, delay=rng.uniform(0, 0.2) if site == "merge" else 0.0)
    if site in DDL_SITES or (site is None and ddl_sites_ahead and rng.random() < 0.4):
        site = site or rng.choice(ddl_sites_ahead)
        if site == "backfill":
            return KillPlan(site, moment=rng.choice(["start", "during"]), delay=rng.uniform(0, 0.4))
        if site == "rename":  # a folder move on path tables: atomic, so before or after it
            return KillPlan(site, moment=rng.choice(["start", "after"]))
        return KillPlan(site, moment="during", delay=rng.uniform(0, 1.5))
    site = site or rng.choice(NON_DDL_SITES)
    if site == "decode":
        return KillPlan(site, hit=rng.randint(1, 120))
    if site == "merge":
        return KillPlan(site, hit=rng.randint(1, 3), delay=rng.uniform(0, 0.6))
    return KillPlan(site, hit=rng.randint(1, 4))


@dataclasses.dataclass
class RunOutcome:
    protocol: str
    kills: list[str]
    problems: list[str]
    seconds: float

    @property
    def equal(self) -> bool:
        return not self.problems


def _start_job(arguments: list[str], log: Path) -> int:
    """Run `python -m <arguments>` in a process group of its own; its exit status (-9 when killed)."""
    with open(log, "ab") as out:
        job = subprocess.Popen(
            [sys.executable, "-m", *arguments],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=job_environment(),
        )
        try:
            return job.wait(timeout=_JOB_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, 9)
            job.wait()
            raise AssertionError(f"the job ran over {_JOB_TIMEOUT} s; see {log}") from None


def kill_run(scene: Scenario, sections: dict, workdir: Path, kills_wanted: int, rng: random.Random, baseline, spark,
             *, planned: Sequence[KillPlan] = (), reference: str | Path | None = None,
             sites: Sequence[str] = ()) -> RunOutcome:
    """Kill the job up to `kills_wanted` times (the i-th as `planned[i]` says, where given; else at a random
    point), restart it without a kill switch (in this process: `_final_run`), check the target (and its history
    tables against those of `reference`, an uninterrupted run's target, where given)."""
    started = time.monotonic()
    config = write_config(workdir / "job.toml", sections)
    kill_log, job_log = workdir / "kills.log", workdir / "job.log"
    kill_log.touch()
    kills: list[str] = []
    passed: set[str] = set()
    while len(kills) < kills_wanted:
        ahead = [s for s in scene.ddl_sites() if s not in passed]
        plan = planned[len(kills)] if len(kills) < len(planned) else choose_kill(
            rng, ahead, site=rng.choice(sites) if sites else None)
        before = len(kill_log.read_text().splitlines())
        status = _start_job(["benchmarks.fault_job", *plan.arguments(), "--log", str(kill_log), "--", "run", "--config", str(config)], job_log)
        lines = kill_log.read_text().splitlines()[before:]
        passed |= {line.split()[1] for line in lines if line.startswith("passed ")}
        killed = [line.split()[1] for line in lines if line.startswith("killed ")]
        if killed:
            kills += killed
            continue
        if status != 0:
            return RunOutcome(scene.protocol, kills, [f"the job failed (exit {status}) planned to be killed at {plan}; see {job_log}"], time.monotonic() - started)
        break  # the job finished before the kill point: the stream is applied
    try:
        _final_run(spark, sections, job_log)
    except Exception as err:  # noqa: BLE001 - reported as the run's problem
        return RunOutcome(scene.protocol, kills, [f"the final run failed ({err}); see {job_log}"], time.monotonic() - started)
    target = sections["target"]["path"]
    problems = differences(spark, target, scene.feed, baseline)
    if reference is not None:
        problems += history_differences(spark, target, reference)
    return RunOutcome(scene.protocol, kills, problems, time.monotonic() - started)


def _final_run(spark, sections: dict, log: Path) -> None:
    """The last restart, without a kill switch, in this process on `spark`, its lines appended to `log`.

    Each killed job's successor is a new process already (the next kill run, a restart of the one before);
    this one needs no JVM of its own, whose start and cold run cost 20-30 s of a CI side's time."""
    import logging

    from ticdc_delta.jobs.pipeline import Pipeline

    with open(log, "a") as out:
        out.write("--- the final restart, in the checking process\n")
    with job_lines_to(log):
        try:
            Pipeline.from_config(_in_process(sections), spark).run()
        except Exception:
            logging.getLogger("ticdc_delta").exception("the final restart failed")
            raise


def _in_process(sections: dict):
    """The job's configuration for a run in this process: Spark's settings are its session's (`spark.conf`
    configures a job process's own)."""
    from ticdc_delta.jobs import config as config_module

    return config_module.from_mapping({name: value for name, value in sections.items() if name != "spark.conf"})


def uninterrupted(spark, sections: dict, scene: Scenario):
    """The workload applied without faults in this process: its target's versions per applied point."""
    from ticdc_delta.jobs.pipeline import Pipeline

    Pipeline.from_config(_in_process(sections), spark).run()
    target = sections["target"]["path"]
    problems = differences(spark, target, scene.feed, None)
    if problems:
        raise AssertionError(f"{scene.protocol}: the uninterrupted run is not equal to upstream: {problems}")
    return versions_per_point(spark, target, scene.feed)


def publish_scenario(bootstrap_servers: str, scene: Scenario) -> None:
    from testbed.produce import publish_in_order

    publish_in_order(bootstrap_servers, scene.feed.messages, scene.topic, scene.feed.partitions)


@dataclasses.dataclass(frozen=True)
class Targets:
    """Where the runs' tables go: `root` (a local folder or an s3a:// location) and the job settings reaching
    it (`sections`: the target's options and Spark's, merged into each run's)."""

    root: str
    sections: dict = dataclasses.field(default_factory=dict)

    def location(self, name: str) -> str:
        return f"{self.root.rstrip('/')}/{name}"

    def settled(self, job: dict) -> dict:
        """`job` (a run's sections, its target under `root`) with the settings reaching the store."""
        values = {**job, **{k: v for k, v in self.sections.items() if k != "target"}}
        values["target"] = {**job["target"], **self.sections.get("target", {})}
        return values


def protocol_runs(spark, bootstrap_servers: str, scene: Scenario, workdir: Path, kills: int, kills_per_run: int,
                  rng: random.Random, batch_messages: int = 40, targets: Targets | None = None,
                  sites: Sequence[str] = ()) -> list[RunOutcome]:
    """An uninterrupted run, then kill runs of `scene` until `kills` kills happened (tables under `targets`,
    by default the workdir)."""
    targets = targets or Targets(str(workdir))
    publish_scenario(bootstrap_servers, scene)
    name = f"{scene.protocol}-uninterrupted"
    base = targets.location(name)
    baseline = uninterrupted(spark, targets.settled(job_sections(
        bootstrap_servers, scene, base, f"g-{name}-{uuid.uuid4().hex[:6]}", batch_messages)), scene)
    outcomes: list[RunOutcome] = []
    while sum(len(o.kills) for o in outcomes) < kills:
        n = len(outcomes) + 1
        run_dir = workdir / f"{scene.protocol}-run{n}"
        run_dir.mkdir(parents=True)
        sections = targets.settled(job_sections(bootstrap_servers, scene, targets.location(f"{run_dir.name}/delta"),
                                                f"g-{run_dir.name}-{uuid.uuid4().hex[:6]}", batch_messages))
        wanted = min(kills_per_run, kills - sum(len(o.kills) for o in outcomes))
        # The first run kills once at each DDL site the stream reaches, in stream order: drawn at random, the
        # backfill (the stream's first DDL) was passed unhit in most runs (on 2026-11-25 in all six).
        planned = [choose_kill(rng, [], site=site) for site in scene.ddl_sites()] if n == 1 and not sites else []
        outcome = kill_run(scene, sections, run_dir, wanted, rng, baseline, spark, planned=planned[:wanted],
                           reference=base if "history" in scene.settings else None, sites=sites)
        outcomes.append(outcome)
        print(f"  {scene.protocol} run {n}: kills {outcome.kills or 'none'}; "
              f"{'equal' if outcome.equal else 'NOT EQUAL: ' + '; '.join(outcome.problems)} ({outcome.seconds:.0f} s)", flush=True)
        if not outcome.kills and outcome.equal:
            raise AssertionError(f"{scene.protocol}: the job finished before its first kill point; make the workload longer")
    return outcomes


def summary(outcomes: list[RunOutcome]) -> str:
    sites = Counter(site for o in outcomes for site in o.kills)
    equal = sum(o.equal for o in outcomes)
    return (f"{equal}/{len(outcomes)} runs equal; {sum(sites.values())} kills at {len(sites)} distinct kill sites: "
            + ", ".join(f"{site} {n}" for site, n in sorted(sites.items())))


def run(args) -> bool:
    from testbed.local_kafka import LocalKafka
    from testbed.s3_server import S3Server, s3_spark_conf
    from tests.registry_server import FakeSchemaRegistry
    from ticdc_delta.jobs.session import get_spark, hadoop_aws_package

    rng = random.Random(args.seed)
    protocols = [p.strip() for p in args.kill_protocols.split(",") if p.strip()]
    workdir = args.kill_workdir or Path(tempfile.mkdtemp(prefix="ticdc-faults-"))
    print(f"workdir {workdir}", flush=True)
    broker = LocalKafka(workdir / "kafka")
    broker.start()
    registry = FakeSchemaRegistry()
    registry.start()
    conf, packages, targets, s3 = {"spark.sql.shuffle.partitions": "1", "spark.default.parallelism": "1"}, [], None, None
    outcomes: list[RunOutcome] = []
    spark = None
    try:
        if args.target == "s3":
            s3 = S3Server(workdir / "moto.log")
            s3.start()
            s3.create_bucket("kills")  # (a bucket per section: Hadoop caches a bucket's file system per JVM)
            hadoop = s3_spark_conf(s3, args.s3_fast_listing == "on")
            conf, packages = {**conf, **hadoop}, [hadoop_aws_package()]
            # One job at a time writes a target (a killed one's processes have ended before the next starts):
            # the single-driver log store's put-if-absent holds within each, as docs/object-storage.md says.
            targets = Targets(f"s3a://kills/{workdir.name}",
                              {"target": {"require_safe_commits": False}, "spark.conf": hadoop})
            print(f"tables under {targets.root} ({s3.endpoint})", flush=True)
        if args.kill_small_merge_writer == "delta-rs" and targets is not None:
            raise SystemExit("--kill-small-merge-writer delta-rs: local targets only (the product refuses others)")
        if args.kill_small_merge_writer != "auto":
            writer = {"target": {"small_merge_writer": args.kill_small_merge_writer}}
            targets = Targets(str(workdir), writer) if targets is None else dataclasses.replace(
                targets, sections={**targets.sections, "target": {**targets.sections.get("target", {}), **writer["target"]}})
        spark = get_spark("local[1]", conf, packages)
        for i, protocol in enumerate(protocols):
            share = args.kills // len(protocols) + (1 if i < args.kills % len(protocols) else 0)
            per_table = args.kill_topics == "per-table" or (args.kill_topics == "both" and i % 2 == 1)
            scene = scenario(protocol, rng, registry.url, history=protocol != "avro", topic_per_table=per_table)
            outcomes += protocol_runs(spark, broker.bootstrap_servers, scene, workdir, share, args.kills_per_run, rng,
                                      targets=targets, sites=[s.strip() for s in args.kill_sites.split(",") if s.strip()])
    finally:
        if spark is not None:
            spark.stop()
        registry.stop()
        broker.stop()
        if s3 is not None:
            s3.stop()
    print(summary(outcomes), flush=True)
    return all(o.equal for o in outcomes)
