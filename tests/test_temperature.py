"""The spatial EFA, its peers and the temperature experiment (real data under data_root())."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from efa import spatial as sp
from efa.baselines import (
    Climatology,
    GaussianConditional,
    knn_indices,
    select_shrinkage,
)
from efa.cli import app
from efa.core.data import Sequences
from efa.datasets import temperature as tp
from experiments.efa_paper import temperature as exp


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return tp.paper_frame(tp.read_city_temperatures(), tp.read_cities(), lags=2)


def _sequences(frame, lags, layout="tokens"):
    return sp.sites_to_sequences(
        frame, site="city_idx", time="date", lat="lat", lon="lon", value="value", lags=lags,
        target="target", name="temp", layout=layout, return_index=True,
    )


# --------------------------------------------------------------------------- set-up


@pytest.mark.parametrize("lags,layout", [(0, "tokens"), (1, "tokens"), (2, "tokens"),
                                          (2, "fields")])
def test_real_setup_counts(frame, lags, layout):
    data, sites, times = _sequences(frame, lags, layout)
    assert len(sites) == 44 and len(times) == 13 * 31
    assert set(pd.DatetimeIndex(times).month) == {10}
    width = 44 * (lags + 1) if layout == "tokens" else 44
    assert data.max_len == width
    year = torch.as_tensor(np.asarray(times.year))
    counts = [
        int(data[(year >= a) & (year <= b)].predicted("temp").sum())
        for a, b in tp.PAPER_YEARS.values()
    ]
    assert counts == [8_184, 5_456, 4_092]
    # The first lag block of 1 October 2007 is 30 September 2007, of the same city.
    first = frame[frame["date"] == pd.Timestamp("2007-09-30")].sort_values("city_idx")
    if lags and layout == "tokens":
        assert torch.equal(data.fields["lag"][0], torch.arange(lags + 1).repeat_interleave(44))
        got = data.fields["temp"][0, 44:88]
    elif lags:
        got = data.fields["temp_lag1"][0]
    else:
        return
    np.testing.assert_allclose(got.numpy(), first["value"].to_numpy(), rtol=0, atol=1e-4)


def test_experiment_load_is_the_paper_split():
    train, val, test, cities = exp.load(1, "fields", center=False)
    assert len(cities) == 44 and list(train.fields) == ["coords", "temp", "temp_lag1"]
    assert [int(d.predicted("temp").sum()) for d in (train, val, test)] == [8184, 5456, 4092]


# --------------------------------------------------------------------------- missing values


def _toy_frame():
    rows = []
    sites = {"a": (40.0, -100.0), "b": (41.0, -90.0), "c": (35.0, -80.0)}
    for t in pd.date_range("2020-01-01", periods=4):
        for s, (lat, lon) in sites.items():
            rows.append({"site": s, "time": t, "lat": lat, "lon": lon,
                         "y": 10.0 + t.day + ord(s) % 3})
    df = pd.DataFrame(rows)
    df.loc[(df.site == "b") & (df.time == "2020-01-03"), "y"] = np.nan  # an explicit NaN
    df = df[~((df.site == "c") & (df.time == "2020-01-02"))]  # an absent row
    return df.reset_index(drop=True)


def test_missing_values_are_hidden_and_not_predicted():
    df = _toy_frame()
    data, sites, times = sp.sites_to_sequences(
        df, site="site", time="time", lat="lat", lon="lon", value="y", return_index=True
    )
    assert list(sites) == ["a", "b", "c"] and len(times) == 4
    obs = data.observed["value"]
    assert not obs[2, 1] and not obs[1, 2] and int((~obs).sum()) == 2
    assert torch.isfinite(data.fields["value"]).all()  # no NaN reaches the model
    assert not data.predicted("value")[2, 1] and not data.predicted("value")[1, 2]

    # Lags: the missing value of day 2 is also missing as day 3's lag-1 context.
    lagged = sp.sites_to_sequences(df, site="site", time="time", lat="lat", lon="lon", value="y",
                                   lags=1)
    assert lagged.max_len == 6 and not lagged.observed["value"][2, 3 + 2]
    assert not lagged.scored[:, 3:].any() and lagged.scored[:, :3].all()
    # The first day's lag context does not exist at all: missing, not an error.
    assert not lagged.observed["value"][0, 3:].any()

    # A missing token is hidden from the context: whatever number is stored there, every
    # prediction is the same (ℓ=2: the exact masked copies).
    torch.manual_seed(0)
    model = sp.spatial_efa(data, num_layers=2).double().eval()
    d64 = data.to(torch.float64)
    base = model.predict_mean(d64)["value"]
    poked = dict(d64.fields)
    poked["value"] = d64.fields["value"].clone()
    poked["value"][2, 1] = 1e6
    again = model.predict_mean(type(d64)(poked, d64.lengths, d64.observed))["value"]
    assert torch.isfinite(base).all()
    torch.testing.assert_close(base, again)
    # The peers skip missing entries too.
    g = GaussianConditional(0.1).fit(data, "value")
    pred = g.predict(data)
    assert np.isnan(pred[2, 1]) and np.isfinite(pred[data.predicted("value").numpy()]).all()


def test_frame_errors():
    df = _toy_frame()
    kw = dict(site="site", time="time", lat="lat", lon="lon", value="y")
    with pytest.raises(ValueError, match="more than one row"):
        sp.sites_to_sequences(pd.concat([df, df.iloc[:1]]), **kw)
    moved = df.copy()
    moved.loc[0, "lat"] = 12.0
    with pytest.raises(ValueError, match="more than one"):
        sp.sites_to_sequences(moved, **kw)
    with pytest.raises(KeyError, match="nope"):
        sp.sites_to_sequences(df, **{**kw, "value": "nope"})


def test_warm_start_starts_at_the_base_model():
    df = _toy_frame()
    kw = dict(site="site", time="time", lat="lat", lon="lon", value="y")
    same = sp.sites_to_sequences(df, **kw).to(torch.float64)
    lagged = sp.sites_to_sequences(df, lags=2, layout="fields", **kw).to(torch.float64)
    torch.manual_seed(0)
    base = sp.spatial_efa(same, num_layers=2, block="pre_ln").double().eval()
    model = sp.spatial_efa(lagged, num_layers=2, block="pre_ln").double().eval()
    expected = base.predict_mean(same)["value"]
    assert not torch.allclose(model.predict_mean(lagged)["value"], expected)
    model.warm_start(base)
    torch.testing.assert_close(model.predict_mean(lagged)["value"], expected)
    with pytest.raises(ValueError, match="this model does not"):
        base.warm_start(model)


# --------------------------------------------------------------------------- FM and peers


def test_knn_fm_matches_naive_loop(frame):
    full, _, _ = _sequences(frame[frame["target"]], 0)
    full = full[torch.arange(3)].to(torch.float64)
    # One missing city: it is neither a neighbour nor predicted (and the batch no longer
    # shares one kernel).
    gap = full.observed["temp"].clone()
    gap[1, 7] = False
    for data in (full, Sequences(full.fields, full.lengths, {"temp": gap})):
        _check_fm_against_loop(frame, data)


def _check_fm_against_loop(frame, data):
    cities = tp.city_table(frame)
    lat, lon = cities["lat"].to_numpy(), cities["lon"].to_numpy()
    dist = tp.haversine_km(lat[:, None], lon[:, None], lat[None, :], lon[None, :])
    for k, pooling in ((1, "sum"), (5, "sum"), (5, "mean"), (43, "sum")):
        torch.manual_seed(k)
        model = sp.knn_fm(data, k, name="temp", pooling=pooling).double()
        eta = model.natural_params(data)["temp"][..., 0]
        value = model.fields[1]
        with torch.no_grad():
            z_all = (data.fields["coords"] - model.c_loc.double()) / model.c_scale.double()
            h = model.h.double()(z_all).numpy()
        y = data.fields["temp"].numpy()
        obs = data.observed["temp"].numpy()
        for b in range(3):
            for i in range(44):
                d = dist[i].copy()
                d[i] = np.inf
                d[~obs[b]] = np.inf
                nn_ = [j for j in np.argsort(d, kind="stable")[:k] if np.isfinite(d[j])]
                s = sum(h[b, j] * (y[b, j] - value.loc) / value.scale for j in nn_)
                if pooling == "mean":
                    s = s / len(nn_)
                expected = value.loc + value.scale * float(h[b, i] @ s)
                assert eta[b, i].item() == pytest.approx(expected, rel=1e-10, abs=1e-9)


def test_knn_indices_match_nearest_neighbours(frame):
    cities = tp.city_table(frame)
    coords = torch.tensor(cities[["lat", "lon"]].to_numpy())[None]
    idx, usable = knn_indices(coords, torch.ones(1, 44, dtype=torch.bool), 10)
    ref = tp.nearest_neighbours(cities["lat"], cities["lon"], 10)
    assert usable.all() and np.array_equal(idx[0].numpy(), ref)


def test_gaussian_conditional_matches_direct_formula():
    rng = np.random.default_rng(0)
    n, p = 60, 6
    a = rng.normal(size=(p, p))
    # through the (unique) Cholesky factor, not multivariate_normal's SVD
    low = np.linalg.cholesky(a @ a.T + np.eye(p))
    y = rng.normal(size=p) * 5 + rng.standard_normal((n, p)) @ low.T
    data = Sequences({"value": torch.tensor(y)}, torch.full((n,), p))
    test_y = y[:5].copy()
    test_y[2, 3] = 0.0  # missing below
    obs = np.ones_like(test_y, dtype=bool)
    obs[2, 3] = False
    test = Sequences({"value": torch.tensor(test_y)}, torch.full((5,), p),
                        observed={"value": torch.tensor(obs)})
    for alpha in (0.0, 0.3):
        g = GaussianConditional(alpha).fit(data, "value")
        mu = y.mean(0)
        s = np.cov(y, rowvar=False, bias=True)
        s = (1 - alpha) * s + alpha * np.trace(s) / p * np.eye(p)
        pred, sd = g.predict_mean_sd(test)
        for r in range(5):
            for i in range(p):
                if not obs[r, i]:
                    assert np.isnan(pred[r, i]) and np.isnan(sd[r, i])
                    continue
                rest = [j for j in range(p) if j != i and obs[r, j]]
                s12, s22 = s[i, rest], s[np.ix_(rest, rest)]
                expected = mu[i] + s12 @ np.linalg.solve(s22, test_y[r, rest] - mu[rest])
                assert pred[r, i] == pytest.approx(expected, rel=1e-10)
                # the conditional variance: the Schur complement s11 − s12 s22⁻¹ s21
                var = s[i, i] - s12 @ np.linalg.solve(s22, s12)
                assert sd[r, i] == pytest.approx(np.sqrt(var), rel=1e-10)
        assert np.array_equal(g.predict(test), pred, equal_nan=True)
    chosen, curve = select_shrinkage(data, test, "value", grid=(0.0, 0.5))
    assert chosen.alpha == min(curve, key=curve.get)


def test_anomalies_shift_each_city_and_keep_squared_errors():
    train, val, _, _ = exp.load(1, "fields", center=False)
    c_train, c_val, _, _ = exp.load(1, "fields", center=True)
    means = sp.site_means(train, "temp")
    assert means.shape == (44,)
    assert torch.allclose(
        c_train.fields["temp_lag1"], train.fields["temp_lag1"] - means.float(), atol=1e-4
    )
    clim = Climatology().fit(train, "temp")
    np.testing.assert_allclose(clim.mean_[:44], means.numpy(), rtol=1e-6)
    assert Climatology().fit(c_train, "temp").mse(c_val) == pytest.approx(clim.mse(val))


# --------------------------------------------------------------------------- the experiment


@pytest.mark.slow
def test_quick_run_through_the_cli(tmp_path):
    result = CliRunner().invoke(
        app, ["reproduce", "temperature", "--quick", "--seeds", "2", "--out", str(tmp_path),
              "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    folder = tmp_path / "temperature"
    out = json.loads((folder / "results.json").read_text())
    assert {"experiment", "command", "seeds", "wall_seconds", "rows"} <= set(out)
    assert out["experiment"] == "temperature" and out["seeds"] == [0, 1]
    assert "--quick" in out["command"]
    for row in out["rows"]:
        assert {"setting", "model", "metric", "mean", "std", "values", "paper"} <= set(row)
        assert len(row["values"]) == 2 and np.isfinite(row["values"]).all()
    models = {(r["setting"], r["model"]) for r in out["rows"]}
    assert ("same day", "EFA ℓ=1") in models and ("1 day ahead", "EFA ℓ=1") in models
    assert ("same day", "Gaussian conditional") in models
    assert ("1 day ahead", "Gaussian conditional + 1-day lag") in models
    assert any(m.startswith("FM (k=") for _, m in models)
    assert len(out["figures"]["attention"]["weights"]) == 44
    assert (folder / "fm_vs_k.png").stat().st_size > 0
    assert (folder / "city_map.png").stat().st_size > 0
    assert "efa reproduce temperature" in (folder / "results.md").read_text()
