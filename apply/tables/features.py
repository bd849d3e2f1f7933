"""The Delta table features the job's tables use (`target.table_features`), and what a table has.

- "compatible" (the default): tables every Delta reader opens. No column
  mapping, no deletion vectors, no type widening and classic checkpoints:
  delta-rs (the `deltalake` package, and pandas through it) and Polars refuse
  deletion vectors, type widening and v2 checkpoints, and delta-rs reads
  column-mapped columns as NULLs. Renames, drops and type changes rewrite the
  table; column names Delta refuses without column mapping are escaped
  (`apply.base.identifiers.delta_column_name`).
- "full": column mapping (renames and drops in place, any column name),
  deletion vectors (MERGE writes the changed rows, not the files holding
  them) and, where the session's Delta has it as a stable feature (4.0 and
  later, i.e. Spark 4), type widening. Readers need Delta 3.x (Delta 4 where
  the table widened a type) or Databricks.

The setting decides how the job creates tables. Changes to an existing table
follow what that table has (a table created under the other setting, or by
an earlier release, keeps working): `TableLayout.of` reads it back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ticdc_delta.apply.base.identifiers import delta_column_name, upstream_column_name
from ticdc_delta.schema_cache.events import TableSchema

COMPATIBLE = "compatible"
FULL = "full"
SETTINGS = (COMPATIBLE, FULL)

# Reader features that delta-rs 1.6 (pyarrow/pandas path) or Polars refuse or
# misread: a table created under "compatible" that has one got it from a
# session or workspace default, and is logged.
NOT_READABLE_EVERYWHERE = frozenset(
    {"columnMapping", "deletionVectors", "typeWidening", "typeWidening-preview", "v2Checkpoint", "variantType",
     "variantType-preview"}
)

_FEATURE_PREFIX = "delta.feature."


@dataclass(frozen=True)
class TableLayout:
    """What a Delta table uses, as far as the job's statements depend on it."""

    column_mapping: bool = False
    deletion_vectors: bool = False
    # In-place widening: the stable `typeWidening` feature (Delta 4). Delta 3.x
    # has a preview that only widens among the small integer types.
    type_widening: bool = False
    features: frozenset[str] = field(default_factory=frozenset)

    @staticmethod
    def for_setting(setting: str, *, stable_type_widening: bool) -> TableLayout:
        """The layout the job creates tables with under `setting`."""
        if setting == FULL:
            return TableLayout(column_mapping=True, deletion_vectors=True, type_widening=stable_type_widening)
        return TableLayout()

    @staticmethod
    def of(properties: Mapping[str, str]) -> TableLayout:
        """The layout of a table with these `SHOW TBLPROPERTIES`."""
        features = frozenset(
            key[len(_FEATURE_PREFIX):]
            for key, value in properties.items()
            if key.startswith(_FEATURE_PREFIX) and value == "supported"
        )
        return TableLayout(
            column_mapping=properties.get("delta.columnMapping.mode", "none") != "none",
            deletion_vectors=properties.get("delta.enableDeletionVectors") == "true",
            type_widening=properties.get("delta.enableTypeWidening") == "true" and "typeWidening" in features,
            features=features,
        )

    def create_properties(self) -> dict[str, str]:
        """TBLPROPERTIES of a new table: every setting explicit, so session or workspace defaults
        (deletion vectors and v2 checkpoints are on by default in some) do not add features."""
        properties = {
            "delta.columnMapping.mode": "name" if self.column_mapping else "none",
            "delta.enableDeletionVectors": str(self.deletion_vectors).lower(),
            "delta.enableTypeWidening": str(self.type_widening).lower(),
        }
        if not (self.column_mapping or self.deletion_vectors or self.type_widening):
            properties["delta.checkpointPolicy"] = "classic"
        return properties

    def unreadable_features(self) -> list[str]:
        return sorted(self.features & NOT_READABLE_EVERYWHERE)

    # --- column names: upstream names as they are, or escaped without column mapping ---------

    def delta_name(self, name: str) -> str:
        return name if self.column_mapping else delta_column_name(name)

    def upstream_name(self, name: str) -> str:
        return name if self.column_mapping else upstream_column_name(name)

    def delta_schema(self, schema: TableSchema) -> TableSchema:
        """`schema` with the column names this table stores."""
        if self.column_mapping or all(delta_column_name(c.name) == c.name for c in schema.columns):
            return schema
        return replace(
            schema,
            columns=tuple(replace(c, name=delta_column_name(c.name)) for c in schema.columns),
            key=tuple(delta_column_name(k) for k in schema.key),
        )
