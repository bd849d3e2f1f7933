"""The Spark engine (`run.engine = "spark"`) killed mid-batch, restarted, and ending with exactly the upstream tables.

Its other end-to-end tests are the variants `[spark]` of Simple's suite (tests/e2e/test_simple_pipeline.py, the
`engine` fixture: partitions out of commitTs order, a key-changing update, rows waiting for their structure, bad
input under both policies, DDL with a replay) and avro's without the TiDB extension (offset ordering), the
history test's and the staging table's cleanup; every protocol's decoding on executors is
tests/unit/test_staged_decoding.py's.
"""

from __future__ import annotations

import random
import uuid

import pytest

from benchmarks import fault_kills
from tests.support import TEST_SESSION_CONF, staged_rows
from ticdc_delta.apply.identifiers import catalog_name

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
