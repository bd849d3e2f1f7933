"""The tables a consumer materializes, in `_ticdc/tables`: what `ticdc-delta status` reports on.

A table is registered before the job first creates it (or renames another
table to its name): the applier registers every table of a batch that does
not exist yet, in one commit, before applying the batch. So the registry
never misses a table the job made; a crash between registering and creating
leaves a name whose table the replay creates. Tables that already exist are
looked up in the registry once per process (one read) and registered when
missing, so tables made by a release before the registry appear too. A name
may be registered more than once (a table dropped, then seen again); readers
take distinct names.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from pyspark.errors import AnalysisException
from pyspark.sql import functions as F

from ticdc_delta.apply.internal_tables import InternalTable, append_internal_rows
from ticdc_delta.apply.locator import TableLocator
from ticdc_delta.apply.progress import is_missing_table
from ticdc_delta.apply.sql_session import SqlSession
from ticdc_delta.schema_cache.events import TableName

_TABLE = "tables"
_COLUMNS = (("consumer", "STRING"), ("database", "STRING"), ("table", "STRING"), ("registered_at", "TIMESTAMP"))


class TableRegistry(InternalTable):
    def __init__(self, sql: SqlSession, locator: TableLocator, consumer: str) -> None:
        super().__init__(sql, locator, _TABLE)
        self._consumer = consumer
        self._registered: set[TableName] = set()  # by this object: not written again
        self._exists = False  # known to exist (this object appended to it)
        self._read = False  # the registry's names are in `_registered`

    def register(self, tables: Iterable[TableName], *, existing: Iterable[TableName] = ()) -> None:
        """Record `tables` (about to be created) and those of `existing` (Delta tables already there) the
        registry lacks, as this consumer's: one commit, none when all are registered."""
        existing = set(existing) - self._registered
        if existing and not self._read:
            self._registered.update(self.tables())
            self._read = True
        new = sorted((set(tables) | existing) - self._registered, key=lambda t: (t.database, t.table))
        if not new:
            return
        now = dt.datetime.now(dt.timezone.utc)
        rows = [(self._consumer, t.database, t.table, now) for t in new]
        append_internal_rows(self._sql, self._locator, _TABLE, _COLUMNS, rows, exists=self._exists)
        self._exists = True
        self._registered.update(new)

    def tables(self) -> list[TableName]:
        """This consumer's registered tables, sorted by name."""
        try:
            rows = (
                self._sql.table(self.sql_name)
                .where(F.col("consumer") == F.lit(self._consumer))
                .select("database", "table")
                .distinct()
                .collect()
            )
        except AnalysisException as err:
            if is_missing_table(err):
                return []
            raise
        return sorted((TableName(r["database"], r["table"]) for r in rows), key=lambda t: (t.database, t.table))
