"""Command line: `ticdc-delta run` (the job), `ticdc-delta status` (where a consumer
stands), `ticdc-delta replay-dead-letters` (after fixing their cause), and
`ticdc-delta demo` from a repository checkout (the installed wheel does not list it).

Exit statuses: `jobs.exit_statuses` (one table, also the documentation's). Each
failure ends in one line naming cause and remedy (`jobs.failures` for errors
the product did not raise itself); the trace is logged at DEBUG.

`main` raises SystemExit with the status (every launcher sees it: the console
script, `python -m`, a Databricks wheel task, spark-submit); `exit_status`
returns it.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import platform
import signal
import sys
import threading
from typing import NoReturn

from ticdc_delta import __version__
from ticdc_delta.exceptions import (
    AuthenticationError,
    ConfigError,
    DecodeError,
    KafkaUnreachableError,
    LeaseError,
    MaterializerError,
    SparkStartError,
)
from ticdc_delta.jobs import config as config_module
from ticdc_delta.jobs import exit_statuses as exits
from ticdc_delta.jobs.log_lines import log_lines_at

log = logging.getLogger("ticdc_delta")

# What the job needs from its runtime rather than from this package (`pip install ticdc-delta[local]`).
_SPARK_MODULES = {"pyspark", "delta", "py4j"}


def _job_flags(parser) -> None:
    """The flags that say which consumer and tables: shared by `run` and `status`."""
    parser.add_argument("--config", help="TOML configuration file (flags override it)")
    parser.add_argument("--bootstrap-servers", help="kafka.bootstrap_servers")
    parser.add_argument("--topics", help="kafka.topics, comma-separated")
    parser.add_argument("--topic-pattern", help="kafka.topic_pattern: read every topic whose name matches (instead of --topics)")
    parser.add_argument("--group-id", help="kafka.group_id (also names the checkpoint)")
    parser.add_argument("--target-path", help="target.path: root directory of path tables")
    parser.add_argument("--target-catalog", help="target.catalog: catalog for catalog tables")


def _run_parser(sub) -> None:
    run = sub.add_parser("run", help="consume TiCDC topics and apply them to Delta tables")
    _job_flags(run)
    run.add_argument("--start-from", choices=config_module.START_POSITIONS, help="kafka.start_from")
    run.add_argument("--protocol", help="protocol.name")
    mode = run.add_mutually_exclusive_group()
    mode.add_argument("--until-idle", action="store_const", const="until-idle", dest="mode", help="drain and exit")
    mode.add_argument("--continuous", action="store_const", const="continuous", dest="mode", help="run until stopped")
    run.add_argument("--on-bad-message", choices=config_module.BAD_MESSAGE_POLICIES, help="policy.on_bad_message")
    run.add_argument("--engine", choices=config_module.ENGINES, help="run.engine: where messages are read and decoded")
    run.add_argument(
        "--no-skip-when-caught-up", action="store_const", const=False, dest="skip_when_caught_up",
        help="run.skip_when_caught_up = false: start Spark even when the consumer's commits are at the end of every partition",
    )


def _status_parser(sub) -> None:
    status = sub.add_parser(
        "status", help="committed offsets and lag per partition; applied commitTs and Delta version per table"
    )
    _job_flags(status)
    status.add_argument("--json", action="store_true", help="print JSON instead of text tables")


def _replay_parser(sub) -> None:
    replay = sub.add_parser(
        "replay-dead-letters",
        help="after fixing their cause, apply dead letters where that is safe (stop the job first)",
    )
    _job_flags(replay)
    replay.add_argument("--dry-run", action="store_true", help="only say what would be done")


def _snapshot_parser(sub) -> None:
    snapshot = sub.add_parser(
        "snapshot",
        help="load a Dumpling export as the tables' starting point, applied through its snapshot TSO (stop the job first)",
    )
    _job_flags(snapshot)
    snapshot.add_argument("--from", dest="source", required=True,
                          help="the export's folder: a local path or any URL Spark reads (s3a://, abfss://, dbfs:/ ...)")
    snapshot.add_argument("--time-zone", default="UTC",
                          help="the TiDB session time zone Dumpling ran in (TIMESTAMP values are its wall clock)")
    snapshot.add_argument("--no-escape-backslash", action="store_true", help="Dumpling ran with --escape-backslash=false")
    snapshot.add_argument("--no-header", action="store_true", help="Dumpling ran with --no-header (CSV)")
    snapshot.add_argument("--csv-separator", default=",", help="Dumpling's --csv-separator")
    snapshot.add_argument("--csv-delimiter", default='"', help="Dumpling's --csv-delimiter")
    snapshot.add_argument("--csv-null-value", default="\\N", help="Dumpling's --csv-null-value")


def _as_of_parser(sub) -> None:
    as_of = sub.add_parser(
        "as-of", help="the Delta version of each table that holds upstream as of a commitTs or time, consistently"
    )
    _job_flags(as_of)
    point = as_of.add_mutually_exclusive_group(required=True)
    point.add_argument("--commit-ts", type=int, help="an upstream commitTs (TSO)")
    point.add_argument("--time", help="an upstream time, ISO 8601 (without a zone: UTC)")
    as_of.add_argument("--tables", help="<database>.<table>, comma-separated (default: the consumer's tables)")
    as_of.epilog = ("Reads as of a commitTs older than maintenance.vacuum_retain_hours (default 168) may fail: VACUUM "
                    "removed the files of older versions.")
    as_of.add_argument("--json", action="store_true", help="print JSON")


def _maintain_parser(sub) -> None:
    maintain = sub.add_parser(
        "maintain", help="compact (OPTIMIZE) and vacuum the consumer's tables now, as [maintenance] says, with no time budget"
    )
    _job_flags(maintain)
    maintain.add_argument("--tables", help="<database>.<table> names or shell patterns, comma-separated (default: all)")
    maintain.add_argument("--json", action="store_true", help="print JSON")


def _tables_parser(sub) -> None:
    tables = sub.add_parser("tables", help="the consumer's path tables and the folder each is in (renamed tables too)")
    _job_flags(tables)
    tables.add_argument("--json", action="store_true", help="print JSON")


def _overrides(args: argparse.Namespace) -> dict:
    def flag(name: str):
        return getattr(args, name, None)  # flags a command does not have count as not given

    # (a flag naming the topics one way replaces the file's other way)
    topics, pattern = flag("topics"), flag("topic_pattern")
    return {
        "kafka": {
            "bootstrap_servers": flag("bootstrap_servers"),
            "topics": () if pattern and not topics else topics,
            "topic_pattern": "" if topics and not pattern else pattern,
            "group_id": flag("group_id"),
            "start_from": flag("start_from"),
        },
        "protocol": {"name": flag("protocol")},
        "target": {"path": flag("target_path"), "catalog": flag("target_catalog")},
        "run": {"mode": flag("mode"), "engine": flag("engine"), "skip_when_caught_up": flag("skip_when_caught_up")},
        "policy": {"on_bad_message": flag("on_bad_message")},
    }


def _install_stop_handlers(stop: threading.Event) -> None:
    def request_stop(signum, _frame) -> None:
        log.info("signal %d: finishing the current batch, then stopping", signum)
        stop.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)


def _command_run(args: argparse.Namespace) -> int:
    from ticdc_delta.jobs.preflight import check_before_start

    config = config_module.load(args.config, _overrides(args))
    from ticdc_delta.jobs.caught_up import LookedOnce, might_be_small, nothing_new, small_run
    from ticdc_delta.jobs.kafka_source import KafkaSource

    # Before anything imports pyspark: Kafka and credentials need no Spark, nor does telling that there is
    # nothing to read (one connection to Kafka for both; one look at the group's commits for the last two).
    source = KafkaSource(config.kafka)
    try:
        check_before_start(config, source)
        looked = LookedOnce(source, count=might_be_small(config))
        if nothing_new(config, looked):
            return 0
        quick_compiler = small_run(config, looked)
    finally:
        source.close()
    from ticdc_delta.jobs.pipeline import runs
    from ticdc_delta.jobs.session import kafka_source_package, spark_for

    stop = threading.Event()
    _install_stop_handlers(stop)
    # The Spark engine reads Kafka with Spark's own source: a local session gets its jars too.
    packages = [kafka_source_package()] if config.run.engine == "spark" else []
    spark = spark_for(config, packages, quick_compiler=quick_compiler)
    # What ran, for a support question or a log read later: the runtime is often not the user's to see.
    log.info("ticdc-delta %s on Python %s, Spark %s", __version__, platform.python_version(), spark.version)
    for result in runs(config, spark, stop=stop):
        log.info(
            "done: %d messages, %d rows applied, %d DDL, %d replays skipped, %d dead letters, %d waiting",
            result.messages,
            result.rows_applied,
            result.schema_changes,
            result.replays_skipped,
            result.dead_letters,
            result.waiting,
        )
    return 0


def _command_status(args: argparse.Namespace) -> int:
    from ticdc_delta.jobs.status import print_status

    return print_status(config_module.load(args.config, _overrides(args)), as_json=args.json)


def _command_maintain(args: argparse.Namespace) -> int:
    from ticdc_delta.jobs.maintain import parse_tables, print_maintain

    config = config_module.load(args.config, _overrides(args))
    return print_maintain(config, parse_tables(args.tables), as_json=args.json)


def _command_tables(args: argparse.Namespace) -> int:
    from ticdc_delta.jobs.tables import print_tables

    return print_tables(config_module.load(args.config, _overrides(args)), as_json=args.json)


def _command_replay(args: argparse.Namespace) -> int:
    from ticdc_delta.jobs.replay import print_replay

    return print_replay(config_module.load(args.config, _overrides(args)), dry_run=args.dry_run)


def _command_snapshot(args: argparse.Namespace) -> int:
    from ticdc_delta.jobs.session import spark_for
    from ticdc_delta.jobs.snapshot import ExportFormat, SnapshotLoader
    from ticdc_delta.schema_cache.options import require_zone

    config = config_module.load(args.config, _overrides(args))
    require_zone("--time-zone", args.time_zone)
    export_format = ExportFormat(
        escape_backslash=not args.no_escape_backslash, csv_separator=args.csv_separator,
        csv_delimiter=args.csv_delimiter, csv_null_value=args.csv_null_value, csv_header=not args.no_header,
        time_zone=args.time_zone,
    )
    spark = spark_for(config)
    outcomes = SnapshotLoader(config, spark, args.source, export_format).load()
    for outcome in outcomes:
        print(f"{outcome.table}: {outcome.action} ({outcome.reason})")
    return 0


def _command_as_of(args: argparse.Namespace) -> int:
    from ticdc_delta.jobs.as_of import parse_point, parse_tables, print_as_of

    config = config_module.load(args.config, _overrides(args))
    return print_as_of(config, parse_point(args.commit_ts, args.time), parse_tables(args.tables), as_json=args.json)


def _demo_available() -> bool:
    # The demo's broker, stream and stand-in encoders are not part of the
    # installed product: they live in the repository's testbed/ package.
    return importlib.util.find_spec("testbed") is not None


def _command_demo(args: argparse.Namespace) -> int:
    from testbed.demo import run_demo

    run_demo(args.workdir)
    return 0


def main(argv: list[str] | None = None) -> NoReturn:
    """The `ticdc-delta` entry point: ends the process with the command's exit status.

    Raised, not returned: a Databricks `python_wheel_task` (and any launcher that imports the entry
    point and calls it) ignores a returned value, and would report a failed run as successful.
    """
    raise SystemExit(exit_status(argv))


def build_parser(*, demo: bool | None = None) -> argparse.ArgumentParser:
    """The `ticdc-delta` command line: every command and its flags; `demo` whether to list the demo command
    (by default, where it runs: a checkout)."""
    parser = argparse.ArgumentParser(prog="ticdc-delta", description="TiCDC (Kafka) -> Delta Lake materializer")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    sub = parser.add_subparsers(dest="command", required=True)
    _run_parser(sub)
    _status_parser(sub)
    _replay_parser(sub)
    _snapshot_parser(sub)
    _as_of_parser(sub)
    _tables_parser(sub)
    _maintain_parser(sub)
    if _demo_available() if demo is None else demo:  # (listed only where it runs: a checkout, not the installed wheel)
        demo = sub.add_parser("demo", help="local Kafka + sample stream + the job until idle, then print the tables")
        demo.add_argument("--workdir", help="where the broker data and Delta tables go (default: the cache folder)")
    return parser


def exit_status(argv: list[str] | None = None) -> int:
    """Run one command line; its exit status (the module docstring lists them)."""
    args = build_parser().parse_args(argv)
    log_lines_at(args.log_level)
    try:
        return {
            "run": _command_run,
            "status": _command_status,
            "replay-dead-letters": _command_replay,
            "snapshot": _command_snapshot,
            "as-of": _command_as_of,
            "tables": _command_tables,
            "maintain": _command_maintain,
            "demo": _command_demo,
        }[args.command](args)
    except ConfigError as err:
        log.error("configuration error: %s", err)
        return exits.CONFIG.code
    except SparkStartError as err:
        log.error("%s", err)
        return exits.SPARK_GONE.code
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] not in _SPARK_MODULES:
            raise
        log.error(
            "%s is not installed in this Python (%s): install ticdc-delta[local] for local runs, or run the job "
            "where Spark provides it (spark-submit, Databricks)", err.name.split(".")[0], sys.executable,
        )
        return exits.SPARK_GONE.code
    except DecodeError as err:
        log.error("%s (policy.on_bad_message = fail; set it to dead-letter to divert such messages)", err)
        return exits.BAD_MESSAGE.code
    except LeaseError as err:
        log.error("%s", err)
        return exits.LEASE.code
    except KafkaUnreachableError as err:
        log.error("%s", err)
        return exits.KAFKA_UNREACHABLE.code
    except AuthenticationError as err:
        log.error("%s", err)
        return exits.CREDENTIALS.code
    except MaterializerError as err:
        log.error("%s", err)
        return exits.OTHER.code
    except Exception as err:  # noqa: BLE001 - Spark's, Delta's, the JVM's: one line, the trace at DEBUG
        from ticdc_delta.jobs.failures import explain

        failure = explain(err)
        log.error("%s", failure.line)
        log.debug("the trace of that error", exc_info=True)
        return failure.status


if __name__ == "__main__":
    main()
