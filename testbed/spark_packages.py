"""Which release of Spark's Kafka source the tests and benchmarks ask for on this machine.

The product asks for the Kafka source of pyspark's own version (`jobs.session.kafka_source_package`).
Maven Central as reached here lacks several releases' jars (spark-sql-kafka-0-10 4.1.4 and 3.5.9, the
token provider of 4.1.2-4.1.3 and 3.5.6-3.5.8), so the test environment names the newest release of
the running line whose Kafka source and token provider jars both resolve here: patch releases of a
line keep the source's interfaces. A user's repository with the exact release needs none of this.
"""

from __future__ import annotations

import os

from ticdc_delta.jobs.session import KAFKA_SOURCE_VERSION_ENV

# Spark line -> the newest release whose spark-sql-kafka-0-10 and spark-token-provider-kafka-0-10 jars resolve here.
_RESOLVABLE = {"3.5": "3.5.7", "4.0": "4.0.0", "4.1": "4.1.1"}


def use_resolvable_kafka_source() -> None:
    """Set the Kafka source's release for this process and its children, unless already set."""
    import pyspark

    line = ".".join(pyspark.__version__.split(".")[:2])
    if line in _RESOLVABLE:
        os.environ.setdefault(KAFKA_SOURCE_VERSION_ENV, _RESOLVABLE[line])


def test_session_packages() -> list[str]:
    """The packages the tests' shared Spark session asks for (besides Delta): Spark's Kafka source (the Spark
    engine's tests) and Hadoop's S3 connector (the object-storage tests)."""
    from ticdc_delta.jobs.session import hadoop_aws_package, kafka_source_package

    use_resolvable_kafka_source()
    return [kafka_source_package(), hadoop_aws_package()]

