"""Dead-letter replay end to end: real broker, Spark and Delta; claim-checked rows the job could not read."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

import pytest

from testbed.encoders.simple import claim_check
from testbed.tables import column
from tests.support import assert_table, job_config, publish, run_job, table_frame
from tests.workloads import ITEMS_DDL, item, items_feed
from ticdc_delta.apply.progress import applied_history
from ticdc_delta.apply.tables.markers import read_progress
from ticdc_delta.jobs.cli import exit_status
from ticdc_delta.jobs.replay import replay_dead_letters

pytestmark = [
    pytest.mark.e2e,
    # The product's own logic, the same Python on both pairs: on the newest for the sides' balance (CI time,
    # 2026-12-07: the oldest side ended 75-80 s after the newest in two clean clones; on the oldest since 2026-11-28).
    pytest.mark.one_pair("dead letters and their replay: the product's own logic, the same Python on both pairs"),
]

LONG = "a name too long for one Kafka message " * 80  # about 3 KB: claim-checked


def _claim_checked(messages, store):
    return [dataclasses.replace(m, value=claim_check(m.value, store, 2_000)) if m.kind == "DML" else m for m in messages]


def _setup(spark, kafka, tmp_path, unique):
    """Ten items applied normally; (topic, target, group, feed, claim-check store)."""
    feed = items_feed()
    with feed.transaction() as txn:
        for i in range(10):
            txn.insert("shop", "items", item(i))
    topic, target, group = f"replay-{unique}", str(tmp_path / "delta"), f"g-{unique}"
    publish(kafka, topic, feed.messages)
    run_job(spark, kafka, topic, target, group)
    return topic, target, group, feed, tmp_path / "claims"


def _rows(spark, target):
    return sorted(tuple(r) for r in table_frame(spark, target, "shop", "items").collect())


def test_replay_writes_a_dead_letter_no_later_change_decides_and_skips_superseded_ones(spark, kafka, tmp_path, unique):
    # Setup: the job runs without claim_check_root, so the claim-checked (large) changes become dead
    # letters: item 1's update (nothing later touches it), item 2's update and its delete (item 2 is
    # inserted again later, in a small message the job applies). Then the root is configured and the
    # dead letters replayed.
    # Expect: a dry run writes nothing and says what it would do; the replay writes item 1 only (a
    # naive replay would put the long name over the new item 2, or delete it), keeps the table's
    # applied commitTs and records each outcome; the table equals upstream; a second replay finds
    # nothing unresolved; later changes still apply on top.
    topic, target, group, feed, store = _setup(spark, kafka, tmp_path, unique)
    start = len(feed.messages)
    with feed.transaction() as txn:
        txn.update("shop", "items", [1], {"name": LONG})
        txn.update("shop", "items", [2], {"name": LONG + "2"})
    with feed.transaction() as txn:
        txn.delete("shop", "items", [2])
    with feed.transaction() as txn:
        txn.insert("shop", "items", item(2, "2.22"))
    publish(kafka, topic, _claim_checked(feed.messages[start:], store))

    result = run_job(spark, kafka, topic, target, group, policy={"on_bad_message": "dead-letter"})
    assert result.dead_letters == 3
    before = _rows(spark, target)
    assert [r for r in before if r[0] == 1][0][1] == "item 1"  # the change to item 1 is missing

    fixed = job_config(kafka, topic, target, group, protocol={"claim_check_root": str(store)})
    dry = replay_dead_letters(fixed, spark, dry_run=True)
    outcomes = {d.position.partition: d for d in dry.decisions}
    assert sorted(d.outcome for d in dry.decisions) == ["applied", "superseded", "superseded"]
    assert _rows(spark, target) == before
    assert any("later change" in d.detail for d in outcomes.values())

    sql_name = f"delta.`{target}/shop/items`"
    point = read_progress(spark, sql_name).point
    report = replay_dead_letters(fixed, spark)

    assert report.counts() == {"applied": 1, "superseded": 2} and not report.refused()
    assert_table(spark, target, feed, "shop", "items", ITEMS_DDL)
    assert read_progress(spark, sql_name).point == point
    newest = applied_history(spark, sql_name, limit=1)[0]
    assert newest.note and len(newest.note["replayedDeadLetters"]) == 1
    log = spark.table(f"delta.`{target}/_ticdc/dead_letter_replays`").collect()
    assert sorted(r["outcome"] for r in log) == ["applied", "superseded", "superseded"]
    assert replay_dead_letters(fixed, spark).decisions == []

    start = len(feed.messages)
    with feed.transaction() as txn:
        txn.update("shop", "items", [1], {"price": Decimal("1.11")})
    publish(kafka, topic, feed.messages[start:])
    run_job(spark, kafka, topic, target, group, protocol={"claim_check_root": str(store)})
    assert_table(spark, target, feed, "shop", "items", ITEMS_DDL)


def test_replay_refuses_a_dead_letter_when_the_structure_changed_after_it(spark, kafka, tmp_path, unique, capsys):
    # Setup: a dead-lettered change of item 1, then ADD COLUMN, then other rows.
    # Expect: refused, naming the schema change; nothing written; `ticdc-delta replay-dead-letters` exits 4.
    topic, target, group, feed, store = _setup(spark, kafka, tmp_path, unique)
    start = len(feed.messages)
    with feed.transaction() as txn:
        txn.update("shop", "items", [1], {"name": LONG})
    feed.add_column("shop", "items", column("stock", "int"))
    with feed.transaction() as txn:
        txn.insert("shop", "items", {**item(20), "stock": 5})
    publish(kafka, topic, _claim_checked(feed.messages[start:], store))
    run_job(spark, kafka, topic, target, group, policy={"on_bad_message": "dead-letter"})
    before = _rows(spark, target)

    fixed = job_config(kafka, topic, target, group, protocol={"claim_check_root": str(store)})
    report = replay_dead_letters(fixed, spark)

    (decision,) = report.decisions
    assert decision.outcome == "refused" and "structure changed after it (ALTER" in decision.detail
    assert _rows(spark, target) == before
    # The command line says the same, and its exit status tells a refusal.
    toml = tmp_path / "job.toml"
    toml.write_text(
        f'[kafka]\nbootstrap_servers = "{kafka.bootstrap_servers}"\ntopics = ["{topic}"]\ngroup_id = "{group}"\n'
        f'[target]\npath = "{target}"\n[protocol]\nclaim_check_root = "{store}"\n'
    )
    assert exit_status(["replay-dead-letters", "--config", str(toml), "--dry-run"]) == 4
    assert f"{decision.position}\trefused\tkey 1: the table's structure changed" in capsys.readouterr().out


def test_replay_waits_until_the_job_has_applied_through_the_dead_letter(spark, kafka, tmp_path, unique):
    # Setup: a dead-lettered change of item 1 whose watermark has not reached partition 0 yet.
    # Expect: refused ("run the job first") while the job's watermark is below it; once the rest
    # arrives and the job has run, the same replay writes it.
    topic, target, group, feed, store = _setup(spark, kafka, tmp_path, unique)
    start = len(feed.messages)
    with feed.transaction() as txn:
        txn.update("shop", "items", [1], {"name": LONG})
    new = _claim_checked(feed.messages[start:], store)
    held = [m for m in new if m.kind == "WATERMARK" and m.partition == 0]
    publish(kafka, topic, [m for m in new if m not in held])
    run_job(spark, kafka, topic, target, group, policy={"on_bad_message": "dead-letter"})
    fixed = job_config(kafka, topic, target, group, protocol={"claim_check_root": str(store)})

    early = replay_dead_letters(fixed, spark)

    (decision,) = early.decisions
    assert decision.outcome == "refused" and "run the job first" in decision.detail
    publish(kafka, topic, held)
    run_job(spark, kafka, topic, target, group, protocol={"claim_check_root": str(store)})
    assert [d.outcome for d in replay_dead_letters(fixed, spark).decisions] == ["applied"]
    assert_table(spark, target, feed, "shop", "items", ITEMS_DDL)
