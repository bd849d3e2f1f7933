"""Refused credentials stop the job at once with a typed error naming the service, never the secret.

The registry half runs the real confluent-kafka client against the registry emulator over https
(a certificate from a throwaway CA) with basic auth. The Kafka half feeds librdkafka's own error
report (what a broker's SASL refusal produces, see tests/e2e/test_security.py) to the consumer's
error callback: no broker runs in unit tests.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from testbed.encoders.ticdc_avro import TiCDCAvroWriter
from testbed.tables import column, table_schema
from testbed.tls import LocalCa
from tests.registry_server import FakeSchemaRegistry
from ticdc_delta.exceptions import (
    AuthenticationError,
    KafkaAuthenticationError,
    KafkaUnreachableError,
    RegistryAuthenticationError,
    RegistryUnavailableError,
)
from ticdc_delta.jobs.config import KafkaConfig
from ticdc_delta.jobs.kafka_source import KafkaSource
from ticdc_delta.schema_cache.events import RawMessage
from ticdc_delta.schema_cache.protocols import check_credentials, create_decoder
from ticdc_delta.schema_cache.ticdc_avro.options import AvroOptions, RegistryOptions
from ticdc_delta.schema_cache.types import DEFAULT_OPTIONS

SECRET = "reg-Secret-7"
TABLE = table_schema("shop", "items", table_id=1, version=1, columns=[column("id", "int", nullable=False)],
                     primary_key=["id"])
TOPIC = "tidb_shop_items"


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return LocalCa(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def https_registry(ca):
    registry = FakeSchemaRegistry(user_info=f"cdc:{SECRET}", tls=ca.issue("registry"))
    registry.start()
    yield registry
    registry.stop()


def decoder(registry, user_info: str, **more):
    options = RegistryOptions(url=registry.url, basic_auth_user_info=user_info, **more)
    return create_decoder(AvroOptions(registry=options), DEFAULT_OPTIONS)


def encoded_row(registry, ca) -> RawMessage:
    writer = TiCDCAvroWriter(
        registry.url, registry_config={"basic.auth.user.info": f"cdc:{SECRET}", "ssl.ca.location": str(ca.certificate)}
    )
    key, value = writer.row(TOPIC, TABLE, "INSERT", 1, None, {"id": 7})
    return RawMessage(TOPIC, 0, 0, key, value)


def test_registry_over_https_with_basic_auth(https_registry, ca):
    assert https_registry.url.startswith("https://")
    message = encoded_row(https_registry, ca)
    events = decoder(https_registry, f"cdc:{SECRET}", ssl_ca_location=str(ca.certificate)).decode(message)
    assert events[-1].after == (7,)


def test_registry_refusing_the_credentials_stops_at_once(https_registry, ca):
    message = encoded_row(https_registry, ca)
    started, asked = time.monotonic(), len(https_registry.requests)
    with pytest.raises(RegistryAuthenticationError) as refused:
        decoder(https_registry, "cdc:wrong-Password", ssl_ca_location=str(ca.certificate)).decode(message)
    # One request (the client's own retry aside), no backoff loop up to max_wait_seconds.
    assert time.monotonic() - started < 5 and len(https_registry.requests) - asked <= 2
    text = str(refused.value)
    assert isinstance(refused.value, AuthenticationError)
    assert "401" in text and "authentication failed" in text and https_registry.url in text
    assert "wrong-Password" not in text and SECRET not in text


def test_wrong_registry_credentials_are_found_before_any_message(https_registry, ca):
    # Setup: the check the job makes before it starts Spark (jobs/preflight.py), with a wrong password,
    # then the right one, then a registry nothing listens on.
    # Expect: 401 -> RegistryAuthenticationError naming the registry, not the password; the right password
    # and an unreachable registry pass (the run waits for a registry that does not answer).
    wrong = AvroOptions(registry=RegistryOptions(
        url=https_registry.url, basic_auth_user_info="cdc:wrong-Password", ssl_ca_location=str(ca.certificate)))
    with pytest.raises(RegistryAuthenticationError, match="listing its subjects.*authentication failed") as refused:
        check_credentials(wrong)
    assert "wrong-Password" not in str(refused.value) and https_registry.url in str(refused.value)
    check_credentials(AvroOptions(registry=RegistryOptions(
        url=https_registry.url, basic_auth_user_info=f"cdc:{SECRET}", ssl_ca_location=str(ca.certificate))))
    check_credentials(AvroOptions(registry=RegistryOptions(url="http://127.0.0.1:9")))


def test_registry_url_credentials_are_not_named(https_registry, ca):
    message = encoded_row(https_registry, ca)
    url = https_registry.url.replace("https://", "https://cdc:url-Password@")
    options = RegistryOptions(url=url, ssl_ca_location=str(ca.certificate))
    with pytest.raises(RegistryAuthenticationError) as refused:
        create_decoder(AvroOptions(registry=options), DEFAULT_OPTIONS).decode(message)
    assert "url-Password" not in str(refused.value) and https_registry.url in str(refused.value)


def test_registry_url_credentials_are_not_named_in_a_failover_list(https_registry, ca):
    # Setup: registry.url as confluent-kafka's comma-separated failover list, each URL with credentials.
    # Expect: the refusal names both URLs, neither password.
    message = encoded_row(https_registry, ca)
    with_password = https_registry.url.replace("https://", "https://cdc:first-Password@")
    url = f"{with_password},{https_registry.url.replace('https://', 'https://cdc:second-Password@')}"
    options = RegistryOptions(url=url, ssl_ca_location=str(ca.certificate))
    with pytest.raises(RegistryAuthenticationError) as refused:
        create_decoder(AvroOptions(registry=options), DEFAULT_OPTIONS).decode(message)
    text = str(refused.value)
    assert "first-Password" not in text and "second-Password" not in text
    assert f"{https_registry.url},{https_registry.url}" in text


def test_registry_certificate_not_trusted_is_not_served(https_registry, ca):
    # Without the CA the client refuses the server's certificate: no schema is read (the job keeps retrying,
    # as for an unreachable registry, then stops).
    message = encoded_row(https_registry, ca)
    with pytest.raises(RegistryUnavailableError, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        decoder(https_registry, f"cdc:{SECRET}", max_wait_seconds=1).decode(message)


def unused_kafka() -> KafkaSource:
    # A loopback port nothing listens on: the consumer exists, no broker answers.
    return KafkaSource(KafkaConfig(bootstrap_servers="127.0.0.1:9", topics=("t",), unreachable_timeout_seconds=300))


REFUSAL = ("sasl_ssl://127.0.0.1:9/bootstrap: SASL authentication error: Authentication failed during "
           "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512")


def test_a_refused_sasl_login_is_not_an_outage():
    source = unused_kafka()
    try:
        source._on_error(KafkaError(KafkaError._AUTHENTICATION, REFUSAL))
        source._on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
        with pytest.raises(KafkaAuthenticationError, match="refused the job's credentials.*SCRAM-SHA-512.*authentication failed"):
            source.waiting_for_broker()
        with pytest.raises(KafkaAuthenticationError):
            source.poll(10, 0.1)
    finally:
        source.close()


def test_an_unreachable_broker_is_still_waited_for():
    source = unused_kafka()
    try:
        source._on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
        assert source.waiting_for_broker()  # within the 300 s limit: wait, do not fail
    finally:
        source.close()


def test_a_refusal_carried_by_a_failed_call_is_one_too():
    # Setup: no error_cb report; a call (a commit) fails with librdkafka's _AUTHENTICATION error itself.
    # Expect: KafkaAuthenticationError at once, not a SourceError after the retries.
    source = unused_kafka()
    try:

        def refused():
            raise KafkaException(KafkaError(KafkaError._AUTHENTICATION, REFUSAL))

        with pytest.raises(KafkaAuthenticationError, match="authentication failed"):
            source._retrying("commit offsets", refused)
    finally:
        source.close()


def test_a_commit_that_waited_for_a_coordinator_counts_its_wait_as_outage():
    # Setup: a commit that fails with librdkafka's "waiting for coordinator" after blocking longer than
    # kafka.unreachable_timeout_seconds (it waits up to session.timeout.ms), no broker answering.
    # Expect: KafkaUnreachableError after that one attempt: the outage began when the commit did.
    source = KafkaSource(KafkaConfig(bootstrap_servers="127.0.0.1:9", topics=("t",), unreachable_timeout_seconds=1))
    attempts = []
    try:

        def blocked_commit():
            attempts.append(time.monotonic())
            time.sleep(1.2)
            raise KafkaException(KafkaError(KafkaError._WAIT_COORD, "Commit failed: Local: Waiting for coordinator"))

        with pytest.raises(KafkaUnreachableError, match="kafka.unreachable_timeout_seconds = 1"):
            source._retrying("commit offsets", blocked_commit)
        assert len(attempts) == 1
    finally:
        source.close()
