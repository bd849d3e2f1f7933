"""The product's own Delta tables (checkpoints, dead letters, tombstones): created on first use."""

from __future__ import annotations

from apply.locator import TableLocator
from apply.sql_session import SqlSession


def ensure_internal_table(sql: SqlSession, locator: TableLocator, table: str, columns: str) -> str:
    """Create one of the product's own Delta tables if missing; return its SQL name."""
    name = locator.internal_sql_name(table)
    locator.prepare_internal(sql)
    sql.run(f"CREATE TABLE IF NOT EXISTS {name} ({columns}) USING DELTA", what=f"create {name}")
    return name
