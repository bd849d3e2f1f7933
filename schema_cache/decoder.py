"""The one decoder interface, and the boundary where bad input becomes a DecodeError.

Which decoder a protocol name selects is decided in `schema_cache.protocols`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Protocol

from ticdc_delta.exceptions import DecodeError, InvalidMessage
from ticdc_delta.schema_cache.events import Event, Ordering, RawMessage, TableSchema
from ticdc_delta.schema_cache.parking import ParkedMessage, ParkingLot


class Decoder(Protocol):
    """Turns raw Kafka messages of one protocol into events.

    Implementations keep the protocol's schema cache. `decode` raises
    DecodeError for a message it cannot decode; it returns no events for a
    message it parks until its schema is known, and may return events of
    earlier parked messages when their schema arrives.
    """

    ordering: Ordering
    # Whether an INSERT is always of a key upstream lacked just before it (not where an update may come as an
    # insert: Open Protocol without old values). The applier then appends a run of new keys instead of merging it.
    inserts_are_new: bool

    def decode(self, message: RawMessage) -> list[Event]: ...

    def parked(self) -> list[ParkedMessage]:
        """Messages held back waiting for their schema."""
        ...

    def take_errors(self) -> list[DecodeError]:
        """Errors of earlier parked messages (released and failed, or timed out)."""
        ...

    def state(self) -> bytes:
        """The schema cache, serialized, to be saved with a checkpoint."""
        ...

    def restore(self, state: bytes) -> None: ...

    def forget_before(self, commit_ts: int) -> None:
        """Every partition is past `commit_ts`, a restart from the checkpoint being saved included: the schema
        cache may drop what only rows at or before it could need."""
        ...


class SelfDescribing:
    """For decoders whose messages name or carry their structure: nothing is ever parked, nothing to save unless overridden.

    Subclasses implement `_decode`; `decode` runs it at the bad-input boundary.
    """


    def decode(self, message: RawMessage) -> list[Event]:
        return decoding(message, self._decode)

    def _decode(self, message: RawMessage) -> list[Event]:
        raise NotImplementedError

    def parked(self) -> list[ParkedMessage]:
        return []

    def take_errors(self) -> list[DecodeError]:
        return []

    def state(self) -> bytes:
        return b"{}"

    def restore(self, state: bytes) -> None:
        pass

    def forget_before(self, commit_ts: int) -> None:
        pass


class Parking:
    """For decoders whose row messages may come before the structure they need (Simple, Debezium without
    schemas): such a message waits in `_parking` and is decoded when its structure arrives.

    Subclasses set `_parking` and implement `_decode`, `state`, `restore` and `forget_before`.
    """

    _parking: ParkingLot

    def decode(self, message: RawMessage) -> list[Event]:
        return decoding(message, self._decode)

    def _decode(self, message: RawMessage) -> list[Event]:
        raise NotImplementedError

    def parked(self) -> list[ParkedMessage]:
        return self._parking.all()

    def take_errors(self) -> list[DecodeError]:
        return self._parking.take_errors()


# What malformed input makes Python raise while a message is picked apart.
_MALFORMED = (
    InvalidMessage,
    ValueError,
    KeyError,
    TypeError,
    IndexError,
    AttributeError,
    EOFError,
    RecursionError,
    OverflowError,
    ArithmeticError,
    struct.error,
)


def decoding(message: RawMessage, decode: Callable[[RawMessage], list[Event]]) -> list[Event]:
    """Run `decode`; whatever bad input raises becomes a DecodeError naming the message."""
    try:
        return decode(message)
    except DecodeError:
        raise
    except InvalidMessage as err:
        raise DecodeError.about(message, str(err)) from err
    except _MALFORMED as err:
        raise DecodeError.about(message, f"{type(err).__name__}: {err}") from err


# TiDB's commitTs is a 64-bit TSO (physical milliseconds << 18) that stays below 2^63 for millennia;
# Delta records it as a signed 64-bit number (txnVersion, the product's BIGINT columns).
MAX_COMMIT_TS = (1 << 63) - 1


def read_commit_ts(value: object) -> int:
    """A message's commitTs (or watermark), refused unless Delta can record it.

    A negative or oversized one would pass decoding and then fail the batch's commit, stopping the
    job instead of being dead-lettered as the bad input it is; a fraction would be cut silently.
    """
    commit_ts = int(value)
    if 0 <= commit_ts <= MAX_COMMIT_TS and (value.__class__ is not float or commit_ts == value):
        return commit_ts
    raise InvalidMessage(f"commitTs {value!r} is not a TiDB timestamp (0 to 2^63-1)")


def require_handle_key(schema: TableSchema) -> None:
    """Reject a row change of a table without a handle key.

    MERGE finds rows by key; without a primary key or NOT NULL unique key an
    UPDATE or DELETE cannot be applied exactly, so such rows are bad input
    (fail or dead-letter by policy), never guessed at.
    """
    if not schema.key:
        raise InvalidMessage(
            f"table {schema.name} has no primary key and no NOT NULL unique key; its rows cannot be merged by key"
        )
