"""What waits, and for what: nothing waits silently.

Each batch the job knows, per partition, the events read and not applied yet (in the gate, the Spark engine's
staging table, or parked for their schema) and what holds them: the partitions the release waits for (their
watermark, or a look at their end: `apply.ordering.completeness`), or a table's message parked for its schema. It

- saves that with every checkpoint, for `ticdc-delta status` (`encode` / `decode`);
- logs once per table and run, at WARNING, a change waiting longer than `run.wait_warning_seconds` (its
  commitTs that much older than the newest watermark read), naming its table, kind and what holds it;
- logs once, at WARNING, a topic that carried a table and has had no watermark for `run.silent_topic_rounds`
  rounds while the newest watermark moved on (`Completeness.round_ended`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ticdc_delta.apply.ordering.completeness import Completeness, Holder
from ticdc_delta.apply.ordering.gate import Waiting
from ticdc_delta.schema_cache.events import TableName, TopicPartition
from ticdc_delta.schema_cache.parking import ParkedMessage

log = logging.getLogger(__name__)

# TiDB's TSO: physical milliseconds above 18 logical bits.
_LOGICAL_BITS = 18
_SCHEMA = "its schema (the BOOTSTRAP or DDL of its schema version)"
_HOLDERS_NAMED = 4


@dataclass(frozen=True, slots=True)
class Wait:
    partition: TopicPartition
    events: int
    oldest_ts: int
    table: TableName
    kind: str  # "row", or a DDL's kind
    waits_for: str
    on_partitions: bool = False  # it waits for partitions to be complete (not for a schema)

    def to_json(self) -> dict:
        return {"partition": str(self.partition), "events": self.events, "oldest_ts": self.oldest_ts,
                "table": str(self.table), "kind": self.kind, "waits_for": self.waits_for}


def holders_text(holders: Iterable[Holder]) -> str:
    """The partitions a release waits for, by topic: "a watermark past X on topic T (partitions 0, 1; ...)"."""
    by_topic: dict[str, list[Holder]] = {}
    for holder in holders:
        by_topic.setdefault(holder.partition.topic, []).append(holder)
    parts = []
    for topic, held in list(by_topic.items())[:_HOLDERS_NAMED]:
        numbers = ", ".join(str(h.partition.partition) for h in held)
        parts.append(f"topic {topic} (partition{'s' if len(held) > 1 else ''} {numbers}: complete through "
                     f"{held[0].through}, its last watermark {held[0].watermark})")
    more = len(by_topic) - _HOLDERS_NAMED
    return "a watermark or a look at the end of " + "; ".join(parts) + (f"; and {more} more topics" if more > 0 else "")


def waits(waiting: Mapping[TopicPartition, Waiting], parked: Iterable[ParkedMessage],
          completeness: Completeness | None) -> list[Wait]:
    """What waits per partition, and for what. `completeness` None: offset ordering (nothing waits for a
    watermark)."""
    limit = completeness.limit() if completeness is not None else None
    holding = holders_text(completeness.holders()) if completeness is not None else ""
    out = []
    for tp, w in sorted(waiting.items()):
        needs_watermark = limit is not None and w.oldest_ts > limit
        out.append(Wait(tp, w.events, w.oldest_ts, w.table, w.kind,
                        holding if needs_watermark else f"a message of its table parked for {_SCHEMA}",
                        on_partitions=needs_watermark))
    oldest_parked: dict[TopicPartition, tuple[int, ParkedMessage]] = {}
    for message in parked:
        tp = message.position.topic_partition
        count, first = oldest_parked.get(tp, (0, message))
        oldest_parked[tp] = (count + 1, message if message.commit_ts < first.commit_ts else first)
    for tp, (count, message) in sorted(oldest_parked.items()):
        out.append(Wait(tp, count, message.commit_ts, message.table, "row (parked)", _SCHEMA))
    return out


def encode(found: list[Wait], newest_watermark: int) -> str | None:
    """What a checkpoint saves of the waits (None: nothing waits)."""
    if not found:
        return None
    return json.dumps({"newest_watermark": newest_watermark, "partitions": [w.to_json() for w in found]},
                      separators=(",", ":"))


def decode(text: str | None) -> dict:
    """What `encode` saved: {"newest_watermark": ..., "partitions": [...]} (empty: nothing waited)."""
    return json.loads(text) if text else {}


def age_seconds(commit_ts: int, newest_watermark: int) -> float:
    """How much older a commitTs is than the newest watermark, in seconds of upstream time."""
    return max(0, (newest_watermark >> _LOGICAL_BITS) - (commit_ts >> _LOGICAL_BITS)) / 1000


class WaitWarnings:
    """The run's WARNING lines about waits: each table once, each silent topic once."""

    def __init__(self, wait_warning_seconds: float) -> None:
        self._seconds = wait_warning_seconds
        self._named: set[TableName] = set()

    def round_ended(self, found: list[Wait], completeness: Completeness, unread: Iterable[TopicPartition] = ()) -> None:
        """The round's WARNING lines. `unread`: partitions with messages not read yet: a wait on them, or a topic
        among them, may end with what is left to read (a backlog being read is not a wait to warn of)."""
        unread = set(unread)
        for topic, last, newest in completeness.round_ended(unread):
            log.warning(
                "topic %s has had no watermark while the newest reached commitTs %d (its last: %d): TiCDC sends "
                "watermarks only to the topics of the tables it replicates, so the table it carried was dropped or "
                "renamed upstream, or taken out of the changefeed; that table stays as it was. If neither happened, "
                "check the changefeed (run.silent_topic_rounds sets how soon this is said)",
                topic, newest, last,
            )
        newest = completeness.newest()
        if newest <= 0:
            return
        holders = {h.partition for h in completeness.holders()}
        for wait in found:
            age = age_seconds(wait.oldest_ts, newest)
            if age <= self._seconds or wait.table in self._named:
                continue
            if wait.on_partitions and holders & unread:
                continue  # (what holds it is still being read)
            self._named.add(wait.table)
            log.warning(
                "%s: a %s change at commitTs %d (%.0f s older than the newest watermark) waits on %s for %s; "
                "run.wait_warning_seconds is %g",
                wait.table, wait.kind, wait.oldest_ts, age, wait.partition, wait.waits_for, self._seconds,
            )
