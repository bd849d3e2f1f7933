"""What delta-rs is given to write (apply.writers.delta_rs, apply.writers.delta_rs_keys, apply.tables.delta_rs_checks), without Spark:
the keys' predicate against tables delta-rs writes and reads back, and the checks that send a MERGE to Spark."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from ticdc_delta.apply.base.session import CommitTags
from ticdc_delta.apply.tables.delta_rs_checks import files_refusal, properties_refusal, rows_refusal
from ticdc_delta.apply.writers.delta_rs import DeltaRs
from ticdc_delta.apply.writers.delta_rs_keys import COMPOSITE_MAX_ROWS, keys_refusal
from ticdc_delta.schema_cache.events import Column, TableName, TableSchema

# Keys as upstream may hold them: every character the predicate's literal must carry through (quotes, a
# backslash, a NUL, a line break, 4-byte UTF-8) and text that reads as SQL.
AWKWARD = ["plain", "it's", "back\\slash", "back\\", "nul\x00byte", "new\nline", "𝄞 ü", "", "''", "\\'",
           "x' OR '1'='1", '"quoted"', "%_*"]


def _table(tmp_path, schema: TableSchema, rows: list[tuple]) -> str:
    from ticdc_delta.apply.tables.arrow_types import arrow_type

    fields = [pa.field(c.name, arrow_type(pa, c.spark_type)) for c in schema.columns]
    columns = list(zip(*rows, strict=True))
    path = str(tmp_path / schema.name.table)
    write_deltalake(path, pa.table([pa.array(v, f.type) for v, f in zip(columns, fields, strict=True)],
                                   schema=pa.schema(fields)))
    return path


def _merged(path: str, schema: TableSchema, changes: list[tuple], ts: int) -> bool:
    """`changes`: (deleted, row) net changes."""
    rows = [(*row, deleted) for deleted, row in changes]
    return DeltaRs().merge(path, schema, rows, CommitTags({"appliedThrough": ts}, ("test", ts)))


def _held(path: str, key: int = 0) -> dict:
    return {row[key]: row for row in (tuple(r.values()) for r in DeltaTable(path).to_pyarrow_table().to_pylist())}


def test_keys_of_every_awkward_string_replace_exactly_their_rows(tmp_path):
    # Setup: a table keyed by strings that need quoting, escaping or carry SQL; a MERGE updating half of them,
    # deleting one and inserting one, then one deleting a key the table lacks.
    # Expect: delta-rs commits both; exactly those rows changed; the second moves the idempotent pair on.
    schema = TableSchema(TableName("db", "awkward"), (Column("k", "STRING"), Column("v", "INT")), ("k",))
    path = _table(tmp_path, schema, [(k, 0) for k in AWKWARD])
    model = {k: (k, 0) for k in AWKWARD}
    changes = [(False, (k, 1)) for k in AWKWARD[1::2]] + [(True, (AWKWARD[0], 0)), (False, ("new ' one", 2))]
    assert _merged(path, schema, changes, 10)
    for deleted, row in changes:
        model.pop(row[0]) if deleted else model.__setitem__(row[0], row)
    assert _held(path) == model
    assert _merged(path, schema, [(True, ("not there", 0))], 11)
    assert _held(path) == model and DeltaTable(path).transaction_version("test") == 11
    assert not _merged(path, schema, [(False, ("replayed", 9))], 11) or _held(path) == model  # (a replay: nothing)
    assert "replayed" not in _held(path)


@pytest.mark.parametrize("key", [("INT", 7, [1, 2, -2**31]), ("DECIMAL(20,0)", Decimal(7),
                                                                      [Decimal(0), Decimal(2**53), Decimal(-2**53)]),
                                 ("DATE", dt.date(2020, 1, 7), [dt.date(1582, 10, 15), dt.date(9999, 12, 31)])])
def test_keys_of_other_types_and_composite_keys_replace_exactly_their_rows(tmp_path, key):
    # Setup: a table keyed by (a key of the given type, a string); a MERGE updating one row, deleting one and
    # inserting one whose first key part another row shares.
    # Expect: exactly those rows changed.
    spark_type, changed, others = key
    schema = TableSchema(TableName("db", "two"), (Column("a", spark_type), Column("b", "STRING"), Column("v", "INT")),
                         ("a", "b"))
    keys = [(a, b) for a in [changed, *others] for b in ("x", "it's")]
    path = _table(tmp_path, schema, [(a, b, 0) for a, b in keys])
    changes = [(False, (changed, "x", 1)), (True, (others[0], "it's", 0)), (False, (changed, "new", 2))]
    assert _merged(path, schema, changes, 10)
    model = {(a, b): (a, b, 0) for a, b in keys}
    for deleted, row in changes:
        model.pop(row[:2]) if deleted else model.__setitem__(row[:2], row)
    held = [tuple(r.values()) for r in DeltaTable(path).to_pyarrow_table().to_pylist()]
    assert {row[:2]: row for row in held} == model and len(held) == len(model)


def test_keys_delta_rs_cannot_name_are_spark_s():
    # Expect: a NULL key, a FLOAT key, and a composite key over its row limit are refused, naming why.
    two = TableSchema(TableName("db", "t"), (Column("a", "INT"), Column("b", "STRING")), ("a", "b"))
    assert "NULL" in keys_refusal(two, [(1, None, False)])
    floating = TableSchema(TableName("db", "t"), (Column("f", "DOUBLE"),), ("f",))
    assert "DOUBLE" in keys_refusal(floating, [(1.5, False)])
    many = [(i, "x", False) for i in range(COMPOSITE_MAX_ROWS + 1)]
    assert "composite" in keys_refusal(two, many) and keys_refusal(two, many[:-1]) is None


def test_rows_holding_values_delta_rs_records_otherwise_are_spark_s():
    # Expect: each value delta-rs writes or records otherwise than Spark refuses the rows, and its neighbours
    # on the safe side do not.
    def refusal(spark_type: str, value):
        return rows_refusal(TableSchema(TableName("db", "t"), (Column("c", spark_type),), ()), [(value,)])

    refused = [("DECIMAL(20,0)", Decimal(2**53 + 1)), ("DECIMAL(38,10)", Decimal("100000.0000000001")),
               ("DECIMAL(38,10)", Decimal("0.000009")), ("DOUBLE", float("nan")), ("FLOAT", float("-inf")),
               ("DATE", dt.date(1582, 10, 14)), ("TIMESTAMP_NTZ", dt.datetime(1899, 12, 31, 23, 59, 59))]
    taken = [("DECIMAL(20,0)", Decimal(2**53)), ("DECIMAL(38,10)", Decimal("99999.9999999999")),
             ("DECIMAL(38,10)", Decimal("0.00001")), ("DECIMAL(12,2)", Decimal("-9999999999.99")),
             ("DOUBLE", -0.0), ("FLOAT", 3.4e38), ("DATE", dt.date(1582, 10, 15)),
             ("TIMESTAMP", dt.datetime(9999, 12, 31, tzinfo=dt.timezone.utc))]
    assert [v for v in refused if refusal(*v) is None] == []
    assert [(v, refusal(*v)) for v in taken if refusal(*v) is not None] == []


def _files(**columns) -> pa.Table:
    return pa.table(columns)


def test_files_whose_statistics_do_not_tell_are_spark_s():
    # Setup: add actions (as delta-rs flattens them) of a table with a DECIMAL(38,10) column.
    # Expect: refused where a file has no record count, no NULL count or no bounds of the column (unless all
    # NULL), or bounds that may hold a value delta-rs records otherwise (within them, not only at them).
    schema = TableSchema(TableName("db", "t"), (Column("id", "INT"), Column("x", "DECIMAL(38,10)")), ("id",))
    d = Decimal

    def files(records, low, high, nulls):
        return _files(num_records=pa.array(records, pa.int64()), **{
            "min.x": pa.array(low, pa.decimal128(38, 10)), "max.x": pa.array(high, pa.decimal128(38, 10)),
            "null_count.x": pa.array(nulls, pa.int64())})

    assert files_refusal(schema, files([2, 3], [d(1), d(5)], [d(10), d("99999.5")], [0, 1])) is None
    assert files_refusal(schema, files([2], [None], [None], [2])) is None  # only NULLs
    assert "without statistics" in files_refusal(schema, files([None], [d(1)], [d(2)], [0]))
    assert "without its statistics" in files_refusal(schema, files([2], [d(1)], [d(2)], [None]))
    assert "without its statistics" in files_refusal(schema, files([2], [None], [d(2)], [0]))
    assert files_refusal(schema, files([2], [d(1)], [d("100000")], [0]))  # 10^15 unscaled
    assert files_refusal(schema, files([2], [d(0)], [d(1)], [0]))  # 0.000001 may lie between
    assert files_refusal(schema, files([2], [d(0)], [d(0)], [0])) is None
    temporal = TableSchema(TableName("db", "t"), (Column("at", "TIMESTAMP"),), ())
    utc = dt.timezone.utc
    late = _files(num_records=[1], **{"min.at": pa.array([dt.datetime(2000, 1, 1, tzinfo=utc)], pa.timestamp("us", "UTC")),
                                     "max.at": pa.array([dt.datetime(2263, 1, 1, tzinfo=utc)], pa.timestamp("us", "UTC")),
                                     "null_count.at": [0]})
    assert "after 2262" in files_refusal(temporal, late)
    nan = _files(num_records=[2], **{"min.d": [1.0], "max.d": [float("nan")], "null_count.d": [0]})
    assert "nan" in files_refusal(TableSchema(TableName("db", "t"), (Column("d", "DOUBLE"),), ()), nan)


def test_table_properties_are_an_allow_list():
    # Expect: properties that change nothing a reader sees, at any value, and features off are allowed, as are
    # keys outside Delta's namespace; anything else of Delta's is refused, naming it.
    allowed = {"delta.checkpointInterval": "5", "delta.logRetentionDuration": "interval 7 days",
               "delta.enableChangeDataFeed": "false", "delta.columnMapping.mode": "none",
               "delta.compatibility.symlinkFormatManifest.enabled": "false", "delta.dataSkippingStatsColumns": "a,b",
               "delta.isolationLevel": "Serializable", "owner": "payments", "comment": "the orders"}
    assert properties_refusal(allowed) is None
    for key, value in {"delta.compatibility.symlinkFormatManifest.enabled": "true", "delta.appendOnly": "true",
                       "delta.enableChangeDataFeed": "true", "delta.setTransactionRetentionDuration": "interval 1 days",
                       "delta.universalFormat.enabledFormats": "iceberg", "delta.someFutureSetting": "x",
                       "delta.dataSkippingStatsColumns": "`a,b`"}.items():
        assert key in (properties_refusal({**allowed, key: value}) or ""), key


def test_a_merge_writes_exact_statistics_strings_without_views_and_floats_without_dictionaries(tmp_path):
    # Setup: a table of a key, a long text, a DOUBLE and a DECIMAL(20,0); a MERGE of rows at the safe extremes.
    # Expect: the file delta-rs adds records the key's bounds exactly and the text's cut at 64 bytes with the
    # upper bound raised; its Parquet schema holds text as string (not string_view, which pyarrow cannot
    # filter), the DOUBLE with no dictionary; a pyarrow read filtering on the text finds the row.
    import pyarrow.parquet as pq

    schema = TableSchema(TableName("db", "stats"), (Column("id", "DECIMAL(20,0)"), Column("s", "STRING"),
                                                    Column("d", "DOUBLE")), ("id",))
    path = _table(tmp_path, schema, [(Decimal(0), "a", 1.0)])
    assert _merged(path, schema, [(False, (Decimal(2**53), "z" * 100, -0.0)), (False, (Decimal(0), "b", 2.0))], 5)
    add = [json.loads(line)["add"] for line in open(f"{path}/_delta_log/00000000000000000001.json")
           if '"add"' in line][0]
    stats = json.loads(add["stats"])
    assert (stats["minValues"]["id"], stats["maxValues"]["id"]) == (0, 2**53)
    assert stats["minValues"]["s"] == "b" and stats["maxValues"]["s"] == "z" * 63 + "{"
    parquet = pq.ParquetFile(f"{path}/{add['path']}")
    assert parquet.schema_arrow.field("s").type == pa.string()
    d = parquet.schema_arrow.get_field_index("d")
    assert not any("DICTIONARY" in e for e in parquet.metadata.row_group(0).column(d).encodings)
    assert DeltaTable(path).to_pyarrow_table(filters=[("s", ">", "c")]).num_rows == 1


def test_a_merge_whose_keys_may_be_in_more_than_max_read_bytes_of_files_is_spark_s(tmp_path):
    # Setup: a table of ten files, each holding a range of 100 keys; bytes_to_read for keys in one file, in
    #    three, and beyond every file's range; then DeltaRs with max_read_bytes between one file and three.
    # Expect: the bytes of exactly the files whose key bounds hold a key (none for keys past the end); the
    #    merge touching one file is delta-rs's, the one touching three is refused (False: Spark's), and the
    #    table is unchanged by the refused one.
    from ticdc_delta.apply.tables.delta_rs_checks import bytes_to_read

    schema = TableSchema(TableName("db", "ranges"), (Column("k", "BIGINT"), Column("v", "STRING")), ("k",))
    path = str(tmp_path / "ranges")
    for first in range(0, 1000, 100):
        write_deltalake(path, pa.table({"k": pa.array(range(first, first + 100), pa.int64()),
                                        "v": [f"value {k:>40}" for k in range(first, first + 100)]}), mode="append")
    files = DeltaTable(path).get_add_actions(flatten=True)
    sizes = dict(zip(files.column("min.k").to_pylist(), files.column("size_bytes").to_pylist(), strict=True))
    assert bytes_to_read(schema, files, [(5, "x", False), (50, "y", True)]) == sizes[0]
    assert bytes_to_read(schema, files, [(150, "x", False), (450, "x", False), (999, "x", False)]) == (
        sizes[100] + sizes[400] + sizes[900])
    assert bytes_to_read(schema, files, [(1000, "x", False), (5000, "x", False)]) == 0
    guarded = DeltaRs(max_read_bytes=max(sizes.values()) * 2)
    three = [(150, "x", False), (450, "x", False), (999, "x", False)]
    assert not guarded.merge(path, schema, three, CommitTags({"appliedThrough": 1}, ("test", 1)))
    assert _held(path)[150] == (150, f"value {150:>40}")
    assert guarded.merge(path, schema, [(5, "x", False), (50, "y", True)], CommitTags({"appliedThrough": 2}, ("test", 2)))
    assert _held(path)[5] == (5, "x") and 50 not in _held(path)


def test_changes_arrow_does_not_take_as_the_columns_types_are_spark_s_not_an_error(tmp_path):
    # Setup: an INT column, and a change whose value does not fit it (a decoder's value the table's type cannot
    # hold as Arrow builds it; Spark's MERGE casts, or says what is wrong).
    # Expect: delta-rs does not take the MERGE (False: Spark's MERGE instead, as documented), commits nothing and
    # raises nothing (the conversion stopped the whole batch before).
    schema = TableSchema(TableName("db", "narrow"), (Column("id", "INT"), Column("v", "INT")), ("id",))
    path = _table(tmp_path, schema, [(1, 1)])
    assert _merged(path, schema, [(False, (2, 2**40))], 10) is False
    assert _held(path) == {1: (1, 1)} and DeltaTable(path).version() == 0
