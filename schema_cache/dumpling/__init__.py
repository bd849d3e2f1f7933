"""Dumpling exports: the initial snapshot a changefeed starts from (`ticdc-delta snapshot`).

Dumpling's documented layout (pingcap/tidb dumpling/export): a `metadata` file whose
`SHOW MASTER STATUS` `Pos` is the snapshot TSO on TiDB, `<db>.<table>-schema.sql` with the
table's SHOW CREATE TABLE, and data files `<db>.<table>.<n>.csv` or `.sql`. This package reads
the layout, the CREATE TABLE text (parsed, never executed) and the data files' records; the
Spark job that loads them is `jobs.snapshot`.
"""
