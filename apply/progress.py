"""How far each Delta table has been applied, recorded atomically with its data.

Every commit the applier makes carries its applied commitTs in the commit's
`userMetadata` (so the record can never disagree with the data it describes),
and MERGE commits also carry Delta's idempotent-write pair (txnAppId,
txnVersion = applied commitTs): a MERGE replayed after a crash, or one that
would move a table backwards, is skipped by Delta itself.

On first touch of a table, its applied commitTs is read back from
`DESCRIBE HISTORY`; events at or below it are already in the table.
"""

from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from typing import Iterator

from pyspark.errors import AnalysisException

log = logging.getLogger(__name__)

APP_ID = "ticdc-delta"
_MARKER = "ticdc_delta"
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"

# Errors that mean "there is no Delta table here (yet)".
_MISSING_TABLE_ERRORS = {
    "DELTA_TABLE_ONLY_OPERATION",
    "DELTA_MISSING_DELTA_TABLE",
    "DELTA_TABLE_NOT_FOUND",
    "TABLE_OR_VIEW_NOT_FOUND",
    "PATH_NOT_FOUND",
    "SCHEMA_NOT_FOUND",
}
_HISTORY_DEPTH = 200


def is_missing_table(err: AnalysisException) -> bool:
    return err.getCondition() in _MISSING_TABLE_ERRORS


@contextmanager
def tagged_commit(spark, applied_ts: int | None, *, txn: tuple[str, int] | None = None) -> Iterator[None]:
    """Run the enclosed write with the applied commitTs recorded on its commit.

    `applied_ts` None leaves the commit unmarked (schema alignment that does
    not itself apply anything). `txn` (application id, version) makes the
    write idempotent: Delta skips it if that application already committed
    this or a higher version to the table. The settings are session-wide, so
    writes of different tables must not run concurrently in one session.
    """
    settings = {}
    if applied_ts is not None:
        settings[_USER_METADATA] = json.dumps({_MARKER: {"appliedTs": applied_ts}})
    if txn is not None:
        settings[_TXN_APP_ID] = txn[0]
        settings[_TXN_VERSION] = str(txn[1])
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key in settings:
            spark.conf.unset(key)


def _marker_of(user_metadata: str | None) -> int | None:
    if not user_metadata:
        return None
    try:
        return int(json.loads(user_metadata)[_MARKER]["appliedTs"])
    except (ValueError, KeyError, TypeError):
        return None  # someone else's metadata


def read_applied_ts(spark, sql_name: str) -> tuple[bool, int | None]:
    """(table exists, applied commitTs recorded in its newest marked commit)."""
    try:
        rows = spark.sql(f"DESCRIBE HISTORY {sql_name} LIMIT {_HISTORY_DEPTH}").select("userMetadata").collect()
    except AnalysisException as err:
        if is_missing_table(err):
            return False, None
        raise
    for row in rows:
        marker = _marker_of(row["userMetadata"])
        if marker is not None:
            return True, marker
    if len(rows) == _HISTORY_DEPTH:
        log.warning("%s: no applied marker in its last %d commits; replaying from scratch", sql_name, _HISTORY_DEPTH)
    return True, None
