"""A changefeed with a topic per table, exactly as TiCDC's event router writes it, on the real broker.

`testbed.changefeed` with `topic_per_table` sends as pingcap/tiflow's `event_router.go` and `mq_ddl_sink.go` do:
rows to their table's topic, a DDL to the topic of the table's old name (a CREATE: the new name's; canal-json:
partition 0 only), watermarks to the topics of the tables replicated now. The fault script's DDL workload on
it (`benchmarks.fault_kills.scenario(topic_per_table=True)`): tables created late, ADD COLUMN with and without
default, DROP/RENAME/MODIFY COLUMN, a RENAME TABLE into another database (its later rows on a new topic), a
TRUNCATE, a DROP TABLE and a CREATE of the same name (on the same topic again), changes on every table after.
Each case ends with every table equal to the upstream model and no other table (`fault_kills.differences`).
The kill between runs is tests/e2e/test_crash_recovery.py's, on this shape too.
"""

from __future__ import annotations

import random
import uuid

import pytest

from benchmarks import fault_kills
from tests.support import SPARK_ENGINE_PAIR

pytestmark = pytest.mark.e2e


def _sections(kafka, scene, target, engine: str = "driver") -> dict:
    sections = fault_kills.job_sections(kafka.bootstrap_servers, scene, target, f"g-{uuid.uuid4().hex}", 200)
    sections["run"]["engine"] = engine
    return sections


def _run(spark, sections: dict):
    from ticdc_delta.jobs.pipeline import Pipeline

    return Pipeline.from_config(fault_kills._in_process(sections), spark).run()


# The driver engine's one run of the Simple workload is the crash test's uninterrupted run (oldest pair) and, in two
# runs, the next test's (newest pair): CI time.
@pytest.mark.parametrize(
    "protocol, engine",
    [
        pytest.param("simple-json", "spark", marks=SPARK_ENGINE_PAIR, id="simple-spark"),
        pytest.param("canal-json", "driver", marks=SPARK_ENGINE_PAIR, id="canal-driver"),
    ],
)
def test_drop_rename_and_new_topics_across_topics_apply_in_commit_order(spark, kafka, tmp_path, protocol, engine):
    # Setup: the DDL workload with a topic per table, published whole; one until-idle run.
    # Expect: every table equal upstream (the renamed table holds its rows from before the RENAME and those its
    # new topic carries after it; the dropped and re-created table only the new one's), no other table, nothing
    # left waiting: the DROP and the RENAME were applied though their topics get no watermark after them.
    scene = fault_kills.scenario(protocol, random.Random(7), None, txns=6, topic_per_table=True)
    assert len(scene.topics()) == 4  # shop_items, shop_logs, shop_tmp and archive_items_2025
    fault_kills.publish_scenario(kafka.bootstrap_servers, scene)
    result = _run(spark, _sections(kafka, scene, tmp_path / "delta", engine))
    assert fault_kills.differences(spark, tmp_path / "delta", scene.feed, None) == []
    assert result.waiting == 0


def test_a_rename_read_in_one_run_and_its_new_topic_found_in_the_next(spark, kafka, tmp_path):
    # Setup: the same workload; the first run starts before TiCDC made the renamed table's topic (everything is
    # there but that topic's messages); its messages come, and a second run finds it.
    # Expect: after the first run shop.items is renamed (the RENAME applied though no watermark followed it on its
    # topic) and holds the rows it had then; after the second, every table equal upstream, nothing waiting.
    scene = fault_kills.scenario("simple-json", random.Random(8), None, txns=6, topic_per_table=True)
    new_topic = scene.feed.topic_of("archive", "items_2025")
    first = [m for m in scene.feed.messages if m.topic != new_topic]
    later = [m for m in scene.feed.messages if m.topic == new_topic]
    sections = _sections(kafka, scene, tmp_path / "delta")
    from testbed.produce import publish_in_order

    publish_in_order(kafka.bootstrap_servers, first, scene.topic, scene.feed.partitions)
    _run(spark, sections)
    tables = fault_kills.located(spark, tmp_path / "delta")
    assert ("shop", "items") not in tables and ("archive", "items_2025") in tables
    publish_in_order(kafka.bootstrap_servers, later, scene.topic, scene.feed.partitions)
    assert _run(spark, sections).waiting == 0
    assert fault_kills.differences(spark, tmp_path / "delta", scene.feed, None) == []


@pytest.mark.parametrize("more", [False, True], ids=["fewer-messages", "more-messages"])
def test_a_topic_deleted_and_created_again_between_runs_is_read_from_its_start(spark, kafka, tmp_path, caplog, more):
    # Setup: a table's topic read by a run; the topic deleted and created again, holding the table's later changes
    # (TiCDC writes to it again): fewer messages than the run had read (its offsets are past the new end), or more
    # (only the topic's id tells).
    # Expect: the next run reads the new topic from its start, says so once naming it (by its new topic id, which
    # the broker tells; offsets past the end say it where it does not), and the table equals upstream.
    from confluent_kafka.admin import AdminClient

    from tests.support import publish
    from tests.workloads import item, items_feed

    feed = items_feed(topic_per_table="again_{schema}_{table}_" + uuid.uuid4().hex[:6])
    topic = feed.topic_of("shop", "items")
    for i in range(0, 24, 4):
        with feed.transaction() as txn:
            for k in range(i, i + 4):
                txn.insert("shop", "items", item(k))
    publish(kafka, topic, feed.messages)
    sections = fault_kills.job_sections(kafka.bootstrap_servers, fault_kills.Scenario("simple-json", feed, {}, topic, True),
                                        tmp_path / "delta", f"g-{uuid.uuid4().hex}", 200)
    sections["kafka"] = {**sections["kafka"], "topics": [topic]}
    _run(spark, sections)
    sent = len(feed.messages)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    admin.delete_topics([topic])[topic].result(30)
    _wait_until_gone(admin, topic)
    for i in range(24, 60 if more else 28, 4):
        with feed.transaction() as txn:
            txn.delete("shop", "items", [i - 24])
            for k in range(i, i + 4):
                txn.insert("shop", "items", item(k))
    publish(kafka, topic, feed.messages[sent:])
    caplog.set_level("WARNING", logger="ticdc_delta")
    assert _run(spark, sections).waiting == 0
    warned = [r.getMessage() for r in caplog.records if "was deleted and created again" in r.getMessage()]
    assert len(warned) == 1 and topic in warned[0]
    assert "another topic id" in warned[0]
    assert fault_kills.differences(spark, tmp_path / "delta", feed, None) == []


def _wait_until_gone(admin, topic: str) -> None:
    import time

    deadline = time.monotonic() + 60
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"{topic} not deleted within 60 s"
        time.sleep(0.2)


def test_what_waits_is_warned_of_once_and_shown_by_status_and_a_silent_topic_is_named(spark, kafka, tmp_path, caplog,
                                                                                      capsys):
    # Setup: a topic per table. shop.items gets changes throughout; shop.logs is taken out of the changefeed after
    # its first rows (TiCDC sends its topic nothing more, no DDL says so); shop.notes's CREATE and BOOTSTRAP never
    # reach its topic (as for a job started after them), so its rows wait for their schema; upstream time moves on
    # ten minutes. Small batches: many rounds.
    # Expect: items and logs equal upstream (logs's topic, read to its end, holds no other back); one WARNING
    # naming shop.notes's wait and what holds it (its schema), one naming logs's silent topic, each once;
    # `status --json` lists the wait with the same reason; the run says events wait.
    from testbed.tables import column
    from tests.support import publish
    from tests.workloads import item, items_feed
    from ticdc_delta.jobs import config as config_module
    from ticdc_delta.jobs.status import gather_status, to_json

    prefix = "waits_" + uuid.uuid4().hex[:6]
    feed = items_feed(topic_per_table=prefix + "_{schema}_{table}")
    feed.create_table("shop", "logs", [column("id", "int", nullable=False)], primary_key=["id"])
    feed.create_table("shop", "notes", [column("id", "int", nullable=False)], primary_key=["id"])
    hidden = len(feed.messages)
    with feed.transaction() as txn:
        txn.insert("shop", "logs", {"id": 1})
        txn.insert("shop", "notes", {"id": 1})
    feed.leave_changefeed("shop", "logs")
    notes_topic = feed.topic_of("shop", "notes")
    for minute in range(1, 11):
        feed.advance_to(feed.last_ts + (60_000 << 18))
        with feed.transaction() as txn:
            txn.insert("shop", "items", item(minute))
    # Neither the CREATE nor the BOOTSTRAP of shop.notes (before `hidden`, or a BOOTSTRAP on its topic).
    sent = [m for i, m in enumerate(feed.messages)
            if not (m.topic == notes_topic and (i < hidden or m.kind == "BOOTSTRAP"))]
    publish(kafka, prefix, sent)
    values = {
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers, "topic_pattern": f"{prefix}_.*",
                  "group_id": f"g-{prefix}"},
        "target": {"path": str(tmp_path / "delta")},
        "run": {"mode": "until-idle", "batch_max_messages": 6, "batch_max_seconds": 2.0, "idle_timeout_seconds": 15.0,
                "wait_warning_seconds": 120, "silent_topic_rounds": 3},
    }
    caplog.set_level("WARNING", logger="ticdc_delta")
    result = _run_config(spark, config_module.from_mapping(values))
    assert result.waiting == 1
    lines = [r.getMessage() for r in caplog.records]
    waits = [line for line in lines if line.startswith("shop.notes: a row (parked) change")]
    assert len(waits) == 1 and " for its schema (the BOOTSTRAP or DDL" in waits[0], lines
    silent = [line for line in lines if line.startswith("topic ")]
    assert len(silent) == 1 and silent[0].startswith(f"topic {feed.topic_of('shop', 'logs')} has had no watermark"), lines
    for name in ("items", "logs"):
        rows = spark.read.format("delta").load(fault_kills.located(spark, tmp_path / "delta")[("shop", name)]).collect()
        assert len(rows) == len(feed.expected_rows("shop", name)), name
    report = to_json(gather_status(config_module.from_mapping(values), spark))
    assert [(w["partition"].rsplit("/", 1)[0], w["table"], w["kind"]) for w in report["waiting"]] == [
        (notes_topic, "shop.notes", "row (parked)")]
    assert report["waiting"][0]["waits_for"].startswith("its schema") and report["newest_watermark"] > 0


def _run_config(spark, config):
    from ticdc_delta.jobs.pipeline import Pipeline

    return Pipeline.from_config(config, spark).run()
