"""kill -9 at chosen points, restart, and end with exactly the upstream tables and history: the fault script's short run.

`benchmarks/faults.py --only kills` kills the job at >= 50 random points over every protocol; this runs the
same code on one workload with one kill, at a recurring site or at a DDL site (the rarest) by a coin, with
history tables chosen for one database (their MERGE and rename follow the table's: kills between the two; their
exact states through DDL are tests/e2e/test_history_tables.py's).
"""

from __future__ import annotations

import random
import uuid

import pytest

from benchmarks import fault_kills
from tests.support import TEST_SESSION_CONF

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.process,
    pytest.mark.one_pair(
        "job processes killed and restarted (a Spark JVM each); the idempotent writes and replays it relies on run on both pairs in test_delta_writer and test_simple_pipeline",
        pair="oldest",
    ),
]

# The fault script's `--only kills` makes the many; here one kill, either at a recurring site in the first
# batch or at a DDL site, chosen by a coin: each is always reached, and each kill costs a JVM start and a
# partial rerun (CI time: a third kill was cut on 2026-11-27, a second, at a DDL site in the restart whose first
# batch replayed what the killed job had applied, on 2026-11-28: 55 s of the oldest side's). With the Spark
# engine's kill (tests/e2e/test_spark_engine.py), CI kills twice.


def test_sigkill_at_random_points_then_restart_gives_the_uninterrupted_result(spark, kafka, tmp_path):
    """Over 60 s in CI: a job process (killed), a Spark JVM that takes 10-20 s to start and runs cold, besides
    the uninterrupted run it is compared with and the restart, both in this process (`fault_kills.kill_run`)."""
    # Setup: Simple JSON with ADD COLUMN DEFAULT, DROP/RENAME/MODIFY COLUMN, RENAME TABLE, TRUNCATE, DROP and
    # re-CREATE between many transactions over three tables, the first with a history table, a topic per table;
    # an uninterrupted run for its versions and its history.
    # Then a run killed once (SIGKILL of Python and its Spark JVM), by a coin either at a random recurring site
    # (decode, MERGE in flight, after a table commit, after the checkpoint) in the first batch or at a random
    # DDL site (backfill, rewrite, rename); then restarted in this process.
    # Expect: every kill happens; the tables equal upstream; no table has more versions per applied commitTs
    # than the uninterrupted run; the history tables hold exactly the uninterrupted run's states. A restart
    # takes the killed job's lease over at once, never waiting for it to expire.
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    rng = random.Random(seed)
    # The table with the most DDL keeps a history (columns added with a default, dropped, renamed, retyped;
    # the table renamed, its history with it); the other tables do not (CI time: a MERGE more per batch each).
    # 8 transactions of rows before the DDL and two rounds after it (12 and four until 2026-12-06, CI time).
    # A topic per table, as TiCDC's router writes them (the RENAME on the old name's topic, the renamed table's
    # later rows on a new one, no watermark after a DROP on its topic): tests/e2e/test_topic_per_table.py's shape,
    # here across a kill (the fault script alternates it with one topic for all tables).
    scene = fault_kills.scenario("simple-json", rng, None, txns=8, history=True, topic_per_table=True)
    fault_kills.publish_scenario(kafka.bootstrap_servers, scene)
    reference = tmp_path / "uninterrupted"
    baseline = fault_kills.uninterrupted(
        spark, fault_kills.job_sections(kafka.bootstrap_servers, scene, reference, f"u-{uuid.uuid4().hex}", 40), scene
    )
    assert "backfill" in scene.ddl_sites()  # Simple carries defaults: ADD COLUMN ... DEFAULT backfills
    if rng.random() < 0.5:
        planned = [fault_kills.choose_kill(rng, [], early=True)]
    else:
        planned = [fault_kills.choose_kill(rng, scene.ddl_sites(), site=rng.choice(scene.ddl_sites()))]

    sections = fault_kills.job_sections(kafka.bootstrap_servers, scene, tmp_path / "delta", f"k-{uuid.uuid4().hex}", 40)
    # A lease no restart outlives (a JVM start under load takes a minute at most): a restart can take it
    # over at once only because the killed job's processes ended.
    sections["run"]["lease_seconds"] = 300
    sections["spark.conf"] = TEST_SESSION_CONF
    outcome = fault_kills.kill_run(scene, sections, tmp_path, len(planned), rng, baseline, spark, planned=planned,
                                   reference=reference)

    assert outcome.problems == []
    assert outcome.kills == [plan.site for plan in planned], f"planned {planned}; the job finished after {outcome.kills}"
    # The history table was renamed with its table (both stay in their folders: `apply.places.folders`).
    assert [table for database, table in fault_kills.located(spark, reference) if database.endswith("_history")] == ["items_2025"]
    log = (tmp_path / "job.log").read_text()
    for epoch in range(2, len(planned) + 2):  # each restart took the lease of the job killed before it
        assert f"its process has ended (that job was killed); took it over (epoch {epoch})" in log
    assert "waiting up to" not in log and "expired at" not in log
