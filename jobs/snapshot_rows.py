"""The executors' side of a snapshot load: a table's data lines (or whole files) -> its typed columns.

Shipped to the executors with the mapInArrow that reads the export's files (`jobs.snapshot`); the
records are parsed by `schema_cache.dumpling.values` and converted by the table's row codec, the same
conversions the stream's decoders use.
"""

from __future__ import annotations

from dataclasses import dataclass

from ticdc_delta.apply.tables.arrow_types import arrow_type
from ticdc_delta.exceptions import InvalidMessage
from ticdc_delta.schema_cache.codec import RowCodec
from ticdc_delta.schema_cache.dumpling.values import CsvDialect, csv_records, sql_records


@dataclass(frozen=True)
class RowSpec:
    """What the executors need to turn a table's data lines into typed columns (pickled to them)."""

    codec: RowCodec
    names: tuple[str, ...] | None  # the files' column order (CSV header, INSERT column list); None: the table's
    format: str
    dialect: CsvDialect
    skip_header: bool


def _records(spec: RowSpec, data: bytes):
    if spec.format == "csv":
        return csv_records(data, spec.dialect)
    return sql_records(data, spec.dialect.escape_backslash)


def typed_batches(spec: RowSpec, batches):
    """mapInArrow: data lines (or whole files) -> the table's columns c0.. and ticdc_deleted (False)."""
    import pyarrow as pa

    schema = spec.codec.schema
    value_types = [arrow_type(pa, c.spark_type) for c in schema.columns]
    names = list(spec.names or schema.column_names())
    headers_seen: set[str] = set()
    for batch in batches:
        columns: list[list] = [[] for _ in schema.columns]
        for data, path, block in zip(*(batch.column(i).to_pylist() for i in range(3)), strict=True):
            try:
                _add_rows(spec, names, columns, _records(spec, data), skip_header=(
                    spec.skip_header and block == 0 and path not in headers_seen))
            except InvalidMessage as err:
                raise InvalidMessage(f"{path}: {err} (in {data[:80]!r})") from None
            if block == 0:
                headers_seen.add(path)
        arrays = [pa.array(v, type=t) for v, t in zip(columns, value_types, strict=True)]
        arrays.append(pa.array([False] * (len(columns[0]) if columns else 0), type=pa.bool_()))
        yield pa.RecordBatch.from_arrays(arrays, names=[*(f"c{i}" for i in range(len(columns))), "ticdc_deleted"])


def _add_rows(spec: RowSpec, names: list[str], columns: list[list], records, *, skip_header: bool) -> None:
    if skip_header:
        header = next(records, None)
        found = [v.decode("utf-8") if v is not None else None for v in header or ()]
        if found != names:
            raise InvalidMessage(f"its CSV header {found} differs from the first file's {names}")
    for record in records:
        if len(record) != len(names):
            raise InvalidMessage(f"a record of {len(record)} values for {len(names)} columns")
        for slot, value in enumerate(spec.codec.row(dict(zip(names, record, strict=True)))):
            columns[slot].append(value)
