"""A run with nothing new to read ends before Spark starts; a run with little to read starts a JVM for a short life.

A run --until-idle reads from where its checkpoint (or, without one, its consumer group's committed offsets)
says, up to the end offsets it notes at start. After saving a checkpoint the job commits the same offsets to
its Kafka group, tagged with its target (`commit_tag`): the checkpoint is authoritative and at or after what
the group holds. So when every partition's committed offset carries this target's tag and is the partition's
end offset, the checkpoint is there too, and the run would read nothing, apply nothing and commit nothing: it
ends at once, without Spark's start, the lease and the product's tables (about a second instead of half a
minute for a scheduled job on a quiet changefeed).

Offsets someone else committed to the group (no tag, another target's) never count. What this cannot see: the
product's tables restored to an earlier version by hand while the group's commits stay at the end; a run with
`run.skip_when_caught_up = false` (or `--no-skip-when-caught-up`) then resumes from the restored checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os

from ticdc_delta.exceptions import KafkaAuthenticationError, KafkaUnreachableError, SourceError
from ticdc_delta.jobs.config import Config, TargetConfig
from ticdc_delta.jobs.kafka_source import GroupPosition, KafkaSource
from ticdc_delta.jobs.paths import under_existing_runtime

log = logging.getLogger(__name__)

_TAG_PREFIX = "ticdc-delta target "


def commit_tag(target: TargetConfig) -> str:
    """The metadata of the job's offset commits: which target's checkpoint they follow. A local path counts
    as the absolute path it names (a relative one means another folder from another working directory);
    a catalog's name is all there is to tell catalogs apart."""
    path = target.path
    if path and ":" not in path:
        path = os.path.abspath(path)
    where = json.dumps([path, target.catalog, target.meta_schema if target.catalog else None])
    return _TAG_PREFIX + hashlib.sha256(where.encode()).hexdigest()[:16]


class LookedOnce:
    """A KafkaSource's `committed_at_end` and `backlog`, answered from one look at the group per target
    (`KafkaSource.position`): the run's two checks before Spark starts (`nothing_new`, then `small_run`) ask
    Kafka once, not twice (a round trip per partition each, against a remote cluster). An error of that look
    ends the run as the first check's always did (the run's own reading would meet it a moment later)."""

    def __init__(self, source: KafkaSource, *, count: bool) -> None:
        """`count` False: no backlog is asked for (`might_be_small` says no), so fewer offsets are looked up."""
        self._source = source
        self._count = count
        self._positions: dict[str, GroupPosition] = {}

    def _position(self, tag: str) -> GroupPosition:
        if tag not in self._positions:
            self._positions[tag] = self._source.position(tag, count=self._count)
        return self._positions[tag]

    def committed_at_end(self, tag: str) -> int:
        return self._position(tag).partitions_at_end

    def backlog(self, tag: str) -> int | None:
        return self._position(tag).backlog


def nothing_new(config: Config, source: KafkaSource | LookedOnce) -> bool:
    """True (and logged) if a run of `config` until idle would find nothing to read; `source`, a KafkaSource of
    `config.kafka` (the pre-flight's), is asked only where the run could skip."""
    if config.run.mode != "until-idle" or not config.run.skip_when_caught_up:
        return False
    partitions = source.committed_at_end(commit_tag(config.target))
    if partitions:
        log.info(
            "nothing new for consumer %s: the offsets its last run committed are the end of all %d partitions of %s; "
            "not starting Spark (run.skip_when_caught_up)",
            config.kafka.group_id, partitions, config.kafka.topics_described(),
        )
    return bool(partitions)


def might_be_small(config: Config) -> bool:
    """Whether a run of `config` could get the quick compiler (`small_run`), before counting its messages."""
    return (
        config.run.mode == "until-idle"
        and config.spark.quick_compiler_max_backlog > 0 and not under_existing_runtime()
    )


def small_run(config: Config, source: KafkaSource | LookedOnce) -> bool:
    """True if a run of `config` until idle has at most `spark.quick_compiler_max_backlog` messages
    to read: its local JVM then compiles with C1 only (jobs.session.QUICK_COMPILER). The count runs from this
    target's commits to the group (else the first offset); its checkpoint is at or after them, so it errs high.
    Where the count cannot be known (commits of something else, `start_from = "latest"` without commits), the
    JVM keeps the full compiler; Kafka unreachable or refusing the job's credentials ends the run as it would
    have a moment later. Both engines (the Spark engine's local JVM also runs its executors' tasks: measured on
    the quick compiler since 2026-11-28, docs/performance.md)."""
    if not might_be_small(config):
        return False
    limit = config.spark.quick_compiler_max_backlog
    try:
        backlog = source.backlog(commit_tag(config.target))
    except (KafkaUnreachableError, KafkaAuthenticationError):
        raise
    except SourceError as err:
        log.debug("could not count the messages to read (%s): the JVM keeps its full compiler", err)
        return False
    log.info("messages to read: %s (spark.quick_compiler_max_backlog: %d)",
             "unknown" if backlog is None else f"{backlog} at most", limit)
    return backlog is not None and backlog <= limit
