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


@pytest.mark.parametrize(
    "protocol, engine",
    [
        pytest.param("simple-json", "driver", id="simple-driver"),
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
