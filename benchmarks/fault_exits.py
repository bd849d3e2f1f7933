"""Exit statuses: each way a job that used delta-rs ends, repeated, as launchers see the process end.

A job process (`ticdc-delta run` of a pair's virtualenv, or its entry point called as a Databricks wheel task
calls it) applies a small stream into a fresh local target with the default writer, so delta-rs commits its
MERGEs (each path checks its target holds delta-rs commits), then ends by one path:

- done: the stream drained, until idle: 0;
- bad-message: `--continuous`, an undecodable message published once delta-rs has committed,
  `policy.on_bad_message = "fail"`: 3;
- sigterm: `--continuous`, SIGTERM once delta-rs has committed: 0 (the batch finishes, then the job stops);
- kafka-gone: `--continuous`, the broker paused (SIGSTOP) once delta-rs has committed, longer than
  `kafka.unreachable_timeout_seconds`: 6;
- spark-gone: `--continuous`, the job's Spark JVM killed once delta-rs has committed: 8;
- configuration and storage, before any commit: 2 (an unknown setting), 9 (the target below a file);

and every other command on a target a run made with delta-rs commits (its own tables written by delta-rs, read
back by the commands): `tables`, `status`, `as-of` (the newest commitTs), `maintain`, `replay-dead-letters` (none
to replay), `snapshot` (an export of another table, into the same target), `demo` (its own broker, a checkout
only), each 0; and `notebook`, a Python process calling the Python API as a notebook does (`table_path`,
`consistent_read`, `read_as_of`, `read_topics`) and ending normally: 0.

The reason: on Python 3.13 a process that read a Delta table through delta-rs's pyarrow dataset can abort at
interpreter shutdown ("terminate called without an active exception", status 134: an Arrow thread that
still holds Python objects meets the interpreter's finalization); a scheduler would call such a run failed
whatever the job did. The job's own use of delta-rs (its write, the log's metadata) makes no such read; this
shows that every exit path ends with its documented status, often enough to catch a 1-in-10 event.
Prints per pair and path `N/N as documented`, and each other status seen with the end of that run's log.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

from testbed.processes import job_environment

ROOT = Path(__file__).resolve().parent.parent
PAIRS = {"newest": ROOT / ".venv", "oldest": ROOT / ".venv-oldest"}
PATHS = {"done": 0, "bad-message": 3, "sigterm": 0, "kafka-gone": 6, "spark-gone": 8, "configuration": 2, "storage": 9,
         "tables": 0, "status": 0, "as-of": 0, "maintain": 0, "replay": 0, "snapshot": 0, "notebook": 0, "demo": 0}
# The paths that read or write a target a `run` made beforehand (`_prepared`), not their own.
_ON_A_MADE_TARGET = {"tables", "status", "as-of", "maintain", "replay", "snapshot", "notebook"}
# A notebook's calls of the Python API (docs/api.md), then a normal end.
_NOTEBOOK = """
import sys
from ticdc_delta.apply.as_of import consistent_read
from ticdc_delta.apply.progress import read_as_of
from ticdc_delta.jobs import config as config_module
from ticdc_delta.jobs.session import get_spark
from ticdc_delta.jobs.tables import table_path
from ticdc_delta.jobs.topic_reader import read_topics

config = config_module.load(sys.argv[1])
spark = get_spark()
names = [f"delta.`{table_path(spark, config.target.path, 'shop', table)}`" for table in ("customers", "orders")]
read = consistent_read(spark, names, (1 << 62))
print({name: frame.count() for name, frame in read.frames(spark).items()})
print(read_as_of(spark, names[0], read.commit_ts).count())
print(len(read_topics(config.kafka)))
"""
_WAIT = 300


def add_arguments(parser) -> None:
    parser.add_argument("--exit-repeats", type=int, default=20, help="runs of each exit path on each pair")
    parser.add_argument("--exit-paths", default=",".join(PATHS), help=f"comma-separated: {', '.join(PATHS)}")
    parser.add_argument("--exit-pairs", default=",".join(PAIRS), help="comma-separated: newest, oldest")
    parser.add_argument("--exit-launcher", choices=("console", "wheel-task"), default="console",
                        help="the job's launcher: the console script, or the entry point called as a wheel task does")


def _config(folder: Path, bootstrap: str, topic: str, *, path: str, continuous_timeout: float | None = None,
            extra: str = "") -> Path:
    kafka = f'[kafka]\nbootstrap_servers = "{bootstrap}"\ntopics = ["{topic}"]\ngroup_id = "g-{folder.name}"\n'
    if continuous_timeout is not None:
        kafka += f"unreachable_timeout_seconds = {continuous_timeout}\n"
    text = f'{kafka}[target]\npath = "{path}"\n[run]\nbatch_max_messages = 60\nbatch_max_seconds = 1.0\n{extra}'
    config = folder / "job.toml"
    config.write_text(text)
    return config


def _delta_rs_commits(target: Path) -> int:
    count = 0
    for log in target.glob("*/*/_delta_log/*.json"):
        if log.parent.parent.parent.name == "_ticdc":
            continue
        count += sum('"engineInfo":"delta-rs' in line for line in log.read_text().splitlines())
    return count


def _command(venv: Path, launcher: str, *arguments: str) -> list[str]:
    if launcher == "console":
        return [str(venv / "bin" / "ticdc-delta"), *arguments]
    from testbed.processes import wheel_task_command

    return wheel_task_command(venv / "bin" / "python", *arguments)


def _descendants(pid: int) -> list[int]:
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == parent:
                        found.append(int(entry.name))
                        frontier.append(int(entry.name))
                except (OSError, IndexError, ValueError):
                    pass
    return found


def _prepared(venv: Path, launcher: str, broker, topic: str, work: Path) -> tuple[Path, Path]:
    """(a job's configuration, its target) after one `run` of the stream with delta-rs commits: what the other
    commands read; and an export of another table for `snapshot`."""
    folder = work / f"made-{venv.name}-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    config = _config(folder, broker.bootstrap_servers, topic, path=str(folder / "lake"))
    with (folder / "job.log").open("w") as out:
        status = subprocess.run(_command(venv, launcher, "run", "--config", str(config)), stdout=out,
                                stderr=subprocess.STDOUT, env=job_environment(), timeout=_WAIT).returncode
    if status != 0 or _delta_rs_commits(folder / "lake") == 0:
        raise RuntimeError(f"the run preparing the commands' target ended {status}; see {folder / 'job.log'}")
    from testbed.dumpling import write_export
    from tests.workloads import item, items_feed

    feed = items_feed()
    with feed.transaction() as txn:
        for i in range(3):
            txn.insert("shop", "items", item(i))
    write_export(feed, folder / "export")
    return config, folder / "lake"


def _command_of(path: str, venv: Path, launcher: str, config: Path, work: Path) -> list[str]:
    if path == "notebook":
        script = work / "notebook.py"
        script.write_text(_NOTEBOOK)
        return [str(venv / "bin" / "python"), str(script), str(config)]
    if path == "demo":
        return _command(venv, launcher, "demo", "--workdir", str(work / f"demo-{uuid.uuid4().hex[:8]}"))
    now = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())  # (every table's newest applied point: it is before now)
    arguments = {"tables": ["tables", "--json"], "status": ["status", "--json"], "as-of": ["as-of", "--time", now, "--json"],
                 "maintain": ["maintain", "--json"], "replay": ["replay-dead-letters"],
                 "snapshot": ["snapshot", "--from", str(config.parent / "export")]}[path]
    return _command(venv, launcher, *arguments, "--config", str(config))


def _one_command(path: str, venv: Path, launcher: str, config: Path, work: Path) -> tuple[int, str, int]:
    """One run of a command on the made target (or the demo on its own): (status, the end of its log, 1)."""
    log = work / f"{path}-{uuid.uuid4().hex[:8]}.log"
    with log.open("w") as out:
        try:
            status = subprocess.run(_command_of(path, venv, launcher, config, work), stdout=out,
                                    stderr=subprocess.STDOUT, env=job_environment(), timeout=_WAIT).returncode
        except subprocess.TimeoutExpired:
            status = -9
    return status, "\n".join(log.read_text(errors="replace").splitlines()[-4:]), 1


def _one(path: str, venv: Path, launcher: str, broker, topic: str, messages: list, work: Path) -> tuple[int, str, int]:
    """One run of an exit path: (its status, the end of its log, delta-rs commits in its target)."""
    from testbed.changefeed import Message
    from tests.support import publish

    folder = work / f"{path}-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    target = folder / "lake"
    log = folder / "job.log"
    extra, run_args, path_of_target = "", ["run"], str(target)
    if path == "bad-message":  # (a topic of its own: the bad message comes once delta-rs has committed)
        extra = '[policy]\non_bad_message = "fail"\n'
        topic = f"{topic}-bad-{folder.name}"
        publish(broker, topic, messages)
    if path == "storage":
        (folder / "a-file").write_text("not a folder")
        path_of_target = str(folder / "a-file" / "lake")
    continuous = path in ("bad-message", "sigterm", "kafka-gone", "spark-gone")
    config = _config(folder, broker.bootstrap_servers, topic, path=path_of_target,
                     continuous_timeout=20.0 if path == "kafka-gone" else None, extra=extra)
    if path == "configuration":
        config.write_text(config.read_text().replace("[run]\n", "[run]\nno_such_setting = 1\n", 1))
    command = _command(venv, launcher, *run_args, "--config", str(config), *(["--continuous"] if continuous else []))
    with log.open("w") as out:
        job = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=job_environment(),
                               start_new_session=True)
        try:
            if continuous:
                deadline = time.monotonic() + _WAIT
                while _delta_rs_commits(target) == 0 and job.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.5)
                if job.poll() is None:
                    if path == "bad-message":
                        publish(broker, topic, [Message(0, b"\xff not a TiCDC message", "bad")])
                    elif path == "sigterm":
                        job.send_signal(signal.SIGTERM)
                    elif path == "spark-gone":
                        for pid in _descendants(job.pid):
                            if "java" in Path(f"/proc/{pid}/comm").read_text():
                                os.kill(pid, signal.SIGKILL)
                    else:
                        os.kill(broker._process.pid, signal.SIGSTOP)  # (the broker's JVM: it answers nothing)
            status = job.wait(timeout=_WAIT)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            status = job.wait()
        finally:
            if path == "kafka-gone":
                os.kill(broker._process.pid, signal.SIGCONT)
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-4:])
    return status, tail, _delta_rs_commits(target) if target.exists() else 0


def run(args) -> bool:
    from testbed.demo import demo_changefeed
    from testbed.local_kafka import LocalKafka
    from tests.support import publish

    paths = [p.strip() for p in args.exit_paths.split(",") if p.strip()]
    pairs = [p.strip() for p in args.exit_pairs.split(",") if p.strip()]
    work = Path(os.environ.get("TICDC_DELTA_CACHE", ROOT / ".cache")) / f"exits-{uuid.uuid4().hex[:8]}"
    work.mkdir(parents=True)
    broker = LocalKafka(work / "kafka")
    broker.start()
    ok = True
    try:
        topic = "exits"
        messages = demo_changefeed(seed=args.seed % 1000, changes=150).messages
        publish(broker, topic, messages)
        for pair in pairs:
            venv = PAIRS[pair]
            made = None
            for path in paths:
                seen: Counter = Counter()
                unused = 0
                began = time.monotonic()
                if path in _ON_A_MADE_TARGET and made is None:
                    made = _prepared(venv, args.exit_launcher, broker, topic, work)
                for _ in range(args.exit_repeats):
                    if path in _ON_A_MADE_TARGET or path == "demo":
                        config = made[0] if made is not None else work
                        status, tail, commits = _one_command(path, venv, args.exit_launcher, config, work)
                    else:
                        status, tail, commits = _one(path, venv, args.exit_launcher, broker, topic, messages, work)
                    seen[status] += 1
                    if PATHS[path] not in (2, 9) and commits == 0:
                        unused += 1
                    if status != PATHS[path]:
                        print(f"    {pair} {path}: status {status}, log ends:\n      " + tail.replace("\n", "\n      "))
                n = args.exit_repeats
                right = seen[PATHS[path]]
                commits = "before any commit" if PATHS[path] in (2, 9) else f"{n - unused}/{n} with delta-rs commits"
                print(f"  {pair:<7} {path:<14} {right}/{n} as documented ({PATHS[path]}); statuses {dict(seen)}; "
                      f"{commits}; {(time.monotonic() - began) / n:.0f} s a run", flush=True)
                ok = ok and right == n and (PATHS[path] in (2, 9) or unused == 0)
    finally:
        broker.stop()
    return ok


if __name__ == "__main__":
    sys.exit("run through benchmarks/faults.py --only exits")
