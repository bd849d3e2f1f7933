"""What delta-rs (the `deltalake` package, no JVM) does for the job under `target.small_merge_writer = "delta-rs"`:
small MERGEs, and the reads of a table's first touch.

A Spark/Delta MERGE of a few rows costs about one CPU-second on the driver (planning, its Spark jobs,
the snapshot; docs/performance.md), so a round over many tables is bound by its commits. delta-rs
commits the same change for about 20 ms CPU. Spark keeps everything else: DDL, snapshot loads, large
sources, history tables, the product's own tables, and any table delta-rs cannot write as Spark would.

A merge is taken only where its result is the one Spark's would have been, for every reader
(apply.tables.delta_rs_checks says what that takes of the table and the rows):

- the rows are held in memory, at most `max_rows` of them;
- the table is a path table on the local file system (an object store's commit safety under delta-rs
  is not yet shown: docs/operations.md);
- the table has no column mapping, deletion vectors or type widening ("compatible" layout), no table
  feature or property delta-rs does not honour as Spark does;
- the table's columns are exactly the source's, in name and type, and none needs Spark to convert it
  (VARIANT), and no name holds a backquote (delta-rs cannot address such a column);
- neither the rows nor the table (by its files' statistics) hold a value delta-rs records or rewrites
  otherwise than Spark does, and every file has statistics to tell.

Anything else returns False and the caller runs Spark's MERGE; so does any error delta-rs raises before
it commits (with a warning), and a commit conflict that is still there after a few attempts. The commit
carries the same tags as Spark's: the applied point in `userMetadata` and the idempotent-write pair as a
Delta `txn` action (Spark skips a MERGE whose pair the table already has; here the same check is made
before writing, again at each attempt).

The same reader gives the job what it reads of a table at its first touch (`facts`: its newest commits'
markers, its columns, its properties), which from Spark would load the table's snapshot into the JVM: about
a second a table the JVM has not read within the hour.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ticdc_delta.apply.base.session import CommitTags
from ticdc_delta.apply.tables.arrow_types import arrow_type
from ticdc_delta.apply.tables.delta_rs_base import (
    CONFLICT_WORDS,
    STATISTICS_PREFIX_BYTES,
    checkpoint_as_spark_would,
    local_path,
    with_conflict_retries,
)
from ticdc_delta.apply.tables.delta_rs_checks import (
    bytes_to_read,
    files_refusal,
    floating,
    properties_refusal,
    protocol_refusal,
    rows_refusal,
)
from ticdc_delta.apply.writers.delta_rs_keys import keys_predicate, keys_refusal
from ticdc_delta.exceptions import ApplyError
from ticdc_delta.schema_cache.events import TableSchema

log = logging.getLogger(__name__)

DEFAULT_MAX_ROWS = 10_000
# delta-rs reads every file whose key bounds the changes' keys fall within, on one core of the driver; Spark's
# MERGE spreads its reads over the executors, for about a second of fixed cost. Measured up to 144 MiB (a 10^7-row
# table), delta-rs took 0.02x-0.05x Spark's time, both growing with the bytes read (benchmarks/bench.py,
# table-size: docs/performance.md); the bound keeps delta-rs within twice the largest size measured.
DEFAULT_MAX_READ_BYTES = 256 * 2**20
_NEEDS_SPARK = frozenset({"VARIANT"})


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

    def __init__(self, max_rows: int = DEFAULT_MAX_ROWS, max_read_bytes: int | None = DEFAULT_MAX_READ_BYTES) -> None:
        import pyarrow
        import pyarrow.compute

        self._pa = pyarrow
        self._pc = pyarrow.compute
        self.max_rows = max_rows
        self.max_read_bytes = max_read_bytes

    def facts(self, location: str, depth: int | None) -> TableFacts | None:
        """What the job reads of the table at `location` at its first touch (`depth`: how many of its newest
        commits' metadata, 0 for none, None for all); None where Spark must read it (another store, a table feature delta-rs does not
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
        history = table.history(depth) if depth is None or depth > 0 else []
        return TableFacts(True, tuple(commit.get("userMetadata") for commit in history), tuple(columns), properties)

    def merge(self, location: str, schema: TableSchema, rows: Sequence[tuple], tags: CommitTags,
              check_write: Callable[[], None] | None = None) -> bool:
        """Merge `rows` into the table at `location` with `tags` on its commit; False if not taken (Spark's to do).

        `schema` names the table's stored (Delta) column names. `check_write` is asked before every attempt (the
        job's lease: it raises to refuse the write). Nothing is committed when False is returned.
        """
        path = local_path(location)
        if path is None or not rows or len(rows) > self.max_rows:
            return False
        if any(c.spark_type in _NEEDS_SPARK or "`" in c.name for c in schema.columns):
            return False
        if any("." in c.name for c in floating(schema)):
            return False  # (its Parquet settings below would not reach it: delta-rs reads the dot as nesting)
        why = keys_refusal(schema, rows) or rows_refusal(schema, rows)
        if why:
            log.debug("%s: left to Spark's MERGE: %s", location, why)
            return False
        return with_conflict_retries(lambda: self._attempt(path, location, schema, rows, tags), check_write,
                                     location, "Spark's MERGE")

    def _attempt(self, path: str, location: str, schema: TableSchema, rows: Sequence[tuple],
                 tags: CommitTags) -> bool | None:
        """One attempt at the MERGE on the table as it is now: True done (or done before), False Spark's to do,
        None another writer committed first (nothing of this one was)."""
        from deltalake import DeltaTable
        from deltalake.exceptions import CommitFailedError, DeltaProtocolError

        try:
            table = DeltaTable(path)
        except DeltaProtocolError as err:  # a table feature delta-rs does not support
            log.debug("%s: left to Spark's MERGE: %s", location, err)
            return False
        except Exception as err:  # noqa: BLE001 - whatever it is, Spark's MERGE meets it too, or does not
            return self._failed(location, path, None, tags, err)
        try:
            source = self._source(schema, rows)
        except (ValueError, TypeError, OverflowError, self._pa.ArrowException) as err:
            # A value Arrow does not take as the column's type (Spark's MERGE casts it as the table has it).
            log.debug("%s: left to Spark's MERGE: the changes as Arrow: %s", location, err)
            return False
        files = self._pa.table(table.get_add_actions(flatten=True))
        # (Partition values are written in the file paths and the log as each writer encodes them: not checked
        # to be Spark's, so a partitioned table is Spark's.)
        partitions = table.metadata().partition_columns
        why = (protocol_refusal(table.protocol()) or properties_refusal(table.metadata().configuration)
               or (f"partitioned by {', '.join(partitions)}" if partitions else None)
               or (None if source is not None and self._same_columns(table, source, len(schema.columns))
                   else "its columns are not the changes' columns")
               or files_refusal(schema, files) or self._read_refusal(schema, files, rows))
        if why:
            log.debug("%s: left to Spark's MERGE: %s", location, why)
            return False
        if tags.txn is not None:
            app_id, version = tags.txn
            done = table.transaction_version(app_id)
            if done is not None and done >= version:
                log.debug("%s: already holds the changes through %s (%s); not merged again", location, version, app_id)
                return True
        before = table.version()
        try:
            self._execute(table, schema, rows, source, tags)
        except DeltaProtocolError as err:
            log.debug("%s: left to Spark's MERGE: %s", location, err)
            return False
        except CommitFailedError as err:
            if any(word in str(err).lower() for word in CONFLICT_WORDS):
                return None
            return self._failed(location, path, before, tags, err)
        except Exception as err:  # noqa: BLE001 - delta-rs's own errors, I/O, the source's
            return self._failed(location, path, before, tags, err)
        if table.version() == before:
            # Nothing changed (deletes of keys the table lacks): delta-rs then makes no commit, where Spark's
            # commits the tags (the applied point must move on), so Spark's MERGE does it.
            return False
        checkpoint_as_spark_would(table, path, location)
        return True

    def _execute(self, table, schema: TableSchema, rows: Sequence[tuple], source, tags: CommitTags) -> None:
        """The MERGE as one delta-rs write: the rows of every key in the changes replaced by the changes' upserts.

        For net changes (one row per key, apply.changes.table_changes) that is what the MERGE does: a deleted key's row goes, an
        updated one's is replaced, a new one is inserted, a deleted key the table lacks changes nothing. delta-rs's
        own MERGE writes its text columns as Arrow's string_view, which pyarrow (up to 26) cannot filter: a
        filtered read through pyarrow (pandas, `to_pyarrow_table(filters=...)`) of such a file fails. Its write
        with a predicate writes them as strings, and skips the files whose statistics rule the keys out.
        """
        from deltalake import ColumnProperties, WriterProperties, write_deltalake
        from deltalake.transaction import CommitProperties, PostCommitHookProperties, Transaction

        upserts = self._upserts(source)
        properties = CommitProperties(
            custom_metadata=None if tags.user_metadata is None else {"userMetadata": json.dumps(tags.user_metadata)},
            app_transactions=None if tags.txn is None else [Transaction(tags.txn[0], tags.txn[1])],
        )
        # FLOAT/DOUBLE values are written without a dictionary: Spark's Parquet reader checks an equality against
        # a dictionary by the values' bits, so a file whose dictionary holds -0.0 was skipped by `= 0.0`.
        plain = {c.name: ColumnProperties(dictionary_enabled=False) for c in floating(schema)}
        writer = WriterProperties(compression="SNAPPY", statistics_truncate_length=STATISTICS_PREFIX_BYTES,
                                  column_properties=plain or None)
        # The log is checkpointed as Spark does it (below), not every 100 commits as delta-rs would on its own.
        hooks = PostCommitHookProperties(create_checkpoint=False)
        write_deltalake(table, upserts, mode="overwrite", predicate=keys_predicate(schema, rows),
                        writer_properties=writer, commit_properties=properties, post_commithook_properties=hooks)

    def _read_refusal(self, schema: TableSchema, files, rows: Sequence[tuple]) -> str | None:
        if self.max_read_bytes is None:
            return None
        read = bytes_to_read(schema, files, rows)
        if read <= self.max_read_bytes:
            return None
        return f"{read / 2**20:.0f} MiB of files may hold the changes' keys (more than {self.max_read_bytes / 2**20:.0f})"

    def _upserts(self, source):
        """The source's rows that are not deletes, without its deleted flag: what the write adds."""
        flag = source.column(source.num_columns - 1)
        return source.drop_columns([source.schema.names[-1]]).filter(self._pc.invert(flag))

    def _failed(self, location: str, path: str, before: int | None, tags: CommitTags, err: Exception) -> bool:
        """After delta-rs raised: True if the MERGE was committed all the same (a step after the commit failed),
        else False (Spark's MERGE runs instead), each said in one line."""
        reason = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
        if before is not None and self._committed(path, before, tags):
            log.warning("%s: delta-rs committed the MERGE, then failed (%s)", location, reason)
            return True
        log.warning("%s: delta-rs failed before committing (%s); Spark's MERGE instead", location, reason)
        log.debug("%s: delta-rs's error", location, exc_info=err)
        return False

    @staticmethod
    def _committed(path: str, before: int, tags: CommitTags) -> bool:
        """Whether a commit after version `before` is this MERGE's (its idempotent pair, else its metadata)."""
        from deltalake import DeltaTable

        try:
            table = DeltaTable(path)
            if table.version() == before:
                return False
            if tags.txn is not None:
                done = table.transaction_version(tags.txn[0])
                return done is not None and done >= tags.txn[1]
            marker = None if tags.user_metadata is None else json.dumps(tags.user_metadata)
            return marker is not None and any(
                commit.get("userMetadata") == marker for commit in table.history(table.version() - before))
        except Exception as err:  # noqa: BLE001 - then it cannot be told: the caller's MERGE decides by the pair
            log.debug("%s: could not read back what was committed: %s", path, err)
            return False

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
