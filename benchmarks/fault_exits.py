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
- configuration and storage, before any commit: 2 (an unknown setting), 9 (the target below a file).

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
PATHS = {"done": 0, "bad-message": 3, "sigterm": 0, "kafka-gone": 6, "spark-gone": 8, "configuration": 2, "storage": 9}
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
            for path in paths:
                seen: Counter = Counter()
                unused = 0
                began = time.monotonic()
                for _ in range(args.exit_repeats):
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
