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

from ticdc_delta.exceptions import InvalidMessage, ValueConversionError
from ticdc_delta.schema_cache import types
from ticdc_delta.schema_cache.events import Column, TableName, TableSchema

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


def _null_key(field: str) -> None:
    # MERGE finds a row by its key: a NULL key matches no row, so an insert would add a row no later
    # change can find and a delete would remove nothing. Handle keys are NOT NULL upstream.
    raise InvalidMessage(f"key column {field!r} is missing or NULL")


def _compiled(fields: Sequence[str], converters: Sequence[Converter], keep: Sequence[int], required: Sequence[int]) -> Callable:
    """A function from a wire row to a tuple of all columns, of which only positions `keep` are read
    and positions `required` (the handle key) must not be NULL.

    The hot path of every decoder: generated once per structure so a row costs
    one lookup, one test and one call per column, with no loop. The generated
    text holds only positions; field names and converters are bound as values.
    """
    width = len(fields)
    params = ", ".join([f"f{i}, c{i}" for i in keep] + ["null_key"])
    lines = [f"def bind({params}):", "    def row(values):", "        get = values.get"]
    for i in keep:
        lines.append(f"        v{i} = get(f{i})")
        lines.append(f"        if v{i} is not None:")
        lines.append(f"            v{i} = c{i}(v{i})")
        if i in required:
            lines.append(f"        if v{i} is None:")
            lines.append(f"            null_key(f{i})")
    items = [f"v{i}" if i in keep else "None" for i in range(width)]
    lines.append(f"        return ({', '.join(items)}{',' if width == 1 else ''})")
    lines.append("    return row")
    namespace: dict = {}
    exec("\n".join(lines), namespace)  # noqa: S102 - text built from integers only
    bound = [value for i in keep for value in (fields[i], converters[i])]
    return namespace["bind"](*bound, _null_key)


class RowCodec:
    """A table structure and the conversion of its wire rows; immutable, picklable."""

    __slots__ = ("schema", "columns", "context", "_fields", "_key_fields", "_converters", "_row", "_key_row")

    def __init__(self, schema: TableSchema, columns: Sequence[ColumnCodec], context: ValueContext) -> None:
        self.schema = schema
        self.columns = tuple(columns)
        self.context = context
        self._fields = tuple(c.field or c.name for c in self.columns)
        self._converters = tuple(c.reader(c, context) for c in self.columns)
        everything = range(len(self.columns))
        key = schema.key_indexes()
        self._row = _compiled(self._fields, self._converters, everything, key)
        self._key_row = _compiled(self._fields, self._converters, key, key)
        self._key_fields = tuple(self._fields[i] for i in schema.key_indexes())

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
        # Upstream names are unique ignoring case (TiDB's rule, and Spark's: it could not create the
        # table); a key naming a column twice would also make the generated row function invalid Python.
        if len({n.lower() for n in names}) != len(columns) or len(set(key)) != len(key):
            raise InvalidMessage(f"{table} names a column twice (columns or key {list(key)})")
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
        try:
            return self._row(values)
        except _CONVERSION_ERRORS:
            self._name_the_column(values, range(len(self._fields)))
            raise

    def key_row(self, values: Mapping[str, object]) -> tuple:
        """Like `row`, but only the handle-key columns are read; the others are None.

        An old row image is needed only to find the row (its key): converting
        the rest would be wasted work on every UPDATE and DELETE.
        """
        try:
            return self._key_row(values)
        except _CONVERSION_ERRORS:
            self._name_the_column(values, self.schema.key_indexes())
            raise

    def has_key_fields(self, values: Mapping[str, object]) -> bool:
        """Whether `values` holds every handle-key column (a partial old image may not)."""
        return all(f in values for f in self._key_fields)

    def _name_the_column(self, values: Mapping[str, object], positions: Iterable[int]) -> None:
        # The slow path, only for a row that failed: redo it column by column to say which one.
        for i in positions:
            raw = values.get(self._fields[i])
            try:
                if raw is not None:
                    self._converters[i](raw)
            except _CONVERSION_ERRORS as err:
                raise ValueConversionError(f"column {self._fields[i]!r}: cannot convert {raw!r}: {err}") from err


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
