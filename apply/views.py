"""Small Spark helpers shared by the writers of this package."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

from apply.locator import TableLocator


@contextmanager
def temp_view(spark, rows: Sequence[tuple], schema: str, name: str) -> Iterator[str]:
    """`rows` as a temporary view called `name` for the duration of the block.

    Values travel inside the DataFrame, never as SQL text.
    """
    spark.createDataFrame(rows, schema=schema).createOrReplaceTempView(name)
    try:
        yield name
    finally:
        spark.catalog.dropTempView(name)


def ensure_internal_table(spark, locator: TableLocator, table: str, columns: str) -> str:
    """Create one of the product's own Delta tables if missing; return its SQL name."""
    name = locator.internal_sql_name(table)
    locator.prepare_internal(spark)
    spark.sql(f"CREATE TABLE IF NOT EXISTS {name} ({columns}) USING DELTA")
    return name
