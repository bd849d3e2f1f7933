"""`ticdc-delta snapshot`: load a Dumpling export as each table's starting point, applied through its TSO.

The usual way to start from a populated TiDB: Dumpling exports at a snapshot TSO, a changefeed
starts at that TSO. Each exported table is created (or replaced) with the stream's type mapping
and its rows, in two commits: the first marks the table as loading (`snapshotLoading`), so a
crash between them leaves a table the job refuses with a clear error, not an empty table it
would take as applied; the second writes the rows and records the TSO as the table's applied
point. A later `run` skips every change at or below it (the applier's replay check), whatever the
topic still holds. Re-running is idempotent: a table already applied through the TSO or beyond
is left as it is; one that is loading, or behind the TSO, is replaced.

The data files are read by Spark (its text source, any file system it reaches) and parsed where
they are read (mapInArrow), with the same row codec conversions as the stream's decoders.
"""

from __future__ import annotations

import gzip
import logging
from dataclasses import dataclass
from pathlib import PurePosixPath

from pyspark.sql import functions as F

from apply.arrow_types import arrow_type, source_type
from apply.delta_writer import DeltaWriter
from apply.metrics import PhaseTimes
from apply.progress import AppliedPoint
from apply.sql_session import SqlSession
from apply.table_registry import TableRegistry
from jobs.config import Config
from jobs.pipeline import locator_for
from schema_cache.codec import RowCodec, ValueContext
from schema_cache.dumpling.create_table import parse_create_table
from schema_cache.dumpling.layout import ExportTable, export_tables, snapshot_tso
from schema_cache.dumpling.values import CsvDialect, csv_records, sql_columns, sql_records
from schema_cache.events import Ordering
from schema_cache.exceptions import ConfigError, InvalidMessage, MaterializerError

log = logging.getLogger(__name__)


class SnapshotError(MaterializerError):
    """An export that cannot be loaded as it is: which file, and why."""


@dataclass(frozen=True)
class ExportFormat:
    """How Dumpling was run (its flags of the same names); the defaults are Dumpling's."""

    escape_backslash: bool = True
    csv_separator: str = ","
    csv_delimiter: str = '"'
    csv_null_value: str = "\\N"
    csv_header: bool = True
    # The TiDB session time zone Dumpling ran in: TIMESTAMP values are written as wall clock in it.
    time_zone: str = "UTC"

    def dialect(self) -> CsvDialect:
        return CsvDialect(self.csv_separator.encode(), self.csv_delimiter.encode(), self.csv_null_value.encode(),
                          self.escape_backslash)


@dataclass(frozen=True)
class TableOutcome:
    table: str
    action: str  # "loaded" or "skipped"
    reason: str


@dataclass(frozen=True)
class _Spec:
    """What the executors need to turn a table's data lines into typed columns (pickled to them)."""

    codec: RowCodec
    names: tuple[str, ...] | None  # the files' column order (CSV header, INSERT column list); None: the table's
    format: str
    dialect: CsvDialect
    skip_header: bool


def _records(spec: _Spec, data: bytes):
    if spec.format == "csv":
        return csv_records(data, spec.dialect)
    return sql_records(data, spec.dialect.escape_backslash)


def _typed_batches(spec: _Spec, batches):
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


def _add_rows(spec: _Spec, names: list[str], columns: list[list], records, *, skip_header: bool) -> None:
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


class SnapshotLoader:
    """Loads one Dumpling export into the configured target (path or catalog tables)."""

    def __init__(self, config: Config, spark, source: str, export_format: ExportFormat = ExportFormat()) -> None:
        if config.protocol.ordering is Ordering.OFFSET:
            raise ConfigError(
                f"protocol {config.protocol.name!r} is applied in Kafka offset order: its tables record offsets, not "
                "commitTs, so a snapshot's TSO cannot say which changes it already holds"
            )
        self._sql = SqlSession(spark)
        # Frames are built on the session the statements run on (the job's own fork of `spark`).
        self._spark = self._sql.spark
        self._source = source.rstrip("/")
        self._format = export_format
        self._context = ValueContext(config.types, export_format.time_zone)
        locator = locator_for(config)
        self._writer = DeltaWriter(self._sql, locator, PhaseTimes(), table_features=config.target.table_features)
        self._registry = TableRegistry(self._sql, locator, config.kafka.group_id)

    def _files(self) -> dict[str, str]:
        """The export folder's files: name -> full path, as Spark's file systems list them."""
        try:
            rows = self._spark.read.format("binaryFile").load(self._source).select("path").collect()
        except Exception as err:  # Spark's error for a missing folder differs between releases
            raise SnapshotError(f"cannot list the export at {self._source}: {str(err).splitlines()[0]}") from err
        return {PurePosixPath(r["path"]).name: r["path"] for r in rows}

    def _contents(self, paths: list[str]) -> dict[str, bytes]:
        rows = self._spark.read.format("binaryFile").load(paths).select("path", "content").collect()
        out = {}
        for row in rows:
            content = bytes(row["content"])
            out[PurePosixPath(row["path"]).name] = gzip.decompress(content) if row["path"].endswith(".gz") else content
        return out

    def load(self) -> list[TableOutcome]:
        files = self._files()
        if "metadata" not in files:
            raise SnapshotError(f"{self._source} has no metadata file: not a finished Dumpling export")
        tables = export_tables(sorted(files))
        contents = self._contents([files["metadata"], *(files[t.schema_file] for t in tables)])
        tso = snapshot_tso(contents["metadata"].decode("utf-8", errors="replace"))
        log.info("export at %s: snapshot TSO %d, %d tables", self._source, tso, len(tables))
        codecs = {}
        for table in tables:
            try:
                codecs[table.name] = parse_create_table(
                    contents[table.schema_file].decode("utf-8"), table.name.database, self._context
                )
            except (InvalidMessage, UnicodeDecodeError) as err:
                raise SnapshotError(f"{table.schema_file}: {err}") from err
        outcomes = []
        for table in tables:
            outcomes.append(self._load_table(table, codecs[table.name], tso, files))
        return outcomes

    def _load_table(self, table: ExportTable, codec: RowCodec, tso: int, files: dict[str, str]) -> TableOutcome:
        name = codec.schema.name
        progress = self._writer.progress(name)
        applied = progress.point.ts if progress.point is not None and not progress.point.offsets else None
        if progress.snapshot_loading is None and applied is not None and applied >= tso:
            log.info("%s: already applied through %d (the export's TSO %d or later): left as it is", name, applied, tso)
            return TableOutcome(str(name), "skipped", f"applied through {applied}")
        frame = self._frame(table, codec, [files[f] for f in table.data_files]) if table.data_files else None
        # Registered as the consumer's before it is created (as the job does), or added if it existed unregistered.
        self._registry.register([] if progress.exists else [name], existing=[name] if progress.exists else [])
        # Two commits: the replacement marked as loading, then the rows applied through the TSO.
        self._writer.create(name, codec.schema, None, replace=progress.exists, note={"snapshotLoading": tso})
        if frame is None:
            frame = self._spark.createDataFrame(
                [], ", ".join([*(f"c{i} {source_type(c.spark_type)}" for i, c in enumerate(codec.schema.columns)),
                               "ticdc_deleted BOOLEAN"])
            )
        try:
            self._writer.merge_frame(name, codec.schema, frame, AppliedPoint(ts=tso), into_empty=True, idempotent=False,
                                     note={"snapshotTs": tso})
        except Exception as err:
            raise SnapshotError(f"{name}: loading {len(table.data_files)} data files failed: {_cause(err)}") from err
        log.info("%s: loaded from %d data files, applied through TSO %d", name, len(table.data_files), tso)
        return TableOutcome(str(name), "loaded", f"{len(table.data_files)} data files")

    def _frame(self, table: ExportTable, codec: RowCodec, paths: list[str]):
        fmt = self._format
        whole = not fmt.escape_backslash  # values may then span lines: a file is parsed as a whole
        lines = self._spark.read.text(paths, wholetext=whole).select(
            F.col("value").cast("binary"), F.col("_metadata.file_path"), F.col("_metadata.file_block_start")
        )
        names = self._column_order(table, paths[0])
        spec = _Spec(codec, names, table.format, fmt.dialect(), table.format == "csv" and fmt.csv_header)
        schema = ", ".join([*(f"c{i} {source_type(c.spark_type)}" for i, c in enumerate(codec.schema.columns)),
                            "ticdc_deleted BOOLEAN"])
        return lines.mapInArrow(lambda batches: _typed_batches(spec, batches), schema)

    def _column_order(self, table: ExportTable, first: str) -> tuple[str, ...] | None:
        """The data files' column order: the CSV header, or an INSERT's column list; None: the table's."""
        lines = self._spark.read.text(first).select(F.col("value").cast("binary").alias("v"))
        if table.format == "csv":
            if not self._format.csv_header:
                return None
            head = lines.limit(1).collect()
            record = next(csv_records(bytes(head[0]["v"]), self._format.dialect()), None) if head else None
            if not record or any(v is None for v in record):
                raise SnapshotError(f"{first}: no CSV header (Dumpling writes one unless --no-header; say --no-header)")
            return tuple(v.decode("utf-8") for v in record)
        head = lines.where(F.col("v").startswith(F.lit(b"INSERT"))).limit(1).collect()
        return None if not head else (tuple(sql_columns(bytes(head[0]["v"])) or ()) or None)


def _cause(err: Exception) -> str:
    """The product's own error text from an executor's failure (Spark wraps it in its own)."""
    text = str(err)
    for line in text.splitlines():
        if "InvalidMessage" in line or "ValueConversionError" in line:
            return line.split(":", 1)[1].strip() if ":" in line else line
    return text.splitlines()[0] if text else type(err).__name__
