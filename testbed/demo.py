"""The demo: local Kafka, a sample Simple JSON stream, the job until idle, the tables.

The stream: two tables of a shop over 3 partitions, a few hundred changes in
small transactions each followed by a watermark, an ALTER TABLE ADD COLUMN
half-way, and order-number corrections that change a primary key (TiCDC
sends those as DELETE + INSERT at one commitTs).
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import random
import shutil
import signal
import sys
import time
from decimal import Decimal
from pathlib import Path

from testbed.changefeed import Changefeed
from testbed.local_kafka import LocalKafka
from testbed.produce import publish_in_order
from testbed.tables import column
from ticdc_delta.jobs import config as config_module
from ticdc_delta.jobs.log_lines import log_lines_at
from ticdc_delta.jobs.paths import cache_dir
from ticdc_delta.jobs.pipeline import Pipeline, RunResult
from ticdc_delta.jobs.session import get_spark

log = logging.getLogger(__name__)

TOPIC = "ticdc-demo"
GROUP = "ticdc-delta-demo"
PARTITIONS = 3
STATUSES = ["new", "paid", "shipped", "cancelled"]


def demo_changefeed(seed: int = 7, changes: int = 400, **feed_options) -> Changefeed:
    """A deterministic sample stream of about `changes` row changes.

    `feed_options` go to Changefeed (encoding, location, avro_writer, topic_prefix).
    """
    rng = random.Random(seed)
    feed = Changefeed(PARTITIONS, **feed_options)
    feed.create_table(
        "shop",
        "customers",
        [
            column("id", "int", nullable=False, length=11),
            column("name", "varchar", length=64),
            column("balance", "decimal", length=12, decimal=2),
            column("signed_up", "timestamp", decimal=3),
        ],
        primary_key=["id"],
    )
    feed.create_table(
        "shop",
        "orders",
        [
            column("order_no", "bigint", nullable=False, unsigned=True, length=20),
            column("customer_id", "int", length=11),
            column("amount", "decimal", length=10, decimal=2),
            column("status", "enum", elements=STATUSES),
            column("placed_at", "datetime", decimal=3),
            column("note", "text"),
        ],
        primary_key=["order_no"],
    )
    feed.watermark()
    base = dt.datetime(2026, 1, 1, 9, 0, 0)
    customers: list[int] = []
    orders: list[int] = []
    next_customer, next_order = 1, 18_446_744_073_709_551_000  # near BIGINT UNSIGNED's top
    done = 0
    altered = False
    while done < changes:
        if not altered and done >= changes // 2:
            feed.add_column("shop", "customers", column("tier", "varchar", length=16))
            altered = True
        with feed.transaction() as txn:
            for _ in range(rng.randint(1, 4)):
                roll = rng.random()
                if roll < 0.2 or len(customers) < 5:
                    row = {
                        "id": next_customer,
                        "name": f"customer {next_customer}",
                        "balance": Decimal(rng.randint(0, 100_000)) / 100,
                        "signed_up": (base + dt.timedelta(minutes=next_customer, milliseconds=123)).replace(
                            tzinfo=dt.timezone.utc
                        ),
                    }
                    if altered:
                        row["tier"] = rng.choice(["gold", "silver", None])
                    txn.insert("shop", "customers", row)
                    customers.append(next_customer)
                    next_customer += 1
                elif roll < 0.55:
                    txn.insert(
                        "shop",
                        "orders",
                        {
                            "order_no": next_order,
                            "customer_id": rng.choice(customers),
                            "amount": Decimal(rng.randint(100, 50_000)) / 100,
                            "status": "new",
                            "placed_at": base + dt.timedelta(hours=done, microseconds=rng.randint(0, 999) * 1000),
                            "note": rng.choice([None, "gift wrap", "leave at door", "日本語のメモ"]),
                        },
                    )
                    orders.append(next_order)
                    next_order += 1
                elif roll < 0.8 and orders:
                    order = rng.choice(orders)
                    txn.update("shop", "orders", [order], {"status": rng.choice(STATUSES[1:])})
                elif roll < 0.88 and orders:
                    # A corrected order number: the primary key changes.
                    old = orders.pop(rng.randrange(len(orders)))
                    txn.update("shop", "orders", [old], {"order_no": next_order, "note": f"renumbered from {old}"})
                    orders.append(next_order)
                    next_order += 1
                elif roll < 0.95 and orders:
                    txn.delete("shop", "orders", [orders.pop(rng.randrange(len(orders)))])
                else:
                    cid = rng.choice(customers)
                    changes_ = {"balance": Decimal(rng.randint(0, 100_000)) / 100}
                    if altered:
                        changes_["tier"] = rng.choice(["gold", "silver", "bronze"])
                    txn.update("shop", "customers", [cid], changes_)
                done += 1
    return feed


def demo_config(bootstrap_servers: str, target: str, *, topic: str = TOPIC, group: str = GROUP, **sections):
    """The demo job's configuration; `sections` add to it (e.g. policy={"on_bad_message": "dead-letter"})."""
    values = {
        "kafka": {"bootstrap_servers": bootstrap_servers, "topics": [topic], "group_id": group},
        "target": {"path": str(target)},
        "run": {"mode": "until-idle"},
    }
    for name, section in sections.items():
        values[name] = {**values.get(name, {}), **section}
    return config_module.from_mapping(values)


def notebook_demo(**sections):
    """The demo job's configuration as the notebooks see it, and the demo's folder.

    `scripts/demo --serve` keeps its broker up in the cache's `demo/` folder and writes its address there;
    the `TICDC_DEMO_*` variables point elsewhere (the tests' demo: its own broker, topic and folder).
    """
    workdir = Path(os.environ.get("TICDC_DEMO_WORKDIR", cache_dir() / "demo"))
    address = workdir / "kafka" / "bootstrap.servers"
    bootstrap = os.environ.get("TICDC_DEMO_BOOTSTRAP_SERVERS") or (
        address.read_text().strip() if address.exists() else "127.0.0.1:9092"
    )
    target = os.environ.get("TICDC_DEMO_TARGET", str(workdir / "delta"))
    topic = os.environ.get("TICDC_DEMO_TOPIC", TOPIC)
    group = os.environ.get("TICDC_DEMO_GROUP_ID", GROUP)
    return demo_config(bootstrap, target, topic=topic, group=group, **sections), workdir


def load_demo(
    bootstrap_servers: str, target: str, *, topic: str = TOPIC, group: str = GROUP, spark=None
) -> tuple[Changefeed, RunResult]:
    """Publish the demo stream to `topic` and run the job until idle into `target` (what the demo and tests share)."""
    feed = demo_changefeed()
    sent = publish_in_order(bootstrap_servers, feed.messages, topic, PARTITIONS)
    print(f"produced {sent} Simple JSON messages to {topic} ({PARTITIONS} partitions) at {bootstrap_servers}")
    config = demo_config(bootstrap_servers, target, topic=topic, group=group)
    result = Pipeline.from_config(config, spark or get_spark()).run()
    return feed, result


def run_demo(workdir: Path | None = None, *, serve: bool = False) -> RunResult:
    """The demo in `workdir`; `serve`: keep the broker running afterwards (for the notebooks) until Ctrl-C."""
    workdir = Path(workdir or cache_dir() / "demo")
    shutil.rmtree(workdir, ignore_errors=True)
    with LocalKafka(workdir / "kafka") as broker:
        feed, result = load_demo(broker.bootstrap_servers, str(workdir / "delta"))
        print(
            f"\napplied {result.rows_applied} row changes and {result.schema_changes} DDL in {result.batches} batches "
            f"from {result.messages} messages; tables in {workdir / 'delta'}\n"
        )
        _show_tables(get_spark(), demo_config(broker.bootstrap_servers, str(workdir / "delta")), feed)
        if serve:
            _serve(broker, workdir)
    return result


def _serve(broker: LocalKafka, workdir: Path) -> None:
    # The notebooks read the broker's address from <workdir>/kafka/bootstrap.servers.
    print(
        f"Kafka stays up at {broker.bootstrap_servers} for the notebooks (notebooks/, demo folder {workdir}); "
        "Ctrl-C stops it",
        flush=True,
    )
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


def _show_tables(spark, config, feed: Changefeed) -> None:
    from ticdc_delta.apply.places.locator import PathLocator
    from ticdc_delta.schema_cache.events import TableName

    locator = PathLocator(config.target.path)
    for database, table in feed.table_names():
        name = locator.sql_name(TableName(database, table))
        frame = spark.table(name)
        actual = sorted(tuple(r) for r in frame.collect())
        expected = sorted(feed.expected_rows(database, table))
        verdict = "matches the upstream model" if _same(actual, expected) else "DIFFERS from the upstream model"
        print(f"{database}.{table}: {len(actual)} rows, {verdict}")
        frame.orderBy(frame.columns[0]).show(10, truncate=False)


def _normalize(row: tuple) -> tuple:
    # collect() gives TIMESTAMP values as naive local datetimes; compare instants.
    return tuple(v.astimezone(dt.timezone.utc) if isinstance(v, dt.datetime) and v.tzinfo is None else v for v in row)


def _same(actual: list[tuple], expected: list[tuple]) -> bool:
    return [_normalize(r) for r in actual] == [_normalize(r) for r in expected]


def table_differences(spark, target: str, feed: Changefeed, database: str, table: str) -> list[tuple]:
    """(key, Delta row, upstream row) for every key where the Delta table and the upstream model differ.

    The key is the first column; a missing row is None.
    """
    from ticdc_delta.apply.places.locator import PathLocator
    from ticdc_delta.schema_cache.events import TableName

    actual = {r[0]: _normalize(tuple(r)) for r in spark.table(PathLocator(target).sql_name(TableName(database, table))).collect()}
    expected = {r[0]: _normalize(r) for r in feed.expected_rows(database, table)}
    return [(k, actual.get(k), expected.get(k)) for k in sorted(actual.keys() | expected.keys()) if actual.get(k) != expected.get(k)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", help="where the broker data and Delta tables go (default: the cache folder)")
    parser.add_argument("--serve", action="store_true", help="keep the broker running afterwards, for the notebooks")
    args = parser.parse_args(argv)
    log_lines_at("INFO")
    run_demo(args.workdir, serve=args.serve)
    return 0


if __name__ == "__main__":
    sys.exit(main())
