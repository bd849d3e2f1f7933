"""The exit statuses of `ticdc-delta`: one table, the code's and the documentation's (docs/running.md's table and
docs/cli.md are generated from it by scripts/reference.py; the README's list is checked against it).

Every launcher sees the status: the console script, `python -m ticdc_delta.jobs.cli`, a Databricks
`python_wheel_task` (the entry point raises SystemExit) and spark-submit's primary resource in client mode.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ExitStatus:
    code: int
    cause: str
    remedy: str


DONE = ExitStatus(0, "done", "")
OTHER = ExitStatus(
    1, "anything else: an error the product did not foresee, or Kafka refusing what the job asks (a listed topic "
    "that does not exist, a pattern that matches none, offsets removed by retention)",
    "the one line names it; `--log-level DEBUG` logs the trace")
CONFIG = ExitStatus(
    2, "a bad configuration: an unknown key or section, a value not allowed, a missing required key, an "
    "environment variable a `{ env = \"NAME\" }` value names that is not set; `[[tables]]` rules that send two "
    "tables to one name, move a table already made, or split a RENAME between a skipped and a materialized name",
    "fix the key the line names (docs/configuration.md; for rules, Operations' \"Choosing and naming tables\")")
BAD_MESSAGE = ExitStatus(
    3, "a message that cannot be decoded, under `policy.on_bad_message = \"fail\"`; the line names its topic, "
    "partition, offset and cause",
    "fix the cause upstream, or set `policy.on_bad_message = \"dead-letter\"` to divert such messages and replay "
    "them later")
REPLAY_REFUSED = ExitStatus(
    4, "`replay-dead-letters` only: some dead letters were refused (each is printed with its reason); the others "
    "were applied", "read each reason; a refused letter stays in the table")
LEASE = ExitStatus(
    5, "another job runs this consumer: its lease is held by a live job, or was taken over while this one was "
    "paused; nothing more was written", "run one job per `kafka.group_id`; wait for the other to end")
KAFKA_UNREACHABLE = ExitStatus(
    6, "no Kafka broker answered for longer than `kafka.unreachable_timeout_seconds`; what was applied is "
    "checkpointed", "check `kafka.bootstrap_servers` and the brokers; run again later (it resumes)")
CREDENTIALS = ExitStatus(
    7, "Kafka (the SASL login) or the schema registry (HTTP 401) refused the job's credentials, at once, with no "
    "retry; the line names the service, never the secret", "fix the credentials in `kafka.properties` or `[registry]`")
SPARK_GONE = ExitStatus(
    8, "the runtime cannot run Spark: pyspark or delta-spark not installed in the job's Python, a local Spark "
    "that does not start (no Java, a jar that cannot be fetched), Spark's JVM that stopped answering mid-run "
    "(killed, most often for memory), Python workers of another Python version",
    "`pip install 'ticdc_delta-<version>-py3-none-any.whl[local]'` or run under spark-submit or Databricks; give "
    "the driver more memory and run again (it resumes); `PYSPARK_PYTHON` the job's Python")
STORAGE = ExitStatus(
    9, "the target's storage cannot be used: a folder the job cannot create or write, something it did not "
    "create where its tables go", "check `target.path` (or `target.catalog`) and its permissions")

STATUSES = (DONE, OTHER, CONFIG, BAD_MESSAGE, REPLAY_REFUSED, LEASE, KAFKA_UNREACHABLE, CREDENTIALS, SPARK_GONE, STORAGE)


def table() -> str:
    """The statuses as a Markdown table: status, cause, remedy."""
    rows = ["| status | cause | remedy |", "|---|---|---|"]
    rows += [f"| {s.code} | {s.cause} | {s.remedy or '–'} |" for s in STATUSES]
    return "\n".join(rows) + "\n"
