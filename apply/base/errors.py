"""Reading Spark's error conditions across the supported releases."""

from __future__ import annotations


def error_condition(err: BaseException) -> str:
    """The error's condition (Spark 4's `getCondition`, Spark 3.5's `getErrorClass`), or ""."""
    for accessor in ("getCondition", "getErrorClass"):
        method = getattr(err, accessor, None)
        if method is not None:
            try:
                return method() or ""
            except Exception:  # noqa: BLE001 - the JVM error may be gone (Connect, shutdown)
                return ""
    return ""


# Errors that mean "there is no Delta table here (yet)".
_MISSING_TABLE_ERRORS = {
    "DELTA_TABLE_ONLY_OPERATION",
    "DELTA_MISSING_DELTA_TABLE",
    "DELTA_TABLE_NOT_FOUND",
    "TABLE_OR_VIEW_NOT_FOUND",
    "PATH_NOT_FOUND",
    "SCHEMA_NOT_FOUND",
}


def is_missing_table(err: BaseException) -> bool:
    """Whether `err` (Spark's) says there is no Delta table there (yet)."""
    return error_condition(err) in _MISSING_TABLE_ERRORS
