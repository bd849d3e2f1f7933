"""Checks every decoder applies to what it decodes, whatever the protocol."""

from __future__ import annotations

from schema_cache.events import RawMessage, TableSchema
from schema_cache.exceptions import DecodeError


def require_handle_key(schema: TableSchema, message: RawMessage) -> None:
    """Reject a row change of a table without a handle key.

    MERGE finds rows by key; without a primary key or NOT NULL unique key an
    UPDATE or DELETE cannot be applied exactly, so such rows are bad input
    (fail or dead-letter by policy), never guessed at.
    """
    if not schema.key:
        raise DecodeError(
            message.position,
            f"table {schema.name} has no primary key and no NOT NULL unique key; "
            "its rows cannot be merged by key",
            key=message.key,
            value=message.value,
        )
