"""Where each table is: for readers of path tables, and `ticdc-delta tables`.

A table the job never renamed is at `<target.path>/<database>/<table>`. A RENAME leaves the table's
folder where it was and records the new name's folder in the table registry (`apply.places.folders`),
so a renamed table, or a name created again while another table holds its usual folder, is found here:

    from ticdc_delta.jobs.tables import table_path
    spark.read.format("delta").load(table_path(spark, "s3a://lake/cdc", "shop", "orders"))
"""

from __future__ import annotations

import json
import sys

from ticdc_delta.apply.base.session import SqlSession
from ticdc_delta.apply.own_tables.delta_rs import own_tables_reader
from ticdc_delta.apply.places.locator import PathLocator
from ticdc_delta.exceptions import ConfigError
from ticdc_delta.jobs.config import Config
from ticdc_delta.jobs.runtime import settle
from ticdc_delta.schema_cache.events import TableName


def _located(spark, root: str) -> tuple[PathLocator, SqlSession]:
    sql = SqlSession(spark, isolate=False)
    locator = PathLocator(root, own_delta_rs=own_tables_reader(root))  # (reads only)
    locator.load(sql)
    return locator, sql


def table_path(spark, root: str, database: str, table: str) -> str:
    """The folder of upstream `database`.`table` under the path-table root `root` (the job's `target.path`)."""
    locator, _ = _located(spark, root)
    name = TableName(database, table)
    if locator.gone(name):
        raise LookupError(f"{database}.{table} was dropped or renamed away upstream; `ticdc-delta tables` lists the tables")
    return locator.path(name)


def print_tables(config: Config, *, as_json: bool = False) -> int:
    """Print the consumer's tables and where each is: `database.table<TAB>location`."""
    from ticdc_delta.apply.places.registry import TableRegistry
    from ticdc_delta.jobs.session import quick_for_a_few_reads, spark_for

    if not config.target.path:
        raise ConfigError("tables: catalog tables are found by name in target.catalog; this lists path tables")
    spark = spark_for(config, quick_compiler=quick_for_a_few_reads(config))
    config = settle(config, spark)
    locator, sql = _located(spark, config.target.path)
    names = TableRegistry(sql, locator, config.kafka.group_id).tables()
    rows = [{"database": t.database, "table": t.table, "location": locator.path(t)} for t in names]
    if as_json:
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for row in rows:
            sys.stdout.write(f"{row['database']}.{row['table']}\t{row['location']}\n")
    return 0
