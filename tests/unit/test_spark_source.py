"""The Spark engine's Kafka settings and batch planning (jobs/spark_engine/kafka_frame.py, jobs/spark_engine/intake.py), without Spark."""

from __future__ import annotations

import pytest

from ticdc_delta.exceptions import ConfigError
from ticdc_delta.jobs import config as config_module
from ticdc_delta.jobs.spark_engine.intake import _Ranges, plan_ranges
from ticdc_delta.jobs.spark_engine.kafka_frame import java_properties
from ticdc_delta.schema_cache.events import TopicPartition


def _kafka(properties=None, java=None):
    values = {"kafka": {"bootstrap_servers": "b:9092", "topics": ["t"], "group_id": "g",
                        "properties": properties or {}, "java_properties": java or {}},
              "target": {"path": "/tmp/x"}}
    return config_module.from_mapping(values).kafka


def test_sasl_scram_over_tls_becomes_the_java_clients_settings():
    # Setup: librdkafka's SASL_SSL/SCRAM settings with a CA file, a password with a quote and a backslash.
    # Expect: the Java client's login module with both escaped, the CA as a PEM trust store.
    props = java_properties(_kafka({
        "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "cdc",
        "sasl.password": 'p"w\\d', "ssl.ca.location": "/etc/ca.pem",
    }))
    assert props["security.protocol"] == "SASL_SSL"
    assert props["sasl.mechanism"] == "SCRAM-SHA-512"
    assert props["sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="cdc" password="p\\"w\\\\d";'
    )
    assert props["ssl.truststore.type"] == "PEM" and props["ssl.truststore.location"] == "/etc/ca.pem"


def test_java_properties_override_and_librdkafka_tuning_is_dropped(caplog):
    # Setup: librdkafka-only tuning and an untranslatable setting; a Java property set explicitly.
    # Expect: tuning dropped silently, the other named in a warning, the Java setting as given.
    props = java_properties(_kafka({"session.timeout.ms": "6000", "enable.ssl.certificate.verification": "false"},
                                   {"fetch.max.bytes": "1048576", "security.protocol": "SSL"}))
    assert props == {"fetch.max.bytes": "1048576", "security.protocol": "SSL"}
    assert "enable.ssl.certificate.verification" in caplog.text and "session.timeout.ms" not in caplog.text


def test_a_sasl_mechanism_without_a_login_module_is_a_config_error():
    with pytest.raises(ConfigError, match="kafka.java_properties"):
        java_properties(_kafka({"sasl.mechanisms": "OAUTHBEARER", "sasl.username": "u", "sasl.password": "p"}))


def test_a_batch_shares_its_budget_between_partitions_and_passes_on_what_one_does_not_need():
    # Setup: three partitions with 5, 1,000 and 1,000 messages waiting; a 300-message batch.
    # Expect: all 5 of the first, the rest split evenly; nothing for a partition at its end; ranges from each start.
    a, b, c, d = (TopicPartition("t", p) for p in range(4))
    starts = {a: 10, b: 0, c: 7, d: 50}
    ends = {a: 15, b: 1000, c: 1007, d: 50}
    ranges = plan_ranges(starts, ends, 300)
    assert ranges == {a: (10, 15), b: (0, 147), c: (7, 155)}
    assert isinstance(ranges, _Ranges) and len(ranges) == 300


def test_an_empty_plan_is_false():
    tp = TopicPartition("t", 0)
    assert not plan_ranges({tp: 5}, {tp: 5}, 100)
