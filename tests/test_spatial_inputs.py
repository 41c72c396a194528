"""Bad input to the spatial tables and their peers is refused by name, never answered silently:
``sites_to_sequences``' step, lags, coordinates, times and site ids; the k-NN FM's coordinates;
the Gaussian peers' untrained or mismatched sites; the FMs' field kinds and flags; the
teacher sampler's seed. Valid input keeps its numbers (lags on float times match)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from efa import Attribute, Category, Sequences, Value
from efa.baselines import Climatology, GaussianConditional
from efa.baselines.fm import KNNFM, CategoricalFM, ValueFM, knn_indices
from efa.core.families import Gaussian
from efa.generators import attention_teacher, sample
from efa.geo import off_the_globe
from efa.spatial import sites_to_sequences

KW = dict(site="s", time="t", lat="lat", lon="lon", value="v", lags=1)


def _two_sites() -> pd.DataFrame:
    return pd.DataFrame({"s": ["A", "A", "B", "B"], "t": [1, 2, 1, 2], "lat": [1.0, 1, 2, 2],
                         "lon": [3.0, 3, 4, 4], "v": [1.0, 2, 3, 4]})


@pytest.mark.parametrize("step", [0, -1, float("nan"), float("inf"), True, "1",
                                  pd.Timedelta(0), pd.Timedelta(days=-1),
                                  np.timedelta64("NaT")])
def test_a_step_that_is_not_positive_and_finite_is_refused(step):
    # 0 made the lag token the target itself (a leak), -1 the future, NaN wiped every lag.
    with pytest.raises(ValueError, match="step must be positive and finite"):
        sites_to_sequences(_two_sites(), step=step, **KW)


def test_lags_on_float_times_match_despite_rounding():
    df = pd.DataFrame({"s": "A", "t": [0.1, 0.2, 0.3, 0.4, 0.5], "lat": 1.0, "lon": 2.0,
                       "v": np.arange(5.0)})
    data = sites_to_sequences(df, step=0.1, **{**KW, "lags": 2})
    # 0.3 - 0.1 != 0.2 in floating point: the lags matched exactly missed rows.
    seen = data.observed["value"]
    assert seen.tolist() == [[True, False, False], [True, True, False]] + [[True] * 3] * 3
    assert data.fields["value"][4].tolist() == [4.0, 3.0, 2.0]
    # Integer times with a float step match as before.
    whole = sites_to_sequences(_two_sites(), step=1.0, **KW)
    assert whole.fields["value"][1].tolist() == [2.0, 4.0, 1.0, 3.0]


def test_a_lag_that_matches_no_row_is_an_error():
    monthly = pd.DataFrame({"s": "A", "t": pd.date_range("2020-01-01", periods=4, freq="MS"),
                            "lat": 1.0, "lon": 2.0, "v": np.arange(4.0)})
    with pytest.raises(ValueError, match=r"lag 1 .*step=.*column 't'.*29 days.*pass step="):
        sites_to_sequences(monthly, **KW)  # the default step is one day
    steps = _two_sites().assign(t=[0, 1, 0, 1]).pipe(
        lambda d: pd.concat([d, d.assign(t=d.t + 2), d.assign(t=d.t + 4)]))
    with pytest.raises(ValueError, match="lag 6 .*does not reach that far back.*lags=5"):
        sites_to_sequences(steps, **{**KW, "lags": 100})
    with pytest.raises(ValueError, match="one time only"):
        sites_to_sequences(_two_sites().query("t == 1"), **KW)
    # The first time's lag has no row, but the others do: missing there, not an error.
    assert not sites_to_sequences(_two_sites(), **KW).observed["value"][0, 2:].any()


@pytest.mark.parametrize("col, bad, what", [("lat", 130.0, "latitude"),
                                            ("lat", np.inf, "latitude"),
                                            ("lon", 400.0, "longitude"),
                                            ("lon", -np.inf, "longitude")])
def test_coordinates_off_the_globe_are_refused(col, bad, what):
    df = _two_sites()
    df.loc[df.s == "B", col] = bad
    with pytest.raises(ValueError, match=f"column '{col}' \\({what}\\) of site 'B'.*finite"):
        sites_to_sequences(df, **KW)


def test_both_longitude_conventions_are_accepted():
    data = sites_to_sequences(_two_sites().assign(lon=[350.0, 350, -170, -170]), **KW)
    assert data.fields["coords"][0, :2, 1].tolist() == [350.0, -170.0]
    assert [m.tolist() for m in off_the_globe([-90, 91], [360, -181])] == [[False, True],
                                                                          [False, True]]


def test_text_times_and_mixed_site_ids_are_named():
    with pytest.raises(ValueError, match="column 't' .*numbers or datetimes.*pd.to_datetime"):
        sites_to_sequences(_two_sites().assign(t=["a", "b", "a", "b"]), **{**KW, "lags": 0})
    with pytest.raises(ValueError, match="column 's' .*mixes ids of types \\['int', 'str'\\]"):
        sites_to_sequences(_two_sites().assign(s=[1, 1, "B", "B"]), **KW)


def test_knn_refuses_coordinates_that_are_not_degrees():
    coords = torch.tensor([[[40.0, -70.0], [41.0, -71.0], [130.0, 10.0]]])
    with pytest.raises(ValueError, match="sequence 0, position 2: latitude 130.0"):
        knn_indices(coords, torch.ones(1, 3, dtype=torch.bool), 1)
    # An unavailable token (padding, a missing value) is never a neighbour: not checked.
    idx, usable = knn_indices(coords, torch.tensor([[True, True, False]]), 1)
    assert idx[0, :2, 0].tolist() == [1, 0] and usable[0, :2].all()
    fm = KNNFM(Attribute("coords", size=2), Value("value", Gaussian(1.0)), 1)
    data = Sequences({"coords": coords, "value": torch.zeros(1, 3)}, torch.tensor([3]))
    with pytest.raises(ValueError, match="latitude 130.0 is not finite degrees"):
        fm.predict_mean(data)


def _sites(n: int, width: int, observed: list[bool] | None = None) -> Sequences:
    seen = {} if observed is None else {"value": torch.tensor([observed] * n)}
    return Sequences({"coords": torch.zeros(n, width, 2), "value": torch.randn(n, width)},
                     torch.full((n,), width), observed=seen)


def test_climatology_needs_every_site_in_training():
    with pytest.raises(ValueError, match="site 2 has no observed training value.*every site"):
        Climatology().fit(_sites(10, 3, [True, True, False]), "value")
    fitted = Climatology().fit(_sites(10, 3), "value")
    assert np.isfinite(fitted.mse(_sites(5, 3)))


def test_peers_refuse_data_with_other_sites():
    train, other = _sites(10, 3), _sites(5, 4)
    for model in (Climatology(), GaussianConditional(0.1)):
        model.fit(train, "value")
        with pytest.raises(ValueError, match="fit had 3 sites.*the data have 4"):
            model.mse(other)
    with pytest.raises(KeyError, match="no field 'nope'"):
        Climatology().fit(train, "nope")


def test_fm_field_kinds_and_flags():
    with pytest.raises(TypeError, match="item must be a Category field, got Value 'x'"):
        ValueFM(Value("x", Gaussian()), Value("y", Gaussian()))
    with pytest.raises(TypeError, match="value must be a Value field, got Category 'y'"):
        ValueFM(Category("x", 3), Category("y", 3))
    with pytest.raises(TypeError, match="intercept must be True, False or None, got 'yes'"):
        CategoricalFM(Category("x", 3), intercept="yes")
    assert CategoricalFM(Category("x", 3), intercept=np.bool_(True)).intercept is not None


@pytest.mark.parametrize("seed", [1.5, None, "1"])
def test_the_sampler_names_a_bad_seed(seed):
    teacher = attention_teacher([Category("x", 3)], max_len=2, seed=0)
    with pytest.raises(ValueError, match="seed must be an integer"):
        sample(teacher, 4, seed=seed)
    assert len(sample(teacher, 4, seed=np.int64(1))) == 4
