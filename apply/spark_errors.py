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
