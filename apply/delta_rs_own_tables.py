"""Reads of and writes to the product's own tables (checkpoints, metrics, the table registry, tombstones) by
delta-rs, where it takes the data tables' small MERGEs (`target.small_merge_writer`: path
tables on the local file system).

Each append through Spark is a statement of its own (planning, a write job, the snapshot and the commit, on the
driver, for one row or a few) and a job run makes several: a checkpoint per batch, the metrics rows, the
registry rows of tables it creates. delta-rs appends the same rows in the job's Python process.

An append is taken only where delta-rs writes what Spark's INSERT would, for every reader: the table's protocol
and properties are those delta-rs writes as Spark does (apply.delta_rs_checks), and its columns are exactly the
rows' columns, in name, type and order (a table of another release, with more or fewer columns, is Spark's: its
INSERT matches columns by name). A missing table is created with the rows as its first commit, as Spark's CREATE
TABLE AS SELECT makes it: protocol (1, 2), the same columns, the product's table properties but
`delta.enableTypeWidening = false`, which delta-rs cannot set (its default: the table has no type widening
either way; Spark sets it only so that a session default cannot turn it on at creation). Anything else, and any
error delta-rs raises before committing, leaves the append to Spark (False), which then commits it (a creation:
its CREATE TABLE AS SELECT). The write guard (the job's lease) is asked before every attempt.

A read (the registry at each run's start, the newest checkpoint, the tombstones) is delta-rs's wherever the table's
protocol and properties are those it reads as Spark does; Spark's otherwise, and wherever delta-rs cannot open
the table. Each is a Spark statement less too.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence

from ticdc_delta.apply.arrow_types import arrow_type
from ticdc_delta.apply.delta_rs import (
    CONFLICT_WORDS,
    STATISTICS_PREFIX_BYTES,
    checkpoint_as_spark_would,
    local_path,
    unavailable,
    with_conflict_retries,
)
from ticdc_delta.apply.delta_rs_checks import properties_refusal, protocol_refusal

log = logging.getLogger(__name__)

# Table properties delta-rs refuses to set at creation, each at the value that is Delta's default.
_DEFAULTS_LEFT_OUT = {"delta.enableTypeWidening": "false"}
# Delta's primitive type names as the product's column definitions write them.
_DDL_NAMES = {"long": "BIGINT", "integer": "INT", "short": "SMALLINT", "byte": "TINYINT"}


def own_tables_reader(root: str) -> DeltaRsOwnTables | None:
    """delta-rs for the own tables under a path-table root, where it can read them (a local folder, the package
    installed); None: Spark's."""
    return DeltaRsOwnTables() if local_path(root) is not None and unavailable() is None else None


class DeltaRsOwnTables:
    """Reads of and appends to the product's own tables at local paths, as Spark's would leave and read them."""

    def __init__(self) -> None:
        import pyarrow

        self._pa = pyarrow

    def append(self, location: str, columns: Sequence[tuple[str, str]], rows: Sequence[tuple],
               check_write: Callable[[], None], create_with: Mapping[str, str] | None = None) -> bool:
        """Append `rows` (values of `columns`, as (name, Spark type) pairs) to the table at `location`; False if
        not taken (Spark's to do: nothing was committed). `create_with`: the table properties to create it with
        where it is missing (None: a missing table is Spark's to create)."""
        path = local_path(location)
        if path is None or not rows:
            return False
        try:
            source = self._source(columns, rows)
        except (ValueError, TypeError, self._pa.ArrowException) as err:
            log.debug("%s: left to Spark's INSERT: %s", location, err)
            return False
        return with_conflict_retries(lambda: self._attempt(path, location, columns, source, create_with), check_write,
                                     location, "Spark's statement")

    def rows(self, location: str):
        """The table at `location` as an Arrow table (every row), or None where Spark reads it: missing, another
        store, a table feature delta-rs does not read as Spark does."""
        path = local_path(location)
        if path is None:
            return None
        from deltalake import DeltaTable

        try:
            table = DeltaTable(path)
            why = protocol_refusal(table.protocol()) or properties_refusal(table.metadata().configuration)
            if why:
                log.debug("%s: read by Spark: %s", location, why)
                return None
            return table.to_pyarrow_table()
        except Exception as err:  # noqa: BLE001 - missing (being created), I/O: Spark reads it and says what is wrong
            log.debug("%s: read by Spark: %s", location, err)
            return None

    def _attempt(self, path: str, location: str, columns: Sequence[tuple[str, str]], source,
                 create_with: Mapping[str, str] | None) -> bool | None:
        """True appended, False Spark's to do, None another writer committed first (nothing of this one was)."""
        from deltalake import DeltaTable, WriterProperties, write_deltalake
        from deltalake.exceptions import CommitFailedError, TableNotFoundError
        from deltalake.transaction import PostCommitHookProperties

        writer = WriterProperties(compression="SNAPPY", statistics_truncate_length=STATISTICS_PREFIX_BYTES)
        # The log is checkpointed as Spark does it (below), not every 100 commits as delta-rs would on its own.
        hooks = PostCommitHookProperties(create_checkpoint=False)
        try:
            table = DeltaTable(path)
        except TableNotFoundError:
            if create_with is None:
                return False
            return self._create(path, location, source, create_with, writer, hooks)
        except Exception as err:  # noqa: BLE001 - a feature delta-rs does not read, I/O: Spark's
            log.debug("%s: left to Spark's INSERT: %s", location, err)
            return False
        why = (protocol_refusal(table.protocol()) or properties_refusal(table.metadata().configuration)
               or (f"partitioned by {table.metadata().partition_columns}" if table.metadata().partition_columns else None)
               or self._columns_refusal(table, columns))
        if why:
            log.debug("%s: left to Spark's INSERT: %s", location, why)
            return False
        try:
            write_deltalake(table, source, mode="append", writer_properties=writer, post_commithook_properties=hooks)
        except CommitFailedError as err:
            if any(word in str(err).lower() for word in CONFLICT_WORDS):
                return None
            return self._failed(location, err)
        except Exception as err:  # noqa: BLE001 - delta-rs's own errors, I/O, the rows'
            return self._failed(location, err)
        checkpoint_as_spark_would(table, path, location)
        return True

    @staticmethod
    def _create(path: str, location: str, source, create_with: Mapping[str, str], writer, hooks) -> bool | None:
        """The table made with the rows as its first commit; None where another writer made it first."""
        from deltalake import DeltaTable, write_deltalake

        properties = {k: v for k, v in create_with.items() if _DEFAULTS_LEFT_OUT.get(k) != v}
        if any(k in _DEFAULTS_LEFT_OUT for k in properties):
            return False  # (one delta-rs cannot set, at another value than its default: Spark's)
        try:
            write_deltalake(path, source, mode="append", configuration=properties, writer_properties=writer,
                            post_commithook_properties=hooks)
        except Exception as err:  # noqa: BLE001 - another creator's first commit came first, or delta-rs failed
            try:
                DeltaTable(path)
            except Exception:  # noqa: BLE001 - still missing: delta-rs failed; Spark's CREATE TABLE AS SELECT instead
                return DeltaRsOwnTables._failed(location, err)
            return None  # (made by another writer meanwhile: appended to at the next attempt)
        return True

    @staticmethod
    def _failed(location: str, err: Exception) -> bool:
        # An append commits in one step, its last: an error is before it, so nothing of it is in the table.
        log.warning("%s: delta-rs failed to append (%s: %s); Spark's instead", location, type(err).__name__,
                    str(err).strip().splitlines()[0] if str(err).strip() else "")
        log.debug("%s: delta-rs's error", location, exc_info=err)
        return False

    def _columns_refusal(self, table, columns: Sequence[tuple[str, str]]) -> str | None:
        stored = [(field["name"], _ddl_of(field["type"])) for field in json.loads(table.schema().to_json())["fields"]]
        wanted = [(name, _normal(kind)) for name, kind in columns]
        return None if stored == wanted else f"its columns {stored} are not the rows' {wanted}"

    def _source(self, columns: Sequence[tuple[str, str]], rows: Sequence[tuple]):
        pa = self._pa
        values = list(zip(*rows, strict=True))
        arrays = [pa.array(list(column), type=arrow_of(pa, kind)) for column, (_, kind) in zip(values, columns, strict=True)]
        return pa.Table.from_arrays(arrays, names=[name for name, _ in columns])


def arrow_of(pa, ddl: str):
    """The Arrow type of a column type as the product's own tables write it (nested types included)."""
    ddl = ddl.strip()
    upper = ddl.upper()
    if upper.startswith("ARRAY<") and upper.endswith(">"):
        return pa.list_(arrow_of(pa, ddl[6:-1]))
    if upper.startswith("MAP<") and upper.endswith(">"):
        key, value = _top_level(ddl[4:-1])
        return pa.map_(arrow_of(pa, key), arrow_of(pa, value))
    if upper.startswith("STRUCT<") and upper.endswith(">"):
        fields = []
        for part in _top_level(ddl[7:-1]):
            name, kind = part.split(":", 1)
            fields.append(pa.field(name.strip().strip("`"), arrow_of(pa, kind)))
        return pa.struct(fields)
    return arrow_type(pa, upper)


def _top_level(text: str) -> list[str]:
    """`text` split at its commas outside angle brackets."""
    parts, depth, start = [], 0, 0
    for at, char in enumerate(text):
        depth += (char == "<") - (char == ">")
        if char == "," and depth == 0:
            parts.append(text[start:at])
            start = at + 1
    return [*parts, text[start:]]


def _ddl_of(kind) -> str:
    """A Delta schema type (its JSON form) as `_normal` writes a column definition."""
    if isinstance(kind, str):
        return _DDL_NAMES.get(kind, kind.upper())
    if kind["type"] == "array":
        return f"ARRAY<{_ddl_of(kind['elementType'])}>"
    if kind["type"] == "map":
        return f"MAP<{_ddl_of(kind['keyType'])},{_ddl_of(kind['valueType'])}>"
    if kind["type"] == "struct":
        return "STRUCT<" + ",".join(f"{f['name']}:{_ddl_of(f['type'])}" for f in kind["fields"]) + ">"
    return json.dumps(kind)  # (a type the product's own tables do not have: never equal to one of theirs)


def _normal(ddl: str) -> str:
    """A column definition without spaces and name quotes, type names upper-cased (as `_ddl_of` writes them)."""
    ddl = ddl.strip()
    upper = ddl.upper()
    if upper.startswith("ARRAY<"):
        return f"ARRAY<{_normal(ddl[6:-1])}>"
    if upper.startswith("MAP<"):
        key, value = _top_level(ddl[4:-1])
        return f"MAP<{_normal(key)},{_normal(value)}>"
    if upper.startswith("STRUCT<"):
        fields = (part.split(":", 1) for part in _top_level(ddl[7:-1]))
        return "STRUCT<" + ",".join(f"{name.strip().strip('`')}:{_normal(kind)}" for name, kind in fields) + ">"
    return upper
