"""Every reader answers a filtered read of a table delta-rs merged into as it answers the same read of the table
Spark merged the same rows into (apply.tables.delta_rs_checks): Spark with data skipping, delta-rs's pyarrow dataset
and its DataFusion engine, with equalities and ranges on each value and NULL tests.

Each family below is merged into twin tables batch by batch, one by the job's writer with delta-rs configured
and one by Spark's MERGE alone: first values whose statistics delta-rs records exactly (its commits), then
values it does not (Spark's MERGE, else the reads differ), then a change to a row those share a file with
(Spark's again: the table's statistics say what it holds; a delta-rs rewrite of that file would lose it).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from tests.filtered_reads import differences, predicates
from ticdc_delta.apply.changes.collapse import NetChange
from ticdc_delta.apply.changes.merge_source import SourceRows
from ticdc_delta.apply.places.locator import PathLocator
from ticdc_delta.apply.tables.points import AppliedPoint
from ticdc_delta.apply.writers.delta_rs import DeltaRs
from ticdc_delta.apply.writers.delta_writer import DeltaWriter
from ticdc_delta.schema_cache.events import Column, TableName, TableSchema

pytestmark = [pytest.mark.e2e, pytest.mark.both_pairs(
    "Spark and Delta of each release skip files by the statistics delta-rs wrote"
)]

UTC = dt.timezone.utc
NAN, INF = float("nan"), float("inf")
RS, SPARK = "delta-rs", "Apache-Spark"

# (columns, the key, then batches: (changes as (deleted, row), the engine that must commit the delta-rs twin's))
FAMILIES = {
    # BIGINT UNSIGNED and BIT(64) land as DECIMAL(20,0): delta-rs records bounds above 2^53 rounded or clamped.
    "unsigned_keys": ((Column("id", "DECIMAL(20,0)"), Column("v", "STRING")), [
        ([(False, (Decimal(0), "zero")), (False, (Decimal(2**53 - 1), "below")), (False, (Decimal(2**53), "at"))], RS),
        ([(False, (Decimal(k), "far")) for k in (2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1)], SPARK),
        ([(False, (Decimal(2**63), "changed")), (True, (Decimal(2**53 + 1), None))], SPARK),
    ]),
    # DECIMAL(38,10): more than 15 digits, or nearer to zero than 0.0001, is rounded or unreadable to delta-rs.
    "decimals": ((Column("id", "INT"), Column("x", "DECIMAL(38,10)"), Column("y", "DECIMAL(12,2)")), [
        ([(False, (1, Decimal("0"), Decimal("9999999999.99"))), (False, (2, Decimal("12345.6789"), Decimal("-0.01"))),
          (False, (3, Decimal("-99999.9999999999"), Decimal("0"))), (False, (4, Decimal("0.0001"), None))], RS),
        ([(False, (5, Decimal("1234567890123456.7890123456"), Decimal("1.00"))),
          (False, (6, Decimal("0.0000000001"), Decimal("2.50")))], SPARK),
        ([(False, (5, Decimal("-9999999999999999999999999999.9999999999"), Decimal("3.00")))], SPARK),
    ]),
    # FLOAT and DOUBLE: -0.0 and the extremes are delta-rs's; NaN and infinities are not.
    "floats": ((Column("id", "INT"), Column("d", "DOUBLE"), Column("f", "FLOAT")), [
        ([(False, (1, -0.0, -0.0)), (False, (2, 0.0, 0.0)), (False, (3, 1.5, 3.4028234663852886e38)),
          (False, (4, -1.7976931348623157e308, -3.4028234663852886e38)), (False, (5, 5e-324, 1.401298464324817e-45))],
         RS),
        ([(False, (6, NAN, NAN)), (False, (7, INF, INF)), (False, (8, -INF, -INF)), (False, (9, 2.0, None))], SPARK),
        ([(False, (9, 3.0, 3.0)), (True, (7, None, None))], SPARK),
    ]),
    # DATE / TIMESTAMP / TIMESTAMP_NTZ at the ends the product accepts; before 1582-10-15 and 1900 is Spark's. (A
    # TIMESTAMP after 2262 Spark writes as INT96, which delta-rs cannot read at all: test_delta_rs_merges.py.)
    "times": ((Column("id", "INT"), Column("day", "DATE"), Column("at", "TIMESTAMP"), Column("wall", "TIMESTAMP_NTZ")), [
        ([(False, (1, dt.date(1582, 10, 15), dt.datetime(1900, 1, 1, tzinfo=UTC), dt.datetime(1900, 1, 1))),
          (False, (2, dt.date(9999, 12, 31), dt.datetime(2262, 4, 10, 23, 59, 59, 999999, tzinfo=UTC),
                   dt.datetime(9999, 12, 31, 23, 59, 59, 999999))),
          (False, (3, dt.date(2020, 1, 1), dt.datetime(2020, 1, 1, 0, 0, 0, 999, tzinfo=UTC),
                   dt.datetime(2020, 1, 1, 0, 0, 0, 1)))], RS),
        ([(False, (5, dt.date(1000, 1, 1), dt.datetime(1899, 12, 31, 23, 59, 59, tzinfo=UTC),
                   dt.datetime(1800, 1, 1)))], SPARK),
        ([(False, (5, dt.date(2021, 1, 1), None, None))], SPARK),
    ]),
    # Statistics of strings are cut (Spark: 32 characters, delta-rs: 64 bytes, the upper bound raised); BIGINT at
    # its extremes; BINARY (no bounds; delta-rs records no NULL count) and BOOLEAN (delta-rs records bounds).
    "strings_and_others": ((Column("id", "BIGINT"), Column("s", "STRING"), Column("b", "BINARY"),
                            Column("flag", "BOOLEAN")), [
        ([(False, (-2**63, "a" * 40, None, True)), (False, (2**63 - 1, "a" * 32 + "b", b"\x00" * 40, False)),
          (False, (0, "\U0010ffff" * 40, b"", None))], RS),
        ([(False, (1, "b" * 33, b"\xff", True)), (False, (2, "z" * 100 + "\U0001d11e", None, False)),
          (False, (3, "", b"x", True))], RS),
        ([(False, (0, "a" * 31, b"y", False)), (True, (1, None, None, None))], RS),
    ]),
}


def _engine_of_last_commit(spark, name: str) -> str:
    row = spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").select("engineInfo").collect()[0]
    return (row[0] or "").split("/")[0].split(":")[0]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_filtered_reads_of_delta_rs_merges_equal_spark_merges(sql, spark, tmp_path, family):
    # Setup: twin tables of the family's columns; each batch merged into one by the writer with delta-rs configured
    # and into the other by Spark's MERGE.
    # Expect: each batch's commit is the engine the family names; after the last batch delta-rs commits and after
    # the last of all (which leaves delta-rs's files as they are), delta-rs's readers answer every predicate (each
    # operator on each value merged so far, NULL tests) from the one as from the other, and after the last Spark
    # answers its share of them as the rows say it must.
    columns, batches = FAMILIES[family]
    names = [c.name for c in columns]
    locator = PathLocator(str(tmp_path))
    writers = {RS: DeltaWriter(sql, locator, small_merges=DeltaRs()), SPARK: DeltaWriter(sql, locator)}
    schemas = {who: TableSchema(TableName("db", f"{family}_{who[:5].lower()}"), columns, (names[0],))
               for who in writers}
    for who, writer in writers.items():
        writer.create(schemas[who].name, schemas[who], None, replace=False)
    paths = {who: str(tmp_path / "db" / schemas[who].name.table) for who in writers}
    seen: dict[str, list] = {name: [] for name in names}
    held: dict[object, tuple] = {}
    last_by_delta_rs = max(i for i, (_, engine) in enumerate(batches) if engine == RS)
    for i, (changes, engine) in enumerate(batches):
        for who, writer in writers.items():
            source = SourceRows.of([NetChange(deleted, row) for deleted, row in changes])
            writer.merge(schemas[who].name, schemas[who], source, AppliedPoint(ts=100 * (i + 1)))
        assert _engine_of_last_commit(spark, locator.sql_name(schemas[RS].name)) == engine, f"batch {i + 1}"
        for deleted, row in changes:
            if deleted:
                held.pop(row[0], None)
                continue
            held[row[0]] = row
            for name, value in zip(names, row, strict=True):
                seen[name].append(value)
        if i in (last_by_delta_rs, len(batches) - 1):
            found = predicates({c.name: c.spark_type for c in columns}, seen)
            # (Spark's reads only after the last batch, which leaves delta-rs's files as they were: they take the most
            # time, a query each)
            wrong, misread = differences(spark, paths[RS], paths[SPARK], found, held.values(), names,
                                         ask_spark=i == len(batches) - 1)
            assert wrong == [], f"after batch {i + 1}"
            print("\n".join(["pyarrow's misreadings of Spark's files (docs/operations.md):", *misread]))
