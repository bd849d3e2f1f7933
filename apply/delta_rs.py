"""What delta-rs (the `deltalake` package, no JVM) does for the job under `target.small_merge_writer = "delta-rs"`:
small MERGEs, and the reads of a table's first touch.

A Spark/Delta MERGE of a few rows costs about one CPU-second on the driver (planning, its Spark jobs,
the snapshot; docs/performance.md), so a round over many tables is bound by its commits. delta-rs
commits the same change for about 20 ms CPU. Spark keeps everything else: DDL, snapshot loads, large
sources, history tables, the product's own tables, and any table delta-rs cannot write as Spark would.

A merge is taken only where its result is the one Spark's would have been:

- the rows are held in memory, at most `max_rows` of them;
- the table is a path table on the local file system (an object store's commit safety under delta-rs
  is not yet shown: docs/operations.md);
- the table has no column mapping, deletion vectors or type widening ("compatible" layout);
- the table's columns are exactly the source's, in name and type, and none needs Spark to convert it
  (VARIANT), and no name holds a backquote (delta-rs cannot address such a column);
- neither the rows nor the table (by its files' statistics) hold a DATE before 1582-10-15 or a TIMESTAMP
  before 1900: Spark 3.5 refuses to read such values from Parquet files another writer made (it cannot tell
  their calendar; SPARK-31404), and a MERGE rewrites the files holding the rows it changes.

Anything else returns False and the caller runs Spark's MERGE. The commit carries the same tags as
Spark's: the applied point in `userMetadata` and the idempotent-write pair as a Delta `txn` action
(Spark skips a MERGE whose pair the table already has; here the same check is made before writing).

The same reader gives the job what it reads of a table at its first touch (`facts`: its newest commits'
markers, its columns, its properties), which from Spark would load the table's snapshot into the JVM: about
a second a table the JVM has not read within the hour.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ticdc_delta.apply.arrow_types import arrow_type
from ticdc_delta.apply.sql_session import CommitTags
from ticdc_delta.exceptions import ApplyError
from ticdc_delta.schema_cache.events import TableSchema

log = logging.getLogger(__name__)

DEFAULT_MAX_ROWS = 10_000
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
_NEEDS_SPARK = frozenset({"VARIANT"})
# The earliest value of each type Spark 3.5 reads from a Parquet file without Spark's calendar mark.
_EARLIEST = {
    "DATE": dt.date(1582, 10, 15),
    "TIMESTAMP": dt.datetime(1900, 1, 1, tzinfo=dt.timezone.utc),
    "TIMESTAMP_NTZ": dt.datetime(1900, 1, 1),
}
# Spark writes TIMESTAMP as INT96 (its default) and delta-rs reads INT96 as nanoseconds: a file holding a later
# one would be rewritten wrong by a delta-rs MERGE.
_LATEST_TIMESTAMP = dt.datetime(2262, 4, 11, tzinfo=dt.timezone.utc)


def local_path(location: str) -> str | None:
    """The file-system path of a table location on the local file system (a path, or a `file:` URL); None for
    any other store."""
    scheme = _SCHEME.match(location)
    if scheme is None:
        return location
    if scheme.group(1).lower() != "file":
        return None
    rest = location[scheme.end():]
    return "/" + rest.lstrip("/") if rest.startswith("//") else rest


def available() -> bool:
    try:
        import deltalake  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def _identifier(name: str) -> str:
    # A SQL identifier for delta-rs's expression parser (DataFusion): double quotes, doubled inside.
    return '"' + name.replace('"', '""') + '"'


# What delta-rs writes as Spark would: tables whose protocol asks for nothing more. Legacy writer versions 3-4
# (CHECK constraints, change data feed, generated columns), 6 (identity columns) and any other feature (row
# tracking, domain metadata, checkpoint protection, in-commit timestamps, ...) go to Spark.
_WRITABLE_WRITER_FEATURES = frozenset({"appendOnly", "invariants", "timestampNtz"})
_WRITABLE_READER_FEATURES = frozenset({"timestampNtz"})


def _writes_as_spark(protocol, configuration: Mapping[str, str]) -> bool:
    if protocol.min_reader_version not in (1, 3) or protocol.min_writer_version not in (1, 2, 7):
        return False
    if configuration.get("delta.enableChangeDataFeed", "false").lower() == "true":
        return False
    return (set(protocol.writer_features or ()) <= _WRITABLE_WRITER_FEATURES
            and set(protocol.reader_features or ()) <= _WRITABLE_READER_FEATURES)


# Delta's primitive type names as Spark's simpleString names them (the product's column types only).
_SPARK_NAMES = {"long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint"}
_PLAIN_TYPES = frozenset({"float", "double", "boolean", "string", "binary", "date", "timestamp", "timestamp_ntz"})
_DECIMAL = re.compile(r"decimal\(\d+,\d+\)")


@dataclass(frozen=True)
class TableFacts:
    """What the job reads of a table at its first touch, as Spark would give it."""

    exists: bool
    # The `userMetadata` of its newest commits, newest first (at most the depth asked for).
    user_metadata: tuple[str | None, ...] = ()
    # (Delta name, Spark type name as `DataType.simpleString` gives it) of each column.
    columns: tuple[tuple[str, str], ...] = ()
    # Its properties as SHOW TBLPROPERTIES lists them (configuration and supported table features).
    properties: Mapping[str, str] = field(default_factory=dict)


MISSING = TableFacts(exists=False)


class DeltaRs:
    """MERGEs of in-memory net changes (values of the table's columns, then whether deleted) by delta-rs, and what
    the job reads of a table at its first touch."""

    def __init__(self, max_rows: int = DEFAULT_MAX_ROWS) -> None:
        import pyarrow

        self._pa = pyarrow
        self.max_rows = max_rows

    def facts(self, location: str, depth: int) -> TableFacts | None:
        """What the job reads of the table at `location` at its first touch (`depth`: how many of its newest
        commits' metadata, 0 for none); None where Spark must read it (another store, a table feature delta-rs does not
        read, column mapping, a column type the product does not make)."""
        path = local_path(location)
        if path is None:
            return None
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaProtocolError, TableNotFoundError

        try:
            table = DeltaTable(path)
        except TableNotFoundError:
            return MISSING
        except DeltaProtocolError:
            return None
        properties = dict(table.metadata().configuration)
        if properties.get("delta.columnMapping.mode", "none") != "none":
            return None  # (physical column names differ from the schema's)
        protocol = table.protocol()
        for feature in {*(protocol.reader_features or ()), *(protocol.writer_features or ())}:
            properties[f"delta.feature.{feature}"] = "supported"
        columns = []
        for column in json.loads(table.schema().to_json())["fields"]:
            kind = column["type"]
            if not isinstance(kind, str) or not (kind in _PLAIN_TYPES or kind in _SPARK_NAMES or _DECIMAL.fullmatch(kind)):
                return None
            columns.append((column["name"], _SPARK_NAMES.get(kind, kind)))
        history = table.history(depth) if depth > 0 else []
        return TableFacts(True, tuple(commit.get("userMetadata") for commit in history), tuple(columns), properties)

    def merge(self, location: str, schema: TableSchema, rows: Sequence[tuple], tags: CommitTags) -> bool:
        """Merge `rows` into the table at `location` with `tags` on its commit; False if not taken (Spark's to do).

        `schema` names the table's stored (Delta) column names. A commit conflict or an I/O error raises
        (the batch fails and is replayed); nothing is committed when False is returned.
        """
        path = local_path(location)
        if path is None or len(rows) > self.max_rows:
            return False
        if any(c.spark_type in _NEEDS_SPARK or "`" in c.name for c in schema.columns):
            return False
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaProtocolError
        from deltalake.transaction import CommitProperties, Transaction

        try:
            table = DeltaTable(path)
        except DeltaProtocolError as err:  # a table feature delta-rs does not support
            log.debug("%s: left to Spark's MERGE: %s", location, err)
            return False
        if not _writes_as_spark(table.protocol(), table.metadata().configuration):
            return False
        source = self._source(schema, rows)
        if source is None or not self._same_columns(table, source, len(schema.columns)):
            return False
        if self._holds_times_out_of_range(table, schema, rows):
            return False
        if tags.txn is not None:
            app_id, version = tags.txn
            done = table.transaction_version(app_id)
            if done is not None and done >= version:
                log.debug("%s: already holds the changes through %s (%s); not merged again", location, version, app_id)
                return True
        deleted = _identifier(source.schema.names[-1])
        on = " AND ".join(f"t.{_identifier(k)} = s.{_identifier(k)}" for k in schema.key)
        properties = CommitProperties(
            custom_metadata=None if tags.user_metadata is None else {"userMetadata": json.dumps(tags.user_metadata)},
            app_transactions=None if tags.txn is None else [Transaction(tags.txn[0], tags.txn[1])],
        )
        before = table.version()
        try:
            (table.merge(source, on, source_alias="s", target_alias="t", commit_properties=properties)
             .when_matched_delete(f"s.{deleted}")
             .when_matched_update_all(except_cols=[source.schema.names[-1]])
             .when_not_matched_insert_all(predicate=f"NOT s.{deleted}", except_cols=[source.schema.names[-1]])
             .execute())
        except DeltaProtocolError as err:
            log.debug("%s: left to Spark's MERGE: %s", location, err)
            return False
        if table.version() == before:
            # Nothing changed (deletes of keys the table lacks): delta-rs then makes no commit, where Spark's
            # commits the tags (the applied point must move on), so Spark's MERGE does it.
            return False
        self._checkpoint_as_spark_would(table, location)
        return True

    @staticmethod
    def _checkpoint_as_spark_would(table, location: str) -> None:
        # Spark checkpoints a table's log every `delta.checkpointInterval` commits (10 unless set); delta-rs only
        # every 100. Without one every 10, each first read of the table (a restart's applied point, Spark's next
        # MERGE or DDL) would replay up to 100 commit files, and so would each of delta-rs's own loads.
        interval = int(table.metadata().configuration.get("delta.checkpointInterval", "10"))
        if interval > 0 and table.version() % interval == 0:
            try:
                table.create_checkpoint()
            except Exception as err:  # noqa: BLE001 - as Spark's: the commit is made; a later one checkpoints
                log.warning("%s: checkpoint of version %d failed: %s", location, table.version(), err)

    def _source(self, schema: TableSchema, rows: Sequence[tuple]):
        """The rows as an Arrow table named as the table's columns, then a deleted flag named unlike any of them."""
        pa = self._pa
        try:
            types = [arrow_type(pa, c.spark_type) for c in schema.columns]
        except ApplyError:
            return None  # a type only Spark's MERGE converts
        names = [c.name for c in schema.columns]
        flag = "ticdc_deleted"
        while flag in names:
            flag += "_"
        columns = list(zip(*rows, strict=True)) if rows else [()] * (len(names) + 1)
        arrays = [pa.array(values, type=kind) for values, kind in zip(columns, [*types, pa.bool_()], strict=True)]
        return pa.Table.from_arrays(arrays, names=[*names, flag])

    def _same_columns(self, table, source, count: int) -> bool:
        """Whether the table has exactly the source's columns (but its flag), in name and type."""
        stored = self._pa.schema(table.schema().to_arrow())
        kinds = {field.name: field.type for field in stored}
        if len(kinds) != count:
            return False
        # By name: delta-rs's update-all and insert-all match the source's columns to the table's by name.
        return all(f.name in kinds and kinds[f.name].equals(f.type) for f in list(source.schema)[:count])

    def _holds_times_out_of_range(self, table, schema: TableSchema, rows: Sequence[tuple]) -> bool:
        """Whether the rows or the table may hold a date or time Spark 3.5 refuses in another writer's files, or the
        table a TIMESTAMP delta-rs would misread in Spark's."""
        temporal = [(i, c.name, _EARLIEST[c.spark_type]) for i, c in enumerate(schema.columns) if c.spark_type in _EARLIEST]
        if not temporal:
            return False
        if any(row[i] is not None and row[i] < earliest for row in rows for i, _, earliest in temporal):
            return True
        files = self._pa.table(table.get_add_actions(flatten=True))
        if files.num_rows == 0:
            return False
        present, records = set(files.schema.names), files.column("num_records").to_pylist()
        unknown = [None] * len(records)
        for i, name, earliest in temporal:
            lows = files.column(f"min.{name}").to_pylist() if f"min.{name}" in present else unknown
            highs = files.column(f"max.{name}").to_pylist() if f"max.{name}" in present else unknown
            nulls = files.column(f"null_count.{name}").to_pylist() if f"null_count.{name}" in present else unknown
            late = schema.columns[i].spark_type == "TIMESTAMP"
            for count, low, high, null in zip(records, lows, highs, nulls, strict=True):
                if null == count:
                    continue  # only NULLs in this file
                if low is None or low < earliest or (late and (high is None or high > _LATEST_TIMESTAMP)):
                    return True  # out of range, or not known (no statistics for the column)
        return False
