"""Upstream names are data: quoting for SQL, encoding for paths."""

from __future__ import annotations

import re

import pytest

from ticdc_delta.apply.base.identifiers import catalog_name, path_segment, quote, sql_string
from ticdc_delta.apply.places.locator import PathLocator
from ticdc_delta.schema_cache.events import TableName


def test_quote_doubles_backticks():
    assert quote("plain") == "`plain`"
    assert quote("a`b") == "`a``b`"
    assert quote("x` ; DROP TABLE y; --") == "`x`` ; DROP TABLE y; --`"


@pytest.mark.parametrize(
    "name, segment",
    [
        ("orders", "orders"),
        ("Order_Items2", "Order_Items2"),
        ("..", "-2e-2e"),
        ("a/b", "a-2fb"),
        ("_ticdc", "-5fticdc"),
        ("my-db", "my-2ddb"),
        ("日本", "-e6-97-a5-e6-9c-ac"),
        ("", "-"),
    ],
)
def test_path_segment(name, segment):
    assert path_segment(name) == segment


def test_distinct_names_get_distinct_segments():
    names = ["a-2e", "a.", "a-", "a_", "_a", "-5fa"]
    assert len({path_segment(n) for n in names}) == len(names)


def test_hostile_names_stay_under_the_root():
    locator = PathLocator("/lake")
    path = locator.path(TableName("../../etc", "passwd"))
    assert path.startswith("/lake/") and ".." not in path.split("/")


@pytest.mark.parametrize(
    "name, mapped",
    [
        ("orders", "orders"),
        ("Order_2024", "Order_2024"),
        ("my-db", "my_db_" + __import__("hashlib").sha256(b"my-db").hexdigest()[:8]),
    ],
)
def test_catalog_name(name, mapped):
    assert catalog_name(name) == mapped


def test_catalog_names_are_safe_and_distinct():
    names = ["my-db", "my db", "my_db", "my.db", "ünï", "a`b"]
    mapped = [catalog_name(n) for n in names]
    assert len(set(mapped)) == len(names)
    assert all(re.fullmatch(r"[A-Za-z0-9_]+", m) for m in mapped)


def test_a_sql_string_literal_holds_any_text_spark_35_parses():
    # (Spark 3.5 takes no doubled quote: a backslash escapes the quote, and itself)
    assert sql_string("it's a \\ and 'x'") == "'it\\'s a \\\\ and \\'x\\''"
