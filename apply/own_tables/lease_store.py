"""The consumer lease's row, and the product's own `leases` Delta table that keeps it (`apply.own_tables.lease`)."""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass
from typing import Protocol

from pyspark.errors import AnalysisException
from pyspark.sql import functions as F

from ticdc_delta.apply.base.errors import error_condition, is_missing_table
from ticdc_delta.apply.base.session import SqlSession, is_commit_conflict
from ticdc_delta.apply.own_tables.base import ALREADY_THERE, OwnTablePlaces, create_internal_table_as, own_rows
from ticdc_delta.apply.tables.features import TableLayout
from ticdc_delta.exceptions import ApplyError

log = logging.getLogger(__name__)

TABLE = "leases"
_COLUMNS = (
    ("consumer", "STRING"), ("owner", "STRING"), ("epoch", "BIGINT"), ("revision", "BIGINT"), ("holder", "STRING"),
    ("process", "STRING"), ("acquired_at", "TIMESTAMP"), ("renewed_at", "TIMESTAMP"), ("expires_at", "TIMESTAMP"),
)
# A row changes with every renewal (a small data file replaced each time): keep the table's
# history short, and let VACUUM remove replaced files after an hour (its own retention).
_PROPERTIES = {
    "delta.logRetentionDuration": "interval 1 days",
    "delta.deletedFileRetentionDuration": "interval 1 hours",
}
_CREATE_ATTEMPTS = 4
# What a creation of the table half-way (by another job) looks like to a second one, across Delta
# releases: the location holds files and no commit yet.
_SOMEONE_CREATING = ALREADY_THERE | {"PATH_ALREADY_EXISTS", "DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION"}
# How long another job's creation may take before its files count as something in the way.
_CREATION_WAIT_SECONDS = 120
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def micros(seconds: float) -> int:
    """Seconds as the microseconds a lease row's times are kept in."""
    return int(seconds * 1_000_000)


def timestamp(us: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(microseconds=us)


def shown(us: int) -> str:
    return timestamp(us).strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The consumer's row; times in microseconds since the epoch. `owner` None: released.

    `holder` is for people (host and pid); `process` identifies the holder's
    process on its machine (`process_identity`), or is None.
    """

    consumer: str
    owner: str | None
    epoch: int
    revision: int
    holder: str
    process: str | None
    acquired_us: int
    renewed_us: int
    expires_us: int

    def free_at(self, now_us: int) -> bool:
        return self.owner is None or self.expires_us <= now_us

    def describe(self) -> str:
        return f"{self.holder or 'unknown'}, epoch {self.epoch}, taken {shown(self.acquired_us)}"


class LeaseStore(Protocol):
    def prepare(self, first: LeaseRecord) -> bool:
        """Create the table if missing, holding `first` as its one row; True if this made it so."""
        ...

    def read(self, consumer: str) -> LeaseRecord | None:
        read = own_rows(self._locator, TABLE)  # (delta-rs's read where it writes the own tables)
        if read is not None:
            return _one(self.sql_name, consumer, [_record_of(r) for r in read.to_pylist() if r["consumer"] == consumer])
        rows = (
            self._sql.table(self.sql_name)
            .where(F.col("consumer") == F.lit(consumer))
            .select(
                "owner", "epoch", "revision", "holder", "process",
                *(F.expr(f"unix_micros({c})").alias(c) for c in ("acquired_at", "renewed_at", "expires_at")),
            )
            .collect()
        )
        return _one(self.sql_name, consumer, [LeaseRecord(
            consumer, row["owner"], row["epoch"], row["revision"], row["holder"] or "", row["process"],
            row["acquired_at"], row["renewed_at"], row["expires_at"],
        ) for row in rows])

    def write(self, record: LeaseRecord, expected: LeaseRecord | None) -> bool:
        """Store `record` if the consumer's row is still `expected` (same revision; None: no row); else nothing.

        Also nothing when another commit to the table came first (Delta's
        concurrent-modification error). True if `record` was stored.
        """
        ...

    def tidy(self) -> None:
        """Remove files the table no longer uses."""
        ...


class DeltaLeaseStore:
    """Lease rows in the product's own `leases` Delta table."""

    def __init__(self, sql: SqlSession, locator: OwnTablePlaces) -> None:
        self._sql = sql
        self._locator = locator
        self.sql_name = locator.internal_sql_name(TABLE)

    def prepare(self, first: LeaseRecord) -> bool:
        if self._locator.internal_table_exists(self._sql, TABLE):
            return False
        location = self._locator.internal_location(TABLE)
        if self._locator.own_delta_rs is not None and location is not None:
            # delta-rs's first commit where it writes the own tables: version 0 or nothing, so True only where
            # this commit made the table, as below.
            made = self._locator.own_delta_rs.create(location, _COLUMNS, _values(first),
                                                     {**TableLayout().create_properties(), **_PROPERTIES})
            if made is not None:
                return made
        # The table made with the first holder's row in its first commit: a new target's job saves the
        # read and the MERGE that inserting it would take (about a second and a half a run).
        literals = _literals(first)
        select = "SELECT " + ", ".join(f"CAST({literals[name]} AS {kind}) AS {name}" for name, kind in _COLUMNS)
        deadline = time.monotonic() + _CREATION_WAIT_SECONDS
        attempt = 1
        while True:
            try:
                create_internal_table_as(self._sql, self._locator, TABLE, select, properties=_PROPERTIES, guarded=False)
            except Exception as err:
                # Two jobs starting at once both create it. The loser may be told that the table
                # exists, that its location is not empty (the winner is half-way: its files written,
                # its first commit not yet, which took a cold JVM on a busy machine more than 12 s), or
                # that it lost the commit race: once the winner is done the table is there; else the
                # error was real.
                if self._exists():
                    return False
                condition = error_condition(err)
                half_way = condition in _SOMEONE_CREATING or is_commit_conflict(err)
                if not (half_way and time.monotonic() < deadline) and attempt >= _CREATE_ATTEMPTS:
                    raise
                if half_way and attempt == 1:
                    log.info("%s is being created by another job (%s); waiting for its first commit, up to %d s",
                             self.sql_name, condition or type(err).__name__, _CREATION_WAIT_SECONDS)
            else:
                return True  # without IF NOT EXISTS: it succeeds only where this job's commit made the table
            time.sleep(min(attempt, 3))
            attempt += 1

    def _exists(self) -> bool:
        try:
            self._sql.table(self.sql_name).limit(0).collect()
        except AnalysisException as err:
            if is_missing_table(err):
                return False
            raise
        return True

    def tidy(self) -> None:
        # Without RETAIN, VACUUM keeps what the table's deletedFileRetentionDuration says.
        self._sql.run_unguarded(f"VACUUM {self.sql_name}", what=f"vacuum {self.sql_name}")

    def read(self, consumer: str) -> LeaseRecord | None:
        rows = (
            self._sql.table(self.sql_name)
            .where(F.col("consumer") == F.lit(consumer))
            .select(
                "owner", "epoch", "revision", "holder", "process",
                *(F.expr(f"unix_micros({c})").alias(c) for c in ("acquired_at", "renewed_at", "expires_at")),
            )
            .collect()
        )
        if len(rows) > 1:
            # Never written so (the MERGE keys on consumer): someone edited the table by hand.
            raise ApplyError(f"{self.sql_name} holds {len(rows)} rows for consumer {consumer!r}; delete all but one")
        if not rows:
            return None
        row = rows[0]
        return LeaseRecord(
            consumer, row["owner"], row["epoch"], row["revision"], row["holder"] or "", row["process"],
            row["acquired_at"], row["renewed_at"], row["expires_at"],
        )

    def write(self, record: LeaseRecord, expected: LeaseRecord | None) -> bool:
        if expected is None:
            return self._insert(record)
        location = self._locator.internal_location(TABLE)
        if self._locator.own_delta_rs is not None and location is not None:
            # delta-rs's UPDATE where it writes the own tables, committed only if nothing was since its read
            # (apply.own_tables.delta_rs): as strict as Spark's conflict check below, or stricter.
            values = {name: value for name, value in zip((n for n, _ in _COLUMNS), _values(record), strict=True)
                      if name != "consumer"}
            changed = self._locator.own_delta_rs.update_one(
                location, {"consumer": record.consumer, "revision": int(expected.revision)}, values)
            if changed is not None:
                return changed
        # Renewals, releases and take-overs: an UPDATE, about a quarter cheaper than the MERGE that inserting
        # needs (no join, no source to materialize), and Delta checks it for conflicts the same way. Every
        # value goes in as a literal the product wrote itself: strings hex-encoded, times in microseconds.
        assignments = ", ".join(f"{name} = {value}" for name, value in _literals(record).items() if name != "consumer")
        return self._changed_one(
            f"UPDATE {self.sql_name} SET {assignments} "
            f"WHERE consumer = {_string_literal(record.consumer)} AND revision = {int(expected.revision)}",
            record.consumer,
        )

    def _insert(self, record: LeaseRecord) -> bool:
        """The consumer's first row: unless another job inserted one meanwhile."""
        names = [name for name, _ in _COLUMNS]
        literals = _literals(record)
        return self._changed_one(
            f"MERGE INTO {self.sql_name} AS t USING (SELECT {', '.join(f'{literals[n]} AS {n}' for n in names)}) AS s "
            f"ON t.consumer = s.consumer WHEN NOT MATCHED THEN INSERT ({', '.join(names)}) "
            f"VALUES ({', '.join('s.' + n for n in names)})",
            record.consumer,
        )

    def _changed_one(self, statement: str, consumer: str) -> bool:
        """Run the conditional write; True if it changed the consumer's row (a lost commit race: False)."""
        try:
            outcome = self._sql.run_unguarded(statement, what=f"lease of {consumer}", retry_conflicts=False)
        except Exception as err:
            if not is_commit_conflict(err):
                raise
            log.info("lease of %s: another commit to %s came first (%s)", consumer, self.sql_name, type(err).__name__)
            return False
        # Delta reports the rows it changed: one, exactly when the condition held at its commit.
        return outcome.collect()[0]["num_affected_rows"] == 1


def _one(sql_name: str, consumer: str, records: list[LeaseRecord]) -> LeaseRecord | None:
    if len(records) > 1:
        # Never written so (the MERGE keys on consumer): someone edited the table by hand.
        raise ApplyError(f"{sql_name} holds {len(records)} rows for consumer {consumer!r}; delete all but one")
    return records[0] if records else None


def _values(record: LeaseRecord) -> tuple:
    """The row's values in `_COLUMNS`' order, times with their zone (as delta-rs writes and reads them)."""
    return (record.consumer, record.owner, record.epoch, record.revision, record.holder, record.process,
            timestamp(record.acquired_us), timestamp(record.renewed_us), timestamp(record.expires_us))


def _record_of(row: dict) -> LeaseRecord:
    """A row as delta-rs reads it (times with their zone)."""
    def us(at: dt.datetime) -> int:
        return (at - _EPOCH) // dt.timedelta(microseconds=1)

    return LeaseRecord(row["consumer"], row["owner"], row["epoch"], row["revision"], row["holder"] or "",
                       row["process"], us(row["acquired_at"]), us(row["renewed_at"]), us(row["expires_at"]))


def _string_literal(value: str | None) -> str:
    # Hex, so that no character of a host name or an owner needs escaping.
    return "NULL" if value is None else f"CAST(X'{value.encode().hex()}' AS STRING)"


def _literals(record: LeaseRecord) -> dict[str, str]:
    """The row's values as SQL literals, by column."""
    return {
        "consumer": _string_literal(record.consumer),
        "owner": _string_literal(record.owner),
        "epoch": str(int(record.epoch)),
        "revision": str(int(record.revision)),
        "holder": _string_literal(record.holder),
        "process": _string_literal(record.process),
        "acquired_at": f"timestamp_micros({int(record.acquired_us)})",
        "renewed_at": f"timestamp_micros({int(record.renewed_us)})",
        "expires_at": f"timestamp_micros({int(record.expires_us)})",
    }
