"""A product table made by an earlier release gets the columns it lacks (`internal_tables._add_missing_columns`):
its decisions against a stand-in session; the ALTER itself runs on real Delta tables in
tests/e2e/test_metrics_and_status.py (the catalog test, both pairs)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pyspark.errors import AnalysisException

from ticdc_delta.apply.own_tables.base import _add_missing_columns

COLUMNS = [("consumer", "STRING"), ("round", "BIGINT"), ("table_seconds", "ARRAY<STRUCT<`seconds`: DOUBLE>>")]


class Session:
    """The table's columns as each schema read finds them, in turn; the statements run; an ALTER may be refused."""

    def __init__(self, *schemas: list[str], refuse: bool = False) -> None:
        self.schemas, self.refuse, self.statements = list(schemas), refuse, []

    def table(self, name):
        fields = [SimpleNamespace(name=n) for n in self.schemas.pop(0)]
        return SimpleNamespace(schema=SimpleNamespace(fields=fields))

    def run(self, statement, what=""):
        self.statements.append(statement)
        if self.refuse:
            raise AnalysisException("FIELDS_ALREADY_EXISTS")


def test_a_table_with_every_column_gets_no_statement():
    session = Session(["consumer", "ROUND", "table_seconds"])  # (names compared case-insensitively, as Spark does)
    _add_missing_columns(session, "m", COLUMNS, "append")
    assert session.statements == []


def test_the_missing_columns_are_added_in_one_quoted_statement():
    session = Session(["consumer"])
    _add_missing_columns(session, "m", COLUMNS, "append")
    assert session.statements == ["ALTER TABLE m ADD COLUMNS (`round` BIGINT, `table_seconds` ARRAY<STRUCT<`seconds`: DOUBLE>>)"]


def test_another_job_adding_them_first_is_fine_and_a_real_refusal_is_raised():
    _add_missing_columns(Session(["consumer", "round"], ["consumer", "round", "table_seconds"], refuse=True),
                         "m", COLUMNS, "append")
    with pytest.raises(AnalysisException):
        _add_missing_columns(Session(["consumer", "round"], ["consumer", "round"], refuse=True), "m", COLUMNS, "append")
