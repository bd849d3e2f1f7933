"""Which upstream tables are materialized, and under which name: the `[[tables]]` rules.

Each rule matches `database.table` with shell patterns (as `history.tables` does); the first rule a table
matches decides: `skip` leaves it out, otherwise `target` names its table, a template of `{database}` and
`{table}` with one `.` between the target's database (schema) and table parts. A table no rule matches
keeps its own name. Routing happens as a batch enters the applier (`Applier.apply`): from there on every
name (the locator's, the table registry's, metrics', `status`'s) is the target's.

Each upstream table has one target and each target one upstream table: a table's applied point
(`apply.progress`) orders one source's commits, so many-to-one has no exactly-once meaning. Two tables
routed to one name stop the job (exit 2) naming both, when the second is first seen, across runs too:
the routes taken so far are saved with each checkpoint. So is a change of rules that would move a table
already routed (its rows are where it was): refused at start. Rules may still be added or changed for
tables not seen yet, and a table may be skipped from now on (its table stays, no longer updated).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import logging
import string
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from ticdc_delta.exceptions import ConfigError
from ticdc_delta.schema_cache.events import RowChange, SchemaChange, SchemaChangeKind, TableName, Watermark

log = logging.getLogger(__name__)

IDENTITY = "{database}.{table}"
DEFAULT_COMMENT = "TiDB table {database}.{table}, materialized by ticdc-delta"
# What `target.table_features` sets on every table it creates: not a rule's to change.
_FEATURE_PROPERTIES = frozenset({"delta.columnmapping.mode", "delta.enabledeletionvectors", "delta.enabletypewidening",
                                 "delta.checkpointpolicy"})
_WILDCARDS = frozenset("*?[")


@dataclass(frozen=True)
class TableRule:
    """One `[[tables]]` entry; `key` is how errors name it (`tables[1]`)."""

    match: tuple[str, ...]
    target: str = IDENTITY
    skip: bool = False
    # How the job creates the matched tables (`CreatedLayout`); an existing table is never altered for them.
    properties: Mapping[str, str] = dataclasses.field(default_factory=dict)
    partition_by: tuple[str, ...] = ()
    cluster_by: tuple[str, ...] = ()
    comment: str = DEFAULT_COMMENT
    # Not a configuration key (the reference leaves out fields marked so).
    key: str = dataclasses.field(default="tables", compare=False, metadata={"internal": True})

    def __post_init__(self) -> None:
        match = (self.match,) if isinstance(self.match, str) else self.match
        if not isinstance(match, (tuple, list)) or not match or not all(isinstance(p, str) and p for p in match):
            raise ConfigError(f"{self.key}.match: must be a `database.table` name or pattern, or a list of them, "
                              f"got {self.match!r}")
        object.__setattr__(self, "match", tuple(match))
        if not isinstance(self.skip, bool):
            raise ConfigError(f"{self.key}.skip: must be true or false, got {self.skip!r}")
        if self.skip and self.target != IDENTITY:
            raise ConfigError(f"{self.key}: `skip` and `target` together; a skipped table lands nowhere")
        self._parts()  # checks the template
        self._check_layout()
        for pattern in self.match:
            self._check_one_to_one(pattern)

    def _check_layout(self) -> None:
        if not isinstance(self.properties, Mapping) or not all(isinstance(k, str) and k for k in self.properties):
            raise ConfigError(f"{self.key}.properties: must be a table of Delta table properties, got {self.properties!r}")
        shown = {}
        for key, value in self.properties.items():
            if key.lower() in _FEATURE_PROPERTIES or key.lower().startswith("delta.feature."):
                raise ConfigError(f"{self.key}.properties.{key}: table features are target.table_features's (it "
                                  "decides who can read the tables)")
            if isinstance(value, bool):
                value = str(value).lower()
            if not isinstance(value, (str, int, float)):
                raise ConfigError(f"{self.key}.properties.{key}: must be a string, number or boolean, got {value!r}")
            shown[key] = str(value)
        object.__setattr__(self, "properties", shown)
        for name in ("partition_by", "cluster_by"):
            columns = getattr(self, name)
            columns = (columns,) if isinstance(columns, str) else columns
            if not isinstance(columns, (list, tuple)) or not all(isinstance(c, str) and c for c in columns):
                raise ConfigError(f"{self.key}.{name}: must be a list of column names, got {columns!r}")
            object.__setattr__(self, name, tuple(columns))
        if self.partition_by and self.cluster_by:
            raise ConfigError(f"{self.key}: `partition_by` and `cluster_by` together; Delta takes one or the other")
        if not isinstance(self.comment, str):
            raise ConfigError(f"{self.key}.comment: must be a text, got {self.comment!r}")
        _check_fields(self.comment, f"{self.key}.comment")
        if self.skip and (self.properties or self.partition_by or self.cluster_by or self.comment != DEFAULT_COMMENT):
            raise ConfigError(f"{self.key}: a skipped table is not created; `skip` takes no layout")

    def layout(self, upstream: TableName) -> CreatedLayout:
        return CreatedLayout(self.key, upstream, self.properties, self.partition_by, self.cluster_by,
                             _render(self.comment, upstream))

    def matches(self, table: TableName) -> bool:
        name = f"{table.database}.{table.table}"
        return any(fnmatch.fnmatchcase(name, p) for p in self.match)

    def route(self, table: TableName) -> TableName | None:
        if self.skip:
            return None
        database, name = self._parts()
        return TableName(_render(database, table), _render(name, table))

    def _parts(self) -> tuple[str, str]:
        if not isinstance(self.target, str):
            raise ConfigError(f"{self.key}.target: must be a template such as \"{IDENTITY}\", got {self.target!r}")
        _check_fields(self.target, f"{self.key}.target")
        # Placeholders hold no `.`, so the template's one `.` is literal; it is split before names are put in
        # (an upstream name may hold a `.`).
        parts = self.target.split(".")
        if len(parts) != 2 or not all(part.strip() for part in parts):
            raise ConfigError(f"{self.key}.target: {self.target!r} must be a database part, one `.` and a table "
                              "part, e.g. \"raw_{database}.{table}\"")
        return parts[0], parts[1]

    def _check_one_to_one(self, pattern: str) -> None:
        # A wildcard in a part whose placeholder the target lacks sends many tables to one name.
        database, _, name = pattern.partition(".") if "." in pattern else (pattern, "", pattern)
        uses = {field for _, field, _, _ in string.Formatter().parse(self.target) if field}
        for part, placeholder in ((database, "database"), (name, "table")):
            if not self.skip and _WILDCARDS & set(part) and placeholder not in uses:
                raise ConfigError(
                    f"{self.key}.target: {self.target!r} sends every table matching {pattern!r} to one name; put "
                    f"{{{placeholder}}} in it (one upstream table to one target: each table has its own applied point)"
                )


def _check_fields(template: str, key: str) -> None:
    """Refuses placeholders other than {database} and {table}, and unbalanced braces (`key`: the template's)."""
    try:
        fields = list(string.Formatter().parse(template))
    except ValueError as err:
        raise ConfigError(f"{key}: {template!r}: {err} (write a literal brace as {{{{ or }}}})") from err
    for _, field, spec, conversion in fields:
        if field is not None and (field not in ("database", "table") or spec or conversion):
            raise ConfigError(f"{key}: {template!r}: only {{database}} and {{table}} may be put in, "
                              f"without a format, got {{{field}}}")


@dataclass(frozen=True)
class CreatedLayout:
    """How the job creates one table (`DeltaWriter.create`): its rule's properties, partition or clustering
    columns (upstream names) and comment."""

    rule: str  # how errors name the rule (`tables[2]`)
    upstream: TableName
    properties: Mapping[str, str] = dataclasses.field(default_factory=dict)
    partition_by: tuple[str, ...] = ()
    cluster_by: tuple[str, ...] = ()
    comment: str = ""


def _render(template: str, table: TableName) -> str:
    return template.format(database=table.database, table=table.table)


def rules_of(values: object) -> tuple[TableRule, ...]:
    """The `[[tables]]` array of a configuration file."""
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, Mapping) for v in values):
        raise ConfigError("tables: must be an array of tables ([[tables]] entries), each with `match`")
    allowed = [f.name for f in dataclasses.fields(TableRule) if not f.metadata.get("internal")]
    rules = []
    for index, entry in enumerate(values, 1):
        key = f"tables[{index}]"
        unknown = sorted(set(entry) - set(allowed))
        if unknown:
            raise ConfigError(f"{key}.{unknown[0]}: unknown key; allowed: {', '.join(allowed)}")
        if "match" not in entry:
            raise ConfigError(f"{key}.match: is required (a `database.table` name or pattern)")
        rules.append(TableRule(**entry, key=key))
    return tuple(rules)


class Routes:
    """The rules, and every route taken under them by this consumer (upstream name -> target, None: skipped)."""

    def __init__(self, rules: Sequence[TableRule] = (), *, case_sensitive: bool = False) -> None:
        """`case_sensitive`: whether two targets that differ only by case are two tables where they land (a catalog
        with `spark.sql.caseSensitive = true`); otherwise they are one (a catalog's default, a file system that
        ignores case), and routing two upstream tables to them is refused as routing them to one name is."""
        self._rules = tuple(rules)
        self._case_sensitive = case_sensitive
        self._taken: dict[TableName, TableName | None] = {}
        self._holders: dict[TableName, TableName] = {}  # target (as compared) -> the upstream table routed to it
        self._lock = threading.Lock()
        # Whether routes are saved with checkpoints: with rules, or once a checkpoint held routes (rules
        # removed since must still not move a table).
        self.recording = bool(self._rules)

    def __bool__(self) -> bool:
        """Whether any name may differ from upstream's (else batches pass untouched)."""
        return self.recording

    def _compared(self, target: TableName) -> TableName:
        return target if self._case_sensitive else TableName(target.database.lower(), target.table.lower())

    def layout(self, target: TableName) -> CreatedLayout:
        """How the job creates `target`: by the rule of the upstream table routed to it."""
        upstream = self._holders.get(self._compared(target), target)
        for rule in self._rules:
            if rule.matches(upstream):
                return rule.layout(upstream)
        return CreatedLayout("tables", upstream, comment=_render(DEFAULT_COMMENT, upstream))

    def target(self, table: TableName) -> TableName | None:
        """Where `table` lands (None: skipped); its first route is kept, and a second table routed to one
        name is refused."""
        taken = self._taken.get(table, False)
        if taken is not False:
            return taken
        with self._lock:
            return self._take(table, self.route(table))

    def route(self, table: TableName) -> TableName | None:
        """Where the rules alone send `table`."""
        for rule in self._rules:
            if rule.matches(table):
                return rule.route(table)
        return table

    def _take(self, table: TableName, target: TableName | None) -> TableName | None:
        if target is not None:
            compared = self._compared(target)
            holder = self._holders.get(compared)
            if holder is not None and holder != table:
                other = self._taken.get(holder) or target
                where = target if other == target else f"{other} and {target}, one table where names ignore case"
                raise ConfigError(
                    f"tables: {table} and {holder} are both routed to {where}; one upstream table to one target "
                    "(each has its own applied point): change the rules so that their targets differ"
                )
            self._holders[compared] = table
        self._taken[table] = target
        return target

    def routed(self, events: Iterable) -> list:
        """`events` with their tables' target names; those of skipped tables left out."""
        out = []
        for event in events:
            kind = type(event)
            if kind is Watermark:
                out.append(event)
                continue
            target = self.target(event.table)
            if kind is SchemaChange and event.previous_name is not None:
                before = self.target(event.previous_name)
                if (before is None) != (target is None):
                    where = event.position
                    raise ConfigError(
                        f"tables: {event.previous_name} renamed to {event.table} at {where.topic}/"
                        f"{where.partition}@{where.offset} crosses the rules' selection (one is skipped, the "
                        "other materialized): make the rules skip both names or materialize both"
                    )
                if target is not None:
                    event = event._replace(previous_name=before)
            if kind is SchemaChange and (event.kind is SchemaChangeKind.DROP or event.previous_name is not None):
                # The name leaves its target (a table created again under it later is routed again).
                self._forget(event.previous_name or event.table)
            if target is None:
                continue
            if target != event.table:
                if kind is RowChange or kind is SchemaChange:
                    event = event._replace(table=target)
                else:  # grouped changes (`apply.changes.table_changes.TableChanges`)
                    event = dataclasses.replace(event, table=target)
            out.append(event)
        return out

    def _forget(self, table: TableName) -> None:
        with self._lock:
            target = self._taken.pop(table, None)
            if target is not None and self._holders.get(self._compared(target)) == table:
                del self._holders[self._compared(target)]

    def held(self, holds: Mapping[TableName, int]) -> dict[TableName, int]:
        """Per target, the commitTs before which it is applied (`Applier.apply`'s `holds`)."""
        out = {}
        for table, ts in holds.items():
            target = self.target(table)
            if target is not None:
                out[target] = min(ts, out.get(target, ts))
        return out

    # --- saved with checkpoints ---------------------------------------------------------------------------

    def saved(self) -> str:
        with self._lock:
            taken = sorted(self._taken.items(), key=lambda item: (item[0].database, item[0].table))
        return json.dumps([[t.database, t.table] + ([r.database, r.table] if r else [None, None]) for t, r in taken])

    def restore(self, saved: str | None, materialized: Callable[[], Iterable[TableName]]) -> None:
        """Take again the routes a checkpoint saved (None: saved none; then each table `materialized()` gives,
        the table registry's, was routed to its own name). A table the rules now send elsewhere is refused,
        unless its new target is materialized already (a snapshot load made it); one skipped from now on is
        told once."""
        made: set[TableName] | None = None
        if saved is None:
            made = set(materialized())
            taken = {t: t for t in made}
        else:
            taken = {TableName(d, t): (TableName(rd, rt) if rd is not None else None) for d, t, rd, rt in json.loads(saved)}
            self.recording = True
        with self._lock:
            for table, before in sorted(taken.items(), key=lambda item: (item[0].database, item[0].table)):
                now = self.route(table)
                if now != before and now is not None:
                    if made is None:
                        made = set(materialized())
                    if now not in made:
                        raise self._moved(table, before, now)
                if now is None and before is not None:
                    log.warning("tables: %s is skipped from now on; its table %s stays as it is, no longer updated",
                                table, before)
                self._take(table, now)

    @staticmethod
    def _moved(table: TableName, before: TableName | None, now: TableName) -> ConfigError:
        if before is None:
            return ConfigError(
                f"tables: {table} was skipped by earlier rules, so its changes until now are in no table, and the "
                f"rules now materialize it as {now}: load it from a snapshot first (`ticdc-delta snapshot`), or keep "
                "skipping it"
            )
        return ConfigError(
            f"tables: {table} is materialized as {before} and the rules now route it to {now}: a table keeps its "
            "route once made; put back the rule that routed it (an exact rule for it, first), or load it under the "
            "new name from a snapshot (`ticdc-delta snapshot`)"
        )
