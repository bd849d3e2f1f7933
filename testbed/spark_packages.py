"""Which release of Spark's Kafka source the tests and benchmarks ask for on this machine.

The product asks for the Kafka source of pyspark's own version (`jobs.session.kafka_source_package`).
Maven Central as reached here lacks several releases' jars (spark-sql-kafka-0-10 4.1.4 and 3.5.9, the
token provider of 4.1.2-4.1.3 and 3.5.6-3.5.8), so the test environment names the newest release of
the running line whose Kafka source and token provider jars both resolve here: patch releases of a
line keep the source's interfaces. A user's repository with the exact release needs none of this.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from testbed.processes import ROOT
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


def start_fetching_test_session_packages(log: Path) -> subprocess.Popen | None:
    """Resolve the tests' session packages (`test_session_packages`, with Delta) in a background process, or
    None when they are already cached.

    From an empty cache Ivy spends 30-50 s on one round trip after another (a few hundred POMs), waiting
    far more than working: started before the unit tests, it is done when the first end-to-end test starts
    the session, which then takes the jars from the cache. The set holds every artifact the job processes'
    smaller sets need (Delta alone, with the Kafka source, with the S3 connector), which resolve from the
    Ivy cache they share (`jobs.session.share_ivy_cache`)."""
    from ticdc_delta.jobs.session import cached_jars, delta_package

    if cached_jars([delta_package(), *test_session_packages()]):
        return None
    with open(log, "w") as out:
        return subprocess.Popen([sys.executable, "-c", _FETCH], stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True)


# A local session asking for them (Ivy fetches them into the cache and marks them complete), stopped at once.
_FETCH = (
    "from testbed.spark_packages import test_session_packages; from ticdc_delta.jobs.session import get_spark; "
    "get_spark('local[1]', packages=test_session_packages()).stop()"
)
