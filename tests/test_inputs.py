"""Every bad input through the public API gets a specific error: field, problem, expectation."""

import pytest
import torch

import efa
from efa import EFA, Category, EFAConfig, Sequences, Value
from efa.families import Bernoulli, Gaussian, Poisson


@pytest.fixture
def model():
    torch.manual_seed(0)
    fields = [
        Category("movie", 5, target=False, dim=4),
        Value("rating", Poisson(shift=1), dim=4, hidden=4),
        Value("score", Gaussian(1.0), dim=2, hidden=4),
        Value("liked", Bernoulli(), dim=2, hidden=4),
    ]
    return EFA(EFAConfig(fields, num_layers=1, max_len=4))


def good():
    return {
        "movie": [[0, 1, 2], [3, 4]],
        "rating": [[1, 2, 3], [3, 1]],
        "score": [[0.5, 1.0, -2.0], [0.0, 3.0]],
        "liked": [[0, 1, 1], [1, 0]],
    }


def fit(model, fields):
    return efa.fit(model, Sequences.from_lists(fields), None, max_epochs=1, progress=False)


def test_good_input_fits(model):
    fit(model, good())


@pytest.mark.parametrize(
    "field,seq,value,match",
    [
        ("score", 0, float("nan"), "field 'score'.*NaN"),
        ("score", 1, float("inf"), "field 'score'.*inf"),
        ("movie", 0, 7, "field 'movie'.*"),
        ("movie", 1, -1, "field 'movie'.*"),
        ("rating", 0, 0, "field 'rating'.*"),  # 1 + Poisson: 0 is outside the support
        ("rating", 1, -3, "field .rating.*below shift=1.*sequence 1, position 0"),
        ("liked", 0, 2, "field 'liked'.*"),
    ],
)
def test_bad_values(model, field, seq, value, match):
    fields = good()
    fields[field][seq][0] = value
    with pytest.raises(ValueError, match=match):
        fit(model, fields)


def test_non_integer_counts_are_not_truncated(model):
    fields = good()
    fields["rating"] = [[1.0, 2.5, 3.0], [3.0, 1.0]]
    with pytest.raises((ValueError, TypeError), match="field 'rating'"):
        fit(model, fields)


def test_float_categories_are_refused(model):
    data = Sequences.from_lists(good())
    data.fields["movie"] = data.fields["movie"].float()
    with pytest.raises((ValueError, TypeError), match="field 'movie'"):
        model.log_likelihood(data)


def test_ragged_input_without_padding():
    with pytest.raises(TypeError, match="from_lists"):
        Sequences({"movie": [[0, 1, 2], [3, 4]]}, torch.tensor([3, 2]))
    with pytest.raises(ValueError, match="sequence 1: fields have different lengths"):
        Sequences.from_lists({"movie": [[0, 1], [3, 4]], "rating": [[1, 2], [1]]})


def test_longer_than_positional_table(model):
    fields = {k: [v[0] + v[0][:2]] for k, v in good().items()}  # length 5 > max_len 4
    with pytest.raises(ValueError, match="longer than the positional table"):
        fit(model, fields)


def test_empty_data():
    with pytest.raises(ValueError, match="empty"):
        Sequences.from_lists({"movie": []})
    with pytest.raises(ValueError, match="at least one field"):
        Sequences.from_lists({})
    with pytest.raises(ValueError, match="sequence 0 is empty"):
        Sequences.from_lists({"movie": [[], [1]]})


def test_missing_and_unknown_fields(model):
    fields = good()
    del fields["liked"]
    with pytest.raises(KeyError, match="'liked' is missing"):
        fit(model, fields)
    fields = good()
    fields["extra"] = fields["movie"]
    with pytest.raises(KeyError, match="does not know.*extra"):
        fit(model, fields)


def test_not_a_sequences_object(model):
    with pytest.raises(TypeError, match="expected efa.Sequences"):
        model.log_likelihood({"movie": torch.zeros(2, 3)})


def test_bad_lengths():
    with pytest.raises(ValueError, match="sequence 1 has length 4, expected 1..3"):
        Sequences({"movie": torch.zeros(2, 3, dtype=torch.long)}, torch.tensor([3, 4]))


def test_missing_values_are_masked_not_predicted(model):
    data = Sequences.from_lists(good(), observed={"score": [[True, False, True], [True, True]]})
    data.fields["score"][0, 1] = float("nan")  # a missing value may hold anything
    ll = model.log_likelihood(data)
    assert ll["score"][1] == 4 and torch.isfinite(ll["score"][0])
    loss = model.loss(data)
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_bad_config_is_explained():
    with pytest.raises(ValueError, match="at least one field must be a target"):
        EFAConfig([Category("movie", 5, target=False)])
    with pytest.raises(ValueError, match="direction must be one of"):
        EFAConfig([Category("movie", 5)], direction="sideways")
    with pytest.raises(ValueError, match="num_categories"):
        Category("movie", 1)
    with pytest.raises(TypeError, match="family must be"):
        Value("rating", "poisson")


def test_from_frame_builds_ordered_padded_sequences():
    import pandas as pd

    df = pd.DataFrame(
        {
            "user": [2, 1, 1, 2, 1],
            "t": [5, 3, 1, 4, 2],
            "movie": [4, 0, 1, 3, 2],
            "rating": pd.array([1, 2, None, 3, 1], dtype="Int64"),
            "lat": [0.1, 0.2, 0.3, 0.4, 0.5],
            "lon": [1.0, 2.0, 3.0, 4.0, 5.0],
        }
    )
    with pytest.raises(ValueError, match="field 'rating': NaN in sequence 0"):
        Sequences.from_frame(df, "user", {"rating": "rating"}, order="t")
    data = Sequences.from_frame(
        df,
        "user",
        {"movie": "movie", "rating": "rating", "where": ["lat", "lon"]},
        order="t",
        missing=True,
    )
    assert data.lengths.tolist() == [3, 2]
    assert data.fields["movie"].tolist() == [[1, 2, 0], [3, 4, 0]]
    assert data.fields["rating"].dtype == torch.int64
    assert data.observed["rating"].tolist() == [[False, True, True], [True, True, False]]
    assert data.fields["where"].shape == (2, 3, 2)
    with pytest.raises(KeyError, match="'nope'"):
        Sequences.from_frame(df, "user", {"movie": "nope"})
