"""Kafka messages read by Spark's own Kafka source, for explicit offset ranges (the Spark engine).

The offsets stay the product's: each batch names, per partition, the offsets it reads from and up to;
the checkpoint records how far it got. Spark's source is Kafka's Java client, whose settings are
spelled differently from librdkafka's `kafka.properties`: the security settings are translated
(`java_properties`), and `kafka.java_properties` adds or overrides any of the Java client's own.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from ticdc_delta.apply.base.errors import error_condition
from ticdc_delta.exceptions import ConfigError
from ticdc_delta.jobs.config import KafkaConfig
from ticdc_delta.schema_cache.events import TopicPartition

log = logging.getLogger(__name__)

# librdkafka settings with the same name and meaning in Kafka's Java client.
_SAME = ("security.protocol", "sasl.mechanism", "client.id", "ssl.endpoint.identification.algorithm")
# SASL mechanism -> the Java client's login module for a user name and password.
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# librdkafka-only settings with nothing to translate (the consumer's tuning, logging).
_LIBRDKAFKA_ONLY = ("debug", "session.timeout.ms", "statistics.interval.ms", "queued.max.messages.kbytes",
                    "fetch.wait.max.ms", "socket.keepalive.enable", "log_level")


def _jaas_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def java_properties(config: KafkaConfig) -> dict[str, str]:
    """The Java client's settings for `kafka.properties` (security), then `kafka.java_properties`."""
    given = dict(config.properties)
    translated: dict[str, str] = {}
    for key in _SAME:
        if key in given:
            translated[key] = str(given.pop(key))
    mechanism = given.pop("sasl.mechanisms", None)
    if mechanism is not None:
        translated["sasl.mechanism"] = str(mechanism)
    username, password = given.pop("sasl.username", None), given.pop("sasl.password", None)
    if username is not None or password is not None:
        module = _LOGIN_MODULES.get(translated.get("sasl.mechanism", "PLAIN").upper())
        if module is None:
            raise ConfigError(
                f"kafka.properties: sasl.mechanism {translated.get('sasl.mechanism')!r} with sasl.username/password "
                "has no translation for Spark's Kafka source; set its sasl.jaas.config in kafka.java_properties"
            )
        translated["sasl.jaas.config"] = (
            f"{module} required username={_jaas_string(str(username or ''))} password={_jaas_string(str(password or ''))};"
        )
    ca = given.pop("ssl.ca.location", None)
    if ca is not None:
        translated["ssl.truststore.type"] = "PEM"
        translated["ssl.truststore.location"] = str(ca)
    for key in _LIBRDKAFKA_ONLY:
        given.pop(key, None)
    if given:
        log.warning(
            "kafka.properties %s have no translation for Spark's Kafka source (run.engine = 'spark'); set the Java "
            "client's equivalents in kafka.java_properties if they matter", ", ".join(sorted(given)),
        )
    return {**translated, **dict(config.java_properties)}


def kafka_frame(spark, config: KafkaConfig, ranges: Mapping[TopicPartition, tuple[int, int]]):
    """The messages of `ranges` (per partition: from, up to) as a DataFrame: topic, partition, offset, key, value."""
    wanted = {tp: r for tp, r in ranges.items() if r[1] > r[0]}
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for tp, (start, end) in sorted(wanted.items()):
        assign.setdefault(tp.topic, []).append(tp.partition)
        starting.setdefault(tp.topic, {})[str(tp.partition)] = start
        ending.setdefault(tp.topic, {})[str(tp.partition)] = end
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", config.bootstrap_servers)
        .option("assign", json.dumps(assign))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        # The offsets were asked of the brokers just now: a range Kafka no longer holds is an error to see.
        .option("failOnDataLoss", "true")
    )
    for key, value in java_properties(config).items():
        reader = reader.option(f"kafka.{key}", value)
    try:
        frame = reader.load()
    except Exception as err:
        if _no_kafka_source(err):
            raise ConfigError(
                "run.engine = 'spark' needs Spark's Kafka source (org.apache.spark:spark-sql-kafka-0-10 for this "
                "Spark): Databricks has it; with spark-submit add it to --packages"
            ) from err
        raise
    return frame.select("topic", "partition", "offset", "key", "value")


def _no_kafka_source(err: Exception) -> bool:
    # Spark 3.5 and 4.1 give this failure only a legacy condition (_LEGACY_ERROR_TEMP_1140), which a release may
    # rename: the condition where it is the documented one, else the message Spark has kept since 2.x.
    return error_condition(err) == "DATA_SOURCE_NOT_FOUND" or "failed to find data source: kafka" in str(err).lower()
