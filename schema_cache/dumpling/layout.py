"""Which files of a Dumpling export hold what: the snapshot TSO, each table's structure and data."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import unquote

from ticdc_delta.exceptions import ConfigError
from ticdc_delta.schema_cache.events import TableName

# `Pos:` under `SHOW MASTER STATUS:` (or `SHOW BINARY LOG STATUS:` on newer servers): the TSO on TiDB.
_POSITION = re.compile(r"^SHOW (?:MASTER|BINARY LOG) STATUS:.*?^\s*Pos:\s*(\S+)\s*$", re.MULTILINE | re.DOTALL)
# File names Dumpling writes by default: `{fn db}-schema-create.sql`, `{fn db}.{fn table}-schema.sql`,
# `{fn db}.{fn table}.{index}.{csv|sql}[.gz]`; `fn` writes '.', '/', '%', ... as %XX, so the first
# '.' always ends the database name.
_SCHEMA_FILE = re.compile(r"([^.]+)\.([^.]+)-schema\.sql(\.gz)?")
_VIEW_FILE = re.compile(r"([^.]+)\.([^.]+)-schema-view\.sql(\.gz)?")
_DATA_FILE = re.compile(r"([^.]+)\.([^.]+)\.(\d+)\.(csv|sql)(\.gz)?")
_UNREADABLE = re.compile(r"[^.]+\.[^.]+\.\d+\.(csv|sql)\.(zst|snappy)")
# Files with nothing to load: the database's CREATE, views' and other objects' definitions.
_NOTHING_TO_LOAD = re.compile(
    r"metadata|[^.]+-schema-create\.sql|[^.]+\.[^.]+-schema-(?:view|sequence|triggers|post)\.sql"
    r"|[^.]+-placement-policy-create\.sql|[^.]+-schema-post\.sql"
)


def snapshot_tso(metadata: str) -> int:
    """The snapshot TSO a TiDB export's `metadata` file records."""
    match = _POSITION.search(metadata)
    if match is None or not match.group(1).isdigit():
        raise ConfigError(
            "the export's metadata file has no TiDB snapshot TSO (SHOW MASTER STATUS Pos: <tso>): "
            "not a Dumpling export of TiDB"
        )
    return int(match.group(1))


def _name(escaped: str) -> str:
    return unquote(escaped, errors="strict")


@dataclass
class ExportTable:
    """One table of the export: its schema file and its data files (relative names), all one format."""

    name: TableName
    schema_file: str
    data_files: list[str] = field(default_factory=list)
    format: str | None = None  # "csv" or "sql"; None while it has no data file (an empty table)


def export_tables(file_names: list[str]) -> list[ExportTable]:
    """The export's tables from its file names (no folder part), sorted by name.

    Views (`-schema-view.sql`), sequences and other objects have no data to load and are left out.
    """
    tables: dict[tuple[str, str], ExportTable] = {}
    for name in sorted(file_names):
        schema = _SCHEMA_FILE.fullmatch(name)
        if schema is not None:
            key = (schema.group(1), schema.group(2))
            tables[key] = ExportTable(TableName(_name(key[0]), _name(key[1])), name)
    for name in file_names:
        view = _VIEW_FILE.fullmatch(name)
        if view is not None:  # a view's -schema.sql is a placeholder CREATE TABLE
            tables.pop((view.group(1), view.group(2)), None)
    for name in sorted(file_names):
        if _UNREADABLE.fullmatch(name):
            raise ConfigError(f"{name}: zstd and snappy compressed exports are not read; decompress them or export with -c gzip")
        data = _DATA_FILE.fullmatch(name)
        if data is None:
            base = name.removesuffix(".gz")
            if _SCHEMA_FILE.fullmatch(name) or _VIEW_FILE.fullmatch(name) or _NOTHING_TO_LOAD.fullmatch(base):
                continue
            # Never skip what is not understood: a table would be loaded empty and the stream's older changes skipped.
            raise ConfigError(
                f"{name}: not a file of a Dumpling export in CSV or SQL form with the default file names "
                "(parquet exports and --output-filename-template are not read)"
            )
        table = tables.get((data.group(1), data.group(2)))
        if table is None:
            raise ConfigError(f"{name}: a data file without its table's schema file ({data.group(1)}.{data.group(2)}-schema.sql)")
        if table.format not in (None, data.group(4)):
            raise ConfigError(f"{table.name}: data files in both CSV and SQL form")
        table.format = data.group(4)
        table.data_files.append(name)
    if tables and not any(t.data_files for t in tables.values()):
        # An export of empty tables only is possible, but one made with --no-data is far likelier: loading it
        # would replace every table with an empty one applied through the TSO.
        raise ConfigError("the export has no data file at all (made with --no-data?): nothing would be loaded")
    return [tables[k] for k in sorted(tables)]
