"""kill -9 at chosen points, restart, and end with exactly the upstream tables: the fault script's short run.

`benchmarks/faults.py --only kills` kills the job at >= 50 random points over every protocol; this runs the
same code on one workload with a handful of kills, a DDL site first so the rarest sites are covered.
"""

from __future__ import annotations

import random
import uuid

import pytest

from benchmarks import fault_kills
from benchmarks.fault_job import DDL_SITES

pytestmark = pytest.mark.e2e

# Per Python/Spark/Delta pair: CI runs both pairs, so 4 kills in all (each costs a JVM start and a
# partial rerun); the fault script's `--only kills` makes the many.
KILLS = 2


def test_sigkill_at_random_points_then_restart_gives_the_uninterrupted_result(spark, kafka, tmp_path):
    # Setup: Simple JSON with ADD COLUMN DEFAULT, DROP/RENAME/MODIFY COLUMN, RENAME TABLE, TRUNCATE, DROP and
    # re-CREATE between many transactions over three tables; an uninterrupted run for its versions.
    # Then a run killed KILLS times (SIGKILL of Python and its Spark JVM) at random sites, and restarted.
    # Expect: the tables equal upstream, no table has more versions per applied commitTs than the
    # uninterrupted run, and the first kill is at a DDL site (backfill, rewrite, rename). A restart
    # takes the killed job's lease over at once, never waiting for it to expire.
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    rng = random.Random(seed)
    scene = fault_kills.scenario("simple-json", rng, None, txns=12)
    fault_kills.publish_scenario(kafka.bootstrap_servers, scene)
    baseline = fault_kills.uninterrupted(
        spark, fault_kills.job_sections(kafka.bootstrap_servers, scene, tmp_path / "uninterrupted", f"u-{uuid.uuid4().hex}", 40), scene
    )
    assert "backfill" in scene.ddl_sites()  # Simple carries defaults: ADD COLUMN ... DEFAULT backfills

    sections = fault_kills.job_sections(kafka.bootstrap_servers, scene, tmp_path / "delta", f"k-{uuid.uuid4().hex}", 40)
    # A lease no restart outlives (a JVM start under load takes a minute at most): a restart can take it
    # over at once only because the killed job's processes ended.
    sections["run"]["lease_seconds"] = 300
    outcome = fault_kills.kill_run(scene, sections, tmp_path, KILLS, rng, baseline, spark, first=rng.choice(scene.ddl_sites()))

    assert outcome.problems == []
    assert len(outcome.kills) == KILLS, f"the job finished after {outcome.kills}; the workload is too short"
    assert outcome.kills[0] in DDL_SITES
    log = (tmp_path / "job.log").read_text()
    assert "its process has ended (that job was killed); took it over (epoch 2)" in log
    assert "waiting up to" not in log and "expired at" not in log
