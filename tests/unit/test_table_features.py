"""Table feature settings, a table's layout read from its properties, and column names without column mapping."""

from __future__ import annotations

from ticdc_delta.apply.base.identifiers import delta_column_name, upstream_column_name
from ticdc_delta.apply.tables.features import COMPATIBLE, FULL, TableLayout
from ticdc_delta.schema_cache.events import Column, TableName, TableSchema


def test_compatible_tables_pin_every_feature_off():
    # Session or workspace defaults (deletion vectors, v2 checkpoints) must not add reader features.
    assert TableLayout.for_setting(COMPATIBLE, stable_type_widening=True).create_properties() == {
        "delta.columnMapping.mode": "none",
        "delta.enableDeletionVectors": "false",
        "delta.enableTypeWidening": "false",
        "delta.checkpointPolicy": "classic",
    }


def test_full_tables_widen_types_only_where_delta_has_it_stable():
    assert TableLayout.for_setting(FULL, stable_type_widening=True).create_properties() == {
        "delta.columnMapping.mode": "name",
        "delta.enableDeletionVectors": "true",
        "delta.enableTypeWidening": "true",
    }
    assert TableLayout.for_setting(FULL, stable_type_widening=False).create_properties()["delta.enableTypeWidening"] == "false"


def test_layout_of_a_table_from_its_properties():
    full = TableLayout.of(
        {
            "delta.columnMapping.mode": "name",
            "delta.enableDeletionVectors": "true",
            "delta.enableTypeWidening": "true",
            "delta.feature.typeWidening": "supported",
            "delta.feature.columnMapping": "supported",
            "delta.feature.deletionVectors": "supported",
            "delta.feature.appendOnly": "supported",
        }
    )
    assert (full.column_mapping, full.deletion_vectors, full.type_widening) == (True, True, True)
    assert full.unreadable_features() == ["columnMapping", "deletionVectors", "typeWidening"]
    # Delta 3.x's preview cannot widen INT -> BIGINT: not in-place widening for the job.
    preview = TableLayout.of({"delta.enableTypeWidening": "true", "delta.feature.typeWidening-preview": "supported"})
    assert not preview.type_widening and preview.unreadable_features() == ["typeWidening-preview"]
    plain = TableLayout.of({"delta.minReaderVersion": "1", "delta.feature.timestampNtz": "supported"})
    assert plain == TableLayout(features=frozenset({"timestampNtz"})) and plain.unreadable_features() == []


def test_column_names_delta_refuses_are_escaped_reversibly():
    for name, stored in [
        ("unit price", "unit%20price"),
        ("a,b;c{d}(e)=f", "a%2Cb%3Bc%7Bd%7D%28e%29%3Df"),
        ("tab\there\nnew", "tab%09here%0Anew"),
        ("100%", "100%25"),
        ("x%20y", "x%2520y"),  # a literal escape-looking name stays distinct from "x y"
        ("plain_name", "plain_name"),
        ("ünï.`odd`", "ünï.`odd`"),  # allowed without column mapping: kept
    ]:
        assert delta_column_name(name) == stored
        assert upstream_column_name(stored) == name


def test_schema_names_only_change_without_column_mapping():
    schema = TableSchema(TableName("d", "t"), (Column("my id", "INT"), Column("v", "STRING")), ("my id",))
    escaped = TableLayout().delta_schema(schema)
    assert escaped.column_names() == ("my%20id", "v") and escaped.key == ("my%20id",)
    assert TableLayout(column_mapping=True).delta_schema(schema) is schema
    plain = TableSchema(TableName("d", "t"), (Column("id", "INT"),), ("id",))
    assert TableLayout().delta_schema(plain) is plain
