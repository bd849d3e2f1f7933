"""`ticdc-delta maintain`: one pass of the data tables' maintenance (apply.maintenance) over every table of a
consumer (or those `--tables` names), with no time budget: what an operator runs on demand, or a scheduler
beside a job that keeps `maintenance.every_batches = 0`.

It may run while the job does: an OPTIMIZE that meets the job's commit is retried, as the job retries a MERGE
that meets one of its; VACUUM deletes only files no snapshot of the last `maintenance.vacuum_retain_hours` uses.
"""

from __future__ import annotations

import fnmatch
import json
import sys
from dataclasses import asdict

from ticdc_delta.apply.base.session import SqlSession
from ticdc_delta.apply.maintenance import TableMaintenance
from ticdc_delta.apply.places.registry import TableRegistry
from ticdc_delta.exceptions import ConfigError
from ticdc_delta.jobs.config import Config
from ticdc_delta.jobs.pipeline import locator_for
from ticdc_delta.jobs.runtime import settle


def parse_tables(text: str | None) -> list[str]:
    """`--tables`: `database.table` names or shell patterns, comma-separated."""
    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    bad = [n for n in names if "." not in n]
    if bad:
        raise ConfigError(f"--tables: {bad[0]!r} is not database.table (a name or a shell pattern such as shop.*)")
    return names


def print_maintain(config: Config, patterns: list[str], *, as_json: bool = False) -> int:
    from ticdc_delta.jobs.session import quick_for_a_few_reads, spark_for
    spark = spark_for(config, quick_compiler=quick_for_a_few_reads(config))
    config = settle(config, spark)
    sql = SqlSession(spark, isolate=False)
    locator = locator_for(config)
    locator.load(sql)
    tables = TableRegistry(sql, locator, config.kafka.group_id).tables()
    if patterns:
        tables = [t for t in tables if any(fnmatch.fnmatchcase(f"{t.database}.{t.table}", p) for p in patterns)]
    settings = config.maintenance
    done = TableMaintenance(sql, locator, min_files=settings.min_files, retain_hours=settings.vacuum_retain_hours).run(tables)
    if as_json:
        rows = [{**asdict(m), "table": f"{m.table.database}.{m.table.table}"} for m in done]
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for maintained in done:
            sys.stdout.write(maintained.describe() + "\n")
    return 0
