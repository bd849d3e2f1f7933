"""End to end against a producer nobody here wrote: Debezium's MariaDB connector on a real MariaDB.

A MariaDB server (testbed/mariadb.py) is captured by Debezium's embedded engine
(testbed/debezium_capture.py) into one single-partition topic of the local broker: the initial
snapshot (`op` r), then inserts, updates (one changing a primary key: d, tombstone, c), deletes
(each followed by its tombstone), TRUNCATE (`op` t) and DDL (ADD COLUMN with a default, DROP
COLUMN, RENAME COLUMN, RENAME TABLE, CREATE and DROP TABLE) over most MariaDB column types. The
job runs on the topic without the TiDB extension, in offset order, and every Delta table must
equal `SELECT * FROM` its MariaDB table, value for value.

Representation differences docs/protocols.md names: DECIMAL travels as a double (the values here have
at most 15 significant digits, so they come back exact); TIME is text in the column's precision;
BIT a number; TIMESTAMP an instant (the server runs in UTC).
"""

from __future__ import annotations

import datetime as dt
import decimal

import pytest
from chispa import assert_df_equality

from testbed.debezium_capture import DebeziumCapture
from testbed.mariadb import MariaDb
from testbed.produce import ensure_topic
from tests.support import assert_gone, run_job, table_frame

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.conformance,
    # On the oldest pair: Spark 3.5 is where its dates before 1582 once failed the MERGE (the job's session
    # now writes them as they are); the decoder's Python 3.10 differences are in the unit tests.
    pytest.mark.one_pair("starts MariaDB and Debezium's JVM; one capture checks the decoder for both", pair="newest"),
]

DATABASE = "dbz_shop"

_CREATE = [
    """CREATE TABLE numbers (
        id INT PRIMARY KEY, ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT, su SMALLINT UNSIGNED,
        mi MEDIUMINT, mu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT, bu BIGINT UNSIGNED,
        d DECIMAL(12,3), f FLOAT, db DOUBLE, bo BOOL, legacy VARCHAR(8))""",
    """CREATE TABLE texts (
        id BIGINT UNSIGNED PRIMARY KEY, c CHAR(4), v VARCHAR(40), tx TEXT, bn BINARY(4), vb VARBINARY(16),
        bl BLOB, e ENUM('small','medium','large'), s SET('red','green','blue'), b1 BIT(1), b12 BIT(12), j JSON)""",
    """CREATE TABLE times (
        id INT PRIMARY KEY, d DATE, dt DATETIME, dt3 DATETIME(3), dt6 DATETIME(6), ts TIMESTAMP NULL,
        ts2 TIMESTAMP(2) NULL, t TIME, t6 TIME(6), y YEAR)""",
    """CREATE TABLE orders (region CHAR(2), no INT, amount DECIMAL(10,2) NOT NULL, status VARCHAR(10),
        PRIMARY KEY (region, no))""",
    "CREATE TABLE scratch (id INT PRIMARY KEY, v VARCHAR(10))",
]


def _numbers(n: int) -> tuple:
    sign = -1 if n % 2 else 1
    return (
        n, sign * (n % 128), 200 + n % 56, sign * 30000, 65535 - n, sign * 8_000_000, 16_777_215 - n,
        sign * 2_000_000_000, 4_294_967_295 - n, sign * (9_000_000_000_000_000_000 + n), 18_446_744_073_709_551_615 - n,
        decimal.Decimal(f"{sign * 123456789}.{n % 1000:03d}"), sign * 1.5, sign * 2.0 ** -20 * n, n % 2, f"old{n}",
    )


def _texts(n: int) -> tuple:
    return (
        2**63 + n, f"c{n % 10}", f"välue {n} ✓", "long text " * (n % 5), bytes([n % 256, 0, 1]), bytes([0, n % 256, 255]),
        bytes(range(n % 7)), ("small", "medium", "large")[n % 3], ("red,blue", "", "green", None)[n % 4], n % 2,
        (n * 37) % 4096, f'{{"n": {n}, "tags": ["a", "b"], "nested": {{"x": null}}}}',
    )


def _times(n: int) -> tuple:
    base = dt.datetime(2024, 2, 29, 23, 59, 58) + dt.timedelta(days=n, seconds=n)
    return (
        n, dt.date(1000 + n, 1 + n % 12, 1 + n % 28), base, base.replace(microsecond=123000),
        base.replace(microsecond=654321), base, base.replace(microsecond=450000),
        dt.timedelta(hours=-(n % 800), minutes=5, seconds=6), dt.timedelta(hours=n % 24, microseconds=987654), 1901 + n,
    )


def _snapshot_rows(server: MariaDb) -> None:
    """Tables and rows that exist before Debezium starts: they arrive as its initial snapshot."""
    server.execute(f"CREATE DATABASE {DATABASE}")
    server.execute(*_CREATE, database=DATABASE)
    server.executemany(f"INSERT INTO numbers VALUES ({', '.join(['%s'] * 16)})", map(_numbers, range(1, 6)), DATABASE)
    server.executemany(f"INSERT INTO texts VALUES ({', '.join(['%s'] * 12)})", map(_texts, range(1, 6)), DATABASE)
    server.executemany(f"INSERT INTO times VALUES ({', '.join(['%s'] * 10)})", map(_times, range(1, 6)), DATABASE)
    server.execute("INSERT INTO orders VALUES ('eu', 1, 10.50, 'new'), ('us', 1, 99.99, 'new')", database=DATABASE)


def _streamed_workload(server: MariaDb) -> None:
    """Changes after the snapshot: read from the binlog."""
    ex = lambda *statements: server.execute(*statements, database=DATABASE)  # noqa: E731
    server.executemany(f"INSERT INTO numbers VALUES ({', '.join(['%s'] * 16)})", map(_numbers, range(6, 40)), DATABASE)
    server.executemany(f"INSERT INTO texts VALUES ({', '.join(['%s'] * 12)})", map(_texts, range(6, 40)), DATABASE)
    server.executemany(f"INSERT INTO times VALUES ({', '.join(['%s'] * 10)})", map(_times, range(6, 40)), DATABASE)
    ex(
        "UPDATE numbers SET d = d * 2, f = NULL, legacy = 'changed' WHERE id % 3 = 0",
        "UPDATE numbers SET id = 1000 WHERE id = 2",  # a primary key change: d, tombstone, c
        "UPDATE texts SET v = NULL, bn = x'ffffffff', s = 'red,green,blue', b12 = b'111111111111' WHERE id % 4 = 1",
        "UPDATE times SET ts = '2038-01-19 03:14:07', t = '838:59:59', dt6 = '9999-12-31 23:59:59.999999' WHERE id = 7",
        "DELETE FROM numbers WHERE id IN (5, 6, 7)",
        "DELETE FROM texts WHERE id > 9223372036854775838",
        "DELETE FROM times WHERE id = 1",
        # DDL: a column added with a default (older rows read it), one dropped, one renamed.
        "ALTER TABLE numbers ADD COLUMN note VARCHAR(20) NOT NULL DEFAULT 'none', ADD COLUMN qty INT DEFAULT 7",
        "ALTER TABLE numbers DROP COLUMN legacy",
        "ALTER TABLE times RENAME COLUMN t TO t_of_day",
        "UPDATE numbers SET note = 'after ddl', qty = NULL WHERE id = 10",
        "INSERT INTO times (id, t_of_day, y) VALUES (500, '-01:02:03', 2155)",
        "INSERT INTO numbers (id, bu, note) VALUES (501, 18446744073709551615, 'max')",
        # Key changes of a composite key, then the table renamed and written under its new name.
        "UPDATE orders SET region = 'ap' WHERE region = 'us'",
        "INSERT INTO orders VALUES ('eu', 2, 5.00, 'new'), ('eu', 3, 6.25, 'paid')",
        "RENAME TABLE orders TO orders_archive",
        "UPDATE orders_archive SET status = 'archived' WHERE no < 3",
        "INSERT INTO orders_archive VALUES ('us', 9, 1.00, 'late')",
        # TRUNCATE (op t, sent with skipped.operations=none), rows after it; a table created and dropped.
        "INSERT INTO scratch VALUES (1, 'a'), (2, 'b')",
        "TRUNCATE TABLE scratch",
        "INSERT INTO scratch VALUES (3, 'c')",
        "CREATE TABLE gone (id INT PRIMARY KEY)",
        "INSERT INTO gone VALUES (1)",
        "DROP TABLE gone",
    )


TABLES = ["numbers", "texts", "times", "orders_archive", "scratch"]


def _time_text(value: dt.timedelta, fsp: int) -> str:
    micros = value // dt.timedelta(microseconds=1)
    sign, micros = ("-" if micros < 0 else ""), abs(micros)
    seconds, fraction = divmod(micros, 1_000_000)
    text = f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return text + f".{fraction:06d}"[: fsp + 1] if fsp else text


def _expected(server: MariaDb, spark, table: str, schema):
    """`SELECT * FROM table` as the Delta table's Spark types hold it."""
    from pyspark.sql import types as T

    columns, rows = server.query(f"SELECT * FROM `{table}`", DATABASE)
    _, described = server.query(
        "SELECT COLUMN_NAME, DATA_TYPE, DATETIME_PRECISION FROM information_schema.COLUMNS "
        f"WHERE TABLE_SCHEMA = '{DATABASE}' AND TABLE_NAME = '{table}'"
    )
    kinds = {name: (kind, precision) for name, kind, precision in described}
    spark_types = {f.name: f.dataType for f in schema.fields}
    assert [f.name for f in schema.fields] == columns  # same columns, same order

    def convert(name: str, value: object) -> object:
        kind, precision = kinds[name]
        target = spark_types[name]
        if value is None:
            return None
        if kind == "bit":
            return int.from_bytes(value, "big")
        if kind == "time":
            return _time_text(value, precision or 0)
        if kind == "timestamp":
            return value.replace(tzinfo=dt.timezone.utc)  # the server runs in UTC
        if isinstance(target, T.DecimalType):
            return decimal.Decimal(value)
        if isinstance(target, T.StringType) and isinstance(value, bytes):
            return value.decode()
        return value

    expected = [tuple(convert(name, v) for name, v in zip(columns, row, strict=True)) for row in rows]
    return spark.createDataFrame(expected, schema=schema)


def test_debezium_mariadb_capture_into_delta(spark, kafka, tmp_path, unique):
    topic, target = f"dbz-mariadb-{unique}", str(tmp_path / "delta")
    ensure_topic(kafka.bootstrap_servers, topic, 1)
    with MariaDb(tmp_path / "mariadb") as server:
        _snapshot_rows(server)
        capture = DebeziumCapture(
            server, kafka.bootstrap_servers, topic, DATABASE, tmp_path / "capture",
            options={"skipped.operations": "none"},  # TRUNCATE as op t (skipped by default)
        )
        with capture:
            # The snapshot reads tables in name order: once times' 5 rows are in, it is done (DDL
            # during a snapshot is not supported by Debezium).
            capture.wait_for(f"mariadb.{DATABASE}.times", 5)
            _streamed_workload(server)
            capture.drain()
        destinations = [d for d, _, _ in capture.delivered]
        assert destinations.count("mariadb") >= 10  # schema changes (the connector's own topic)

        result = run_job(
            spark, kafka, topic, target, f"g-{unique}",
            protocol={"name": "debezium", "enable_tidb_extension": False, "allow_offset_ordering": True},
        )
        assert result.rows_applied > 0 and result.dead_letters == 0 and result.waiting == 0

        for table in TABLES:
            actual = table_frame(spark, target, DATABASE, table)
            assert_df_equality(
                actual, _expected(server, spark, table, actual.schema), ignore_row_order=True, ignore_nullable=True
            )
        assert_gone(spark, target, DATABASE, "orders")
        assert_gone(spark, target, DATABASE, "gone")
