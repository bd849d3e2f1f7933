"""The checkpoint table stays bounded: old checkpoints deleted, files compacted and vacuumed.

Real Spark and Delta: checkpoints saved through `CheckpointStore` as the job saves them, and a job run
over a real broker with a small `checkpoint.keep` / `checkpoint.cleanup_every`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.support import assert_table, publish, run_job
from tests.workloads import ITEMS_DDL, item, items_feed
from ticdc_delta.apply.own_tables.checkpoint import Checkpoint, CheckpointStore, Retention
from ticdc_delta.apply.own_tables.dead_letters import DeadLetterTable
from ticdc_delta.apply.own_tables.delta_rs import DeltaRsOwnTables
from ticdc_delta.apply.places.locator import PathLocator
from ticdc_delta.exceptions import DecodeError
from ticdc_delta.jobs.spark_engine.executor_decoding import STAGED_FIELDS
from ticdc_delta.jobs.spark_engine.staging import StagingTable
from ticdc_delta.schema_cache.events import Ordering, Position, TopicPartition

pytestmark = [pytest.mark.e2e, pytest.mark.both_pairs(
    "OPTIMIZE, DELETE and VACUUM (LITE where the release has it) of the checkpoint table"
)]

_TP = TopicPartition("orders", 0)


def _checkpoint(consumer: str, batch: int) -> Checkpoint:
    # A decoder state of a few KB that tells its batch: what `load` returns is checked byte for byte.
    return Checkpoint(consumer, batch, {_TP: batch * 10}, {_TP: batch * 1000}, f"{consumer}:{batch};".encode() * 300)


def _rows(sql, locator, consumer: str) -> list[tuple]:
    table = sql.table(locator.internal_sql_name("checkpoints"))
    rows = table.where(table.consumer == consumer).collect()
    return sorted((r["batch"], r["offsets"], r["watermarks"], bytes(r["decoder_state"]), r["saved_at"]) for r in rows)


def _batches(sql, locator, consumer: str) -> set[int]:
    return {row[0] for row in _rows(sql, locator, consumer)}


def _live_files(sql, locator) -> int:
    return _live_files_of(sql, locator.internal_sql_name("checkpoints"))


def _live_files_of(sql, name: str) -> int:
    return sql.sql(f"DESCRIBE DETAIL {name}").collect()[0]["numFiles"]


def _files_on_disk(folder: Path) -> int:
    return len(list(folder.glob("*.parquet")))


def _dead_letter(sql, locator, consumer: str, offset: int) -> Position:
    position = Position(_TP.topic, _TP.partition, offset)
    DeadLetterTable(sql, locator, consumer).write([DecodeError(position, "not a TiCDC message", value=b"junk")])
    return position


def _replay_start(sql, locator, store: CheckpointStore, consumer: str) -> Checkpoint | None:
    """The checkpoint `replay-dead-letters` starts from, found as jobs.replay finds it."""
    letters = DeadLetterTable(sql, locator, consumer).read()
    return store.load(consumer, saved_before=min(d.recorded_at for d in letters))


@pytest.mark.one_pair("the checkpoint table's cleanup is the same Python on both pairs; each Delta's OPTIMIZE and "
                      "VACUUM run in test_maintenance.py and the staging table's cleanup below, on both (CI time)",
                      pair="oldest")
def test_checkpoints_stay_bounded_keeping_the_replays_start_and_other_consumers_rows(sql, tmp_path):
    # Setup: consumer "other" saves 3 checkpoints; consumer "main" then saves 9, as the job does (by delta-rs)
    # (save, then clean up when due) with keep 2 and a cleanup every 3 batches, files no longer used
    # deleted at once (retention 0). A dead letter recorded after main's batch 1 is resolved by a
    # replay at once; one recorded after batch 4 stays unresolved until batch 7. (15 saves with keep 3
    # and every 5 until 2026-11-28: the same three cleanups, the oldest side's first test, 158 s in CI.)
    # Expect: right before each cleanup at most keep + every + 1 rows and every + 1 live files (before
    # the first, other's 3 files too); after it exactly main's newest 2 checkpoints, plus batch 4 while
    # its dead letter is unresolved (not batch 1: its dead letter is resolved), one live data file and
    # no other on disk; meanwhile the replay's own query finds batch 4, offsets and decoder state
    # intact; other's rows unchanged; load() the newest; the table's retention properties set.
    keep, every = 2, 3
    # Saved and loaded by delta-rs, as the job does on local paths (apply.own_tables.delta_rs); cleaned up by Spark.
    locator = PathLocator(str(tmp_path / "lake"), own_delta_rs=DeltaRsOwnTables())
    folder = tmp_path / "lake" / "_ticdc" / "checkpoints"
    store = CheckpointStore(sql, locator, Retention(keep, every, file_seconds=0))
    for batch in (1, 2, 3):
        store.save(_checkpoint("other", batch))
    others = _rows(sql, locator, "other")

    kept_for_replay = None
    for batch in range(1, 10):
        store.save(_checkpoint("main", batch))
        if batch == 1:
            resolved = _dead_letter(sql, locator, "main", 10)
            DeadLetterTable(sql, locator, "main").record_replays([(resolved, "applied", "")])
        if batch == 4:
            unresolved = _dead_letter(sql, locator, "main", 40)
            kept_for_replay = 4
        if batch == 7:
            DeadLetterTable(sql, locator, "main").record_replays([(unresolved, "superseded", "")])
            kept_for_replay = None
        if not store.cleanup_due(batch):
            continue
        assert len(_rows(sql, locator, "main")) <= keep + every + 1
        # One file per save since the last cleanup, and the one it compacted all into (before the first: other's 3).
        assert _live_files(sql, locator) <= every + (3 if batch == every else 1)

        report = store.clean_up("main", batch)

        newest = set(range(max(1, batch - keep + 1), batch + 1))
        expected = newest | ({kept_for_replay} if kept_for_replay else set())
        assert _batches(sql, locator, "main") == expected, f"after the cleanup at batch {batch}"
        assert report is not None and report.kept_for_replay == kept_for_replay
        assert _live_files(sql, locator) == 1
        assert _files_on_disk(folder) == 1
        if batch == 6:
            start = _replay_start(sql, locator, store, "main")
            assert start == dataclasses.replace(_checkpoint("main", 4), saved_at=start.saved_at)

    assert _rows(sql, locator, "other") == others
    newest = store.load("main")
    assert newest == dataclasses.replace(_checkpoint("main", 9), saved_at=newest.saved_at)
    name = locator.internal_sql_name("checkpoints")
    properties = {r["key"]: r["value"] for r in sql.sql(f"SHOW TBLPROPERTIES {name}").collect()}
    assert properties["delta.deletedFileRetentionDuration"] == "interval 0 seconds"
    assert properties["delta.logRetentionDuration"] == "interval 1 days"


def test_the_spark_engines_staging_table_is_compacted_and_vacuumed_by_its_cleanup(sql, tmp_path):
    # Setup: the Spark engine's staging table with 4 rows written by 4 appends (4 small files), then
    # cleaned up with files no longer used deleted at once (retention 0).
    # Expect: the 4 rows kept; one live data file (an OPTIMIZE commit) and no other on disk (VACUUM);
    # the retention properties set.
    locator = PathLocator(str(tmp_path / "lake"))
    staging = StagingTable(sql, locator, "main", Ordering.COMMIT_TS)
    staging.ensure()
    for offset in range(4):
        columns = ", ".join(str(offset) if name == "offset" else f"CAST(NULL AS {kind})" for name, _, kind in STAGED_FIELDS)
        sql.run(f"INSERT INTO {staging.name} SELECT {columns}", what="test rows")
    assert _live_files_of(sql, staging.name) == 4

    staging.clean_up(Retention(keep=1, cleanup_every=1, file_seconds=0))

    assert sorted(r["offset"] for r in staging.frame().collect()) == [0, 1, 2, 3]
    assert _live_files_of(sql, staging.name) == 1
    assert "OPTIMIZE" in {r["operation"] for r in sql.sql(f"DESCRIBE HISTORY {staging.name}").collect()}
    (folder,) = (tmp_path / "lake" / "_ticdc").glob("staging_*")
    assert _files_on_disk(folder) == 1
    properties = {r["key"]: r["value"] for r in sql.sql(f"SHOW TBLPROPERTIES {staging.name}").collect()}
    assert properties["delta.deletedFileRetentionDuration"] == "interval 0 seconds"


@pytest.mark.one_pair("when the job cleans up (every `checkpoint.cleanup_every` batches) is the product's own logic, the same "
                      "Python on both pairs; the cleanup's statements run on both pairs in the tests above")
def test_the_job_cleans_up_its_checkpoints_every_cleanup_every_batches(spark, sql, kafka, tmp_path, unique):
    # Setup: 50 inserts in 10 transactions in one partition, drained in batches of at most 8 messages with
    # checkpoint.keep 2 and checkpoint.cleanup_every 3. One partition: a batch saves a checkpoint only when
    # its committable offsets moved, and over several partitions a batch read from one of them can leave
    # them where they were (its events wait for the others' watermarks), so the count of saves depended on
    # how Kafka interleaved the partitions (5 once, in CI). In one, every batch of 8 ends past the
    # transaction the batch before it ended in (a transaction is 6 messages): 62 messages, at least 8 saves.
    # Expect: the table equals the upstream model; the consumer's checkpoints are its newest 2 as of
    # the last cleanup (the last batch number rounded down to a multiple of 3) and those saved after
    # it; the batches' phase times include checkpoint_cleanup.
    feed = items_feed(partitions=1)
    for start in range(0, 50, 5):
        with feed.transaction() as txn:
            for i in range(start, start + 5):
                txn.insert("shop", "items", item(i))
    topic, group, target = f"growth-{unique}", f"g-{unique}", str(tmp_path / "lake")
    publish(kafka, topic, feed.messages, partitions=1)

    result = run_job(
        spark, kafka, topic, target, group, run={"batch_max_messages": 8}, checkpoint={"keep": 2, "cleanup_every": 3}
    )

    assert_table(spark, target, feed, "shop", "items", ITEMS_DDL)
    locator = PathLocator(target)
    last = CheckpointStore(sql, locator).load(group).batch
    assert last >= 6  # at least two cleanups
    last_cleanup = last - last % 3
    assert _batches(sql, locator, group) == set(range(last_cleanup - 1, last + 1))
    assert "checkpoint_cleanup" in result.phases
