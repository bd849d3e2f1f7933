"""Checks every decoder applies to what it decodes, whatever the protocol."""

from __future__ import annotations

import struct
from typing import Callable

from schema_cache.events import Event, RawMessage, TableSchema
from schema_cache.exceptions import DecodeError, ValueConversionError

# What malformed input raises while being picked apart.
_MALFORMED = (ValueError, KeyError, TypeError, IndexError, EOFError, struct.error, ValueConversionError)


def decoding(message: RawMessage, decode: Callable[[RawMessage], list[Event]]) -> list[Event]:
    """Run `decode`, turning whatever malformed input raises into a DecodeError naming the message."""
    try:
        return decode(message)
    except DecodeError:
        raise
    except _MALFORMED as err:
        raise DecodeError.about(message, f"{type(err).__name__}: {err}") from err


def require_handle_key(schema: TableSchema, message: RawMessage) -> None:
    """Reject a row change of a table without a handle key.

    MERGE finds rows by key; without a primary key or NOT NULL unique key an
    UPDATE or DELETE cannot be applied exactly, so such rows are bad input
    (fail or dead-letter by policy), never guessed at.
    """
    if not schema.key:
        raise DecodeError.about(
            message,
            f"table {schema.name} has no primary key and no NOT NULL unique key; its rows cannot be merged by key",
        )
