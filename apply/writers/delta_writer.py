"""SQL against Delta tables: create, evolve structure, MERGE, truncate.

Upstream names reach SQL only quoted (`apply.base.identifiers.quote`); upstream
values reach Spark only inside DataFrames, never as SQL text.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from ticdc_delta.apply.base.identifiers import quote, sql_string
from ticdc_delta.apply.base.phases import PhaseTimes
from ticdc_delta.apply.base.session import INTERPRETED_EXPRESSIONS, SqlSession, spark_version
from ticdc_delta.apply.changes import history as history_sql
from ticdc_delta.apply.changes.merge_source import MergeSource, SourceRows
from ticdc_delta.apply.places.locator import TableLocator
from ticdc_delta.apply.places.routing import CreatedLayout
from ticdc_delta.apply.tables.features import COMPATIBLE, SETTINGS, TableLayout
from ticdc_delta.apply.tables.markers import APP_ID, commit_tags, described_history, read_progress
from ticdc_delta.apply.tables.points import AppliedPoint, PendingBackfill, TableProgress
from ticdc_delta.apply.writers.delta_rs import DeltaRs, TableFacts
from ticdc_delta.apply.writers.evolution import EvolutionPlan, normalized_type, plan
from ticdc_delta.exceptions import ConfigError
from ticdc_delta.schema_cache.events import Column, TableName, TableSchema

log = logging.getLogger(__name__)

# Table features a column type needs. CREATE TABLE enables them itself; a
# later ADD COLUMN or type change must enable them first.
_TYPE_FEATURES = {"TIMESTAMP_NTZ": "timestampNtz", "VARIANT": "variantType"}

_DELETED = "ticdc_deleted"


def _source_column(i: int) -> str:
    # Source columns are positional so no upstream name can collide with ours.
    return f"c{i}"


# A MERGE of rows held in memory: its source is a literal part of the plan, so Delta need not copy it
# aside first (its guard against a source that changes between the MERGE's two passes). A small one is
# joined by broadcast with nothing for adaptive execution to re-plan, which would run each of the MERGE's
# query stages as a Spark job of its own: a small MERGE then takes 5 Spark jobs, not 12 (Delta 4.4), as a batch
# over many tables makes many (docs/performance-history.md: on two busy cores their CPU, more than their number, costs).
# Its expressions are interpreted (unless the session says how): compiling them costs more than evaluating
# them on that few rows.
_IN_MEMORY_SOURCE = {"spark.databricks.delta.merge.materializeSource": "none"}
_SMALL_IN_MEMORY_SOURCE = {**_IN_MEMORY_SOURCE, "spark.sql.adaptive.enabled": "false", **INTERPRETED_EXPRESSIONS}
_SMALL_SOURCE_ROWS = 10_000


def in_memory_source_settings(rows: int) -> Mapping[str, str]:
    """The session settings a MERGE of `rows` rows held in memory runs with (the small ones: a superset)."""
    return _SMALL_IN_MEMORY_SOURCE if rows <= _SMALL_SOURCE_ROWS else _IN_MEMORY_SOURCE


# Spark types a DataFrame cannot carry from Python values: the source column
# holds another type and the statement converts it.
_SOURCE_FORMS = {"VARIANT": ("STRING", "parse_json({})")}


def _source_type(column: Column) -> str:
    return _SOURCE_FORMS.get(column.spark_type, (column.spark_type, ""))[0]


def _source_value(i: int, column: Column) -> str:
    template = _SOURCE_FORMS.get(column.spark_type, ("", "{}"))[1]
    return template.format(f"s.{_source_column(i)}")


def _source_schema(columns: Sequence[Column], *extra: str) -> str:
    return ", ".join([f"{_source_column(i)} {_source_type(c)}" for i, c in enumerate(columns)] + list(extra))


def create_table_sql(name: str, schema: TableSchema, *, replace: bool, properties: Mapping[str, str],
                     partition_by: Sequence[str] = (), cluster_by: Sequence[str] = (), comment: str = "") -> str:
    """`properties` and `comment` as string literals (a rule's are the user's text, the comment holds upstream
    names); `partition_by` / `cluster_by`: Delta column names."""
    columns = ", ".join(f"{quote(c.name)} {c.spark_type}" for c in schema.columns)
    settings = ", ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in properties.items())
    # Not CREATE OR REPLACE: on an existing path table Delta treats that as
    # "create unless it exists" and keeps the rows.
    verb = "REPLACE TABLE" if replace else "CREATE TABLE"
    layout = ""
    if partition_by:
        layout += f" PARTITIONED BY ({', '.join(quote(c) for c in partition_by)})"
    if cluster_by:
        layout += f" CLUSTER BY ({', '.join(quote(c) for c in cluster_by)})"
    if comment:
        layout += f" COMMENT {sql_string(comment)}"
    return f"{verb} {name} ({columns}) USING DELTA{layout} TBLPROPERTIES ({settings})"


def _layout_columns(created: CreatedLayout, key: str, layout: TableLayout, schema: TableSchema,
                    table: TableName) -> list[str]:
    """A rule's partition or clustering columns as the table stores them; a column the table lacks: exit 2."""
    names = {c.name.lower(): c.name for c in schema.columns}
    wanted = getattr(created, key)
    missing = [c for c in wanted if c.lower() not in names]
    if missing:
        raise ConfigError(f"{created.rule}.{key}: {created.upstream} (created as {table}) has no column "
                          f"{missing[0]!r}; its columns: {', '.join(c.name for c in schema.columns)}")
    return [layout.delta_name(names[c.lower()]) for c in wanted]


def merge_sql(name: str, schema: TableSchema, source: str) -> str:
    """MERGE of net changes, one source row per key.

    Clause order matters: a matched deleted key is deleted, any other matched
    key takes the new image, and an unmatched key is inserted unless deleted.
    """
    names = schema.column_names()
    on = " AND ".join(f"t.{quote(k)} = s.{_source_column(names.index(k))}" for k in schema.key)
    values = [_source_value(i, c) for i, c in enumerate(schema.columns)]
    assignments = ", ".join(f"t.{quote(n)} = {v}" for n, v in zip(names, values, strict=True))
    targets = ", ".join(quote(n) for n in names)
    return (
        f"MERGE INTO {name} AS t USING {source} AS s ON {on} "
        f"WHEN MATCHED AND s.{_DELETED} THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET {assignments} "
        f"WHEN NOT MATCHED AND NOT s.{_DELETED} THEN INSERT ({targets}) VALUES ({', '.join(values)})"
    )


def insert_sql(name: str, schema: TableSchema, source: str) -> str:
    """The upserts of a MERGE source appended: for a table known to be empty."""
    targets = ", ".join(quote(c.name) for c in schema.columns)
    values = ", ".join(_source_value(i, c) for i, c in enumerate(schema.columns))
    return f"INSERT INTO {name} ({targets}) SELECT {values} FROM {source} AS s WHERE NOT s.{_DELETED}"


def add_columns_sql(name: str, additions: Sequence[tuple[Column, str | None]]) -> str:
    """ADD COLUMNS keeping upstream order: each column goes AFTER its predecessor."""
    parts = []
    for column, after in additions:
        position = f" AFTER {quote(after)}" if after else " FIRST"
        parts.append(f"{quote(column.name)} {column.spark_type}{position}")
    return f"ALTER TABLE {name} ADD COLUMNS ({', '.join(parts)})"


def _cast(expression: str, new_type: str, lenient: bool = False) -> str:
    if new_type == "VARIANT":
        return f"parse_json(CAST({expression} AS STRING))"
    return f"{'TRY_CAST' if lenient else 'CAST'}({expression} AS {new_type})"


# One column of a table rewrite: the Delta column it comes from (None: a new,
# empty column), the type to cast it to (None: as it is), its Delta name.
RewriteColumn = tuple[str | None, str | None, str]


def rewrite_select_sql(name: str, columns: Sequence[RewriteColumn], lenient: bool = False) -> str:
    """The SELECT from the table itself that gives its rewrite's rows and columns; `lenient`: a value that
    does not convert to its new type becomes NULL (a history's closed states, which upstream never
    checked against the new type), instead of failing the statement."""
    items = []
    for source, new_type, output in columns:
        if source is None:
            expression = f"CAST(NULL AS {new_type})"
        elif new_type is None:
            expression = quote(source)
        else:
            expression = _cast(quote(source), new_type, lenient)
        items.append(f"{expression} AS {quote(output)}")
    return f"SELECT {', '.join(items)} FROM {name}"


@dataclass(frozen=True)
class _Step:
    statement: str | Callable[[], object]
    # Recorded on this step's commit when it is not the last one.
    pending: PendingBackfill | None = None


@dataclass(frozen=True, kw_only=True)
class Evolution:
    """How `DeltaWriter.evolve` brings a table to a new structure, and how the change is recorded.

    `statement`: the upstream DDL text (renames are read from it); `ddl`: the DDL's identity, and
    `prior`/`pending`: the table's point before it and the defaults a crashed run left to write, so
    that a redo finishes the same change. `additive_only`: only add and widen columns (a structure
    seen in rows, not announced by a DDL: never lose data on its account). `keep_dropped`: columns the
    structure lacks stay, and a rewrite's values that do not convert become NULL (a history table
    keeps what its rows had). `defaults_where`: the rows defaults are written into (the product's
    own condition on the target `t`; default all).
    """

    statement: str = ""
    ddl: str | None = None
    prior: AppliedPoint | None = None
    pending: PendingBackfill | None = None
    additive_only: bool = False
    keep_dropped: bool = False
    defaults_where: str | None = None


# Structure seen in rows rather than announced by a DDL.
ADDITIVE_ONLY = Evolution(additive_only=True)


class DeltaWriter:
    """The statements that change upstream tables' Delta tables, on the job's SQL session."""

    def __init__(
        self,
        sql: SqlSession,
        locator: TableLocator,
        times: PhaseTimes | None = None,
        *,
        table_features: str = COMPATIBLE,
        small_merges: DeltaRs | None = None,
        layouts: Callable[[TableName], CreatedLayout] | None = None,
    ) -> None:
        """`layouts`: how each table is created (`apply.places.routing.Routes.layout`: its `[[tables]]` rule's
        properties, partitioning or clustering and comment); default: none of them."""
        if table_features not in SETTINGS:
            raise ValueError(f"table_features: {table_features!r}; allowed: {', '.join(SETTINGS)}")
        self._sql = sql
        self._locator = locator
        self._times = times or PhaseTimes()
        self._setting = table_features
        # Small in-memory MERGEs committed by delta-rs where it writes what Spark would (apply.writers.delta_rs).
        self._small_merges = small_merges
        self._layouts_of = layouts or (lambda table: CreatedLayout("tables", table))
        # What each table touched has (column mapping, ...), read once; dropped
        # whenever the job changes a table's structure.
        self._layouts: dict[TableName, TableLayout] = {}
        self._warned: set[TableName] = set()

    def fork(self) -> DeltaWriter:
        """A writer on a session of its own (`SqlSession.fork`), for statements running at the same time as
        this one's (`apply.writers.table_pool`); it shares what this one knows of each table's layout."""
        twin = copy.copy(self)
        twin._sql = self._sql.fork()
        return twin

    def _name(self, table: TableName) -> str:
        self._locator.load(self._sql)  # where path tables are: read once per process
        return self._locator.sql_name(table)

    def progress(self, table: TableName) -> TableProgress:
        """Whether the table exists, and how far its commits say it is applied."""
        with self._times.phase("table_state"):
            name = self._name(table)
            if self._locator.gone(table):
                return TableProgress(exists=False)  # its folder, if still there, holds the table that left
            newest = self._facts(table, 1)
            if newest is None:
                return read_progress(self._sql, name)

            def commits(depth: int | None) -> list[str | None] | None:
                facts = newest if depth == 1 else self._facts(table, depth)
                if facts is None:  # (no longer one delta-rs reads as Spark would)
                    return described_history(self._sql, name, depth)
                return list(facts.user_metadata) if facts.exists else None

            return read_progress(self._sql, name, commits)

    def _facts(self, table: TableName, depth: int | None = 0) -> TableFacts | None:
        """What delta-rs reads of the table (`depth`: of its newest commits' metadata), where the job has it
        (`target.small_merge_writer`) and the table is one it reads as Spark would; None: Spark's to read."""
        location = self._delta_rs_location(table)
        return None if location is None else self._small_merges.facts(location, depth)

    def _delta_rs_location(self, table: TableName) -> str | None:
        """Where the table is, for delta-rs: None without it, or for catalog tables (only the catalog's engines
        commit to them)."""
        path = getattr(self._locator, "path", None)
        if self._small_merges is None or path is None:
            return None
        self._name(table)  # (loads where path tables are: a renamed table's folder)
        return path(table)

    def columns(self, table: TableName) -> list[tuple[str, str]]:
        """(upstream name, Spark type) of the table's current columns."""
        layout = self._layout(table)
        return [(layout.upstream_name(name), kind) for name, kind in self._delta_columns(table)]

    def _delta_columns(self, table: TableName) -> list[tuple[str, str]]:
        facts = self._facts(table)
        if facts is not None and facts.exists:
            return list(facts.columns)
        fields = self._sql.table(self._name(table)).schema.fields
        return [(f.name, f.dataType.simpleString()) for f in fields]

    def _layout(self, table: TableName) -> TableLayout:
        layout = self._layouts.get(table)
        return layout if layout is not None else self._read_layout(table)

    def _read_layout(self, table: TableName) -> TableLayout:
        facts = self._facts(table)
        if facts is not None and facts.exists:
            properties = facts.properties
        else:
            properties = {r["key"]: r["value"] for r in self._sql.sql(f"SHOW TBLPROPERTIES {self._name(table)}").collect()}
        layout = self._layouts[table] = TableLayout.of(properties)
        unreadable = layout.unreadable_features()
        if self._setting == COMPATIBLE and unreadable and table not in self._warned:
            # Created under "full" or by an earlier release, or given features by session or
            # workspace defaults (spark.databricks.delta.properties.defaults.*): Delta never removes
            # a feature by itself. The job goes on using what the table has.
            self._warned.add(table)
            log.warning(
                "%s has table features %s, which delta-rs and other non-Spark readers refuse or misread, although "
                "target.table_features is %r; ALTER TABLE ... DROP FEATURE removes them",
                table, ", ".join(unreadable), self._setting,
            )
        return layout

    def _created_layout(self) -> TableLayout:
        # Type widening is a stable feature from Delta 4.0 (Spark 4); Delta 3.x
        # has only a preview that widens among the small integer types.
        return TableLayout.for_setting(self._setting, stable_type_widening=spark_version(self._sql.spark) >= (4, 0))

    def create(self, table: TableName, schema: TableSchema, point: AppliedPoint | None, *, replace: bool,
               note: Mapping[str, object] | None = None) -> None:
        layout = self._created_layout()
        with self._times.phase("ddl"):
            self._locator.prepare(self._sql, table)
            # A dropped table not yet cleaned up where this one goes (dropped and created again): replaced
            # in one commit, as on an object store nothing is deleted in a batch.
            replace = replace or self._locator.holds_leftover(self._sql, table)
            if not replace:
                self._locator.clear_cut_short(self._sql, table)
            created = self._layouts_of(table)
            statement = create_table_sql(
                self._name(table), layout.delta_schema(schema), replace=replace,
                properties={**layout.create_properties(), **created.properties},
                partition_by=_layout_columns(created, "partition_by", layout, schema, table),
                cluster_by=_layout_columns(created, "cluster_by", layout, schema, table), comment=created.comment,
            )
            self._sql.run(statement, commit_tags(point, note=note), what=f"create {table}")
            self._layouts.pop(table, None)
            self._read_layout(table)  # and says if the new table has features the setting does not want
        log.info("%s %s (%d columns)", "replaced" if replace else "created", table, len(schema.columns))

    def evolve(self, table: TableName, schema: TableSchema, point: AppliedPoint | None,
               how: Evolution = Evolution()) -> bool:
        """Make the table's structure that of `schema`; True if anything changed.

        Order: renames, drops, adds, type changes, then defaults written into
        the rows that existed before. A table without column mapping cannot
        rename or drop a column in place: there one rewrite of the table makes
        the renames, drops, adds and type changes together. Type changes the
        table cannot make in place also rewrite it. Only the last step carries `point`, so a
        crash part-way leaves the table marked as before (`prior`) and the
        change is redone; since a redo finds the new columns already there,
        the add step records which defaults are still to be written for the
        DDL identified by `how.ddl` (`how.pending`, read back on restart).
        `how` (an `Evolution`) says what the change may do and how it is recorded.
        """
        with self._times.phase("ddl"):
            return self._evolve(table, schema, point, how)

    def _evolve(self, table: TableName, schema: TableSchema, point: AppliedPoint | None, how: Evolution) -> bool:
        statement, ddl, prior, pending = how.statement, how.ddl, how.prior, how.pending
        additive_only, keep_dropped, defaults_where = how.additive_only, how.keep_dropped, how.defaults_where
        name = self._name(table)
        layout = self._read_layout(table)
        current = self._delta_columns(table)
        change = plan([(layout.upstream_name(n), kind) for n, kind in current], schema, statement)
        if additive_only:
            change = EvolutionPlan(adds=change.adds, widenings=change.widenings, backfill=change.backfill)
        if keep_dropped:
            change = dataclasses.replace(change, drops=[])
        if change.widenings and not layout.type_widening:
            # No stable type widening on this table ("compatible" tables, and Delta 3.x, whose
            # preview widens only among the small integer types): rewrite instead.
            change = dataclasses.replace(change, widenings=[], rewrite=change.rewrite + change.widenings)
        backfill = list(change.backfill)
        if pending is not None and ddl is not None and pending.ddl == ddl:
            done = {c.name.lower() for c in backfill}
            wanted = {n.lower() for n in pending.columns} - done
            backfill += [c for c in schema.columns if c.name.lower() in wanted and c.default is not None]

        new_types = [c.spark_type for c, _ in change.adds] + [t for _, t in change.widenings + change.rewrite]
        features = sorted({_TYPE_FEATURES[t] for t in new_types if t in _TYPE_FEATURES} - layout.features)
        steps = [_Step(f"ALTER TABLE {name} SET TBLPROPERTIES ('delta.feature.{f}' = 'supported')") for f in features]
        defaults = tuple(c.name for c in change.backfill)
        marker = PendingBackfill(ddl, defaults) if defaults and ddl is not None else None
        laid_out = self._laid_out_by(table, layout, change.drops) if layout.column_mapping and change.drops else []
        if (not layout.column_mapping and (change.renames or change.drops)) or laid_out:
            restructured = _restructured(layout, current, schema, change.renames, keep_rest=keep_dropped)
            why = (f"no column mapping; renames {change.renames or '-'}, drops {change.drops or '-'}" if not laid_out
                   else f"a drop of {laid_out}, which it is partitioned or clustered by: Delta drops no such column")
            steps.append(_Step(lambda: self._rewrite(table, restructured, why, lenient=keep_dropped), marker))
        else:
            column = layout.delta_name
            steps += [_Step(f"ALTER TABLE {name} RENAME COLUMN {quote(a)} TO {quote(b)}") for a, b in change.renames]
            if change.drops:
                dropped = ", ".join(quote(n) for n in change.drops)
                steps.append(_Step(f"ALTER TABLE {name} DROP COLUMNS ({dropped})"))
            if change.adds:
                adds = [(dataclasses.replace(c, name=column(c.name)), after and column(after)) for c, after in change.adds]
                steps.append(_Step(add_columns_sql(name, adds), marker))
            steps += [
                _Step(f"ALTER TABLE {name} ALTER COLUMN {quote(column(c))} TYPE {new}") for c, new in change.widenings
            ]
            if change.rewrite:
                # Its columns are read when it runs: as the earlier steps left them.
                new_types_of = dict(change.rewrite)
                why = f"type changes {change.rewrite}"
                steps.append(_Step(lambda: self._rewrite(table, self._retyped(table, layout, new_types_of), why,
                                                         lenient=keep_dropped)))
        if backfill:
            steps.append(_Step(lambda: self._write_defaults(table, layout, backfill, defaults_where)))

        for i, step in enumerate(steps):
            if i == len(steps) - 1:
                tags = commit_tags(point)
            else:
                tags = commit_tags(prior if step.pending else None, pending=step.pending)
            try:
                self._sql.run(step.statement, tags, what=f"evolve {table}")
            finally:
                self._layouts.pop(table, None)
        if steps:
            log.info(
                "%s: renamed %s, dropped %s, added %s, widened %s, rewrote %s, defaults written for %s",
                table,
                change.renames or "-",
                change.drops or "-",
                [c.name for c, _ in change.adds] or "-",
                change.widenings or "-",
                change.rewrite or "-",
                [c.name for c in backfill] or "-",
            )
        return bool(steps)

    def _retyped(self, table: TableName, layout: TableLayout, new_types: Mapping[str, str]) -> list[RewriteColumn]:
        """Every current column, those named in `new_types` (upstream names) cast to their new type."""
        by_lower = {k.lower(): v for k, v in new_types.items()}
        return [(n, by_lower.get(layout.upstream_name(n).lower()), n) for n, _ in self._delta_columns(table)]

    def _laid_out_by(self, table: TableName, layout: TableLayout, drops: Sequence[str]) -> list[str]:
        """Which of `drops` (upstream names) the table is partitioned or clustered by: Delta's ALTER TABLE DROP
        COLUMNS refuses those, column mapping or not (the table is rewritten without them instead)."""
        detail = self._sql.spark.sql(f"DESCRIBE DETAIL {self._name(table)}").collect()[0].asDict()
        laid = {c.lower() for key in ("partitionColumns", "clusteringColumns") for c in detail.get(key) or ()}
        return [d for d in drops if layout.delta_name(d).lower() in laid]

    def _rewrite(self, table: TableName, columns: Sequence[RewriteColumn], why: str, *, lenient: bool = False) -> None:
        """Replace the table's rows and columns by a SELECT from itself, in one commit.

        For changes Delta cannot make in place (narrowing, to or from text, DATE
        to TIMESTAMP_NTZ; renames and drops without column mapping). An
        overwrite with a new schema keeps the table's properties, features and
        history (CREATE OR REPLACE would reset its properties), and the
        commit is tagged like any other. Runs inside the tagged step.
        """
        log.warning("%s: rewriting the table (%s)", table, why)
        name = self._name(table)
        # An overwrite of the schema also drops the partitioning and the clustering: given again, under the
        # columns' new names (one dropped leaves them).
        detail = self._sql.spark.sql(f"DESCRIBE DETAIL {name}").collect()[0].asDict()
        kept = {source: output for source, _, output in columns if source is not None}
        partitions, clustering = ([kept[c] for c in detail.get(key) or () if c in kept]
                                  for key in ("partitionColumns", "clusteringColumns"))
        if len(partitions) < len(detail.get("partitionColumns") or ()) or \
                len(clustering) < len(detail.get("clusteringColumns") or ()):
            log.warning("%s: partitioned or clustered by a column the rewrite drops: now by %s", table,
                        partitions or clustering or "none")
        rows = self._sql.spark.sql(rewrite_select_sql(name, columns, lenient))
        rows.write.format("delta").mode("overwrite").option("overwriteSchema", "true").partitionBy(*partitions) \
            .saveAsTable(name)
        if clustering:
            self._sql.spark.sql(f"ALTER TABLE {name} CLUSTER BY ({', '.join(quote(c) for c in clustering)})")

    def _write_defaults(self, table: TableName, layout: TableLayout, columns: Sequence[Column],
                        where: str | None = None) -> None:
        # Rows that existed before ADD COLUMN read its default in TiDB; one
        # MERGE against a single-row source writes it into all of them. Runs
        # inside the tagged step (the caller holds the session).
        row = [tuple(c.default for c in columns)]
        with self._sql.view(row, _source_schema(columns)) as source:
            assignments = ", ".join(
                f"t.{quote(layout.delta_name(c.name))} = {_source_value(i, c)}" for i, c in enumerate(columns)
            )
            self._sql.spark.sql(
                f"MERGE INTO {self._name(table)} AS t USING {source} AS s ON TRUE "
                f"WHEN MATCHED{f' AND {where}' if where else ''} THEN UPDATE SET {assignments}"
            )

    def merge(self, table: TableName, schema: TableSchema, source: MergeSource, point: AppliedPoint, *,
              into_empty: bool = False, idempotent: bool = True, note: Mapping[str, object] | None = None) -> None:
        """Apply net changes through `point`: `source` holds per key its values of `schema`'s columns (c0..)
        then whether it was deleted (`apply.changes.table_changes`). `into_empty`: the table is known to hold no rows.

        Into an empty table the changes are appended (the upserts; deletes have
        nothing to delete): the same result as a MERGE, without its join.
        `idempotent` False: no idempotent-write pair (a dead-letter replay, which
        does not move the table past the commitTs it already records; a snapshot's
        rows replacing a table whose log may hold the stream's); `note` says on
        the commit what it was.
        """
        if into_empty and isinstance(source, SourceRows):
            source = SourceRows([row for row in source.rows if not row[-1]])  # deletes: nothing to delete
            if not source.rows:
                return
        layout = self._layout(table)
        schema = layout.delta_schema(schema)
        if isinstance(source, SourceRows) and self._merged_by_delta_rs(table, layout, schema, source, point,
                                                                       idempotent=idempotent, note=note):
            return
        with self._view(source, _source_schema(schema.columns, f"{_DELETED} BOOLEAN")) as view:
            self._merge_source(table, schema, view, point, into_empty=into_empty, idempotent=idempotent, note=note)

    def _merged_by_delta_rs(self, table: TableName, layout: TableLayout, schema: TableSchema, source: SourceRows,
                            point: AppliedPoint, *, idempotent: bool, note: Mapping[str, object] | None) -> bool:
        """The MERGE committed by delta-rs, if configured and it takes this one (apply.writers.delta_rs)."""
        location = self._delta_rs_location(table)
        if location is None or layout.column_mapping or layout.deletion_vectors or layout.type_widening:
            return False
        txn = (APP_ID, point.through_ts) if idempotent and point.through_ts is not None else None
        with self._times.phase("merge"):
            return self._small_merges.merge(location, schema, source.rows, commit_tags(point, txn=txn, note=note),
                                            check_write=lambda: self._sql.check_write(f"merge {table}"))

    @contextmanager
    def _view(self, source: MergeSource, schema: str) -> Iterator[str]:
        """`source` as a temporary view of the session, for the duration of the block."""
        with ExitStack() as scope:
            with self._times.phase("source_build"):
                if isinstance(source, SourceRows):
                    scope.enter_context(self._sql.settings(in_memory_source_settings(len(source.rows)),
                                                           unless_set=INTERPRETED_EXPRESSIONS))
                    view = scope.enter_context(self._sql.view(source.rows, schema))
                else:
                    view = scope.enter_context(self._sql.frame_view(source.frame))
            yield view

    def _merge_source(self, table: TableName, schema: TableSchema, source: str, point: AppliedPoint, *,
                      into_empty: bool, idempotent: bool = True, note: Mapping[str, object] | None = None) -> None:
        # Delta's idempotent writes need one number that grows with every MERGE:
        # the commitTs. Offset points (several partitions; their `ts` is only the
        # newest DDL) rely on the applier's replay check alone.
        txn = (APP_ID, point.through_ts) if idempotent and point.through_ts is not None else None
        with self._times.phase("merge"):
            build = insert_sql if into_empty else merge_sql
            statement = build(self._name(table), schema, source)
            self._sql.run(statement, commit_tags(point, txn=txn, note=note), what=f"merge {table}")

    # --- history tables (apply.changes.history) ----------------------------------------------------

    def create_history_from(self, history: TableName, table: TableName, point: AppliedPoint, *, exists: bool) -> None:
        """`history` made of `table`'s rows as current states valid from `point`: created (unless it `exists`)
        marked `historySeeding`, then the rows appended, marked applied through `point`. A crash between the
        two leaves it empty and marked, and this is done again; a crash within the append leaves only files
        no commit names."""
        source = self._layout(table)
        upstream = [(name, source.upstream_name(name), kind) for name, kind in self._delta_columns(table)]
        if not exists:
            structure = TableSchema(history, tuple(Column(name, kind) for _, name, kind in upstream), ())
            self.create(history, history_sql.history_schema(structure), None, replace=False,
                        note={"historySeeding": True})
        layout = self._layout(history)
        columns = [(name, layout.delta_name(upstream_name)) for name, upstream_name, _ in upstream]
        statement = history_sql.seed_sql(self._name(history), columns, point.ts, self._name(table), quote)
        with self._times.phase("ddl"):
            self._sql.run(statement, commit_tags(point), what=f"begin {history} from {table}")
        log.info("%s begins with the rows of %s, valid from %s", history, table, point.to_json())

    def merge_history(self, history: TableName, schema: TableSchema, source: MergeSource, point: AppliedPoint, *,
                      note: Mapping[str, object] | None = None) -> None:
        """One MERGE into `history` of `apply.changes.history.history_source` rows of `schema` (the table's columns)."""
        schema = self._layout(history).delta_schema(schema)
        with self._view(source, _source_schema(schema.columns, *history_sql.SOURCE_COLUMNS)) as view:
            self._merge_history_source(history, schema, view, point, note)

    def _merge_history_source(self, history: TableName, schema: TableSchema, source: str, point: AppliedPoint,
                              note: Mapping[str, object] | None) -> None:
        values = [_source_value(i, c) for i, c in enumerate(schema.columns)]
        statement = history_sql.merge_sql(self._name(history), schema.column_names(), schema.key, values, source, quote)
        txn = (APP_ID, point.through_ts) if point.through_ts is not None else None
        with self._times.phase("merge"):
            self._sql.run(statement, commit_tags(point, txn=txn, note=note), what=f"merge {history}")

    def close_history(self, history: TableName, commit_ts: int, point: AppliedPoint | None) -> None:
        """End every current state of `history` at `commit_ts`."""
        with self._times.phase("ddl"):
            self._sql.run(history_sql.close_sql(self._name(history), commit_ts, quote), commit_tags(point),
                          what=f"close {history}")

    def truncate(self, table: TableName, point: AppliedPoint) -> None:
        with self._times.phase("ddl"):
            self._sql.run(f"DELETE FROM {self._name(table)}", commit_tags(point), what=f"truncate {table}")

    def drop(self, table: TableName) -> None:
        self._layouts.pop(table, None)
        with self._times.phase("ddl"):
            # Not a Delta commit of the table (path tables: a registry row), so no statement's guard asks.
            self._sql.check_write(f"drop {table}")
            self._locator.drop(self._sql, table)

    def rename(self, old: TableName, new: TableName) -> None:
        self._layouts.pop(old, None)
        self._layouts.pop(new, None)
        with self._times.phase("ddl"):
            self._sql.check_write(f"rename {old}")
            self._locator.rename(self._sql, old, new)

    def clean_up(self) -> None:
        places = self._locator.places
        if places is None or not places.freed():
            return  # (most batches: no phase, no lease check)
        self._sql.check_write("delete the folders of dropped tables")
        with self._times.phase("table_cleanup"):
            for path in self._locator.clean_up(self._sql):
                log.info("deleted %s: no table is there any more", path)


def _restructured(
    layout: TableLayout, current: Sequence[tuple[str, str]], schema: TableSchema, renames: Sequence[tuple[str, str]],
    *, keep_rest: bool = False,
) -> list[RewriteColumn]:
    """The columns of `schema`, each from its current column (renamed: the old one) or new and empty;
    `keep_rest`: then the current columns none of those came from.

    `current`: the table's (Delta name, type); `renames`: (old, new) upstream names.
    """
    present = {layout.upstream_name(n).lower(): (n, kind) for n, kind in current}
    renamed_from = {new.lower(): old.lower() for old, new in renames}
    columns: list[RewriteColumn] = []
    for column in schema.columns:
        found = present.get(column.name.lower()) or present.get(renamed_from.get(column.name.lower(), ""))
        if found is None:
            columns.append((None, column.spark_type, layout.delta_name(column.name)))
        else:
            source, kind = found
            new_type = None if normalized_type(kind) == normalized_type(column.spark_type) else column.spark_type
            columns.append((source, new_type, layout.delta_name(column.name)))
    if keep_rest:
        used = {source for source, _, _ in columns}
        columns += [(name, None, name) for name, _ in current if name not in used]
    return columns
