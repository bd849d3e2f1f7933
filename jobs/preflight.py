"""Credentials checked before the job starts Spark.

Starting Spark and opening the product's tables takes from seconds to a
minute; a wrong SASL password or registry password would only be found
after that. Both are asked first: a refusal stops the job at once
(AuthenticationError, exit 7), as does a topic that does not exist. A
service that does not answer is left to the run, which waits for it as
configured.
"""

from __future__ import annotations

from ticdc_delta.jobs.config import Config
from ticdc_delta.jobs.kafka_source import KafkaSource
from ticdc_delta.schema_cache.protocols import check_credentials


def check_before_start(config: Config, source: KafkaSource) -> None:
    """Kafka's metadata for the configured topics (asked through `source`, a KafkaSource of `config.kafka`), and
    the protocol's services, with the job's credentials."""
    source.partitions()
    check_credentials(config.protocol)
