"""Reads of and writes to the product's own tables (checkpoints, metrics, the table registry, tombstones, the
lease) by delta-rs, where it takes the data tables' small MERGEs (`target.small_merge_writer`: path
tables on the local file system).

Each append through Spark is a statement of its own (planning, a write job, the snapshot and the commit, on the
driver, for one row or a few) and a job run makes several: a checkpoint per batch, the metrics rows, the
registry rows of tables it creates. delta-rs appends the same rows in the job's Python process.

An append is taken only where delta-rs writes what Spark's INSERT would, for every reader: the table's protocol
and properties are those delta-rs writes as Spark does (apply.tables.delta_rs_checks), and its columns are exactly the
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

The lease's conditional changes (its take, renewals and release: `update_one`) are delta-rs's UPDATEs committed
only at the version after the one they read: any commit in between, whatever it changed, fails them, and the
lease decides again on a fresh read. delta-rs's own conflict check is not enough for them: it lets an UPDATE
commit after another writer replaced the file it read with one that no longer matches its predicate (a take by
another job: two rows for one consumer, seen in session 37).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence

from ticdc_delta.apply.tables.arrow_types import arrow_type
from ticdc_delta.apply.tables.delta_rs_base import (
    CONFLICT_WORDS,
    STATISTICS_PREFIX_BYTES,
    checkpoint_as_spark_would,
    local_path,
    unavailable,
    with_conflict_retries,
)
from ticdc_delta.apply.tables.delta_rs_checks import properties_refusal, protocol_refusal

log = logging.getLogger(__name__)

# Table properties delta-rs refuses to set at creation, each at the value that is Delta's default.
# The key of a creation's commit info naming the creation (`_create`).
_CREATION = "ticdcDeltaCreation"
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
            # Not `to_pyarrow_table()`: on Python 3.13 a process that read through it aborts at exit about one
            # time in two ("terminate called without an active exception", status 134: Arrow's threads meet the
            # interpreter's finalization), and a scheduler takes that for a failed run. A read without Arrow's
            # threads does not (0 in 20 here; the tables are small: one thread reads them as fast).
            return table.to_pyarrow_dataset().to_table(use_threads=False)
        except Exception as err:  # noqa: BLE001 - missing (being created), I/O: Spark reads it and says what is wrong
            log.debug("%s: read by Spark: %s", location, err)
            return None

    def create(self, location: str, columns: Sequence[tuple[str, str]], row: tuple,
               properties: Mapping[str, str]) -> bool | None:
        """Create the table at `location` holding `row` as its first commit: True made by this call, False made by
        another writer (nothing of this one committed), None Spark's to do (nothing committed)."""
        path = local_path(location)
        if path is None:
            return None
        try:
            source = self._source(columns, [row])
        except (ValueError, TypeError, self._pa.ArrowException) as err:
            log.debug("%s: created by Spark: %s", location, err)
            return None
        made = self._create(path, location, source, properties, *_writer_and_hooks())
        return {True: True, None: False, False: None}[made]

    def update_one(self, location: str, where: Mapping[str, object], values: Mapping[str, object]) -> bool | None:
        """UPDATE of the row whose columns hold `where`'s values to `values` (text, integers, times with their zone,
        None): True if it changed exactly that row; False if it changed nothing (no such row, or another commit to
        the table since this read: nothing of this one is in it); None Spark's to do (nothing committed)."""
        from deltalake import DeltaTable

        path = local_path(location)
        if path is None:
            return None
        try:
            table = DeltaTable(path)
        except Exception as err:  # noqa: BLE001 - missing, a feature delta-rs does not read, I/O: Spark's
            log.debug("%s: updated by Spark: %s", location, err)
            return None
        return self.update_read(table, path, location, where, values)

    def update_read(self, table, path: str, location: str, where: Mapping[str, object],
                    values: Mapping[str, object]) -> bool | None:
        """`update_one` on `table` as it was read (a DeltaTable at its version)."""
        from deltalake import CommitProperties
        from deltalake.exceptions import CommitFailedError

        why = (protocol_refusal(table.protocol()) or properties_refusal(table.metadata().configuration)
               or (f"partitioned by {table.metadata().partition_columns}" if table.metadata().partition_columns else None))
        if why:
            log.debug("%s: updated by Spark: %s", location, why)
            return None
        try:
            predicate = " AND ".join(f"{name} = {_literal(value)}" for name, value in where.items())
            writer, hooks = _writer_and_hooks()
            metrics = table.update(
                updates={name: _literal(value) for name, value in values.items()}, predicate=predicate,
                writer_properties=writer, post_commithook_properties=hooks,
                # No retry: the commit lands at the version after this read's or not at all (module docstring).
                commit_properties=CommitProperties(max_commit_retries=0),
            )
        except CommitFailedError as err:
            log.info("%s: another commit came first (%s)", location, str(err).strip().splitlines()[0])
            return False
        except Exception as err:  # noqa: BLE001 - delta-rs failed before its commit: Spark's UPDATE instead
            log.warning("%s: delta-rs failed to update (%s: %s); Spark's instead", location, type(err).__name__,
                        str(err).strip().splitlines()[0] if str(err).strip() else "")
            log.debug("%s: delta-rs's error", location, exc_info=err)
            return None
        changed = metrics.get("num_updated_rows", 0)
        if changed:
            checkpoint_as_spark_would(table, path, location)
        return changed == 1

    def _attempt(self, path: str, location: str, columns: Sequence[tuple[str, str]], source,
                 create_with: Mapping[str, str] | None) -> bool | None:
        """True appended, False Spark's to do, None another writer committed first (nothing of this one was)."""
        from deltalake import DeltaTable, write_deltalake
        from deltalake.exceptions import CommitFailedError, TableNotFoundError

        writer, hooks = _writer_and_hooks()
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
        from deltalake import CommitProperties, DeltaTable, write_deltalake

        properties = {k: v for k, v in create_with.items() if _DEFAULTS_LEFT_OUT.get(k) != v}
        if any(k in _DEFAULTS_LEFT_OUT for k in properties):
            return False  # (one delta-rs cannot set, at another value than its default: Spark's)
        # Which creation is this one's, should delta-rs raise after committing it (an I/O error reading back):
        # taken for another writer's, its rows would be appended a second time, or the lease's row taken for
        # another job's.
        token = uuid.uuid4().hex
        try:
            # Version 0 or nothing: not into a table made meanwhile ("error"), and no retry, without which delta-rs
            # 1.6 commits a creation that lost the race at version 1 as a second creation (a new table id and
            # metadata over the first's: tests/unit/test_delta_rs_own_tables.py).
            write_deltalake(path, source, mode="error", configuration=properties, writer_properties=writer,
                            post_commithook_properties=hooks,
                            commit_properties=CommitProperties(max_commit_retries=0, custom_metadata={_CREATION: token}))
        except Exception as err:  # noqa: BLE001 - another creator's first commit came first, or delta-rs failed
            try:
                first = DeltaTable(path).history()[-1]
            except Exception:  # noqa: BLE001 - still missing: delta-rs failed; Spark's CREATE TABLE AS SELECT instead
                return DeltaRsOwnTables._failed(location, err)
            if first.get(_CREATION) == token:
                log.warning("%s: delta-rs raised after its creation committed (%s); the creation stands", location,
                            type(err).__name__)
                return True
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


def _writer_and_hooks():
    """How delta-rs writes the own tables' files (statistics as Spark's), and its post-commit hooks: none, the log
    being checkpointed as Spark does it (`checkpoint_as_spark_would`), not every 100 commits as delta-rs would."""
    from deltalake import WriterProperties
    from deltalake.transaction import PostCommitHookProperties

    return (WriterProperties(compression="SNAPPY", statistics_truncate_length=STATISTICS_PREFIX_BYTES),
            PostCommitHookProperties(create_checkpoint=False))


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


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _literal(value: object) -> str:
    """A value of the product's own tables (text, an integer, a time with its zone, or None) as SQL delta-rs reads."""
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"  # (delta-rs's SQL: no backslash escapes)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return f"to_timestamp_micros({(value - _EPOCH) // dt.timedelta(microseconds=1)})"
    raise TypeError(f"no literal for {value!r}")


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
