"""The tag of the job's offset commits, when a run looks for nothing new at all, and when it counts as a short
run (`jobs.caught_up`)."""

from __future__ import annotations

import argparse
import os
import time

import pytest

from ticdc_delta.exceptions import ConfigError
from ticdc_delta.jobs import config
from ticdc_delta.jobs.caught_up import commit_tag, nothing_new, small_run
from ticdc_delta.jobs.cli import _overrides, _run_parser
from ticdc_delta.jobs.kafka_source import KafkaSource

# A port nothing listens on: asking this broker anything would wait for kafka.unreachable_timeout_seconds.
NOWHERE = {"kafka": {"bootstrap_servers": "127.0.0.1:9", "topics": ["t"], "group_id": "g"}, "target": {"path": "/lake"}}


def test_the_tag_names_the_target_and_nothing_else():
    # Expect: the same target gives the same tag; another path, another catalog or schema another tag.
    tag = commit_tag(config.TargetConfig(path="/lake"))
    assert tag == commit_tag(config.TargetConfig(path="/lake", table_features="full"))
    assert tag != commit_tag(config.TargetConfig(path="/lake2"))
    catalog = commit_tag(config.TargetConfig(catalog="main"))
    assert catalog not in (tag, commit_tag(config.TargetConfig(catalog="main", meta_schema="_other")))
    assert tag.startswith("ticdc-delta target ") and len(tag) < 64
    # A relative path is the folder it names from here: the same as its absolute path, and not another
    # folder's of the same relative name.
    assert commit_tag(config.TargetConfig(path="lake")) == commit_tag(config.TargetConfig(path=os.path.abspath("lake")))
    assert commit_tag(config.TargetConfig(path="s3a://bucket/lake")) != commit_tag(config.TargetConfig(path="s3a://other/lake"))


@pytest.mark.parametrize(
    "run", [{"mode": "continuous"}, {"skip_when_caught_up": False}], ids=["continuous", "switched-off"]
)
def test_no_broker_is_asked_where_the_run_would_not_skip(run):
    # Expect: a continuous run, or one with the setting off, answers at once without Kafka (the broker is nowhere).
    assert _answers_at_once(nothing_new, config.from_mapping({**NOWHERE, "run": run})) is False


def _answers_at_once(decide, loaded) -> bool:
    """`decide(loaded, source)` on a source of the broker nowhere, which it must not ask (under a second)."""
    source = KafkaSource(loaded.kafka)
    try:
        began = time.monotonic()
        answer = decide(loaded, source)
        assert time.monotonic() - began < 1
        return answer
    finally:
        source.close()


def _run_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    _run_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["run", *argv])


def test_the_setting_and_its_flag():
    # Expect: on by default; --no-skip-when-caught-up turns it off; a value other than true/false is refused.
    assert config.RunConfig().skip_when_caught_up is True
    assert _overrides(_run_args("--no-skip-when-caught-up"))["run"]["skip_when_caught_up"] is False
    assert _overrides(_run_args())["run"]["skip_when_caught_up"] is None
    with pytest.raises(ConfigError, match="run.skip_when_caught_up"):
        config.RunConfig(skip_when_caught_up="yes")


@pytest.mark.parametrize(
    "sections, env",
    [({"run": {"mode": "continuous"}}, {}), ({"spark": {"quick_compiler_max_backlog": 0}}, {}),
     ({"run": {"mode": "continuous", "engine": "spark"}}, {}),
     ({}, {"DATABRICKS_RUNTIME_VERSION": "16.4"}), ({}, {"PYSPARK_GATEWAY_PORT": "4040"})],
    ids=["continuous", "switched-off", "spark-engine-continuous", "databricks", "spark-submit"],
)
def test_no_broker_is_asked_where_the_run_keeps_the_full_compiler(sections, env, monkeypatch):
    # Expect: a continuous run (of either engine), the setting at 0, or a session that is not the job's to start
    # (Databricks, spark-submit) keep the full compiler, decided at once without Kafka (the broker is nowhere).
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert _answers_at_once(small_run, config.from_mapping({**NOWHERE, **sections})) is False


def test_the_backlog_limit_is_a_whole_number_of_at_least_0():
    assert config.SparkConfig().quick_compiler_max_backlog == 200_000
    for wrong in (-1, True, 1.5, "20000"):
        with pytest.raises(ConfigError, match="spark.quick_compiler_max_backlog"):
            config.SparkConfig(quick_compiler_max_backlog=wrong)


def test_the_two_checks_before_spark_starts_look_at_the_group_once():
    # Setup: a run --until-idle of the driver engine, its group's position not at the end (3 messages to
    # read); the two checks of the command line (nothing new? a small run?) on one LookedOnce.
    # Expect: one look at the group for both; not "nothing new" (committed_at_end 0), a small run (3).
    from ticdc_delta.jobs.caught_up import LookedOnce
    from ticdc_delta.jobs.kafka_source import GroupPosition

    class Source:
        looks = 0

        def position(self, tag: str, *, count: bool) -> GroupPosition:
            Source.looks += 1
            return GroupPosition(partitions=2, at_end=False, backlog=3 if count else None)

    looked = LookedOnce(Source(), count=True)
    run = config.from_mapping(NOWHERE)
    assert nothing_new(run, looked) is False and small_run(run, looked) is True
    assert Source.looks == 1
    # The Spark engine's short runs too (measured: docs/performance.md).
    spark_run = config.from_mapping({**NOWHERE, "run": {"engine": "spark"}})
    assert small_run(spark_run, LookedOnce(Source(), count=True)) is True
    at_end = type("AtEnd", (), {"position": lambda self, tag, count: GroupPosition(2, True, 0 if count else None)})()
    assert LookedOnce(at_end, count=False).committed_at_end("t") == 2
