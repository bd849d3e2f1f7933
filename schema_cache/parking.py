"""Row-change messages waiting for a table schema the consumer has not seen yet.

A consumer that starts mid-stream can read DML before the BOOTSTRAP or DDL
that describes its schema version. Such messages are parked here, never
dropped, and released in arrival order when the schema arrives. While parked
they hold back their table (nothing newer of it may be applied) and their
partition's committable offset.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from ticdc_delta.exceptions import DecodeError, SchemaNotFoundError
from ticdc_delta.schema_cache.events import Event, Position, RawMessage, TableName


@dataclass(frozen=True, slots=True)
class ParkedMessage:
    message: RawMessage
    table: TableName
    commit_ts: int
    parked_at: float

    @property
    def position(self) -> Position:
        return self.message.position


class ParkingLot:
    """Parked messages by what they wait for; `why` says, for a timed-out one, what never came."""

    def __init__(
        self,
        max_wait_seconds: float,
        why: Callable[[ParkedMessage], str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_wait_seconds = max_wait_seconds
        self._why = why
        self._clock = clock
        self._by_key: dict[Hashable, list[ParkedMessage]] = defaultdict(list)
        self._late_errors: list[DecodeError] = []

    def park(self, key: Hashable, message: RawMessage, table: TableName, commit_ts: int) -> None:
        self._by_key[key].append(ParkedMessage(message, table, commit_ts, self._clock()))

    def release(self, key: Hashable) -> list[ParkedMessage]:
        """Remove and return the messages waiting for `key`, oldest first."""
        return self._by_key.pop(key, [])

    def decode_released(self, key: Hashable, decode: Callable[[RawMessage], list[Event]]) -> list[Event]:
        """Decode the messages that waited for `key`, in arrival order.

        A failure belongs to the parked message, not to the one that released
        it, so it is kept for `take_errors` instead of raised.
        """
        events: list[Event] = []
        for parked in self.release(key):
            try:
                events.extend(decode(parked.message))
            except DecodeError as err:
                self._late_errors.append(err)
        return events

    def take_errors(self) -> list[DecodeError]:
        """Errors of parked messages: released ones that failed, and those that waited too long (removed).

        These belong to messages decoded earlier, so they cannot be raised from
        the `decode` call that happened to trigger them.
        """
        late, self._late_errors = self._late_errors, []
        expired = [SchemaNotFoundError.about(p.message, self._why(p)) for p in self.expire(self._max_wait_seconds)]
        return late + expired

    def expire(self, max_wait_seconds: float) -> list[ParkedMessage]:
        """Remove and return messages parked longer than `max_wait_seconds`."""
        deadline = self._clock() - max_wait_seconds
        expired = []
        for key in list(self._by_key):
            waiting = self._by_key[key]
            if waiting[0].parked_at <= deadline:
                expired.extend(waiting)
                del self._by_key[key]
        return sorted(expired, key=lambda p: p.parked_at)

    def all(self) -> list[ParkedMessage]:
        return [p for waiting in self._by_key.values() for p in waiting]

    def __len__(self) -> int:
        return sum(len(waiting) for waiting in self._by_key.values())
