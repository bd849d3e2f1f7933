"""Every error this project raises on purpose, in one hierarchy.

At the package's root, beside no layer: decoding (`schema_cache`) raises the bad-input and
configuration errors, applying (`apply`) the lease and apply errors, the jobs (`jobs`) the rest, and a
caller catches any of them as `MaterializerError` without importing a layer it does not use.

One raising style for bad input: code that picks a message apart raises
`InvalidMessage` (it does not know where the message came from); the decoder
boundary (`schema_cache.decoder.decoding`) turns it, and anything else
malformed input makes Python raise, into a `DecodeError` naming the topic,
partition and offset and keeping the raw bytes.
"""

from __future__ import annotations

from ticdc_delta.schema_cache.events import Position, RawMessage


class MaterializerError(Exception):
    """Root of every error this project raises on purpose."""


class ConfigError(MaterializerError):
    """A configuration value is missing, unknown or out of range."""


# --- bad input -------------------------------------------------------------------------


class InvalidMessage(MaterializerError):
    """A message, or a value in it, is not what its protocol allows.

    Raised without a position wherever a message is picked apart; the decoder
    boundary wraps it in a DecodeError that names the message.
    """


class ValueConversionError(InvalidMessage):
    """An upstream value does not fit its column type."""


class SchemaIdNotFoundError(InvalidMessage):
    """The schema registry does not know the schema id a message names."""


class DecodeError(MaterializerError):
    """A message could not be turned into events: the typed error for bad input.

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
    """A row change waited longer than allowed for its table's structure."""


# --- services the job depends on ----------------------------------------------------------


class SourceError(MaterializerError):
    """Kafka could not be read."""


class KafkaUnreachableError(SourceError):
    """No Kafka broker answered for longer than `kafka.unreachable_timeout_seconds`."""


class RegistryError(MaterializerError):
    """The schema registry refused a request (authentication, permissions, bad request)."""


class RegistryUnavailableError(RegistryError):
    """The schema registry could not be reached, or kept failing, for longer than allowed."""


class SchemaNotShipped(MaterializerError):
    """An executor's decoder met a schema id the driver has not fetched for it: the driver decodes that message.

    Not bad input (the decoder boundary lets it through): the driver's own decoder fetches the schema.
    """


class AuthenticationError(MaterializerError):
    """Kafka or the schema registry refused the job's credentials (exit status 7): retrying cannot help.

    The message names the service and the mechanism, never a secret.
    """


class KafkaAuthenticationError(SourceError, AuthenticationError):
    """A broker refused the job's SASL login (librdkafka's _AUTHENTICATION)."""


class RegistryAuthenticationError(RegistryError, AuthenticationError):
    """The schema registry answered 401: missing or wrong basic-auth credentials."""


# --- applying ------------------------------------------------------------------------------


class SparkStartError(MaterializerError):
    """Spark could not be started here: no Java, a jar that cannot be fetched, a JVM that exits."""


class ApplyError(MaterializerError):
    """Events could not be applied to a Delta table."""


class ConcurrentCommitError(ApplyError):
    """Another writer kept committing to a table between our read and our commit, past the retries."""


# --- one writer per consumer -------------------------------------------------------------


class LeaseError(MaterializerError):
    """Another job runs (or took over) this consumer: this one must not write (exit status 5)."""


class LeaseHeldError(LeaseError):
    """At start: another live job holds the consumer's lease."""


class LeaseLostError(LeaseError):
    """While running: the lease was taken over by another job (this one paused past its expiry)."""
