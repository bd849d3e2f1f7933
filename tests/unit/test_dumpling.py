"""Reading Dumpling exports: the layout, the CREATE TABLE text, the records of CSV and SQL data files.

The export writer of the tests (testbed/dumpling.py) writes what Dumpling writes; these tests also
pin hand-written text in the shapes Dumpling's source and documentation show.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from testbed.changefeed import Changefeed
from testbed.dumpling import _csv_field, _sql_value, create_table, file_name_part
from tests.decoding import COLUMNS, ROW
from ticdc_delta.exceptions import ConfigError, InvalidMessage
from ticdc_delta.schema_cache.codec import ValueContext
from ticdc_delta.schema_cache.dumpling.create_table import parse_create_table
from ticdc_delta.schema_cache.dumpling.layout import export_tables, snapshot_tso
from ticdc_delta.schema_cache.dumpling.values import CsvDialect, csv_records, sql_columns, sql_records
from ticdc_delta.schema_cache.events import TableName

UTC = dt.timezone.utc


def test_the_metadata_files_pos_is_the_snapshot_tso():
    text = ("Started dump at: 2020-11-10 10:40:19\nSHOW MASTER STATUS:\n\tLog: tidb-binlog\n"
            "\tPos: 420747102018863124\n\tGTID:\n\nFinished dump at: 2020-11-10 10:40:20\n")
    assert snapshot_tso(text) == 420747102018863124
    assert snapshot_tso(text.replace("SHOW MASTER STATUS", "SHOW BINARY LOG STATUS")) == 420747102018863124
    with pytest.raises(ConfigError, match="no TiDB snapshot TSO"):
        snapshot_tso("Started dump at: 2020-11-10 10:40:19\nSHOW MASTER STATUS:\n\tLog: mysql-bin.000001\n\tPos: x\n")


def test_file_names_map_to_tables_with_dumplings_escapes_undone():
    # Setup: a database with a dot and a table with ':' and '-schema' in its name (Dumpling writes %XX),
    # CSV data in two chunks, a gzip one, an empty table, a view, the database's own schema file.
    db, table = file_name_part("shop.eu"), file_name_part("t:normal-schema")
    assert (db, table) == ("shop%2Eeu", "t%3Anormal%2Dschema")
    names = [
        "metadata", f"{db}-schema-create.sql", f"{db}.{table}-schema.sql", f"{db}.{table}.000000000.csv",
        f"{db}.{table}.000000001.csv.gz", f"{db}.empty-schema.sql", f"{db}.v-schema.sql", f"{db}.v-schema-view.sql",
    ]
    tables = export_tables(names)
    assert [(t.name, t.format, t.data_files) for t in tables] == [
        (TableName("shop.eu", "empty"), None, []),
        (TableName("shop.eu", "t:normal-schema"), "csv",
         [f"{db}.{table}.000000000.csv", f"{db}.{table}.000000001.csv.gz"]),
    ]
    with pytest.raises(ConfigError, match="zstd and snappy"):
        export_tables([*names, f"{db}.empty.000000000.sql.zst"])
    with pytest.raises(ConfigError, match="without its table's schema file"):
        export_tables(["shop.gone.000000000.sql"])
    # Never skipped silently: a parquet export, custom file names, an export without any data (--no-data).
    for unknown in (f"{db}.{table}.000000000.parquet", "shop_items_part1.csv"):
        with pytest.raises(ConfigError, match="not a file of a Dumpling export"):
            export_tables([*names, unknown])
    with pytest.raises(ConfigError, match="no data file at all"):
        export_tables(["metadata", f"{db}.{table}-schema.sql"])


def test_create_table_as_tidb_prints_it_gives_the_streams_structure():
    statement = """/*!40101 SET NAMES binary*/;
CREATE TABLE `it``ems` (
  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT,
  `name` varchar(64) COLLATE utf8mb4_bin DEFAULT 'a, (b) NOT NULL \\'c\\'' COMMENT 'PRIMARY KEY, ()',
  `size` enum('s','m,l','o''k') NOT NULL DEFAULT 'm,l',
  `price` decimal(12,3) DEFAULT '0.000',
  `raw` varbinary(16) DEFAULT NULL,
  `bits` bit(12) DEFAULT b'101',
  `at` datetime(6) DEFAULT CURRENT_TIMESTAMP(6),
  `code` char(4) CHARACTER SET binary,
  PRIMARY KEY (`id`) /*T![clustered_index] CLUSTERED */,
  UNIQUE KEY `uk` (`name`(10))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin /*T![auto_rand_base] AUTO_RANDOM_BASE=30001 */;
"""
    schema = parse_create_table(statement, "shop").schema
    assert schema.name == TableName("shop", "it`ems")
    assert [(c.name, c.spark_type, c.nullable, c.default) for c in schema.columns] == [
        ("id", "DECIMAL(20,0)", False, None),
        ("name", "STRING", True, "a, (b) NOT NULL 'c'"),
        ("size", "STRING", False, "m,l"),
        ("price", "DECIMAL(12,3)", True, Decimal("0.000")),
        ("raw", "BINARY", True, None),
        ("bits", "BIGINT", True, 5),
        ("at", "TIMESTAMP_NTZ", True, None),
        ("code", "BINARY", True, None),
    ]
    assert schema.key == ("id",)


def test_without_a_primary_key_the_first_not_null_unique_key_is_the_handle():
    statement = """CREATE TABLE `t` (
  `a` int(11) DEFAULT NULL,
  `b` int(11) NOT NULL,
  `c` int(11) NOT NULL,
  UNIQUE KEY `ua` (`a`),
  KEY `ib` (`b`),
  UNIQUE KEY `ubc` (`b`,`c`)
)"""
    assert parse_create_table(statement, "d").schema.key == ("b", "c")


@pytest.mark.parametrize("statement, error", [
    ("CREATE VIEW `v` AS SELECT 1", "no CREATE TABLE"),
    ("CREATE TABLE `t` (`a` int(11)", "does not end"),
    ("CREATE TABLE `t` (`a` int(11) GENERATED ALWAYS AS (1) VIRTUAL)", "generated column"),
    ("CREATE TABLE `t` (`a` geography)", "unsupported mysqlType"),
])
def test_what_a_schema_file_cannot_describe_is_refused(statement, error):
    with pytest.raises(InvalidMessage, match=error):
        parse_create_table(statement, "d")


def test_csv_records_with_dumplings_backslash_escapes():
    data = b'"id","v","b"\r\n1,"a\\\\b\\nc\\"d\\0",\\N\r\n2,"","\\\\N"\r\n'
    assert list(csv_records(data)) == [[b"id", b"v", b"b"], [b"1", b'a\\b\nc"d\x00', None], [b"2", b"", b"\\N"]]


def test_csv_records_without_escapes_double_the_delimiter_and_may_span_lines():
    data = b'1,"say ""hi""\nthere",\\N\r\n2,"\\n",x\r\n'
    assert list(csv_records(data, CsvDialect(escape_backslash=False))) == [
        [b"1", b'say "hi"\nthere', None], [b"2", b"\\n", b"x"]]


def test_csv_records_with_other_separators_and_null_values():
    dialect = CsvDialect(separator=b"|+|", delimiter=b"'", null=b"NULL")
    assert list(csv_records(b"1|+|'a|+|b'|+|NULL\n", dialect)) == [[b"1", b"a|+|b", None]]


def test_sql_records_of_a_whole_file_and_of_single_lines():
    data = (b"/*!40014 SET FOREIGN_KEY_CHECKS=0*/;\n/*!40101 SET NAMES binary*/;\n"
            b"INSERT INTO `t` VALUES\n(1,'it\\'s (a), b',NULL,x'00ff'),\n(-2.5e3,'',NULL,x'');\n"
            b"INSERT INTO `t` VALUES\n(3,'\\\\N\\n\\Z',NULL,x'41');\n")
    expected = [[b"1", b"it's (a), b", None, b"\x00\xff"], [b"-2.5e3", b"", None, b""], [b"3", b"\\N\n\x1a", None, b"A"]]
    assert list(sql_records(data)) == expected
    lines = [line for line in data.split(b"\n") if line]
    assert [r for line in lines for r in sql_records(line)] == expected
    assert list(sql_records(b"(1,'a''b\nc');", escape_backslash=False)) == [[b"1", b"a'b\nc"]]
    assert sql_columns(b"INSERT INTO `t` (`a`,`b``c`) VALUES") == ["a", "b`c"]
    assert sql_columns(b"INSERT INTO `t` VALUES") is None


@pytest.mark.parametrize("data, parse", [
    (b'1,"never closed', csv_records),
    (b'1,"a"x', csv_records),
    (b"(1,'never closed", sql_records),
    (b"(1,x'zz')", sql_records),
    (b"(1,2", sql_records),
])
def test_truncated_or_garbled_records_are_refused(data, parse):
    with pytest.raises(InvalidMessage):
        list(parse(data))


@pytest.mark.parametrize("fmt", ["csv", "sql"])
def test_every_type_round_trips_through_dumplings_encoding(fmt):
    # Setup: the all-types table of the decoder tests, its CREATE TABLE and a row of every type
    # written as Dumpling writes them (the test export writer), read back.
    # Expect: the values the stream's decoders produce for the same row (the Delta table's values).
    feed = Changefeed()
    feed.create_table("shop", "all_types", COLUMNS, primary_key=["id"])
    schema, _ = feed.table_state("shop", "all_types")
    codec = parse_create_table(create_table(schema), "shop", ValueContext())
    encode = _csv_field if fmt == "csv" else _sql_value
    line = b",".join(encode(c["dataType"], ROW.get(c["name"]), True) for c in schema["columns"])
    records = list(csv_records(line) if fmt == "csv" else sql_records(b"(" + line + b");"))
    row = codec.row(dict(zip(codec.schema.column_names(), records[0], strict=True)))
    assert dict(zip(codec.schema.column_names(), row, strict=True)) == {
        "id": Decimal(2**64 - 1), "i8": -128, "u16": 65535, "u32": 4294967295, "price": Decimal("-123456789.125"),
        "f": 1.5, "d": -2.25, "name": "ünï 😀", "raw": b"\x00\xff\x00", "day": dt.date(1000, 1, 1),
        "at": dt.datetime(2024, 1, 2, 3, 4, 5), "at6": dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
        "ts": dt.datetime(2024, 6, 1, 12, 0, 0, 123000, tzinfo=UTC), "t": "-12:34:56.789", "y": 2155,
        "flag": 1, "bits": 0xABC, "size": "m,l", "tags": "a,c", "doc": '{"k": [1, 2]}',
    }


def test_timestamps_are_read_in_the_zone_dumpling_ran_in():
    codec = parse_create_table("CREATE TABLE `t` (`id` int(11) NOT NULL, `ts` timestamp(3), PRIMARY KEY (`id`))", "d",
                               ValueContext(zone="Asia/Shanghai"))
    assert codec.row({"id": b"1", "ts": b"2024-06-01 20:00:00.123"})[1] == dt.datetime(2024, 6, 1, 12, 0, 0, 123000, tzinfo=UTC)
