"""Reading the configured topics with confluent-kafka.

All partitions of every configured topic are assigned to this one consumer
(no group rebalancing): a table's rows are spread over all partitions of its
topic, and only a consumer that sees every partition can tell when a
commitTs is complete. The consumer group is used for committed offsets only.
Scale out by running one materializer per set of topics.

A broker that refuses the job's SASL credentials is not an outage: librdkafka
reports it (error code _AUTHENTICATION) and keeps retrying, but the job stops
at once with KafkaAuthenticationError instead of waiting
`kafka.unreachable_timeout_seconds` for a broker that answers every time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaPartition

from ticdc_delta.exceptions import KafkaAuthenticationError, KafkaUnreachableError, SourceError
from ticdc_delta.jobs.config import KafkaConfig
from ticdc_delta.jobs.kafka_log import librdkafka_logger
from ticdc_delta.schema_cache.events import RawMessage, TopicPartition

log = logging.getLogger(__name__)

_METADATA_TIMEOUT = 30.0
# Answers of a group coordinator that is starting or moving: librdkafka does not
# flag them retriable, but asking again a moment later succeeds.
_COORDINATOR_MOVING = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError._WAIT_COORD,
    KafkaError._TIMED_OUT,
}
# librdkafka's reports that it reaches no broker (it keeps reconnecting on its own).
_NO_BROKER = {KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._RESOLVE}
_PROBE_TIMEOUT = 1.0
# Longest wait of one consume when reading offset ranges (`read`): their messages are there already.
_READ_POLL_SECONDS = 0.5
# A range's messages not coming this long while a broker answers: they are gone (`read`).
_READ_STALL_SECONDS = 60.0
# A synchronous offset commit with no group coordinator reachable waits up to session.timeout.ms
# (librdkafka's default 45 s) before failing. The job never joins its group (it assigns partitions
# itself), so that setting has no other use here: a short one lets a commit during a broker outage fail
# in seconds and the outage be measured against kafka.unreachable_timeout_seconds. A user's own wins.
_COMMIT_WAIT_MS = 6000
# How long a commit's answer is awaited before it counts as failed (librdkafka answers within
# session.timeout.ms, even "waiting for coordinator", unless the broker went away mid-commit).
_COMMIT_ANSWER_WAIT = 2 * _COMMIT_WAIT_MS / 1000
# Metadata is asked for in slices this long, serving librdkafka's error reports in between
# (a refused login ends the wait at once); a TLS + SCRAM handshake takes a few hundred ms.
_METADATA_SLICE = 2.0
_CLOSE_WAIT = 10.0
# How often a commit's answer is looked for.
_COMMIT_POLL_SECONDS = 0.01
# The consumer's settings an admin client (topic ids) does not take: librdkafka's consumer-only properties
# (its CONFIGURATION.md), which it would warn of, each run.
_CONSUMER_ONLY = {
    "group.id", "group.instance.id", "group.protocol", "group.protocol.type", "group.remote.assignor",
    "partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms", "coordinator.query.interval.ms",
    "max.poll.interval.ms", "enable.auto.commit", "auto.commit.interval.ms", "enable.auto.offset.store",
    "queued.min.messages", "queued.max.messages.kbytes", "fetch.wait.max.ms", "fetch.queue.backoff.ms",
    "fetch.message.max.bytes", "max.partition.fetch.bytes", "fetch.max.bytes", "fetch.min.bytes",
    "fetch.error.backoff.ms", "isolation.level", "enable.partition.eof", "check.crcs", "auto.offset.reset",
    "consume.callback.max.messages", "allow.auto.create.topics",
}
# A ListOffsets request's timestamp meaning "the end" (`end_offsets_now`), and how long its answer is awaited.
_LATEST = -1
_LOOK_TIMEOUT = 5.0
# librdkafka's log level (syslog's) for the offset committer: critical only.
_QUIET = 2
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class GroupPosition:
    """A consumer group's commits against the end offsets, for one target (`KafkaSource.position`)."""

    partitions: int
    # Every partition's committed offset carries the target's tag and is its end offset.
    at_end: bool
    # At most how many messages a run has to read: from the commits (a partition without one: from its first
    # offset, with start_from = "earliest") to the end offsets; None where that says nothing (a commit without
    # the tag, or none with start_from = "latest": the run starts where its checkpoint says).
    backlog: int | None

    @property
    def partitions_at_end(self) -> int:
        """How many partitions there are if every one is at the end (`at_end`), else 0."""
        return self.partitions if self.at_end else 0


class KafkaSource:
    def __init__(self, config: KafkaConfig, commit_tag: str | None = None) -> None:
        """`commit_tag`: the metadata every offset commit carries (`jobs.caught_up`: whose checkpoint they follow)."""
        self._config = config
        self._commit_tag = commit_tag
        self._settings = {
            "session.timeout.ms": _COMMIT_WAIT_MS,
            **config.properties,
            "bootstrap.servers": config.bootstrap_servers,
            "group.id": config.group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": config.start_from,
            "error_cb": self._on_error,
            "logger": librdkafka_logger(),
        }
        self._consumer = Consumer(self._settings)
        self._committer: Consumer | None = None  # made at the first commit (see `_commit_once`)
        self._commit_answers: list[tuple[KafkaError | None, list[KafkaPartition]]] = []
        self._next: dict[TopicPartition, int] = {}
        self._end: dict[TopicPartition, int] = {}
        self._unreachable_since: float | None = None  # monotonic time an outage began (a probe confirmed it)
        # librdkafka's last "no broker" report, not yet confirmed: it also reports one when it drops its
        # bootstrap connection at start, a moment before the brokers it learned of answer.
        self._suspected_since: float | None = None
        self._refused: str | None = None  # librdkafka's report of a refused login, if one came
        # Topic ids: those a checkpoint saved (`expect_topic_ids`), those found now, the topics whose id changed
        # (deleted and created again under the same name: read from their start).
        self._expected_ids: dict[str, str] = {}
        self.topic_ids: dict[str, str] = {}
        self.recreated: set[str] = set()
        self._admin = None  # made at the first look at topic ids
        # Kafka said a partition's topic is unknown since the last look at the topics (deleted, perhaps created
        # again): the job looks at them at once (`jobs.pipeline`).
        self.topic_gone = False

    # --- authentication -------------------------------------------------------------------------

    def _raise_if_refused(self, err: KafkaException | None = None) -> None:
        """KafkaAuthenticationError if a broker refused the login (reported to error_cb, or carried by `err`)."""
        error = err.args[0] if err is not None and err.args else None
        if isinstance(error, KafkaError) and error.code() == KafkaError._AUTHENTICATION:
            self._refused = self._refused or error.str()
        if self._refused is not None:
            raise KafkaAuthenticationError(
                f"Kafka at {self._config.bootstrap_servers} refused the job's credentials: {self._refused} "
                "(authentication failed: check sasl.mechanism, sasl.username and sasl.password in kafka.properties); "
                "stopping without retrying"
            )

    # --- reachability -------------------------------------------------------------------------

    def _on_error(self, error: KafkaError) -> None:
        # Served by librdkafka inside poll/consume, on the calling thread.
        if error.code() == KafkaError._AUTHENTICATION:
            self._refused = self._refused or error.str()  # librdkafka's text names the mechanism, never the password
        elif self._refused is not None:
            return  # "all brokers down" after a refused login: not an outage
        elif error.code() in _NO_BROKER:
            log.debug("Kafka: %s", error)
            if self._suspected_since is None:
                self._suspected_since = time.monotonic()
        else:
            log.warning("Kafka: %s", error)

    def _mark_unreachable(self, reason: str, since: float | None = None) -> None:
        if self._unreachable_since is None:
            self._unreachable_since = time.monotonic() if since is None else since
            log.warning(
                "Kafka at %s unreachable (%s); waiting for it up to %gs (kafka.unreachable_timeout_seconds)",
                self._config.bootstrap_servers, reason, self._config.unreachable_timeout_seconds,
            )

    def waiting_for_broker(self) -> bool:
        """True while no broker answers: an empty poll then is an outage, not the end of the stream.

        Raises KafkaUnreachableError once that lasted longer than the configured limit, and
        KafkaAuthenticationError at once if a broker refused the job's credentials.
        """
        self._raise_if_refused()
        if self._unreachable_since is None and self._suspected_since is None:
            return False
        return self._in_outage(since=self._suspected_since)

    def _in_outage(self, since: float | None = None) -> bool:
        """Ask a broker now: True while none answers (raising past the limit), False once one does.

        `since`: when the caller's failed call began (the outage is at least that old).
        """
        try:
            self._consumer.list_topics(timeout=_PROBE_TIMEOUT)  # answered only by a reachable broker
        except KafkaException as err:
            self._raise_if_refused()
            self._mark_unreachable(str(err), since)
            self._raise_if_down_too_long()
            return True
        self._note_reachable()
        return False

    def _note_reachable(self) -> None:
        """A broker answered: an outage (if one was noted) is over."""
        self._suspected_since = None
        if self._unreachable_since is not None:
            log.info("Kafka at %s reachable again after %.0fs", self._config.bootstrap_servers,
                     time.monotonic() - self._unreachable_since)
            self._unreachable_since = None

    def _metadata(self):
        """The cluster's metadata; only before partitions are assigned.

        No broker answering is an outage like one mid-run: waited for up to
        `kafka.unreachable_timeout_seconds`, then KafkaUnreachableError (exit 6). Another
        failure is retried for up to _METADATA_TIMEOUT. librdkafka reports a refused login
        to error_cb, which only consume() serves: between slices of the wait it is served
        (nothing is assigned yet, so nothing is read).
        """
        started = time.monotonic()
        failures = 0
        while True:
            try:
                metadata = self._consumer.list_topics(timeout=_METADATA_SLICE)
            except KafkaException as err:
                self._consumer.consume(num_messages=1, timeout=0)  # serves error_cb (and librdkafka's log)
                self._raise_if_refused(err)
                error = err.args[0] if err.args else None
                no_broker = isinstance(error, KafkaError) and error.code() in (*_NO_BROKER, KafkaError._TIMED_OUT)
                failures += 1
                if no_broker and failures == 1:
                    # Not yet an outage: librdkafka drops its bootstrap connection as soon as it learns the
                    # brokers' ids, and a request in flight on it fails "all brokers down" (seen on a loaded
                    # machine over SASL_SSL); the outage's clock, if the next slice fails too, starts at `started`.
                    continue
                if no_broker:
                    self._mark_unreachable(error.str(), since=started)
                    self._raise_if_down_too_long(starting=True)
                elif time.monotonic() - started >= _METADATA_TIMEOUT:
                    raise SourceError(f"cannot reach Kafka at {self._config.bootstrap_servers}: {err}") from err
                continue
            self._note_reachable()
            return metadata

    def _raise_if_down_too_long(self, *, starting: bool = False) -> None:
        down = time.monotonic() - self._unreachable_since
        if down > self._config.unreachable_timeout_seconds:
            outcome = (
                "nothing was read or written; check kafka.bootstrap_servers and that the brokers are up"
                if starting else "what was applied is checkpointed, nothing after it was committed"
            )
            raise KafkaUnreachableError(
                f"Kafka at {self._config.bootstrap_servers} unreachable for {down:.0f}s "
                f"(kafka.unreachable_timeout_seconds = {self._config.unreachable_timeout_seconds:g}); stopping: {outcome}"
            )

    def partitions(self) -> dict[str, list[int]]:
        """{topic: its partitions} of every topic read: `kafka.topics` (each must exist), or every topic matching
        `kafka.topic_pattern` now (at least one must)."""
        metadata = self._metadata()
        if self._config.topic_pattern:
            found = {topic: sorted(described.partitions) for topic, described in sorted(metadata.topics.items())
                     if self._config.reads(topic) and described.error is None and described.partitions}
            if not found:
                raise SourceError(f"kafka.topic_pattern: no topic matches {self._config.topic_pattern!r} at "
                                  f"{self._config.bootstrap_servers} (the whole name must match; Kafka's `__` topics never do)")
            return found
        found = {}
        for topic in self._config.topics:
            described = metadata.topics.get(topic)
            if described is None or described.error is not None or not described.partitions:
                raise SourceError(f"kafka.topics: topic {topic!r} does not exist at {self._config.bootstrap_servers}")
            found[topic] = sorted(described.partitions)
        return found

    def _ids_of(self, topics: Iterable[str]) -> dict[str, str]:
        """Each topic's id (Kafka's, kept across a rename of nothing but changed when the topic is deleted and
        created again); {} where the brokers do not tell (no DESCRIBE permission, an old broker)."""
        topics = sorted(topics)
        if not topics:
            return {}
        from confluent_kafka import TopicCollection
        from confluent_kafka.admin import AdminClient

        ids: dict[str, str] = {}
        try:
            if self._admin is None:
                self._admin = AdminClient({k: v for k, v in self._settings.items() if k not in _CONSUMER_ONLY})
            futures = self._admin.describe_topics(TopicCollection(topics), request_timeout=_METADATA_TIMEOUT)
        except Exception as err:  # noqa: BLE001 - what the brokers would not tell: recreated topics known by offsets only
            log.info("Kafka: topic ids not read (%s): a topic deleted and created again is known by its offsets only", err)
            return ids
        for topic, future in futures.items():
            try:
                described = future.result(_METADATA_TIMEOUT)
            except Exception as err:  # noqa: BLE001 - this topic's alone (deleted meanwhile, not allowed)
                log.debug("Kafka: the id of %s not read: %s", topic, err)
                continue
            if described.topic_id is not None:
                ids[topic] = str(described.topic_id)
        return ids

    def expect_topic_ids(self, ids: Mapping[str, str]) -> None:
        """The topic ids a checkpoint saved: a topic whose id differs now is read from its start (`plan`)."""
        self._expected_ids = dict(ids)

    def partitions_changed(self, opened: Mapping[str, list[int]], *, ids: bool = True) -> str:
        """What differs between the partitions read (`opened`, as `open` or `plan` returned them) and those
        `kafka.topic_pattern` matches now: a topic created or deleted, partitions added, and (`ids`) a topic
        deleted and created again ("" if nothing, or if the topics are a fixed list)."""
        self.topic_gone = False
        if not self._config.topic_pattern:
            return ""
        try:  # (not `_metadata`, which may consume while partitions are assigned: one look, or none this time)
            metadata = self._consumer.list_topics(timeout=_METADATA_SLICE)
        except KafkaException as err:
            log.info("Kafka: the topics matching kafka.topic_pattern not listed this time: %s", err)
            return ""
        now = {topic: sorted(described.partitions) for topic, described in metadata.topics.items()
               if self._config.reads(topic) and described.error is None and described.partitions}
        created = sorted(set(now) - set(opened))
        deleted = sorted(set(opened) - set(now))
        grown = sorted(t for t in set(now) & set(opened) if set(now[t]) - set(opened[t]))
        again = []
        if ids:
            found = self._ids_of(set(now) & set(opened) & set(self.topic_ids))
            again = sorted(t for t, topic_id in found.items() if topic_id != self.topic_ids.get(t))
        changes = [f"{what} {', '.join(topics)}" for what, topics in
                   (("new topics", created), ("deleted topics", deleted), ("new partitions of", grown),
                    ("topics deleted and created again", again)) if topics]
        return "; ".join(changes)

    def _retrying(self, what: str, call: Callable[[], T]) -> T:
        """`call`, again while Kafka answers with a retriable error: a coordinator still loading (for up to
        30 s), or no broker at all (for up to `kafka.unreachable_timeout_seconds`)."""
        started = time.monotonic()
        while True:
            attempt = time.monotonic()
            try:
                return call()
            except KafkaException as err:
                error = err.args[0] if err.args else None
                retriable = isinstance(error, KafkaError) and (error.retriable() or error.code() in _COORDINATOR_MOVING)
                if not retriable:
                    self._raise_if_refused(err)
                    raise SourceError(f"cannot {what} at {self._config.bootstrap_servers}: {err}") from err
                # error_cb is not served inside every call (a commit): ask a broker directly.
                outage = self._in_outage(since=attempt)  # raises once no broker answered for too long
                if not outage and time.monotonic() - started >= _METADATA_TIMEOUT:
                    raise SourceError(f"cannot {what} at {self._config.bootstrap_servers}: {err}") from err
                log.info("Kafka: %s; retrying", err)
                time.sleep(0.5)

    def _offset_range(self, tp: TopicPartition) -> tuple[int, int]:
        """(oldest offset Kafka holds, end offset) of `tp`, asked of the broker now."""
        return self._retrying(
            f"read the offsets of {tp}",
            lambda: self._consumer.get_watermark_offsets(KafkaPartition(tp.topic, tp.partition), timeout=_METADATA_TIMEOUT),
        )

    def offset_ranges(self) -> dict[TopicPartition, tuple[int, int]]:
        """Per partition of the configured topics: (oldest offset held, end offset), asked now.

        Nothing is assigned, read or committed: for reports on a consumer that runs elsewhere.
        """
        return {
            TopicPartition(topic, p): self._offset_range(TopicPartition(topic, p))
            for topic, ids in self.partitions().items()
            for p in ids
        }

    def position(self, tag: str, *, count: bool = True) -> GroupPosition:
        """The group's committed offsets against the end offsets now, for the target whose commits carry `tag`
        (`GroupPosition`; `count` False: no backlog, None): one look at the commits, and the offsets of as many
        partitions as the answers need. Nothing is assigned, read or committed."""
        tps = [KafkaPartition(t, p) for t, ids in self.partitions().items() for p in ids]
        at_end, backlog = True, 0 if count else None
        for c in self._group_commits(tps):
            ours = c.error is None and c.offset >= 0 and c.metadata == tag
            at_end = at_end and ours
            if c.error is not None or (c.offset >= 0 and not ours) or (c.offset < 0 and self._config.start_from != "earliest"):
                backlog = None  # a commit of something else, or none while a new group starts at the end
            if not at_end and backlog is None:
                break  # both answers known: no more offsets to ask
            low, high = self._offset_range(TopicPartition(c.topic, c.partition))
            at_end = at_end and c.offset == high
            if backlog is not None:
                backlog += max(0, high - max(c.offset, low))
        return GroupPosition(len(tps), at_end, backlog)

    def committed_at_end(self, tag: str) -> int:
        """How many partitions the configured topics have, if the group's committed offset of every one carries
        `tag` and is its end offset now; else 0 (`position`)."""
        return self.position(tag, count=False).partitions_at_end

    def backlog(self, tag: str) -> int | None:
        """At most how many messages a run of the target whose commits carry `tag` has to read (`position`)."""
        return self.position(tag).backlog

    def _group_commits(self, tps: list[KafkaPartition]) -> list[KafkaPartition]:
        """The group's committed offset (and its metadata) of each of `tps`, asked now."""
        return self._retrying(
            "read the group's committed offsets", lambda: self._consumer.committed(tps, timeout=_METADATA_TIMEOUT)
        )

    def open(self, resume: Mapping[TopicPartition, int] | None = None) -> dict[str, list[int]]:
        """Assign every partition; start at `resume`, else the group's commits, else `start_from`.

        Also notes each partition's end offset now: what "until idle" drains.
        """
        partitions = self.plan(resume)
        self._consumer.assign([KafkaPartition(tp.topic, tp.partition, start) for tp, start in self._next.items()])
        log.info(
            "reading %s from %s",
            ", ".join(str(tp) for tp in self._next),
            {str(tp): o for tp, o in self._next.items()},
        )
        return partitions

    def plan(self, resume: Mapping[TopicPartition, int] | None = None) -> dict[str, list[int]]:
        """Where reading starts (as `open`) and each partition's end offset now, without reading anything.

        For the Spark engine, whose messages Spark's Kafka source reads (`advance` says how far).
        """
        partitions = self.partitions()
        tps = [KafkaPartition(t, p) for t, ids in partitions.items() for p in ids]
        committed = {TopicPartition(c.topic, c.partition): c.offset for c in self._group_commits(tps)}
        found = self._ids_of(partitions)
        self.recreated = {t for t, topic_id in found.items() if self._expected_ids.get(t, topic_id) != topic_id}
        # (a topic whose id was not read this time keeps the one saved: a later recreation is still told)
        self.topic_ids = {**{t: i for t, i in self._expected_ids.items() if t in partitions}, **found}
        ranges, starts = {}, {}
        for tp in tps:
            key = TopicPartition(tp.topic, tp.partition)
            ranges[key] = low, high = self._offset_range(key)
            self._end[key] = high
            start = starts[key] = (resume or {}).get(key)
            if start is None and committed.get(key, -1) >= 0:
                start = starts[key] = committed[key]
            if start is not None and start > high:
                self.recreated.add(key.topic)  # offsets past the end: the topic was deleted and created again
        for key, (low, high) in ranges.items():
            start = starts[key]
            if start is not None and key.topic in self.recreated:
                start = low
            if start is None and resume and self._config.topic_pattern:
                start = low  # a topic found after the first run: from its start, where its tables' CREATE is
            if start is None:
                start = low if self._config.start_from == "earliest" else high
            self._next[key] = max(start, low)  # retention may have removed what we would resume from
        for topic in sorted(self.recreated):
            log.warning(
                "kafka topic %s was deleted and created again since the consumer last read it (%s): reading it from "
                "its start; whatever the old topic held that was not read before is lost to this consumer (load its "
                "tables again from a snapshot if that matters: docs/snapshot-and-as-of.md)",
                topic, "another topic id" if topic in self._expected_ids and self._expected_ids[topic] != self.topic_ids.get(topic)
                else "its offsets are past the end",
            )
        return partitions

    def refresh_end_offsets(self) -> dict[TopicPartition, int]:
        """Ask the brokers for every planned partition's end offset now (the Spark engine, continuous mode).
        With `kafka.topic_pattern`, a topic deleted since keeps the end offset noted before (nothing more is
        read from it) until the job's next look at the topics drops it."""
        for tp in self._next:
            try:
                self._end[tp] = self._offset_range(tp)[1]
            except SourceError as err:
                cause = err.__cause__.args[0] if isinstance(err.__cause__, KafkaException) and err.__cause__.args else None
                if not (isinstance(cause, KafkaError) and self._deleted(cause)):
                    raise
                log.info("Kafka: %s is gone (deleted upstream): nothing more is read from it", tp)
        return dict(self._end)

    def end_offsets_now(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's end offset, asked of the brokers now in one request per broker (`apply.ordering.completeness`:
        a look). A partition Kafka no longer has (its topic deleted) is left out."""
        asked = [KafkaPartition(tp.topic, tp.partition, _LATEST) for tp in partitions]
        if not asked:
            return {}
        try:
            answers = self._consumer.offsets_for_times(asked, timeout=_LOOK_TIMEOUT)
        except KafkaException as err:
            # Nothing depends on a look but how soon a silent topic stops holding the others back: the next
            # batch looks again (a broker restarting, a topic deleted since the last look at the topics).
            self._raise_if_refused(err)
            log.debug("Kafka: end offsets not looked up this batch: %s", err)
            return {}
        return {TopicPartition(a.topic, a.partition): a.offset for a in answers if a.error is None and a.offset >= 0}

    def advance(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Note that messages before these offsets were read elsewhere (Spark's Kafka source)."""
        for tp, offset in offsets.items():
            self._next[tp] = max(self._next.get(tp, 0), offset)

    def _consume(self, max_messages: int, timeout: float) -> list:
        """One consume's messages, Kafka's reports among them handled: a partition's end skipped, a transient
        error logged, any other raised (SourceError); a refused login raised; any answer ends a noted outage."""
        messages = self._consumer.consume(num_messages=max_messages, timeout=timeout)
        self._raise_if_refused()
        if not messages:
            return messages
        self._unreachable_since = self._suspected_since = None
        delivered = []
        for message in messages:
            error = message.error()
            if error is None:
                delivered.append(message)
            elif error.code() == KafkaError._PARTITION_EOF:
                continue
            elif self._deleted(error):
                self.topic_gone = True  # (the next look at the topics drops it: the job looks at once)
                continue
            elif error.fatal() or not error.retriable():
                raise SourceError(f"reading {message.topic()}[{message.partition()}] failed: {error}")
            else:
                log.warning("transient Kafka error: %s", error)
        return delivered

    def poll(self, max_messages: int, timeout: float) -> list[RawMessage]:
        out = []
        append = out.append
        last: dict[tuple[str, int], int] = {}
        for message in self._consume(max_messages, timeout):
            topic, partition, offset = message.topic(), message.partition(), message.offset()
            last[topic, partition] = offset
            append(RawMessage(topic, partition, offset, message.key(), message.value()))
        for (topic, partition), offset in last.items():
            self._next[TopicPartition(topic, partition)] = offset + 1
        return out

    def read(self, ranges: Mapping[TopicPartition, tuple[int, int]]) -> list[RawMessage]:
        """The messages of `ranges` (per partition: from, up to), read here (the Spark engine's small batches,
        which `advance` then notes). Nothing past a range's end is kept; a range's start Kafka no longer holds
        (retention) is an error, as for Spark's Kafka source (`failOnDataLoss`): librdkafka would silently
        start at the earliest offset instead. An outage is waited out as a poll's is."""
        wanted = {tp: r for tp, r in ranges.items() if r[1] > r[0]}
        if not wanted:
            return []
        self._consumer.assign([KafkaPartition(tp.topic, tp.partition, start) for tp, (start, _) in wanted.items()])
        reached = {tp: start for tp, (start, _) in wanted.items()}
        first: dict[TopicPartition, int] = {}
        out: list[RawMessage] = []
        progressed = time.monotonic()
        try:
            while any(reached[tp] < end for tp, (_, end) in wanted.items()):
                if time.monotonic() - progressed > _READ_STALL_SECONDS:
                    short = ", ".join(f"{tp.topic} partition {tp.partition} at {reached[tp]} of {end}"
                                      for tp, (_, end) in wanted.items() if reached[tp] < end)
                    raise SourceError(
                        f"reading {short}: no message for {_READ_STALL_SECONDS:g}s though the broker answers (the "
                        "partition lost messages it had reported, e.g. an unclean leader election); the job stops "
                        "with nothing of the batch applied: check the topic, then run again"
                    )
                messages = self._consume(10_000, _READ_POLL_SECONDS)
                for message in messages:
                    tp, offset = TopicPartition(message.topic(), message.partition()), message.offset()
                    start, end = wanted.get(tp, (0, 0))
                    if not start <= offset < end or offset < reached[tp]:
                        continue  # fetched past the range (or again): the next batch reads it
                    first.setdefault(tp, offset)
                    reached[tp] = offset + 1
                    progressed = time.monotonic()
                    out.append(RawMessage(tp.topic, tp.partition, offset, message.key(), message.value()))
                if not messages:
                    if self._note_steps_over(wanted, reached) or self.waiting_for_broker():
                        progressed = time.monotonic()  # (an outage has its own limit, which raises)
        finally:
            self._consumer.unassign()  # no fetching ahead between batches
        for tp, (start, end) in wanted.items():
            # (no message at all: the consumer may have jumped to the end, auto.offset.reset = latest)
            if first.get(tp, end) > start and self._offset_range(tp)[0] > start:
                raise SourceError(
                    f"{tp.topic} partition {tp.partition}: offsets from {start} were removed from Kafka (retention) before they were read; "
                    "their changes are lost to this consumer: load the tables again from a snapshot (docs/snapshot-and-as-of.md)"
                )
        return out

    def _note_steps_over(self, wanted: Mapping[TopicPartition, tuple[int, int]], reached: dict[TopicPartition, int]) -> bool:
        """Offsets no message is delivered for (transaction markers, compacted away): position() steps over them.
        Whether that moved any partition on."""
        moved = False
        for p in self._consumer.position([KafkaPartition(tp.topic, tp.partition) for tp in wanted]):
            tp = TopicPartition(p.topic, p.partition)
            if p.offset >= 0 and min(p.offset, wanted[tp][1]) > reached[tp]:
                reached[tp] = min(p.offset, wanted[tp][1])
                moved = True
        return moved

    def next_offsets(self) -> dict[TopicPartition, int]:
        """Per partition, the offset after the last message read."""
        return dict(self._next)

    def end_offsets(self) -> dict[TopicPartition, int]:
        """Per partition, its end offset noted at `open` (the offset the next message written gets)."""
        return dict(self._end)

    def latest_end_offsets(self) -> dict[TopicPartition, int]:
        """Per assigned partition, the newest end offset known without asking the broker.

        librdkafka keeps the end offset each fetch response brought; before any
        fetch of a partition, the one noted at `open` stands.
        """
        ends = dict(self._end)
        for tp, noted in ends.items():
            try:
                _, high = self._consumer.get_watermark_offsets(KafkaPartition(tp.topic, tp.partition), cached=True)
            except KafkaException:
                continue  # nothing cached for it yet
            if high is not None and high > noted:
                ends[tp] = high
        return ends

    def unread(self) -> set[TopicPartition]:
        """Partitions with messages not read yet, as far as known without asking the broker (`latest_end_offsets`)."""
        ends = self.latest_end_offsets()
        return {tp for tp, offset in self._next.items() if offset < ends.get(tp, 0)}

    def caught_up(self) -> bool:
        """True once every partition was read up to its end offset noted at `open`."""
        positions = self._consumer.position([KafkaPartition(tp.topic, tp.partition) for tp in self._next])
        for tp in positions:
            key = TopicPartition(tp.topic, tp.partition)
            # position() also steps over transaction markers, which are never delivered.
            reached = max(self._next[key], tp.offset if tp.offset >= 0 else -1)
            if reached < self._end[key]:
                return False
        return True

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        if offsets:
            # (confluent-kafka takes no None for metadata: a source without a tag commits none.)
            tagged = {"metadata": self._commit_tag} if self._commit_tag is not None else {}
            partitions = [KafkaPartition(tp.topic, tp.partition, o, **tagged) for tp, o in offsets.items()]
            # The checkpoint is already saved (and authoritative): a refused commit is retried, then reported.
            self._retrying("commit offsets", lambda: self._commit_once(partitions))

    def _commit_once(self, partitions: list[KafkaPartition]) -> None:
        """Commit `partitions`, waiting at most _COMMIT_ANSWER_WAIT for the answer; KafkaException if it fails.

        librdkafka's synchronous commit can wait forever when the broker goes away while the commit is
        under way: the job would neither apply nor stop. So the commit is asynchronous, on a consumer of
        its own that is never assigned anything: polling it serves the commit's answer and reads no
        message. No answer in time is reported as librdkafka's _TIMED_OUT, which `_retrying` treats as
        any other retriable failure (a new commit, or KafkaUnreachableError once no broker answered for
        too long). An answer that comes late can only repeat offsets already saved in the checkpoint,
        which stays authoritative.
        """
        if self._committer is None:
            # Its connection errors are the reading consumer's too, which logs them; one left behind by a
            # commit lost with its broker (see `close`) would repeat them until the process ends.
            self._committer = Consumer({**self._settings, "on_commit": self._on_commit, "log_level": _QUIET})
        wanted = sorted((p.topic, p.partition, p.offset) for p in partitions)
        self._commit_answers.clear()
        self._committer.commit(offsets=partitions, asynchronous=True)
        deadline = time.monotonic() + _COMMIT_ANSWER_WAIT
        while True:
            for error, answered in self._commit_answers:
                if sorted((p.topic, p.partition, p.offset) for p in answered) != wanted:
                    continue  # the late answer to an earlier commit
                failed = [e for e in (error, *(p.error for p in answered)) if e is not None]
                if failed and not all(self._deleted(e) for e in failed):
                    raise KafkaException(failed[0])
                if failed:  # (the checkpoint holds them; the next look at the topics drops the partitions)
                    log.info("Kafka: offsets of a topic deleted upstream not committed: %s", failed[0])
                return
            if time.monotonic() >= deadline:
                raise KafkaException(KafkaError(
                    KafkaError._TIMED_OUT, f"no answer to the offset commit within {_COMMIT_ANSWER_WAIT:g}s"))
            # (A consumer's poll waits out its timeout when no message comes, answer served or not.)
            self._committer.poll(_COMMIT_POLL_SECONDS)

    def _deleted(self, error: KafkaError) -> bool:
        """Whether `error` says a topic is gone, and the job reads topics by pattern (where that is no failure)."""
        return bool(self._config.topic_pattern) and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    def _on_commit(self, error: KafkaError | None, partitions: list[KafkaPartition]) -> None:
        # Served inside the committer's poll, on the calling thread.
        self._commit_answers.append((error, partitions))

    def close(self) -> None:
        self._consumer.close()
        if self._committer is not None:
            # A commit lost with its broker keeps librdkafka's close waiting for it (for as long as the
            # stuck commit): the close is given a moment, then left to end with the process.
            closing = threading.Thread(target=self._committer.close, name="kafka-committer-close", daemon=True)
            closing.start()
            closing.join(_CLOSE_WAIT)
            if closing.is_alive():
                log.warning("Kafka: the offset committer did not close within %gs (a commit lost with its broker); "
                            "leaving it to end with the process", _CLOSE_WAIT)
