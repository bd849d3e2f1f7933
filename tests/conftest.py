"""Session fixtures: one real Kafka broker and one local Spark + Delta session."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

# Downloads (broker jars, Delta jars) are cached in the checkout unless told otherwise.
os.environ.setdefault("TICDC_DELTA_CACHE", str(Path(__file__).resolve().parent.parent / ".cache"))


# Fixtures that start a JVM (Spark, the Kafka broker): a test using one is end to end,
# so `-m "not e2e"` never starts one.
_HEAVY_FIXTURES = {"spark", "sql", "kafka"}


def pytest_collection_modifyitems(items):
    for item in items:
        if _HEAVY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    from testbed.local_kafka import LocalKafka

    broker = LocalKafka(tmp_path_factory.mktemp("kafka"))
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from jobs.session import get_spark

    session = get_spark(
        "local[2]",
        {
            "spark.sql.shuffle.partitions": "1",
            "spark.default.parallelism": "1",
            # Catalog-mode tests create managed tables: keep them out of the checkout.
            "spark.sql.warehouse.dir": str(tmp_path_factory.mktemp("warehouse")),
        },
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def sql(spark):
    """The job's kind of SQL session (a fork of the test session), for tests that drive apply/ directly."""
    from apply.sql_session import SqlSession

    return SqlSession(spark)


@pytest.fixture
def unique():
    """A short unique suffix for topic and consumer-group names."""
    return uuid.uuid4().hex[:8]


@pytest.fixture(scope="session")
def registry():
    """The Schema Registry stand-in (tests/registry_server.py), shared by the session."""
    from tests.registry_server import FakeSchemaRegistry

    server = FakeSchemaRegistry()
    server.start()
    yield server
    server.stop()
