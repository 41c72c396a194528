"""Every bad input through the public API gets a specific error: field, problem, expectation."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

import efa
from efa import EFA, Category, EFAConfig, Sequences, Value
from efa.core.families import Bernoulli, Gaussian, Poisson
from tests.helpers import equal_with_nan, make_model, mixed_data, two_row_fields, two_rows


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
        model.log_likelihood_sums(data)


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
        model.log_likelihood_sums({"movie": torch.zeros(2, 3)})


def test_bad_lengths():
    with pytest.raises(ValueError, match="sequence 1 has length 4, expected 1..3"):
        Sequences({"movie": torch.zeros(2, 3, dtype=torch.long)}, torch.tensor([3, 4]))


def test_missing_values_are_masked_not_predicted(model):
    data = Sequences.from_lists(good(), observed={"score": [[True, False, True], [True, True]]})
    data.fields["score"][0, 1] = float("nan")  # a missing value may hold anything
    ll = model.log_likelihood_sums(data)
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


def _data(n=20, seed=0):
    return mixed_data(n=n, seed=seed, dtype=torch.float32)


def _model(seed=0, **kw):
    return make_model(seed=seed, dtype=torch.float32, num_layers=1, **kw)


def test_no_predicted_positions_is_never_a_perfect_score():
    data = _data()
    none = data.with_scored(torch.zeros_like(data.valid()))
    with pytest.raises(ValueError, match="no predicted position"):
        efa.fit(_model(), data, none, max_epochs=1, progress=False)
    with pytest.warns(UserWarning, match="no predicted position"):
        scores = efa.evaluate(_model(), none)
    assert all(np.isnan(v) for v in scores.values())


def test_mask_shapes_must_match_exactly():
    items = [[0, 1, 2], [1, 2]]
    with pytest.raises(ValueError, match=r"observed\['item'\], sequence 1: 1 entries for a "
                                         r"sequence of length 2"):
        efa.Sequences.from_lists({"item": items}, observed={"item": [[True] * 3, [True]]})
    with pytest.raises(ValueError, match="sequence 0: 4 entries"):
        efa.Sequences.from_lists({"item": items}, observed={"item": [[True] * 4, [True] * 2]})
    with pytest.raises(ValueError, match="field 'y' has 1 sequences, field 'item' has 2"):
        efa.Sequences.from_lists({"item": items, "y": [[1.0, 2.0, 3.0]]})


def test_non_finite_padding_and_overflow_are_refused():
    data = _data()
    short = int(data.lengths.argmin())
    n = int(data.lengths[short])
    temp = data.fields["temp"].clone()
    temp[short, n] = float("nan")  # padding
    bad = efa.Sequences({**data.fields, "temp": temp}, data.lengths, data.observed)
    with pytest.raises(ValueError, match=f"sequence {short}, position {n}, which is padding"):
        efa.evaluate(_model(), bad)
    big = data.fields["temp"].double().clone()
    big[0, 0] = 1e39  # finite in float64, inf in the model's float32
    huge = efa.Sequences({**data.fields, "temp": big}, data.lengths,
                         {"temp": torch.ones_like(data.valid())})
    with pytest.raises(ValueError, match="sequence 0, position 0 does not fit the model's "
                                         "torch.float32"):
        efa.evaluate(_model(), huge)
    # A model whose log-likelihood overflows is stopped with the place it overflowed.
    model = _model()
    with torch.no_grad():
        model.readouts["count"].net[-1].weight.fill_(1e30)
    with pytest.raises(FloatingPointError, match="field 'count' at sequence 0, position 0"):
        efa.evaluate(model, data)


def test_frame_rows_without_a_key_and_cut_files(tmp_path):
    df = pd.DataFrame({"user": [1.0, np.nan, 2.0], "item": [0, 1, 2]})
    with pytest.raises(ValueError, match="'user' .* missing in 1 rows"):
        efa.Sequences.from_frame(df, by="user", fields={"item": "item"})
    from efa.datasets import movielens

    src = (efa.datasets.root.data_root() / "movielens-100k" / "u.data").read_text()
    cut = tmp_path / "u.data"
    cut.write_text("\n".join(src.splitlines()[:50_000]) + "\n")
    with pytest.warns(UserWarning, match="50,000 data rows; the official MovieLens-100K"):
        movielens.read_ratings(cut)


def test_float_held_integers_are_located_and_explained():
    counts = torch.tensor([[1.0, 2.0, 3.0], [4.0, 2.5, 1.0]])
    data = efa.Sequences({"c": counts}, torch.tensor([3, 3]))
    model = efa.EFA(efa.EFAConfig([efa.Value("c", Poisson(), dim=4)], num_layers=1))
    with pytest.raises(ValueError, match=r"2.5 at sequence 1, position 1 is not a whole number"
                                         r".*nullable 'Int64'"):
        model.check(data)
    whole = efa.Sequences({"c": counts.round()}, torch.tensor([3, 3]))
    with pytest.raises(ValueError, match=r"integer tensor, got dtype torch.float32 .*\.long\(\)"):
        model.check(whole)
    # Support errors name the (sequence, position), not a flat index.
    neg = efa.Sequences({"c": torch.tensor([[1, 2, 3], [4, -1, 1]])}, torch.tensor([3, 3]))
    with pytest.raises(ValueError, match=r"first: -1 at sequence 1, position 1"):
        model.check(neg)


def test_library_errors_become_efa_errors(tmp_path):
    df = pd.DataFrame({"user": [1, 1, 2], "genre": ["a", "b", "a"], "y": [1.0, 2.0, 3.0]})
    with pytest.raises(TypeError, match="'genre' holds .* values .e.g. 'a'., not numbers.*astype"):
        efa.Sequences.from_frame(df, by="user", fields={"genre": "genre"})
    df["genre"] = df["genre"].astype("category")
    data = efa.Sequences.from_frame(df, by="user", fields={"genre": "genre", "y": "y"})
    assert data.fields["genre"].tolist() == [[0, 1], [0, 0]]
    with pytest.raises(ValueError, match="the selection is empty"):
        data[torch.arange(0)]
    assert len(data[1]) == 1 and data[-1].fields["y"].tolist() == [[3.0]]
    with pytest.raises(IndexError, match="sequence 5 is out of range"):
        data[5]
    model = _model()
    d = _data()
    with pytest.raises(ValueError, match="'item' is a category"):
        efa.mean_squared_error(model, d, "item")
    with pytest.raises(KeyError, match="no field 'nosuch'"):
        efa.mean_squared_error(model, d, "nosuch")
    with pytest.raises(KeyError, match="no field 'nosuch'"):
        model.attention_weights(d, "nosuch")
    with pytest.raises(TypeError, match="max_epochs=30"):
        efa.fit(model, d, d, 30)
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        efa.evaluate(model, d, batch_size=0)
    with pytest.raises(ValueError, match="max_epochs must be an integer"):
        efa.TrainConfig(max_epochs=2.5)
    assert efa.Category("x", np.int64(5)).num_categories == 5
    path = efa.save(model, tmp_path / "m")
    weights = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    with pytest.raises(ValueError, match="model.safetensors is not readable"):
        efa.load(path)
    (path / "config.json").write_text((path / "config.json").read_text()[:40])
    with pytest.raises(ValueError, match="config.json is not valid JSON"):
        efa.load(path)
    ckpt = tmp_path / "ckpt"
    efa.fit(_model(), d, None, max_epochs=1, progress=False, checkpoint_dir=str(ckpt))
    blob = (ckpt / "checkpoint.safetensors").read_bytes()
    (ckpt / "checkpoint.safetensors").write_bytes(blob[:100])
    with pytest.raises(ValueError, match="checkpoint.safetensors is not a readable efa"):
        efa.fit(_model(), d, None, max_epochs=2, progress=False, checkpoint_dir=str(ckpt))


def test_a_value_that_leaves_the_support_in_the_models_precision_is_refused():
    """A gamma value of 1e-48 is positive in float64 and 0 in a float32 model, where its
    log-density is infinite (found by the defaults benchmark's evaluation teacher 908): the
    check refuses it before any fit, naming the place and the precision."""
    from efa.core.families import Gamma

    y = torch.full((3, 4), 2.0, dtype=torch.float64)
    y[1, 2] = 1e-48
    data = efa.Sequences({"y": y}, torch.full((3,), 4))
    model = efa.EFA(efa.EFAConfig([efa.Value("y", Gamma())], max_len=4))
    with pytest.raises(ValueError, match=r"sequence 1, position 2.*once rounded to the model's "
                                         r"torch.float32 \(the data are torch.float64\)"):
        efa.evaluate(model, data)
    assert math.isfinite(sum(efa.evaluate(model.double(), data).values()))


def test_masks_hold_booleans_only():
    """np.asarray(..., dtype=bool) reads the string "False" and NaN as True: refused."""
    for mask, bad in (([["True", "False"]], "'True'"), ([[float("nan"), 1]], "nan"),
                      ([[1, 2]], "2")):
        with pytest.raises(TypeError, match=f"sequence 0, position [01]: masks hold True/False "
                                            f"\\(or 1/0\\), got {bad}"):
            Sequences.from_lists({"x": [[1, 2]]}, observed={"x": mask})
    with pytest.raises(TypeError, match="scored, sequence 0, position 0"):
        Sequences.from_lists({"x": [[1, 2]]}, scored=[["False", "True"]])
    ok = Sequences.from_lists({"x": [[1, 2]]}, observed={"x": [[1, 0]]}, scored=[[True, 0.0]])
    assert ok.observed["x"].tolist() == [[True, False]] and ok.scored.tolist() == [[True, False]]


@pytest.mark.parametrize("name", ["training", "type", "float", "values", "keys"])
def test_a_field_name_torch_reserves_is_refused_by_name(name):
    with pytest.raises(ValueError, match=f"field name '{name}' is taken by torch"):
        Category(name, 5, dim=4)





def test_switches_and_kernels_are_checked_where_they_are_given():
    for key in ("bias", "out_proj", "attend_self"):
        with pytest.raises(ValueError, match=f"{key} must be True or False, got 'False'"):
            efa.EFAConfig(two_row_fields(), max_len=3, **{key: "False"})

    class NotKernel:
        name = "not_a_kernel"

    with pytest.raises(TypeError, match="must be a subclass of efa.Kernel"):
        efa.register_kernel(NotKernel)
    with pytest.raises(ValueError, match="loc must be a number or None, got '1'"):
        efa.Value("v", Gaussian(), loc="1")
    with pytest.raises(ValueError, match="scale must be a number or None, got True"):
        efa.Value("v", Gaussian(), scale=True)
    with pytest.raises(ValueError, match="readout_hidden must be a tuple"):
        efa.Value("v", Gaussian(), readout_hidden=32.0)


def test_predictions_are_the_eval_modes_and_padding_is_refused():
    torch.manual_seed(0)
    model = efa.EFA(efa.EFAConfig(two_row_fields(), max_len=3, dropout=0.5, num_layers=2))
    assert model.training  # a new model trains
    first = model.predict_mean(two_rows())["y"]
    assert equal_with_nan(first, model.predict_mean(two_rows())["y"]) and model.training
    model.eval()
    assert equal_with_nan(first, model.predict_mean(two_rows())["y"])
    model.train()
    a = model.predictive(two_rows(), "y").mean
    assert torch.equal(a, model.predictive(two_rows(), "y").mean)
    at = torch.tensor([[True, False, False], [False, False, True]])  # (1, 2) is padding
    for call in (lambda: model.predict_mean(two_rows(), at=at),
                 lambda: model.attention_weights(two_rows(), at=at)):
        with pytest.raises(ValueError, match="sequence 1, position 2, which is padding"):
            call()
    with pytest.raises(ValueError, match="asks for no position"):
        model.attention_weights(two_rows(), at=torch.zeros(2, 3, dtype=torch.bool))


def test_settings_that_would_be_ignored_are_refused_and_unknown_masks_named():
    with pytest.raises(ValueError, match="warmup_steps=10 warms up the 'cosine' and "
                                         "'constant' schedules; schedule='anneal'"):
        efa.TrainConfig(warmup_steps=10)
    efa.TrainConfig(warmup_steps=10, schedule="cosine")
    with pytest.raises(ValueError, match="proposal='uniform' is the sampled softmax's"):
        efa.TrainConfig(proposal="uniform")
    d = two_rows()
    with pytest.raises(KeyError, match=r"observed\['zzz'\] names no field"):
        efa.Sequences(d.fields, d.lengths, observed={"zzz": torch.ones(2, 3, dtype=torch.bool)})
