"""Command line: `ticdc-delta run` (the job), and `ticdc-delta demo` from a repository checkout.

Exit status: 0 done, 2 bad configuration, 3 bad input under the `fail`
policy (the message is named), 1 anything else.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from jobs import config as config_module
from schema_cache.exceptions import ConfigError, DecodeError, MaterializerError

log = logging.getLogger("ticdc_delta")


def _run_parser(sub) -> None:
    run = sub.add_parser("run", help="consume TiCDC topics and apply them to Delta tables")
    run.add_argument("--config", help="TOML configuration file (flags override it)")
    run.add_argument("--bootstrap-servers", help="kafka.bootstrap_servers")
    run.add_argument("--topics", help="kafka.topics, comma-separated")
    run.add_argument("--group-id", help="kafka.group_id (also names the checkpoint)")
    run.add_argument("--start-from", choices=config_module.START_POSITIONS, help="kafka.start_from")
    run.add_argument("--protocol", help="protocol.name")
    run.add_argument("--target-path", help="target.path: root directory of path tables")
    run.add_argument("--target-catalog", help="target.catalog: catalog for catalog tables")
    mode = run.add_mutually_exclusive_group()
    mode.add_argument("--until-idle", action="store_const", const="until-idle", dest="mode", help="drain and exit")
    mode.add_argument("--continuous", action="store_const", const="continuous", dest="mode", help="run until stopped")
    run.add_argument("--on-bad-message", choices=config_module.BAD_MESSAGE_POLICIES, help="policy.on_bad_message")


def _overrides(args: argparse.Namespace) -> dict:
    return {
        "kafka": {
            "bootstrap_servers": args.bootstrap_servers,
            "topics": args.topics,
            "group_id": args.group_id,
            "start_from": args.start_from,
        },
        "protocol": {"name": args.protocol},
        "target": {"path": args.target_path, "catalog": args.target_catalog},
        "run": {"mode": args.mode},
        "policy": {"on_bad_message": args.on_bad_message},
    }


def _install_stop_handlers(stop: threading.Event) -> None:
    def request_stop(signum, _frame) -> None:
        log.info("signal %d: finishing the current batch, then stopping", signum)
        stop.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)


def _command_run(args: argparse.Namespace) -> int:
    from jobs.pipeline import Pipeline
    from jobs.session import get_spark

    config = config_module.load(args.config, _overrides(args))
    stop = threading.Event()
    _install_stop_handlers(stop)
    spark = get_spark(config.spark.master, config.spark.conf)
    result = Pipeline.from_config(config, spark, stop=stop).run()
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


def _command_demo(args: argparse.Namespace) -> int:
    # The demo's broker, stream and stand-in encoders are not part of the
    # installed product: they live in the repository's testbed/ package.
    try:
        from testbed.demo import run_demo
    except ImportError:
        raise ConfigError(
            "the demo needs the repository checkout (its testbed/ package); run scripts/demo there"
        ) from None
    run_demo(args.workdir)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ticdc-delta", description="TiCDC (Kafka) -> Delta Lake materializer")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    sub = parser.add_subparsers(dest="command", required=True)
    _run_parser(sub)
    demo = sub.add_parser("demo", help="local Kafka + sample stream + the job until idle, then print the tables")
    demo.add_argument("--workdir", help="where the broker data and Delta tables go (default: the cache folder)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        return {"run": _command_run, "demo": _command_demo}[args.command](args)
    except ConfigError as err:
        log.error("configuration error: %s", err)
        return 2
    except DecodeError as err:
        log.error("%s (policy.on_bad_message = fail; set it to dead-letter to divert such messages)", err)
        return 3
    except MaterializerError as err:
        log.error("%s", err)
        return 1


if __name__ == "__main__":
    sys.exit(main())
