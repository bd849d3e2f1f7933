"""One row codec for every protocol: a table's structure plus how each column's wire value is read.

A decoder describes each column once (`ColumnCodec`: its TiDB type, which
reader undoes the protocol's wire form, and the few facts that reader needs)
and gets a `RowCodec`: the neutral `TableSchema` the rest of the product
works with, and conversion of a wire row into a tuple in column order.

The codec holds descriptions only. Readers are module-level functions
(pickled by reference) and the converter closures are rebuilt from them, so a
codec pickles with the standard library and carries no client objects: it can
be shipped to Spark executors, and its per-column converters can fill column
buffers instead of row tuples.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from schema_cache import types
from schema_cache.events import Column, TableName, TableSchema
from schema_cache.exceptions import InvalidMessage, ValueConversionError

Converter = Callable[[object], object]


@dataclass(frozen=True, slots=True)
class ValueContext:
    """What every reader may depend on besides the column: the user's type choices, the server's zone."""

    types: types.TypeOptions = types.DEFAULT_OPTIONS
    # The TiCDC server's time zone, for protocols whose TIMESTAMP text names none.
    zone: str = "UTC"


# (column, context) -> converter from the column's wire value to its Python value.
# Must be a module-level function: codecs pickle it by reference.
Reader = Callable[["ColumnCodec", ValueContext], Converter]


@dataclass(frozen=True, slots=True)
class ColumnCodec:
    """One column: its upstream type, how its wire value is read, and its Delta column facts.

    `hint` carries what the reader needs beyond the type (the Avro primitive,
    the Debezium semantic name, ...). `field` is the key of the value in the
    wire row when it differs from `name`. `spark_type` overrides the type
    mapping for columns that are not upstream columns (TiCDC's extension
    fields). `default` is already the column type's Python value.
    """

    name: str
    tidb: types.TiDBType
    reader: Reader
    hint: str = ""
    nullable: bool = True
    default: object = None
    field: str | None = None
    spark_type: str | None = None

    def column(self, context: ValueContext) -> Column:
        spark = self.spark_type or types.spark_type(self.tidb, context.types)
        return Column(self.name, spark, self.nullable, self.default)


_CONVERSION_ERRORS = (ValueError, TypeError, ArithmeticError, OverflowError, KeyError, IndexError, InvalidMessage)


class RowCodec:
    """A table structure and the conversion of its wire rows; immutable, picklable."""

    __slots__ = ("schema", "columns", "context", "_fields", "_converters")

    def __init__(self, schema: TableSchema, columns: Sequence[ColumnCodec], context: ValueContext) -> None:
        self.schema = schema
        self.columns = tuple(columns)
        self.context = context
        self._fields = tuple(c.field or c.name for c in self.columns)
        self._converters = tuple(c.reader(c, context) for c in self.columns)

    @classmethod
    def build(
        cls,
        table: TableName,
        columns: Sequence[ColumnCodec],
        key: Iterable[str],
        context: ValueContext,
        *,
        table_id: int | None = None,
        version: int | None = None,
    ) -> RowCodec:
        """The codec of `table` with these columns; `key` names handle-key columns (in key order)."""
        key = tuple(key)
        names = {c.name for c in columns}
        missing = [k for k in key if k not in names]
        if missing:
            raise InvalidMessage(f"key columns {missing} are not columns of {table}")
        schema = TableSchema(table, tuple(c.column(context) for c in columns), key, table_id, version)
        return cls(schema, columns, context)

    def __reduce__(self):
        return (RowCodec, (self.schema, self.columns, self.context))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RowCodec):
            return NotImplemented
        return (self.schema, self.columns, self.context) == (other.schema, other.columns, other.context)

    def __hash__(self) -> int:
        return hash((self.schema, self.columns, self.context))

    def row(self, values: Mapping[str, object]) -> tuple:
        """`values` (wire name -> wire value) as a tuple in column order; a missing or null value is None."""
        get = values.get
        try:
            return tuple(None if (raw := get(f)) is None else convert(raw) for f, convert in zip(self._fields, self._converters, strict=True))
        except _CONVERSION_ERRORS:
            return self._row_naming_the_column(values)

    def _row_naming_the_column(self, values: Mapping[str, object]) -> tuple:
        # The slow path, only for a row that failed: redo it column by column to say which one.
        out = []
        for field, convert in zip(self._fields, self._converters, strict=True):
            raw = values.get(field)
            try:
                out.append(None if raw is None else convert(raw))
            except _CONVERSION_ERRORS as err:
                raise ValueConversionError(f"column {field!r}: cannot convert {raw!r}: {err}") from err
        return tuple(out)


# --- readers every protocol can use ------------------------------------------------------


def text_value(column: ColumnCodec, context: ValueContext) -> Converter:
    """TiCDC's text form (see `types.text_converter`); TIMESTAMP text in the server's zone."""
    if column.tidb.name == "timestamp":
        zone, options = context.zone, context.types

        def timestamp(value: object) -> object:
            return types.timestamp_in_zone(str(value), zone, options)

        return timestamp
    return types.text_converter(column.tidb, context.types)


def as_is(column: ColumnCodec, context: ValueContext) -> Converter:
    """The wire value already is the Python value (TiCDC's extension fields)."""
    return _identity


def _identity(value: object) -> object:
    return value


def column_default(tidb: types.TiDBType, raw: object, options: types.TypeOptions) -> object:
    """A column default as the schema describes it, or None where it has no single value or does not parse.

    An unparseable default is not worth failing the stream for: the column
    is still created; only the backfill of older rows is lost.
    """
    try:
        return types.default_value(tidb, raw, options)
    except (ValueError, ArithmeticError, InvalidMessage):
        return None
