"""End to end through the real broker, Spark and Delta: Simple JSON in, Delta tables out."""

from __future__ import annotations

import json
import logging
from decimal import Decimal

import pytest

from testbed.demo import demo_changefeed
from testbed.tables import column
from tests.readers import assert_delta_rs_reads_as_spark
from tests.support import (
    SPARK_ENGINE_PAIR,
    assert_gone,
    assert_table,
    publish,
    run_job,
    run_on_s3,
    spark_variant,
    staged_rows,
    table_frame,
    table_version,
)
from tests.workloads import DDL_EVOLUTION_TABLES, DEMO_TABLE_DDLS, ITEMS_DDL, ddl_evolution, item, items_feed
from ticdc_delta.apply.places.locator import PathLocator
from ticdc_delta.exceptions import DecodeError
from ticdc_delta.jobs import cli
from ticdc_delta.jobs.tables import table_path

pytestmark = pytest.mark.e2e


@pytest.mark.both_pairs("the MERGE, DDL, checkpoint and replay statements of a whole run, on each Spark/Delta pair")
def test_inserts_updates_deletes_across_three_partitions(spark, kafka, tmp_path, unique):
    # Setup: 60 inserts, updates of every third, deletes of every fifth, over 3 partitions.
    # Expect: the Delta table equals the upstream rows, types as mapped.
    feed = items_feed()
    with feed.transaction() as txn:
        for i in range(60):
            txn.insert("shop", "items", item(i))
    for i in range(0, 60, 3):
        with feed.transaction() as txn:
            txn.update("shop", "items", [i], {"price": Decimal("9.99"), "name": None})
    with feed.transaction() as txn:
        for i in range(0, 60, 5):
            txn.delete("shop", "items", [i])
    assert {m.partition for m in feed.messages if m.kind == "DML"} == {0, 1, 2}
    publish(kafka, f"items-{unique}", feed.messages)

    result = run_job(spark, kafka, f"items-{unique}", str(tmp_path), f"g-{unique}")

    assert_table(spark, str(tmp_path), feed, "shop", "items", ITEMS_DDL)
    assert result.waiting == 0 and result.dead_letters == 0


def test_partitions_out_of_commit_order_wait_for_every_watermark(spark, kafka, tmp_path, unique, engine):
    # Setup: partitions 1 and 2 carry the whole stream; partition 0 only its first half.
    # Expect: the first run applies exactly the first half (partition 0's watermark holds
    # the rest back); after partition 0's second half arrives, everything.
    feed = items_feed()
    for i in range(40):
        with feed.transaction() as txn:
            txn.insert("shop", "items", item(i))
    half = len(feed.messages)
    first_half = feed.expected_rows("shop", "items")
    for i in range(40):
        with feed.transaction() as txn:
            txn.update("shop", "items", [i], {"price": Decimal("2.50")})
    early = [m for m in feed.messages if m.partition != 0] + [m for m in feed.messages[:half] if m.partition == 0]
    late = [m for m in feed.messages[half:] if m.partition == 0]
    topic, target = f"ooo-{unique}", str(tmp_path)
    publish(kafka, topic, early)

    # The Spark engine's first run decodes on the executors, so what waits is staged; its second, small, is
    # decoded on the driver into the staging table that holds it (`StagingTable.stage_events`).
    first = run_job(spark, kafka, topic, target, f"g-{unique}", engine=engine,
                    **({"run": _ON_EXECUTORS} if engine == "spark" else {}))
    assert_table(spark, target, feed, "shop", "items", ITEMS_DDL, rows=first_half)
    assert first.waiting > 0  # the updates from partitions 1 and 2 wait for partition 0
    if engine == "spark":  # ... in the staging table, not in the job's memory
        assert staged_rows(spark, target, f"g-{unique}") == first.waiting

    publish(kafka, topic, late)
    run_job(spark, kafka, topic, target, f"g-{unique}", engine=engine)
    assert_table(spark, target, feed, "shop", "items", ITEMS_DDL)
    if engine == "spark":
        assert staged_rows(spark, target, f"g-{unique}") == 0


def test_a_lagging_partition_spills_to_disk_and_the_tables_come_out_exact(spark, kafka, tmp_path, unique, caplog):
    # Setup: 30 transactions of inserts and updates over 3 partitions with an ADD COLUMN half-way,
    # and every watermark of partition 0 withheld until the last one, so everything waits. The job
    # keeps at most 10 waiting events in memory and reads batches of 40 messages.
    # Expect: waiting events spill to files under run.spill_dir (gone after the run); nothing is
    # committed past a waiting event; the table equals the upstream rows, applied in slices of 10.
    feed = items_feed()
    for t in range(30):
        if t == 15:
            feed.add_column("shop", "items", column("stock", "int", default="3"), existing_rows_value=3)
        with feed.transaction() as txn:
            txn.insert("shop", "items", {**item(100 + t), **({"stock": t} if t >= 15 else {})})
            if t:
                txn.update("shop", "items", [100 + t - 1], {"price": Decimal(t)})
    watermarks_p0 = [i for i, m in enumerate(feed.messages) if m.kind == "WATERMARK" and m.partition == 0]
    held_back = set(watermarks_p0[:-1])
    topic, target, spill = f"lag-{unique}", str(tmp_path / "delta"), tmp_path / "spill"
    spill.mkdir()
    publish(kafka, topic, [m for i, m in enumerate(feed.messages) if i not in held_back])
    caplog.set_level(logging.INFO, logger="ticdc_delta.apply.ordering.gate")

    result = run_job(
        spark, kafka, topic, target, f"g-{unique}",
        run={"max_pending_events": 10, "batch_max_messages": 40, "spill_dir": str(spill)},
    )

    assert_table(spark, target, feed, "shop", "items", ITEMS_DDL + ", stock INT")
    assert result.waiting == 0 and result.batches > 3
    assert "spilling the newest to " + str(spill) in caplog.text
    assert not list(spill.iterdir())


# The driver's variants on the newest pair only since 2026-11-28 (CI time: 35 s of the oldest side): the Spark
# engine's variant runs there, the same MERGE of a key's delete and its new key's insert on Delta 3.3.
@pytest.mark.parametrize(
    "split, engine",
    # The Spark engine once (CI time): split, its images' newest-per-key order meets an upsert and a delete at one
    # commitTs (the MERGE source Spark builds: `run.max_pending_events` 1, below).
    [
        pytest.param(True, "driver", id="delete+insert-driver"),
        pytest.param(False, "driver", id="one-update-driver"),
        spark_variant(True, id="delete+insert-spark"),
    ],
)
def test_primary_key_changing_update(spark, kafka, tmp_path, unique, split, engine):
    # Setup: rows 1..6, then keys change 1->101 and 2->3 after 3->103 (a chain in
    # one transaction), delivered split (TiCDC's default) or as one UPDATE.
    # Expect: old keys gone, new keys with their values, untouched rows intact.
    feed = items_feed(split_key_updates=split)
    with feed.transaction() as txn:
        for i in range(1, 7):
            txn.insert("shop", "items", item(i))
    with feed.transaction() as txn:
        txn.update("shop", "items", [1], {"id": 101, "name": "renumbered"})
        txn.update("shop", "items", [3], {"id": 103})
        txn.update("shop", "items", [2], {"id": 3, "price": Decimal("7.77")})
    publish(kafka, f"pk-{unique}", feed.messages)

    # (A Spark-engine release of at most max_pending_events rows is merged from the driver's memory, as the driver
    # engine's batches: the driver's variants run that.)
    run_job(spark, kafka, f"pk-{unique}", str(tmp_path), f"g-{unique}", engine=engine, **_spark_built_sources(engine))

    assert_table(spark, str(tmp_path), feed, "shop", "items", ITEMS_DDL)
    ids = sorted(r["id"] for r in table_frame(spark, str(tmp_path), "shop", "items").collect())
    assert ids == [3, 4, 5, 6, 101, 103]


def test_add_column_mid_stream(spark, kafka, tmp_path, unique):
    # Setup: rows, ALTER TABLE ADD COLUMN stock INT, more rows and an update setting stock.
    # Expect: rows from before the ALTER read NULL unless updated later; later rows carry values.
    feed = items_feed()
    with feed.transaction() as txn:
        for i in range(10):
            txn.insert("shop", "items", item(i))
    feed.add_column("shop", "items", column("stock", "int"))
    with feed.transaction() as txn:
        for i in range(10, 15):
            txn.insert("shop", "items", {**item(i), "stock": i * 10})
        txn.update("shop", "items", [0], {"stock": 5})
    publish(kafka, f"alter-{unique}", feed.messages)

    run_job(spark, kafka, f"alter-{unique}", str(tmp_path), f"g-{unique}")

    assert_table(spark, str(tmp_path), feed, "shop", "items", ITEMS_DDL + ", stock INT")
    stock = {r["id"]: r["stock"] for r in table_frame(spark, str(tmp_path), "shop", "items").collect()}
    assert stock[0] == 5 and stock[1] is None and stock[12] == 120


def test_rows_before_their_bootstrap_wait_and_then_apply(spark, kafka, tmp_path, unique):
    # Setup: a consumer starting mid-stream: the topic holds rows (and watermarks)
    # but no CREATE and no BOOTSTRAP; later TiCDC's periodic BOOTSTRAP arrives.
    # Expect: first run applies nothing and commits nothing past the rows; after the
    # BOOTSTRAP the rows are applied (the table is created from the bootstrap schema).
    feed = items_feed()
    with feed.transaction() as txn:
        for i in range(12):
            txn.insert("shop", "items", item(i))
    with feed.transaction() as txn:
        txn.update("shop", "items", [4], {"price": Decimal("4.44")})
    mid_stream = [m for m in feed.messages if m.kind in ("DML", "WATERMARK")]
    topic, target = f"boot-{unique}", str(tmp_path)
    publish(kafka, topic, mid_stream)

    first = run_job(spark, kafka, topic, target, f"g-{unique}", run={"idle_timeout_seconds": 5.0})
    assert first.rows_applied == 0 and first.waiting == 13

    feed.messages.clear()
    feed.bootstrap("shop", "items")
    feed.watermark()
    publish(kafka, topic, feed.messages)
    second = run_job(spark, kafka, topic, target, f"g-{unique}")
    assert second.rows_applied == 13
    assert_table(spark, target, feed, "shop", "items", ITEMS_DDL)


def test_rows_waiting_for_their_schema_are_not_taken_for_replays_once_it_arrives(spark, kafka, tmp_path, unique, engine,
                                                                                 monkeypatch):
    # Setup: rows of the table's first structure, then ADD COLUMN and rows of the new one, and a watermark
    # past all of them; the ADD COLUMN's DDL messages are missing, so the newer rows wait for their schema
    # while the older ones are applied. Then TiCDC's periodic BOOTSTRAP brings the new structure.
    # Expect: the first run marks the table applied only up to just before the waiting rows (not through
    # the watermark), so the second run applies them instead of skipping them as replays. The Spark engine's
    # releases, small, are merged from rows read into the driver (`StagingTable._held_rows`), the rows still
    # waiting left out of them; its batches decoded on the executors (the rows waiting for their schema handed
    # back to the driver), so they are staged (a small batch decoded on the driver into an empty staging
    # table waits in memory instead).
    held = _sources_held_in_memory(monkeypatch) if engine == "spark" else []
    on_executors = {"run": {"idle_timeout_seconds": 5.0, **_ON_EXECUTORS}} if engine == "spark" else {}
    feed = items_feed()
    with feed.transaction() as txn:
        for i in range(10):
            txn.insert("shop", "items", item(i))
    before_ddl = len(feed.messages)
    feed.add_column("shop", "items", column("stock", "int"))
    del feed.messages[before_ddl:]
    with feed.transaction() as txn:
        for i in range(10, 15):
            txn.insert("shop", "items", {**item(i), "stock": i * 10})
        txn.update("shop", "items", [0], {"stock": 5})
    topic, target = f"held-{unique}", str(tmp_path)
    publish(kafka, topic, feed.messages)

    first = run_job(spark, kafka, topic, target, f"g-{unique}", engine=engine,
                    **(on_executors or {"run": {"idle_timeout_seconds": 5.0}}))
    assert first.rows_applied == 10 and first.waiting == 6

    feed.messages.clear()
    feed.bootstrap("shop", "items")
    feed.watermark()
    publish(kafka, topic, feed.messages)
    second = run_job(spark, kafka, topic, target, f"g-{unique}", engine=engine, **on_executors)
    assert second.rows_applied == 6 and second.replays_skipped == 0
    assert_table(spark, target, feed, "shop", "items", ITEMS_DDL + ", stock INT")
    if engine == "spark":
        assert held == [10, 6], held


def test_a_batch_slower_than_the_idle_timeout_does_not_end_the_drain(spark, kafka, tmp_path, unique):
    # Setup: 30 transactions read 20 messages per batch; every batch's Delta commits take
    # longer than the 0.3 s idle timeout.
    # Expect: the run drains the whole topic (idleness counts empty polls, not apply time).
    feed = items_feed()
    for i in range(30):
        with feed.transaction() as txn:
            txn.insert("shop", "items", item(i))
    topic, target = f"slow-{unique}", str(tmp_path)
    publish(kafka, topic, feed.messages)

    result = run_job(
        spark, kafka, topic, target, f"g-{unique}", run={"idle_timeout_seconds": 0.3, "batch_max_messages": 20}
    )

    assert result.batches > 1 and result.messages == len(feed.messages)
    assert_table(spark, target, feed, "shop", "items", ITEMS_DDL)


@pytest.mark.both_pairs("the MERGE, DDL, checkpoint and replay statements of a whole run, on each Spark/Delta pair")
def test_restart_resumes_where_the_last_run_committed(spark, kafka, tmp_path, unique):
    # Setup: the demo stream (two tables, ALTER, key changes) split in two; a run after each half, then a run
    # with nothing new to read.
    # Expect: the second run reads only the second half (no replays) and the tables match; the third saves
    # no checkpoint (nothing changed since the one it began from: no commit to the checkpoints table).
    feed = demo_changefeed(seed=3, changes=240)
    half = len(feed.messages) // 2
    topic, target, group = f"restart-{unique}", str(tmp_path), f"g-{unique}"
    publish(kafka, topic, feed.messages[:half])
    first = run_job(spark, kafka, topic, target, group)
    publish(kafka, topic, feed.messages[half:])

    second = run_job(spark, kafka, topic, target, group)

    assert first.messages + second.messages - first.waiting <= len(feed.messages)
    assert second.replays_skipped == 0
    for table, ddl in DEMO_TABLE_DDLS.items():
        assert_table(spark, target, feed, "shop", table, ddl)
    checkpoints = f"delta.`{PathLocator(target).internal_path('checkpoints')}`"
    saved = spark.sql(f"DESCRIBE HISTORY {checkpoints} LIMIT 1").collect()[0]["version"]
    third = run_job(spark, kafka, topic, target, group)
    assert third.messages == 0
    assert spark.sql(f"DESCRIBE HISTORY {checkpoints} LIMIT 1").collect()[0]["version"] == saved


@pytest.mark.both_pairs("the MERGE, DDL, checkpoint and replay statements of a whole run, on each Spark/Delta pair")
def test_replaying_the_whole_topic_with_a_new_group_changes_nothing(spark, kafka, tmp_path, unique):
    # Setup: a full run, then the same topic from the beginning under a new consumer group.
    # Expect: every event is recognized as applied; no table gets a new Delta version.
    feed = demo_changefeed(seed=5, changes=150)
    topic, target = f"replay-{unique}", str(tmp_path)
    publish(kafka, topic, feed.messages)
    run_job(spark, kafka, topic, target, f"first-{unique}")
    versions = {t: table_version(spark, target, "shop", t) for t in ("customers", "orders")}

    replay = run_job(spark, kafka, topic, target, f"second-{unique}")

    assert replay.replays_skipped > 0 and replay.rows_applied == 0 and replay.schema_changes == 0
    assert {t: table_version(spark, target, "shop", t) for t in ("customers", "orders")} == versions
    assert_table(spark, target, feed, "shop", "orders",
                 "order_no DECIMAL(20,0), customer_id INT, amount DECIMAL(10,2), status STRING, placed_at TIMESTAMP_NTZ, note STRING")


def test_bad_message_fails_the_job_naming_its_position(spark, kafka, tmp_path, unique, engine):
    # Setup: a valid stream with one undecodable message on partition 1.
    # Expect: the fail policy raises DecodeError naming topic, partition and offset;
    # the dead-letter policy then records it and applies everything else.
    feed = items_feed()
    with feed.transaction() as txn:
        for i in range(9):
            txn.insert("shop", "items", item(i))
    topic, target, group = f"bad-{unique}", str(tmp_path), f"g-{unique}"
    publish(kafka, topic, feed.messages[:4])
    from testbed.produce import produce

    produce(kafka.bootstrap_servers, topic, [(1, b"k", b"\x00not json")])
    publish(kafka, topic, feed.messages[4:])
    bad_offset = sum(1 for m in feed.messages[:4] if m.partition == 1)

    # The Spark engine's variant decodes on the executors, which hand the bad message back to the driver.
    on_executors = {"run": _ON_EXECUTORS} if engine == "spark" else {}
    with pytest.raises(DecodeError) as failure:
        run_job(spark, kafka, topic, target, group, engine=engine, **on_executors)
    assert f"{topic} partition 1 offset {bad_offset}" in str(failure.value)
    assert "not JSON" in failure.value.reason

    result = run_job(spark, kafka, topic, target, group, policy={"on_bad_message": "dead-letter"}, engine=engine,
                     **on_executors)
    assert result.dead_letters == 1
    assert_table(spark, target, feed, "shop", "items", ITEMS_DDL)
    (letter,) = spark.table(f"delta.`{target}/_ticdc/dead_letters`").collect()
    assert (letter["topic"], letter["partition"], letter["offset"]) == (topic, 1, bad_offset)
    assert bytes(letter["value"]) == b"\x00not json" and bytes(letter["key"]) == b"k"
    assert letter["error_type"] == "DecodeError"


def test_avro_encoding_end_to_end(spark, kafka, tmp_path, unique):
    # Setup: the demo stream in Simple's Avro encoding, TIMESTAMPs sent in a non-UTC zone.
    # Expect: the same tables as the upstream model.
    feed = demo_changefeed(seed=13, changes=150, encoding="avro", location="America/Sao_Paulo")
    topic, target = f"avro-{unique}", str(tmp_path)
    publish(kafka, topic, feed.messages)

    run_job(spark, kafka, topic, target, f"g-{unique}", protocol={"encoding": "avro"})

    assert_table(spark, target, feed, "shop", "customers",
                 "id INT, name STRING, balance DECIMAL(12,2), signed_up TIMESTAMP, tier STRING")
    assert_table(spark, target, feed, "shop", "orders",
                 "order_no DECIMAL(20,0), customer_id INT, amount DECIMAL(10,2), status STRING, placed_at TIMESTAMP_NTZ, note STRING")


@pytest.mark.parametrize("engine, store", [
    # The whole run's MERGE, DDL, checkpoint and replay statements on each Spark/Delta pair: the driver engine's
    # on S3 on the newest (what differs between the pairs there, the s3a connector, is also in
    # tests/e2e/test_object_storage.py on both; each DDL kind on local folders: test_ddl_kinds, both pairs), the
    # Spark engine's on a local folder on the oldest (the same applier's statements). The driver engine's run on a
    # local folder on the oldest was cut on 2026-11-28 (CI time: 28 s): the other protocols' DDL tests run it
    # on the newest.
    pytest.param("driver", "s3", marks=pytest.mark.one_pair(
        "the DDL workload on S3; the oldest pair runs it with the Spark engine on a local folder (the same "
        "applier's statements)", pair="newest"), id="driver-s3"),
    pytest.param("spark", "local", marks=SPARK_ENGINE_PAIR, id="spark"),
])
def test_ddl_evolution_end_to_end(spark, kafka, tmp_path, unique, engine, store, capsys, request, monkeypatch):
    # Setup: through Kafka, one table goes through ADD COLUMN with and without default,
    # DROP COLUMN, RENAME COLUMN, MODIFY COLUMN (int -> bigint), RENAME TABLE; a second
    # table is truncated; a third dropped and re-created; rows before and after each. The target is a
    # local folder, or an s3a:// one on a real S3-compatible server (testbed/s3_server.py; the log store
    # check off: tests/e2e/test_object_storage.py's docstring says why).
    # Expect: every final table equals upstream (on S3, also as delta-rs reads it there); the renamed
    # column kept its data; the renamed table stayed in its folder, which `ticdc-delta tables` lists;
    # the product's own tables are beside them (on S3, in the same bucket); a replay under a new group
    # changes nothing and resurrects nothing. The Spark engine reads a release's staged rows once for all its
    # runs' MERGE sources (`StagingTable._rows_of_release`) and keeps none of them once the release is removed;
    # here every release of more than one row exceeds `run.max_pending_events` (1), which a release must not
    # exceed to be merged from the driver's memory instead (`StagingTable._held_rows`: test_rows_waiting_...).
    feed = ddl_evolution(items_feed())
    topic = f"ddl-{unique}"
    from_memory = _sources_from_the_release(monkeypatch) if engine == "spark" else []
    target = f"s3a://lake/ddl-{unique}" if store == "s3" else str(tmp_path)
    s3 = request.getfixturevalue("s3") if store == "s3" else None

    def run(group: str):
        return (run_on_s3 if s3 else run_job)(spark, kafka, topic, target, group, engine=engine,
                                               **_spark_built_sources(engine))

    publish(kafka, topic, feed.messages)

    run(f"g-{unique}")

    if engine == "spark":
        assert len(from_memory) >= len(DDL_EVOLUTION_TABLES) and all(from_memory), from_memory
        assert spark._jsparkSession.sharedState().cacheManager().isEmpty()  # (Delta's own state caches are RDDs)
    for (database, table), ddl in DDL_EVOLUTION_TABLES.items():
        assert_table(spark, target, feed, database, table, ddl)
        if s3:  # (local tables are read back with delta-rs after every test: tests/conftest.py)
            assert_delta_rs_reads_as_spark(spark, table_path(spark, target, database, table), s3.storage_options())
    titles = {r["id"]: r["title"] for r in table_frame(spark, target, "archive", "items_2025").collect()}
    assert titles[0] == "item 0" and titles[2] == "big"
    assert_gone(spark, target, "shop", "items")
    # The rename moved no folder: the table stays where readers first found it, which
    # `ticdc-delta tables` lists.
    assert table_path(spark, target, "archive", "items_2025") == f"{target}/shop/items"
    capsys.readouterr()
    flags = ["--bootstrap-servers", kafka.bootstrap_servers, "--topics", topic, "--group-id", f"g-{unique}",
             "--target-path", target]
    assert cli.exit_status(["tables", *flags, "--json"]) == 0
    listed = {(t["database"], t["table"]): t["location"] for t in json.loads(capsys.readouterr().out)}
    assert listed == {("archive", "items_2025"): f"{target}/shop/items", ("shop", "logs"): f"{target}/shop/logs",
                      ("shop", "tmp"): f"{target}/shop/tmp"}
    if s3:
        keys = s3.keys("lake", f"ddl-{unique}/_ticdc/")
        for own in ("checkpoints", "leases", "tables", "tombstones", "metrics"):
            assert any(k.startswith(f"ddl-{unique}/_ticdc/{own}/_delta_log/") for k in keys), own

    # Replaying everything under a new group must neither change a table nor
    # resurrect the renamed-away or dropped ones.
    tables = [("archive", "items_2025"), ("shop", "logs"), ("shop", "tmp")]
    versions = {t: table_version(spark, target, *t) for t in tables}
    replay = run(f"replay-{unique}")
    assert replay.rows_applied == 0 and replay.schema_changes == 0
    assert {t: table_version(spark, target, *t) for t in tables} == versions
    assert_gone(spark, target, "shop", "items")


def _sources_from_the_release(monkeypatch) -> list[bool]:
    """Per MERGE source the Spark engine builds, whether it reads the release's rows kept in memory."""
    from ticdc_delta.jobs.spark_engine.staging import StagingTable

    seen, run_images = [], StagingTable._run_images

    def recorded(staging, *args, **kwargs):
        images = run_images(staging, *args, **kwargs)
        seen.append("InMemoryRelation" in images[0]._jdf.queryExecution().optimizedPlan().toString())
        return images

    monkeypatch.setattr(StagingTable, "_run_images", recorded)
    return seen


def _sources_held_in_memory(monkeypatch) -> list[int]:
    """Per MERGE source the Spark engine builds from rows read into the driver, how many row changes it holds."""
    from ticdc_delta.jobs.spark_engine.staging import StagingTable

    seen, held_changes = [], StagingTable.held_changes

    def recorded(staging, run):
        changes = held_changes(staging, run)
        if changes is not None:
            seen.append(len(changes))
        return changes

    monkeypatch.setattr(StagingTable, "held_changes", recorded)
    return seen


def _spark_built_sources(engine: str) -> dict:
    """The job's settings under which the Spark engine takes its large batches' path: messages decoded on the
    executors and each MERGE source built by Spark (a release of more than one row is not merged from the
    driver's memory); none for the driver engine (whose events would spill)."""
    return {"run": {"max_pending_events": 1, **_ON_EXECUTORS}} if engine == "spark" else {}


# The Spark engine decodes its batches on the executors, however small (they are read and decoded on the driver
# by default: `run.driver_decode_max_messages`).
_ON_EXECUTORS = {"driver_decode_max_messages": 0}
