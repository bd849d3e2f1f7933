"""Which folder holds each path table (`apply.places.folders`), from the registry's rows."""

from __future__ import annotations

import pytest

from ticdc_delta.apply.places.folders import Entry, TablePlaces, usual_folder
from ticdc_delta.exceptions import ApplyError
from ticdc_delta.schema_cache.events import TableName

A, B, C = TableName("shop", "a"), TableName("shop", "b"), TableName("odd db", "t/..")


def test_a_name_never_registered_is_at_its_usual_folder_encoded():
    places = TablePlaces()
    places.load([])
    assert places.folder(A) == "shop/a"
    assert places.folder(C) == "odd-20db/t-2f-2e-2e"  # nothing of the name can steer the path
    assert not places.gone(A) and not places.live(A)


def test_rows_of_an_older_release_name_no_folder_and_mean_the_usual_one():
    places = TablePlaces()
    places.load([Entry(A, None, False, 0, "g")])
    assert places.live(A) and places.folder(A) == "shop/a" and places.names("g") == [A]


def test_a_rename_hands_the_folder_over_and_frees_nothing():
    places = TablePlaces()
    places.load([Entry(A, "shop/a", False, 1, "g")])
    places.record([Entry(A, "shop/a", True, 2, "g"), Entry(B, "shop/a", False, 2, "g")])
    assert places.gone(A) and places.folder(B) == "shop/a"
    assert places.take_freed() == []
    # The old name created again: its usual folder is B's, so it gets the next one.
    assert places.choose(A) == "shop/a.2"


def test_a_drop_frees_its_folder_once_unless_a_create_takes_it_back():
    places = TablePlaces()
    places.load([Entry(A, "shop/a", False, 1, "g"), Entry(B, "shop/b", False, 1, "g")])
    places.record([Entry(A, "shop/a", True, 2, "g")])
    places.record([Entry(B, "shop/b", True, 3, "g")])
    places.record([Entry(B, places.choose(B), False, 4, "g")])  # re-created: its folder again
    assert places.folder(B) == "shop/b"
    assert places.take_freed() == ["shop/a"]
    assert places.take_freed() == []


def test_the_latest_row_of_a_name_wins_and_rows_before_this_process_still_free_folders():
    # Rows come in any order; `seq` orders the commits.
    places = TablePlaces()
    places.load([Entry(A, "shop/a", True, 5, "g"), Entry(A, "shop/a", False, 1, "g"), Entry(B, "shop/b", False, 2, "h")])
    assert places.gone(A) and places.live(B)
    assert places.take_freed() == ["shop/a"]  # its deletion is not recorded: tried again
    assert places.names("g") == [] and places.names("h") == [B]
    assert places.next_seq() == 6


@pytest.mark.parametrize("folder", ["../etc", "/abs/path", "shop/a/../../x", "shop", "shop/a.b"])
def test_a_registry_row_naming_a_folder_the_product_never_writes_is_refused(folder):
    with pytest.raises(ApplyError, match="never writes"):
        TablePlaces().load([Entry(A, folder, False, 1, "g")])


def test_usual_folder_matches_what_choose_gives_a_free_name():
    places = TablePlaces()
    places.load([])
    assert places.choose(C) == usual_folder(C)
