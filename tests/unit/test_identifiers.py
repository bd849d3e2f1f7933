"""Upstream names are data: quoting for SQL, encoding for paths."""

from __future__ import annotations

import pytest

from apply.identifiers import path_segment, quote
from apply.locator import PathLocator
from schema_cache.events import TableName


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
