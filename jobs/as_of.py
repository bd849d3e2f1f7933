"""`ticdc-delta as-of`: which Delta version of each table holds upstream as of a commitTs (or a time).

Per table: the newest version applied through the point or before it. Together: the newest point no
newer than the one asked for, and no newer than any table's applied point, at which every table is
known exactly (`apply.as_of`), and each table's version there; read them with
`SELECT * FROM <table> VERSION AS OF <version>` or `ConsistentRead.frames`.
"""

from __future__ import annotations

import datetime as dt
import json
import sys

from ticdc_delta.apply.as_of import ConsistentRead, commit_ts_at, consistent_read
from ticdc_delta.apply.base.session import SqlSession
from ticdc_delta.apply.places.registry import TableRegistry
from ticdc_delta.apply.progress import upstream_time
from ticdc_delta.exceptions import ConfigError
from ticdc_delta.jobs.config import Config
from ticdc_delta.jobs.pipeline import locator_for
from ticdc_delta.jobs.runtime import settle
from ticdc_delta.schema_cache.events import TableName


def parse_point(commit_ts: int | None, time: str | None) -> int:
    """--commit-ts or --time (ISO 8601; without a zone: UTC) as a commitTs."""
    if (commit_ts is None) == (time is None):
        raise ConfigError("as-of needs --commit-ts or --time (one of them)")
    if commit_ts is not None:
        return commit_ts
    try:
        return commit_ts_at(dt.datetime.fromisoformat(time))
    except ValueError:
        raise ConfigError(f"--time: {time!r} is not an ISO 8601 date and time") from None


def parse_tables(text: str | None) -> list[TableName] | None:
    if not text:
        return None
    tables = []
    for item in text.split(","):
        database, dot, table = item.strip().partition(".")
        if not dot or not database or not table:
            raise ConfigError(f"--tables: {item!r} is not <database>.<table>")
        tables.append(TableName(database, table))
    return tables


def resolve(config: Config, spark, commit_ts: int, tables: list[TableName] | None = None) -> tuple[ConsistentRead, dict]:
    """The consistent read of `tables` (default: the consumer's registered tables) at `commit_ts`,
    and the SQL name of each table."""
    config = settle(config, spark)
    sql = SqlSession(spark)
    locator = locator_for(config)
    chosen = tables or TableRegistry(sql, locator, config.kafka.group_id).tables()
    if not chosen:
        raise ConfigError(f"consumer {config.kafka.group_id!r} has registered no tables; name them with --tables")
    locator.load(sql)
    names = {locator.sql_name(t): t for t in chosen}
    return consistent_read(sql, list(names), commit_ts), names


def print_as_of(config: Config, commit_ts: int, tables: list[TableName] | None, *, as_json: bool = False) -> int:
    from ticdc_delta.jobs.session import spark_for

    read, names = resolve(config, spark_for(config), commit_ts, tables)
    when = upstream_time(read.commit_ts).isoformat(timespec="milliseconds")
    rows = [{"table": str(names[name]), "sql_name": name, "version": version} for name, version in read.versions.items()]
    if as_json:
        sys.stdout.write(json.dumps({"asked": commit_ts, "commit_ts": read.commit_ts, "upstream_time": when,
                                     "tables": rows}, indent=2) + "\n")
    else:
        lines = [f"consistent as of commitTs {read.commit_ts} ({when}; asked {commit_ts})"]
        lines += [f"  {r['table']}: VERSION AS OF {r['version']}" for r in rows]
        sys.stdout.write("\n".join(lines) + "\n")
    return 0
