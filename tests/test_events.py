"""Sequences from a long table of events (Sequences.from_events, efa.core.events): order within
a sequence, category codes with their vocabularies, the stated policies for long sequences and
a split that keeps every sequence whole."""

import numpy as np
import pandas as pd
import pytest
import torch

import efa
from efa.core.events import split_by_sequence


def _events():
    return pd.DataFrame({
        "user": ["b", "a", "b", "a", "b", "a", "b"],
        "time": [3, 2, 1, 1, 2, 3, 4],
        "movie": ["m9", "m2", "m1", "m9", "m2", "m1", "m1"],
        "rating": [5, 3, 4, 2, 1, 4, 3],
    })


def test_events_become_ordered_coded_sequences():
    ev = efa.Sequences.from_events(_events(), "user", "time", {"movie": "movie",
                                                                "rating": "rating"})
    assert ev.keys == ["a", "b"] and ev.dropped == 0
    assert ev.vocabularies == {"movie": ["m1", "m2", "m9"]}
    assert ev.data.lengths.tolist() == [3, 4]
    movies = [[ev.vocabularies["movie"][int(k)] for k in row[:n]]
              for row, n in zip(ev.data.fields["movie"], ev.data.lengths, strict=True)]
    assert movies == [["m9", "m2", "m1"], ["m1", "m2", "m9", "m1"]]  # by time within a user
    assert ev.data.fields["rating"][1, :4].tolist() == [4, 1, 5, 3]
    ids = efa.Sequences.from_events(_events().assign(movie=[9, 2, 1, 9, 2, 1, 1]), "user",
                                    "time", {"movie": "movie"}, categories=["movie"])
    assert ids.vocabularies == {"movie": [1, 2, 9]}  # integer ids coded 0..K−1 on request


@pytest.mark.parametrize("long, lengths, dropped, first_b", [
    ("last", [2, 2], 3, ["m9", "m1"]), ("first", [2, 2], 3, ["m1", "m2"]),
    ("windows", [2, 1, 2, 2], 0, ["m1", "m2"])])
def test_long_sequences_follow_the_stated_policy(long, lengths, dropped, first_b):
    ev = efa.Sequences.from_events(_events(), "user", "time", {"movie": "movie"}, max_len=2,
                                   long=long)
    assert ev.data.lengths.tolist() == lengths and ev.dropped == dropped
    b = ev.keys.index(("b", 0) if long == "windows" else "b")
    got = [ev.vocabularies["movie"][int(k)] for k in ev.data.fields["movie"][b, :2]]
    assert got == first_b
    if long == "windows":
        assert ev.keys == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]


def test_bad_tables_are_refused_by_name():
    with pytest.raises(ValueError, match="more than max_len=2; choose long="):
        efa.Sequences.from_events(_events(), "user", "time", {"movie": "movie"}, max_len=2,
                                  long="error")
    with pytest.raises(KeyError, match=r"columns \['when'\] are not in the table"):
        efa.Sequences.from_events(_events(), "user", "when", {"movie": "movie"})
    with pytest.raises(ValueError, match="column 'time' .* is missing at row 2"):
        efa.Sequences.from_events(_events().assign(time=[3, 2, None, 1, 2, 3, 4]), "user",
                                  "time", {"movie": "movie"})
    with pytest.raises(ValueError, match="long must be one of"):
        efa.Sequences.from_events(_events(), "user", "time", {"movie": "movie"}, long="trim")
    with pytest.raises(ValueError, match="field 'movie'.* missing at row 1"):
        efa.Sequences.from_events(_events().assign(movie=["m9", None, "m1", "m9", "m2", "m1",
                                                          "m1"]), "user", "time",
                                  {"movie": "movie"})


def test_split_keeps_every_sequence_whole():
    data = efa.Sequences({"x": torch.arange(50)[:, None].repeat(1, 3)}, torch.full((50,), 3))
    parts = split_by_sequence(data, (0.6, 0.2, 0.2), seed=1)
    ids = [set(p.fields["x"][:, 0].tolist()) for p in parts]
    assert [len(i) for i in ids] == [30, 10, 10] and set.union(*ids) == set(range(50))
    assert not (ids[0] & ids[1]) and not (ids[1] & ids[2])
    again = split_by_sequence(data, (0.6, 0.2, 0.2), seed=1)
    assert all(torch.equal(a.fields["x"], b.fields["x"]) for a, b in zip(parts, again,
                                                                          strict=True))
    with pytest.raises(ValueError, match="summing to 1"):
        split_by_sequence(data, (0.5, 0.2))
    with pytest.raises(ValueError, match="at least one"):
        split_by_sequence(data[torch.arange(2)], (0.5, 0.25, 0.25))
    assert np.isclose(sum(len(p) for p in parts), 50)


def test_a_field_reading_the_key_column_leaves_the_keys_as_given():
    """Coding a field's column must not recode the sequence keys (a probe got [0, 1] back
    for ["ann", "bob"]), nor another field reading the same column."""
    ev = pd.DataFrame({"user": ["ann", "ann", "bob"], "t": [2, 1, 1], "item": ["a", "b", "c"]})
    got = efa.Sequences.from_events(ev, "user", "t", {"item": "item", "who": "user",
                                                     "again": "item"})
    assert got.keys == ["ann", "bob"]
    assert got.vocabularies == {"item": ["a", "b", "c"], "who": ["ann", "bob"],
                                "again": ["a", "b", "c"]}
    assert got.data.fields["who"].tolist() == [[0, 0], [1, 0]]
    assert torch.equal(got.data.fields["again"], got.data.fields["item"])
    windows = efa.Sequences.from_events(ev.assign(**{"user (window)": 0}), "user", "t",
                                        {"who": "user"}, max_len=1, long="windows")
    assert windows.keys == [("ann", 0), ("ann", 1), ("bob", 0)]
    assert ev.user.tolist() == ["ann", "ann", "bob"]  # the user's table is untouched


def test_numbers_coded_as_categories_keep_their_numeric_order():
    ev = pd.DataFrame({"u": [1] * 4, "t": [1, 2, 3, 4], "rating": [1, 2, 10, 3]})
    for column in (ev.rating, ev.rating.astype("Int64")):
        got = efa.Sequences.from_events(ev.assign(rating=column), "u", "t",
                                        {"rating": "rating"}, categories=["rating"])
        assert got.vocabularies == {"rating": [1, 2, 3, 10]}


def test_tied_events_are_warned_about_and_bad_arguments_refused():
    ev = pd.DataFrame({"u": [1, 1, 1], "t": [1, 1, 2], "item": ["a", "b", "c"]})
    with pytest.warns(UserWarning, match=r"1 event\(s\) share .*u=1.* t=1"):
        efa.Sequences.from_events(ev, "u", "t", {"item": "item"})
    with pytest.raises(TypeError, match="list of field names, got the string 'item'"):
        efa.Sequences.from_events(ev, "u", "t", {"item": "item"}, categories="item")
    with pytest.raises(TypeError, match=r"\['loc'\] are attribute fields"):
        efa.Sequences.from_events(ev.assign(x=1.0), "u", "t", {"item": "item", "loc": ["x"]},
                                  categories=["loc"])
    data = efa.Sequences.from_lists({"x": [[1]] * 10})
    for fractions in ((0.5, float("nan")), (float("nan"), 1.0)):
        with pytest.raises(ValueError, match="positive numbers summing to 1"):
            split_by_sequence(data, fractions)
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        split_by_sequence(data, (0.5, 0.5), seed=None)
