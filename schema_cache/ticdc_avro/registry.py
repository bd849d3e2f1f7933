"""Schemas by id from a Confluent Schema Registry, through confluent-kafka's client.

Cached by id (a registered schema never changes). Transient failures (server
errors, timeouts, refused connections) are retried with jittered backoff
until `max_wait_seconds`, then the job stops with RegistryUnavailableError:
nothing is skipped, so nothing is lost. An id the registry does not know is
the message's fault: SchemaIdNotFoundError, which the decoder reports as a
DecodeError naming the message. A 401 (credentials missing or wrong) stops
the job at once with RegistryAuthenticationError; other refusals (403, 4xx)
with RegistryError.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from urllib.parse import urlparse

from confluent_kafka.schema_registry import SchemaRegistryClient, SchemaRegistryError

from ticdc_delta.exceptions import (
    ConfigError,
    RegistryAuthenticationError,
    RegistryError,
    RegistryUnavailableError,
    SchemaIdNotFoundError,
    SchemaNotShipped,
)
from ticdc_delta.schema_cache.ticdc_avro.options import RegistryOptions

log = logging.getLogger(__name__)

_RETRIABLE_STATUS = {408, 429, 500, 502, 503, 504}


class SchemaRegistry:
    def __init__(
        self,
        options: RegistryOptions,
        *,
        client: SchemaRegistryClient | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not options.url:
            raise ConfigError("registry.url: required for protocol 'avro'")
        self._options = options
        self._client = client or SchemaRegistryClient(options.client_config())
        self._sleep = sleep
        self._clock = clock
        self._schemas: dict[int, dict] = {}
        self._lock = threading.Lock()

    def schema(self, schema_id: int) -> dict:
        """The Avro schema registered under `schema_id`, as parsed JSON."""
        with self._lock:
            cached = self._schemas.get(schema_id)
            if cached is None:
                cached = self._schemas[schema_id] = json.loads(self._fetch(schema_id))
            return cached

    def fetched(self) -> dict[int, dict]:
        """Every schema fetched so far, by id."""
        with self._lock:
            return dict(self._schemas)

    def check_credentials(self) -> None:
        """RegistryAuthenticationError if the registry answers 401 to a request made with the job's credentials.

        Any other outcome passes (an unreachable registry is waited for when a schema is needed).
        """
        try:
            self._client.get_subjects()
        except SchemaRegistryError as err:
            if err.http_status_code == 401:
                raise self._refused("listing its subjects", err) from err
            log.debug("schema registry at %s: %s (checked again when a schema is needed)", self._where(), err)
        except Exception as err:  # noqa: BLE001 - the client's transport errors (refused, timeout, TLS)
            log.debug("schema registry at %s: %s (checked again when a schema is needed)", self._where(), err)

    def _refused(self, doing: str, err: SchemaRegistryError) -> RegistryAuthenticationError:
        return RegistryAuthenticationError(
            f"the schema registry at {self._where()} refused the job's credentials {doing} (HTTP 401, authentication "
            f"failed: check registry.basic_auth_user_info or the user:password in registry.url): {err}"
        )

    def _fetch(self, schema_id: int) -> str:
        deadline = self._clock() + self._options.max_wait_seconds
        attempt = 0
        while True:
            try:
                return self._client.get_schema(schema_id).schema_str
            except SchemaRegistryError as err:
                if err.http_status_code == 404:
                    raise SchemaIdNotFoundError(f"schema id {schema_id} is not in the registry: {err}") from err
                if err.http_status_code == 401:
                    raise self._refused(f"fetching schema id {schema_id}", err) from err
                if err.http_status_code not in _RETRIABLE_STATUS:
                    raise RegistryError(f"the schema registry refused schema id {schema_id}: {err}") from err
                failure = err
            except Exception as err:  # noqa: BLE001 - the client's transport errors (refused, timeout, TLS)
                failure = err
            attempt += 1
            if self._clock() >= deadline:
                raise RegistryUnavailableError(
                    f"schema registry unavailable for {self._options.max_wait_seconds:g}s "
                    f"fetching schema id {schema_id}: {failure}"
                ) from failure
            # Full jitter: spreads retries of many consumers; capped at 30 s.
            delay = min(30.0, 0.5 * 2 ** min(attempt, 6)) * random.random()
            delay = min(delay, max(0.0, deadline - self._clock()))
            log.warning("schema registry: %s; retrying schema id %d in %.1fs", failure, schema_id, delay)
            self._sleep(delay)

    def _where(self) -> str:
        """The registry's URL(s) without the user:password each may carry (a comma-separated list is confluent-kafka's failover form)."""
        parts = (urlparse(part.strip()) for part in self._options.url.split(","))
        return ",".join(url._replace(netloc=url.netloc.rsplit("@", 1)[-1]).geturl() for url in parts)


class ShippedSchemas:
    """The schemas the driver fetched, on an executor of the Spark engine: no registry is called there.

    An id the driver has not fetched raises SchemaNotShipped: the driver decodes that message itself.
    """

    def __init__(self, schemas: dict[int, dict]) -> None:
        self._schemas = schemas

    @classmethod
    def from_bytes(cls, data: bytes) -> ShippedSchemas:
        return cls({int(k): v for k, v in json.loads(data or b"{}").items()})

    @staticmethod
    def to_bytes(schemas: dict[int, dict]) -> bytes:
        return json.dumps({str(k): v for k, v in schemas.items()}).encode()

    def schema(self, schema_id: int) -> dict:
        try:
            return self._schemas[schema_id]
        except KeyError:
            raise SchemaNotShipped(f"schema id {schema_id} was not fetched by the driver") from None
