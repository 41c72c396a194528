"""In-context regression on inputs it could misread: function tables in float64 (Unix seconds,
large y), the GP generators' broadcasts, the GP oracle's padding and refusals, GP attention
without channels."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

import efa
from efa.baselines.gp import GPOracle
from efa.core.data import Sequences
from efa.generators.gp import NOISY, TNPGP, NoteGP, rbf, sample_note, sample_tnp
from efa.regression import (
    causal_predictive,
    functions_to_sequences,
    gp_attention,
    predict,
    predict_frame,
    regression_efa,
)

T0 = 1_700_000_000.0  # Unix seconds: float32 numbers this large are 128 apart


def _unix_table():
    rng = np.random.default_rng(0)
    return pd.DataFrame({"function": np.repeat([0, 1], 20),
                         "x": T0 + np.tile(np.arange(20) * 60.0, 2),
                         "y": 1e9 + rng.normal(size=40)})


def test_functions_to_sequences_keeps_unix_seconds_and_large_y_distinct():
    df = _unix_table()
    data, _ = functions_to_sequences(df, "function", "x", "y")
    x, y = data.fields["x"][0, :, 0], data.fields["y"][0]
    assert x.unique().numel() == 20
    assert torch.equal(x.double(), torch.tensor(df.x[:20].to_numpy()))
    assert torch.equal(y.double(), torch.tensor(df.y[:20].to_numpy()))


def test_unix_seconds_30_s_apart_get_their_own_predictions():
    # The encoder standardises float64 inputs in float64 before the float32 network.
    torch.manual_seed(0)
    df = _unix_table().assign(y=lambda d: d.y - 1e9)
    data, _ = functions_to_sequences(df, "function", "x", "y")
    model = regression_efa(data, layers=1, heads=1, channels=0)
    targets = pd.DataFrame({"function": 0, "x": T0 + np.array([1000.0, 1030.0, 1060.0])})
    mean = predict_frame(model, df, targets, "function", "x", "y")["mean"].to_numpy()
    assert len(set(mean.tolist())) == 3


def test_a_y_far_from_zero_is_warned_of_and_a_float64_model_keeps_it():
    with pytest.warns(UserWarning, match="column 'y': its 40 distinct values are .* in float32"):
        data, _ = functions_to_sequences(_unix_table(), "function", "x", "y")
    assert data.fields["y"].unique().numel() == 40


def test_rbf_expands_lengthscale_and_variance_each_on_its_own():
    g = torch.Generator().manual_seed(0)
    x1 = torch.rand(3, 5, generator=g, dtype=torch.float64)
    x2 = torch.rand(3, 4, generator=g, dtype=torch.float64)
    ells = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    vs = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    for ell, var in ((1.0, vs), (ells, 1.5), (ells, vs), (0.7, 2.0)):
        got = rbf(x1, x2, ell, var)
        for b in range(3):
            e = float(ell[b]) if torch.is_tensor(ell) else ell
            v = float(var[b]) if torch.is_tensor(var) else var
            want = v * torch.exp(-0.5 * (x1[b, :, None] - x2[b, None, :]) ** 2 / e**2)
            torch.testing.assert_close(got[b], want, rtol=1e-12, atol=0)
    k = rbf(x1, x1, 1.0, vs)
    assert torch.equal(k, k.transpose(-1, -2))
    assert torch.equal(torch.diagonal(k, dim1=-2, dim2=-1), vs[:, None].expand(3, 5))


SPEC = NoteGP(length=8, noise=0.3, lengthscale=2.0, variance=1.5, offset_var=0.5)


def _oracle_data():
    data = sample_note(SPEC, 3, 1)
    return Sequences({k: v.clone() for k, v in data.fields.items()}, torch.tensor([8, 5, 2]))


def _numpy_posterior(data, xt, kt):
    """The GP posterior of each row's targets given its real context points, by numpy."""
    def kern(x1, k1, x2, k2):
        d = x1[:, None] - x2[None, :]
        return (SPEC.variance * np.exp(-0.5 * d**2 / SPEC.lengthscale**2)
                + SPEC.offset_var * (k1[:, None] == k2[None, :]))

    noise = SPEC.noise**2 + SPEC.jitter
    means, sds = [], []
    for b, n in enumerate(data.lengths.tolist()):
        x = data.fields["x"][b, :n, 0].double().numpy()
        k = data.fields["channel"][b, :n].numpy()
        y = data.fields["y"][b, :n].double().numpy()
        kc = kern(x, k, xt[b], kt[b])
        a = np.linalg.solve(kern(x, k, x, k) + noise * np.eye(n), kc)
        means.append(a.T @ y)
        sds.append(np.sqrt(SPEC.variance + SPEC.offset_var + noise - (a * kc).sum(0)))
    return torch.tensor(np.array(means)), torch.tensor(np.array(sds))


def test_gp_oracle_ignores_nan_padding_and_matches_numpy():
    data = _oracle_data()
    xt = torch.tensor([[6.0, 9.5], [12.0, 14.9], [7.0, 7.5]], dtype=torch.float64)
    kt = torch.tensor([[0, 1], [1, 1], [0, 0]])
    oracle = GPOracle(SPEC, [])
    mean, sd = oracle.predict(data, xt, kt)
    want_mean, want_sd = _numpy_posterior(data, xt.numpy(), kt.numpy())
    torch.testing.assert_close(mean, want_mean, rtol=0, atol=1e-12)
    torch.testing.assert_close(sd, want_sd, rtol=0, atol=1e-12)
    causal = oracle.predict_mean_sd(data)
    fields = {k: v.clone() for k, v in data.fields.items()}
    pad = torch.arange(8) >= data.lengths[:, None]
    fields["x"][pad] = float("nan")
    fields["y"][pad] = float("nan")
    fields["channel"][pad] = 7  # padding may hold anything
    nan_padded = Sequences(fields, data.lengths)
    assert torch.equal(torch.stack(oracle.predict(nan_padded, xt, kt)), torch.stack((mean, sd)))
    for a, b in zip(oracle.predict_mean_sd(nan_padded), causal, strict=True):
        assert torch.equal(a.nan_to_num(-1.0), b.nan_to_num(-1.0))


@pytest.mark.parametrize(("name", "value", "shown"), [
    ("y", float("nan"), "y = nan"), ("x", float("inf"), "x = inf"),
    ("channel", 5, "channel = 5")])
def test_gp_oracle_refuses_a_bad_real_point_naming_it(name, value, shown):
    data = _oracle_data()
    fields = {k: v.clone() for k, v in data.fields.items()}
    if name == "x":
        fields["x"][1, 3, 0] = value
    else:
        fields[name][1, 3] = value
    bad = Sequences(fields, data.lengths)
    oracle = GPOracle(SPEC, [])
    with pytest.raises(ValueError, match=f"sequence 1, position 3 has {shown}"):
        oracle.predict_mean_sd(bad)
    with pytest.raises(ValueError, match=f"sequence 1, position 3 has {shown}"):
        oracle.predict(bad, torch.zeros(3, 1, dtype=torch.float64) + 6.0,
                       torch.zeros(3, 1, dtype=torch.long))


def test_gp_oracle_refuses_a_target_channel_it_does_not_know():
    oracle = GPOracle(dataclasses.replace(NOISY, length=6), [])
    data = sample_note(dataclasses.replace(NOISY, length=6), 2, 0)
    with pytest.raises(ValueError, match="target row 1, position 0 has channel = 5"):
        oracle.predict(data, torch.full((2, 2), 7.0, dtype=torch.float64),
                       torch.tensor([[0, 1], [5, 0]]))


@pytest.mark.parametrize("channels", [0, []])
def test_gp_attention_without_channels_builds_and_predicts(channels):
    torch.manual_seed(0)
    data = sample_tnp(TNPGP(batch_size=4), 1, 0).data  # fields x and y only
    model = gp_attention(data, channels=channels)
    assert [f.name for f in model.fields] == ["x", "y"]
    mean, sd = causal_predictive(model, data)
    real = data.valid()
    assert torch.isfinite(mean[real]).all() and (sd[real] > 0).all()
    m, s = predict(model, data[[0, 1]], Sequences({"x": torch.rand(2, 3, 1)},
                                                  torch.tensor([3, 2])))
    assert torch.isfinite(m[:, :2]).all() and torch.isfinite(s[:, :2]).all()


def test_a_categorical_function_column_keeps_each_prediction_on_its_row():
    from efa import regression as R

    rng = np.random.default_rng(0)
    df = pd.DataFrame([(f, rng.uniform(0, 5), rng.normal() + o, 0) for f, o in
                       [("a", 0), ("b", 10), ("c", -10)] for _ in range(5)],
                      columns=["fn", "x", "y", "ch"])
    train, _ = R.functions_to_sequences(df, "fn", "x", "y", "ch")
    torch.manual_seed(0)
    model = R.regression_efa(train, layers=1, heads=1, x_dim=4, y_dim=4, channel_dim=4,
                             hidden=8, ffn=8, readout_hidden=8, channels=[0, 1])
    ctx, tgt = df.groupby("fn").head(4), df.groupby("fn").tail(1)[["fn", "x", "ch"]]
    plain = R.predict_frame(model, ctx, tgt, "fn", "x", "y", "ch")
    kind = pd.CategoricalDtype(["c", "b", "a", "unused"])
    coded = R.predict_frame(model, ctx.astype({"fn": kind}), tgt.astype({"fn": kind}), "fn",
                            "x", "y", "ch")
    assert np.allclose(coded["mean"], plain["mean"]) and coded["fn"].dtype == kind
    with pytest.raises(ValueError, match="channels must be a count or a list of labels"):
        R.note_efa(train, channels=2.0)


def test_the_gp_oracle_refuses_targets_it_would_broadcast():
    from efa.baselines.gp import GPOracle
    from efa.generators.gp import TNPGP, NoteGP, sample_note

    spec = NoteGP(length=5, noise=0.1)
    d = sample_note(spec, 2, 0)
    k = d.fields["channel"]
    ctx = efa.Sequences({"x": d.fields["x"][:, :3], "y": d.fields["y"][:, :3],
                         "channel": k[:, :3]}, torch.tensor([3, 3]))
    oracle = GPOracle(spec, [])
    flat = oracle.predict(ctx, d.fields["x"][:, 3:, 0], k[:, 3:])[0]
    assert torch.equal(oracle.predict(ctx, d.fields["x"][:, 3:], k[:, 3:])[0], flat)
    with pytest.raises(ValueError, match="x and k must both be"):
        oracle.predict(ctx, d.fields["x"][:, 3:, 0], k[:, 3:4])
    with pytest.raises(ValueError, match="max_length must be finite and at least 0.1"):
        TNPGP(max_length=0.05)
