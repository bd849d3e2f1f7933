"""The Spark engine (`run.engine = "spark"`) killed mid-batch, restarted, and ending with exactly the upstream tables;
small batches kept in memory until a large one stages what they left waiting.

Its other end-to-end tests are the variants `[spark]` of Simple's suite (tests/e2e/test_simple_pipeline.py, the
`engine` fixture: partitions out of commitTs order, a key-changing update, rows waiting for their structure, bad
input under both policies, DDL with a replay) and avro's without the TiDB extension (offset ordering), the
history test's and the staging table's cleanup; every protocol's decoding on executors is
tests/unit/test_staged_decoding.py's.
"""

from __future__ import annotations

import random
import uuid
from decimal import Decimal

import pytest

from benchmarks import fault_kills
from tests.support import TEST_SESSION_CONF, assert_table, continuous_run, job_config, publish, staged_rows
from tests.workloads import ITEMS_DDL, item, items_feed
from ticdc_delta.apply.base.identifiers import catalog_name

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.process,
    pytest.mark.one_pair(
        "job processes of the Spark engine killed and restarted (a Spark JVM each); its statements run on both "
        "pairs' variants of the protocol suites",
        pair="oldest",
    ),
]

# Messages per batch: a few batches (each costs the Spark engine about ten Spark actions besides its MERGEs).
BATCH = 100


def test_killed_while_staging_a_batch_then_restarted_gives_the_exact_tables(spark, kafka, tmp_path):
    """Over 60 s in CI: a job process of the Spark engine (a Spark JVM with Python workers, running cold) killed
    mid-staging, then its restart in this process; the engine makes about ten Spark actions a batch."""
    # Setup: Simple JSON with ADD COLUMN DEFAULT, DROP/RENAME/MODIFY COLUMN, RENAME TABLE, TRUNCATE, DROP and
    # re-CREATE between transactions over three tables, read BATCH messages a batch by the Spark engine. A run
    # killed (SIGKILL of Python and its Spark JVM) while the first or second batch is read, decoded on the
    # executors and written to the staging table; then restarted (in this process, on the tests' session: the
    # restart meets what the killed process left, wherever it runs).
    # Expect: the kill happens; the tables equal upstream; no table has two versions for one applied commitTs;
    # nothing is left in the staging table, which was cleaned up (every 2 batches here): vacuumed, at most
    # one live file.
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    rng = random.Random(seed)
    scene = fault_kills.scenario("simple-json", rng, None, txns=6)
    fault_kills.publish_scenario(kafka.bootstrap_servers, scene)

    def sections(target, group):
        values = fault_kills.job_sections(kafka.bootstrap_servers, scene, target, group, BATCH)
        values["run"]["engine"] = "spark"
        values["run"]["driver_decode_max_messages"] = 0  # its batches decoded on the executors, however small
        values["checkpoint"] = {"cleanup_every": 2}  # the staging table's cleanup too, killed in it or not
        values["spark.conf"] = TEST_SESSION_CONF
        return values

    # No uninterrupted run to compare versions with (CI time): every applied commitTs must have one version
    # per table, which is what an uninterrupted run makes (an ADD COLUMN's backfill marks no point of its own).
    baseline: dict = {}
    # One kill per CI run (each costs a JVM start and a partial rerun): mid-staging, the Spark engine's own
    # site; the other sites (MERGE, after a table commit, after the checkpoint) are the driver engine's, whose
    # crash test covers them, and `benchmarks/faults.py` runs them all.
    planned = [fault_kills.KillPlan("stage", hit=rng.randint(1, 2), delay=rng.uniform(0, 1.0))]
    group = f"k-{uuid.uuid4().hex}"
    killed = sections(tmp_path / "delta", group)
    killed["run"]["lease_seconds"] = 300  # a restart takes the killed job's lease over because its processes ended
    outcome = fault_kills.kill_run(scene, killed, tmp_path, len(planned), rng, baseline, spark, planned=planned)

    assert outcome.problems == []
    assert outcome.kills == [plan.site for plan in planned]
    assert staged_rows(spark, str(tmp_path / "delta"), group) == 0
    staging = f"delta.`{tmp_path / 'delta'}/_ticdc/staging_{catalog_name(group)}`"
    # Cleaned up on the checkpoint cleanup's cadence: vacuumed, and compacted (an OPTIMIZE commits only when
    # there are files to compact; its effect is tested in test_checkpoint_growth.py).
    operations = {r["operation"] for r in spark.sql(f"DESCRIBE HISTORY {staging}").collect()}
    assert "VACUUM END" in operations
    assert spark.sql(f"DESCRIBE DETAIL {staging}").collect()[0]["numFiles"] <= 1


@pytest.mark.one_pair("an in-process run of the product's own logic; the sides' balance", pair="newest")
def test_small_batches_wait_in_memory_until_a_large_batch_stages_what_they_left(spark, kafka, tmp_path, unique):
    # Setup: a continuous run of the Spark engine (batches of at most 40 messages decoded on the driver). First a
    # small batch: 4 inserts, then 3 updates whose partition 0 copies (and watermarks) are held back, so the
    # updates wait for partition 0's watermark. Then 30 more updates and partition 0's held messages at once:
    # over 40 messages (each transaction is a row and three watermarks), a batch for the executors.
    # Expect: after the small batch the updates wait in memory (nothing staged, the run reports them waiting);
    # the large batch first stages them (the staging table's only append), then its own (a replaceWhere write);
    # in the end the table equals upstream and nothing is left staged.
    feed = items_feed()
    for i in range(4):
        with feed.transaction() as txn:
            txn.insert("shop", "items", item(i))
    first = len(feed.messages)
    for i in range(3):
        with feed.transaction() as txn:
            txn.update("shop", "items", [i], {"price": Decimal("2.50")})
    second = len(feed.messages)
    held = [m for m in feed.messages[first:second] if m.partition == 0]
    for i in range(30):
        with feed.transaction() as txn:
            txn.update("shop", "items", [i % 4], {"price": Decimal(f"{3 + i}.00")})
    topic, target, group = f"memory-{unique}", str(tmp_path), f"g-{unique}"
    publish(kafka, topic, feed.messages[:first] + [m for m in feed.messages[first:second] if m.partition != 0])
    config = job_config(kafka, topic, target, group, engine="spark",
                        run={"mode": "continuous", "batch_max_messages": 200, "driver_decode_max_messages": 40})
    with continuous_run(config, spark) as seen:
        waited = seen.wait_for(lambda r: r["waiting"] > 0)
        assert waited["messages"] <= 40 and staged_rows(spark, target, group) == 0
        publish(kafka, topic, held + feed.messages[second:])
        seen.wait_for(lambda r: r["messages"] > 40)
        seen.wait_for(lambda r: r["round"] > waited["round"] and not r["waiting"] and r["rows_merged"])
    assert_table(spark, target, feed, "shop", "items", ITEMS_DDL)
    assert staged_rows(spark, target, group) == 0
    staging = f"delta.`{target}/_ticdc/staging_{catalog_name(group)}`"
    writes = [r["operationParameters"]["mode"] for r in
              spark.sql(f"DESCRIBE HISTORY {staging}").orderBy("version").collect() if r["operation"] == "WRITE"]
    assert writes[:2] == ["Append", "Overwrite"], writes
