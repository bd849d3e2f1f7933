"""The project's exception hierarchy.

`schema_cache` is the bottom layer every other package depends on, so the root
exception lives here; `apply` and `jobs` raise subclasses of it.
"""

from __future__ import annotations

from schema_cache.events import Position, RawMessage


class MaterializerError(Exception):
    """Root of every error this project raises on purpose."""


class ConfigError(MaterializerError):
    """A configuration value is missing, unknown or out of range."""


class DecodeError(MaterializerError):
    """A message could not be turned into events.

    Carries the message's position and raw bytes so that a dead-letter record
    can be written and the message found again.
    """

    def __init__(
        self,
        position: Position,
        reason: str,
        *,
        key: bytes | None = None,
        value: bytes | None = None,
    ) -> None:
        self.position = position
        self.reason = reason
        self.key = key
        self.value = value
        super().__init__(
            f"cannot decode {position.topic} partition {position.partition} "
            f"offset {position.offset}: {reason}"
        )

    @classmethod
    def about(cls, message: RawMessage, reason: str) -> DecodeError:
        """The error for `message`, keeping its raw bytes for a dead letter."""
        return cls(message.position, reason, key=message.key, value=message.value)


class SchemaNotFoundError(DecodeError):
    """A row change refers to a table schema version that never arrived."""


class ValueConversionError(MaterializerError):
    """An upstream value does not fit its column type.

    Raised without a position by the type mapping; the decoder wraps it in a
    DecodeError that names the message.
    """


class ApplyError(MaterializerError):
    """Events could not be applied to a Delta table."""
