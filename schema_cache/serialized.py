"""Row images, table structures and schema changes as bytes, for events staged in a Delta table.

The Spark engine decodes on executors and stages row events in a Delta table until their
watermark passes (`jobs.spark_engine.staging`); their values travel as pickled tuples of the same Python
values the driver engine passes to Spark. Reading them back unpickles only what the decoders
produce: built-in scalars, `Decimal`, the `datetime` types, and the event model's own classes.
Anything else in a staged value (a tampered table) is refused: unpickling can run code.
"""

from __future__ import annotations

import hashlib
import io
import pickle

from ticdc_delta.schema_cache.events import SchemaChange, TableSchema

_VALUE_CLASSES = {
    ("decimal", "Decimal"),
    ("datetime", "date"),
    ("datetime", "datetime"),
    ("datetime", "time"),
    ("datetime", "timedelta"),
    ("datetime", "timezone"),
}
_EVENTS_MODULE = "ticdc_delta.schema_cache.events"
# Events staged before the packages moved under `ticdc_delta` name their classes by the old module: a
# Spark engine's staging table written by an earlier release still loads.
_FORMER_EVENTS_MODULE = "schema_cache.events"
_EVENT_CLASSES = _VALUE_CLASSES | {
    (_EVENTS_MODULE, name)
    for name in ("TableName", "Column", "TableSchema", "SchemaChange", "SchemaChangeKind", "Position")
}
_PROTOCOL = 5


class _Allowlisted(pickle.Unpickler):
    def __init__(self, data: bytes, allowed: set[tuple[str, str]]) -> None:
        super().__init__(io.BytesIO(data))
        self._allowed = allowed

    def find_class(self, module: str, name: str):
        if module == _FORMER_EVENTS_MODULE:
            module = _EVENTS_MODULE
        if (module, name) not in self._allowed:
            raise pickle.UnpicklingError(f"staged data names {module}.{name}, which no decoder produces")
        return super().find_class(module, name)


def dump_row(values: tuple | None) -> bytes | None:
    """A row image (a tuple in column order) as bytes; None stays None."""
    return None if values is None else pickle.dumps(values, _PROTOCOL)


def load_row(data: bytes | None) -> tuple | None:
    if data is None:
        return None
    return _Allowlisted(data, _VALUE_CLASSES).load()


def dump_event(event: SchemaChange | TableSchema) -> bytes:
    return pickle.dumps(event, _PROTOCOL)


def load_event(data: bytes) -> SchemaChange | TableSchema:
    loaded = _Allowlisted(data, _EVENT_CLASSES).load()
    if not isinstance(loaded, (SchemaChange, TableSchema)):
        raise pickle.UnpicklingError(f"staged data holds a {type(loaded).__name__}, not a schema change or structure")
    return loaded


def schema_ref(schema: TableSchema) -> str:
    """A short name of a table structure that is equal for equal structures (staged rows name theirs)."""
    return hashlib.sha256(dump_event(schema)).hexdigest()[:24]
