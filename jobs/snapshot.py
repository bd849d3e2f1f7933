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
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from pyspark.sql import functions as F

from ticdc_delta.apply.base.phases import PhaseTimes
from ticdc_delta.apply.base.session import SqlSession
from ticdc_delta.apply.changes.merge_source import SourceFrame
from ticdc_delta.apply.places.registry import TableRegistry
from ticdc_delta.apply.places.routing import Routes
from ticdc_delta.apply.progress import applied_history
from ticdc_delta.apply.tables.arrow_types import source_type
from ticdc_delta.apply.tables.points import AppliedPoint
from ticdc_delta.apply.writers.delta_writer import DeltaWriter
from ticdc_delta.exceptions import ConfigError, InvalidMessage, MaterializerError
from ticdc_delta.jobs.config import Config
from ticdc_delta.jobs.pipeline import locator_for
from ticdc_delta.jobs.runtime import settle, targets_case_sensitive
from ticdc_delta.jobs.snapshot_rows import RowSpec, typed_batches
from ticdc_delta.schema_cache.codec import RowCodec, ValueContext
from ticdc_delta.schema_cache.dumpling.create_table import parse_create_table
from ticdc_delta.schema_cache.dumpling.layout import ExportTable, export_tables, snapshot_tso
from ticdc_delta.schema_cache.dumpling.values import CsvDialect, csv_records, sql_columns
from ticdc_delta.schema_cache.events import Ordering, TableName

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


class SnapshotLoader:
    """Loads one Dumpling export into the configured target (path or catalog tables)."""

    def __init__(self, config: Config, spark, source: str, export_format: ExportFormat = ExportFormat()) -> None:
        if config.protocol.ordering is Ordering.OFFSET:
            raise ConfigError(
                f"protocol {config.protocol.name!r} is applied in Kafka offset order: its tables record offsets, not "
                "commitTs, so a snapshot's TSO cannot say which changes it already holds"
            )
        config = settle(config, spark)
        self._sql = SqlSession(spark)
        # Frames are built on the session the statements run on (the job's own fork of `spark`).
        self._spark = self._sql.spark
        self._source = source.rstrip("/")
        self._format = export_format
        self._context = ValueContext(config.types, export_format.time_zone)
        locator = self._locator = locator_for(config)
        self._routes = Routes(config.tables, case_sensitive=targets_case_sensitive(config, spark))
        self._writer = DeltaWriter(self._sql, locator, PhaseTimes(), table_features=config.target.table_features,
                                   layouts=self._routes.layout)
        self._registry = TableRegistry(self._sql, locator, config.kafka.group_id)

    def _files(self) -> dict[str, str]:
        """The export folder's files: name -> full path, every one (Hadoop's listing of the folder)."""
        try:
            jvm = self._spark.sparkContext._jvm
            folder = jvm.org.apache.hadoop.fs.Path(self._source)
            statuses = folder.getFileSystem(self._spark.sparkContext._jsc.hadoopConfiguration()).listStatus(folder)
            return {status.getPath().getName(): status.getPath().toString() for status in statuses if status.isFile()}
        except Exception as err:  # noqa: BLE001 - no JVM here (Spark Connect), or the folder's error: said below
            jvm_error = err
        try:
            # Spark Connect: its file listing hides names starting with "_" or "." (a database named so is missed).
            log.warning("listing %s with Spark's binaryFile source: files named _* or .* are not seen", self._source)
            rows = self._spark.read.format("binaryFile").load(_literal(self._source)).select("path").collect()
        except Exception as err:  # Spark's error for a missing folder differs between releases
            raise SnapshotError(f"cannot list the export at {self._source}: {str(jvm_error).splitlines()[0]}") from err
        return {PurePosixPath(r["path"]).name: r["path"] for r in rows}

    def _contents(self, paths: list[str]) -> dict[str, bytes]:
        rows = self._spark.read.format("binaryFile").load([_literal(p) for p in paths]).select("path", "content").collect()
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
        name = self._routes.target(codec.schema.name)  # where the job puts it (and how it creates it)
        if name is None:
            return TableOutcome(str(codec.schema.name), "skipped", "the [[tables]] rules skip it")
        progress = self._writer.progress(name)
        applied = progress.point.ts if progress.point is not None and not progress.point.offsets else None
        if progress.snapshot_loading is None and applied is not None and applied >= tso:
            log.info("%s: already applied through %d (the export's TSO %d or later): left as it is", name, applied, tso)
            return TableOutcome(str(name), "skipped", f"applied through {applied}")
        if progress.snapshot_loading is not None:
            self._refuse_going_back(name, tso)
        frame = self._frame(table, codec, [files[f] for f in table.data_files]) if table.data_files else None
        # Registered as the consumer's before it is created (as the job does), or added if it existed unregistered.
        self._registry.register([] if progress.exists else [name], existing=[name] if progress.exists else [])
        # Two commits: the replacement marked as loading, then the rows applied through the TSO.
        self._writer.create(name, codec.schema, None, replace=progress.exists, note={"snapshotLoading": tso})
        if frame is None:
            frame = self._spark.createDataFrame([], _source_schema(codec))
        try:
            self._writer.merge(name, codec.schema, SourceFrame(frame), AppliedPoint(ts=tso), into_empty=True,
                               idempotent=False, note={"snapshotTs": tso})
        except Exception as err:
            raise SnapshotError(f"{name}: loading {len(table.data_files)} data files failed: {_cause(err)}") from err
        log.info("%s: loaded from %d data files, applied through TSO %d", name, len(table.data_files), tso)
        return TableOutcome(str(name), "loaded", f"{len(table.data_files)} data files")

    def _frame(self, table: ExportTable, codec: RowCodec, paths: list[str]):
        fmt = self._format
        whole = not fmt.escape_backslash  # values may then span lines: a file is parsed as a whole
        lines = self._spark.read.text([_literal(p) for p in paths], wholetext=whole).select(
            F.col("value").cast("binary"), F.col("_metadata.file_path"), F.col("_metadata.file_block_start")
        )
        names = self._column_order(table, paths[0], codec)
        spec = RowSpec(codec, names, table.format, fmt.dialect(), table.format == "csv" and fmt.csv_header)
        return lines.mapInArrow(lambda batches: typed_batches(spec, batches), _source_schema(codec))

    def _column_order(self, table: ExportTable, first: str, codec: RowCodec) -> tuple[str, ...] | None:
        """The data files' column order: the CSV header, or an INSERT's column list; None: the table's."""
        lines = self._spark.read.text(_literal(first)).select(F.col("value").cast("binary").alias("v"))
        if table.format == "csv":
            if not self._format.csv_header:
                return None
            head = lines.limit(1).collect()
            record = next(csv_records(bytes(head[0]["v"]), self._format.dialect()), None) if head else None
            names = tuple(v.decode("utf-8", errors="replace") for v in record if v is not None) if record else ()
            what = "CSV header"
        else:
            head = lines.where(F.col("v").startswith(F.lit(b"INSERT"))).limit(1).collect()
            try:
                listed = sql_columns(bytes(head[0]["v"])) if head else None
            except InvalidMessage as err:
                raise SnapshotError(f"{first}: {err}") from err
            if listed is None:
                return None
            names, what = tuple(listed), "INSERT column list"
        # Every column once, no other (a header missing here is a data row taken for one: --no-header).
        if sorted(n.lower() for n in names) != sorted(n.lower() for n in codec.schema.column_names()):
            raise SnapshotError(
                f"{first}: its {what} {list(names)} does not name the table's columns {list(codec.schema.column_names())}"
                + (" (exported with --no-header? say --no-header)" if what == "CSV header" else "")
            )
        return names

    def _refuse_going_back(self, table: TableName, tso: int) -> None:
        """A table whose load was interrupted may have been applied further before it: Delta keeps the
        stream's transaction ids across the replacement, so an older snapshot would have the stream's
        next MERGEs skipped as already written."""
        self._locator.load(self._sql)
        newest = max((h.applied_ts for h in applied_history(self._sql, self._locator.sql_name(table))
                      if h.applied_ts is not None), default=None)
        if newest is not None and newest > tso:
            raise SnapshotError(
                f"{table} was applied through commitTs {newest} before a snapshot load replaced it; an export at TSO "
                f"{tso} is older: load an export at {newest} or later, or drop the table first"
            )


def _source_schema(codec: RowCodec) -> str:
    """The MERGE source's columns (`DeltaWriter.merge`): c0.. in the table's order, then ticdc_deleted."""
    columns = [f"c{i} {source_type(c.spark_type)}" for i, c in enumerate(codec.schema.columns)]
    return ", ".join([*columns, "ticdc_deleted BOOLEAN"])


def _literal(path: str) -> str:
    """`path` with Hadoop's glob characters escaped: Spark reads paths as patterns, and Dumpling leaves
    `[ ] { }` in file names as they are."""
    return re.sub(r"([\[\]{}*?])", r"\\\1", path)


def _cause(err: Exception) -> str:
    """The product's own error text from an executor's failure (Spark wraps it in its own)."""
    text = str(err)
    for line in text.splitlines():
        if "InvalidMessage" in line or "ValueConversionError" in line:
            return line.split(":", 1)[1].strip() if ":" in line else line
    return text.splitlines()[0] if text else type(err).__name__
