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
import random
import shutil
import sys
from decimal import Decimal
from pathlib import Path

from jobs import config as config_module
from jobs.paths import cache_dir
from jobs.pipeline import Pipeline, RunResult
from jobs.session import get_spark
from testbed.changefeed import Changefeed
from testbed.local_kafka import LocalKafka
from testbed.produce import ensure_topic, produce
from testbed.tables import column

log = logging.getLogger(__name__)

TOPIC = "ticdc-demo"
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


def run_demo(workdir: Path | None = None) -> RunResult:
    workdir = Path(workdir or cache_dir() / "demo")
    shutil.rmtree(workdir, ignore_errors=True)
    feed = demo_changefeed()
    with LocalKafka(workdir / "kafka") as broker:
        ensure_topic(broker.bootstrap_servers, TOPIC, PARTITIONS)
        sent = produce(broker.bootstrap_servers, TOPIC, ((m.partition, None, m.value) for m in feed.messages))
        print(f"produced {sent} Simple JSON messages to {TOPIC} ({PARTITIONS} partitions) at {broker.bootstrap_servers}")
        config = config_module.from_mapping(
            {
                "kafka": {"bootstrap_servers": broker.bootstrap_servers, "topics": [TOPIC], "group_id": "ticdc-delta-demo"},
                "target": {"path": str(workdir / "delta")},
                "run": {"mode": "until-idle"},
            }
        )
        spark = get_spark()
        result = Pipeline.from_config(config, spark).run()
    print(
        f"\napplied {result.rows_applied} row changes and {result.schema_changes} DDL in {result.batches} batches "
        f"from {result.messages} messages; tables in {workdir / 'delta'}\n"
    )
    _show_tables(spark, config, feed)
    return result


def _show_tables(spark, config, feed: Changefeed) -> None:
    from apply.locator import PathLocator
    from schema_cache.events import TableName

    locator = PathLocator(config.target.path)
    for database, table in feed.table_names():
        name = locator.sql_name(TableName(database, table))
        frame = spark.table(name)
        actual = sorted(tuple(r) for r in frame.collect())
        expected = sorted(feed.expected_rows(database, table))
        verdict = "matches the upstream model" if _same(actual, expected) else "DIFFERS from the upstream model"
        print(f"{database}.{table}: {len(actual)} rows, {verdict}")
        frame.orderBy(frame.columns[0]).show(10, truncate=False)


def _same(actual: list[tuple], expected: list[tuple]) -> bool:
    # collect() gives TIMESTAMP values as naive local datetimes; compare instants.
    def normalize(value):
        if isinstance(value, dt.datetime) and value.tzinfo is None:
            return value.astimezone(dt.timezone.utc)
        return value

    return [tuple(map(normalize, r)) for r in actual] == [tuple(map(normalize, r)) for r in expected]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", help="where the broker data and Delta tables go (default: the cache folder)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    run_demo(args.workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
