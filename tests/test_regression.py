"""In-context regression (issue 13): the data generator, the note's model as efa equations, the
GP oracle against scipy/scikit-learn, the peers, prediction at new points, bad input, and the
quick reproduction."""

import json
import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from efa.baselines.gp import FittedGP, GPOracle, causal_gaussian, note_kernel, posterior
from efa.baselines.smoother import NadarayaWatson
from efa.baselines.tnp import TNPD
from efa.cli import app
from efa.core.data import Sequences
from efa.generators.gp import (
    LITERAL,
    NOISY,
    TNPGP,
    NoteGP,
    covariance,
    cross_covariance,
    sample_note,
    sample_tnp,
)
from efa.regression import (
    causal_predictive,
    functions_to_sequences,
    gp_attention,
    note_efa,
    predict,
    predict_frame,
    regression_efa,
)

SMALL = replace(NOISY, length=9)


def small(n=4, seed=0, gp=SMALL):
    return sample_note(gp, n, seed)


# --------------------------------------------------------------------------- generator


def test_generator_is_seeded_and_reads_the_note():
    a, b = small(seed=3), small(seed=3)
    assert torch.equal(a.fields["y"], b.fields["y"]) and not torch.equal(
        a.fields["y"], small(seed=4).fields["y"])
    assert a.fields["x"].shape == (4, 9, 1) and a.fields["channel"].dtype == torch.int64
    assert (a.fields["x"] >= 5).all() and (a.fields["x"] <= 15).all()
    assert not a.scored[:, 0].any() and a.scored[:, 1:].all()  # from the second point on
    # With a flat f, the points of a channel share their offset; offsets have variance 2.
    flat = sample_note(NoteGP(length=30, variance=1e-10, noise=0.0), 3000, 0)
    y, k = flat.fields["y"].double(), flat.fields["channel"]
    first0 = torch.where(k == 0, y, float("nan")).nanmean(1)
    spread = torch.where(k == 0, y - first0[:, None], 0.0).abs().max()
    assert spread < 1e-3
    assert abs(float(first0[torch.isfinite(first0)].var()) - 2.0) < 0.2
    assert LITERAL.noise == 0 and NOISY.noise == 0.1


def test_tnp_sampler_follows_the_reference_protocol():
    d = sample_tnp(TNPGP(), 20, 0)
    assert ((d.num_context >= 3) & (d.num_context <= 46)).all()
    targets = d.data.lengths - d.num_context
    assert (targets >= 3).all() and (d.data.lengths <= 49).all()
    assert (d.lengthscale >= 0.1).all() and (d.lengthscale <= 0.6).all()
    assert ((d.scale >= 0.1) & (d.scale <= 1.0)).all()
    assert (d.context() & d.targets()).sum() == 0
    assert ((d.context() | d.targets()) == d.data.valid()).all()


# --------------------------------------------------------------------------- the oracle


def test_oracle_chain_rule_is_the_joint_density_and_each_conditional_is_exact():
    data = small(n=3)
    mean, sd = GPOracle(SMALL, []).predict_mean_sd(data)
    y = data.fields["y"].double()
    cov = covariance(SMALL, data.fields["x"], data.fields["channel"])
    chain = torch.distributions.Normal(mean, sd).log_prob(y).sum(1)
    for b in range(3):
        joint = torch.distributions.MultivariateNormal(  # Cholesky-based joint density
            torch.zeros(9, dtype=torch.float64), cov[b].double()).log_prob(y[b]).item()
        assert chain[b].item() == pytest.approx(joint, abs=1e-9)
        for i in (0, 4, 8):  # textbook Gaussian conditioning
            c, yb = cov[b].numpy(), y[b].numpy()
            w = np.linalg.solve(c[:i, :i], c[:i, i]) if i else np.zeros(0)
            assert mean[b, i].item() == pytest.approx(w @ yb[:i], abs=1e-9)
            assert sd[b, i].item() ** 2 == pytest.approx(c[i, i] - w @ c[:i, i], abs=1e-9)


def test_oracle_kernel_agrees_with_scikit_learn():
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    gp = replace(SMALL, offset_var=0.0, lengthscale=0.7, variance=1.3)
    data = small(n=1, gp=gp)
    x, y = data.fields["x"][0].double().numpy(), data.fields["y"][0].double().numpy()
    mean, sd = GPOracle(gp, []).predict_mean_sd(data)
    kernel = ConstantKernel(1.3) * RBF(0.7) + WhiteKernel(gp.noise**2 + gp.jitter)
    gpr = GaussianProcessRegressor(kernel, optimizer=None, alpha=1e-12).fit(x[:6], y[:6])
    mu, s = gpr.predict(x[6:7], return_std=True)
    assert mean[0, 6].item() == pytest.approx(mu[0], abs=1e-7)
    assert sd[0, 6].item() == pytest.approx(s[0], abs=1e-7)
    # The target-set posterior (context → targets) agrees too.
    m2, s2 = gpr.predict(x[6:], return_std=True)
    xx = torch.from_numpy(x[:, 0])
    k = torch.zeros(9, dtype=torch.long)
    kc = covariance(gp, xx[:6], k[:6])[None]
    kct = cross_covariance(gp, xx[:6], k[:6], xx[6:], k[6:])[None]
    ktt = torch.full((1, 3), 1.3 + gp.noise**2 + gp.jitter, dtype=torch.float64)
    pm, ps = posterior(kc, kct, ktt, torch.from_numpy(y[:6])[None], torch.ones(1, 6, dtype=bool))
    np.testing.assert_allclose(pm[0].numpy(), m2, atol=1e-7)
    np.testing.assert_allclose(ps[0].numpy(), s2, atol=1e-7)


def test_causal_gaussian_ignores_padding():
    data = small(n=2)
    cov = covariance(SMALL, data.fields["x"], data.fields["channel"])
    valid = torch.ones(2, 9, dtype=torch.bool)
    valid[1, 5:] = False
    m, s = causal_gaussian(cov, data.fields["y"].double(), valid)
    m1, s1 = causal_gaussian(cov[1:, :5, :5], data.fields["y"][1:, :5].double(),
                             torch.ones(1, 5, dtype=torch.bool))
    torch.testing.assert_close(m[1, :5], m1[0])
    torch.testing.assert_close(s[1, :5], s1[0])
    assert torch.isnan(m[1, 5:]).all()


def test_fitted_gp_kernel_gradient_and_causality():
    k = note_kernel(1.3, 0.7, 1.9, 0.05)
    data = small(n=1)
    X = np.stack([data.fields["x"][0, :, 0].double().numpy(),
                  data.fields["channel"][0].double().numpy()], 1)
    K, G = k(X, eval_gradient=True)
    for i in range(len(k.theta)):
        t = k.theta.copy()
        t[i] += 1e-6
        np.testing.assert_allclose((k.clone_with_theta(t)(X) - K) / 1e-6, G[..., i], atol=1e-5)
    model = FittedGP([], restarts=0)
    m1, s1 = model.predict_mean_sd(data)
    changed = Sequences({k: v.clone() for k, v in data.fields.items()}, data.lengths)
    changed.fields["y"][0, 8] += 3.0
    m2, s2 = model.predict_mean_sd(changed)
    torch.testing.assert_close(m1[0, :9], m2[0, :9])  # y_8 is never used to predict y_<=8
    assert [f["context"] for f in model.fits[0]] == [4, 8]


# --------------------------------------------------------------------------- the models


def test_note_model_computes_equations_7_to_18():
    """The efa configuration against the note's equations written out by hand."""
    torch.manual_seed(0)
    data = small(n=2).to(torch.float64)
    model = note_efa(data, e=5, ell=4, hidden=6).double()
    att = model.blocks[0].attn
    assert att.q.bias is None and att.q.in_features == 5 and att.v.in_features == 5
    enc = model.encoders
    xe = enc["x"](data.fields["x"], None)                      # Eq. 7
    ye = enc["y"](data.fields["y"], None)                      # Eq. 8
    ke = enc["channel"](data.fields["channel"], None)          # Eq. 9
    q, k, v = xe @ att.q.weight.T, xe @ att.k.weight.T, ye @ att.v.weight.T   # Eqs. 10–12
    net = model.readouts["y"].net
    a, a4 = net[0].weight, net[2].weight                       # [A2 A3 A1]ᵀ, A4
    assert net[0].bias is None and net[2].bias is None and net[1].negative_slope == 0.01
    mean, sd = causal_predictive(model, data)
    f = model.fields[1]
    for b in range(2):
        for t in range(1, 9):
            dot = q[b, t] @ k[b, :t].T                         # Eq. 13, row t+1 over h <= t
            score = torch.softmax(dot, -1)                     # Eq. 14
            attv = score @ v[b, :t]                            # Eq. 15
            out = a @ torch.cat([xe[b, t], ke[b, t], attv])    # Eq. 16
            out = torch.maximum(0.01 * out, out)               # Eq. 17
            z = a4 @ out                                       # Eq. 18
            mu = f.loc + f.scale * z[0]
            sigma = f.scale * (torch.nn.functional.softplus(z[1]) + f.family.min_scale)
            assert mean[b, t].item() == pytest.approx(mu.item(), abs=1e-10)
            assert sd[b, t].item() == pytest.approx(sigma.item(), abs=1e-10)


@pytest.mark.parametrize("build", [note_efa, regression_efa])
def test_predict_is_the_prediction_of_a_point_appended_to_the_context(build):
    torch.manual_seed(0)
    data = small(n=3, gp=replace(NOISY, length=12)).to(torch.float64)
    model = build(data).double()
    ctx = Sequences({k: v[:, :7] for k, v in data.fields.items()}, torch.tensor([7, 4, 6]))
    tgt = Sequences({"x": data.fields["x"][:, 7:], "channel": data.fields["channel"][:, 7:]},
                    torch.tensor([5, 5, 2]))
    mean, sd = predict(model, ctx, tgt)
    assert torch.isnan(mean[2, 2:]).all()
    for b in range(3):
        n = int(ctx.lengths[b])
        for t in range(int(tgt.lengths[b])):
            def cat(name, tail, b=b, n=n):
                return torch.cat([ctx.fields[name][b, :n], tail])[None]

            seq = Sequences({"x": cat("x", tgt.fields["x"][b, t:t + 1]),
                             "y": cat("y", torch.zeros(1).double()),
                             "channel": cat("channel", tgt.fields["channel"][b, t:t + 1])},
                            torch.tensor([n + 1]))
            m, s = causal_predictive(model, seq)
            assert mean[b, t].item() == pytest.approx(m[0, n].item(), abs=1e-10)
            assert sd[b, t].item() == pytest.approx(s[0, n].item(), abs=1e-10)


def test_smoother_matches_its_formula():
    data = small(n=2)
    nw = NadarayaWatson([], bandwidth=0.7, channel_weight=0.2, nugget=0.01, prior_mean=0.5,
                        prior_var=3.0)
    mean, sd = nw.predict_mean_sd(data)
    x, y, k = (data.fields["x"][..., 0].double(), data.fields["y"].double(),
               data.fields["channel"])
    assert mean[0, 0].item() == 0.5 and sd[0, 0].item() == pytest.approx(math.sqrt(3.0))
    b, i = 1, 6
    w = torch.exp(-0.5 * ((x[b, i] - x[b, :i]) / 0.7) ** 2)
    w = w * torch.where(k[b, :i] == k[b, i], 1.0, 0.2)
    mu = (w * y[b, :i]).sum() / w.sum()
    var = (w * (y[b, :i] - mu) ** 2).sum() / w.sum() + 0.01
    assert mean[b, i].item() == pytest.approx(mu.item())
    assert sd[b, i].item() == pytest.approx(var.sqrt().item())


def test_tnpd_attends_to_the_context_only():
    torch.manual_seed(0)
    data = small(n=3)
    model = TNPD(data, regression_efa(data, layers=1).fields, num_layers=2).eval()
    xc, xt = model._x(data, (slice(None), slice(0, 5))), model._x(data, (slice(None), slice(5, 9)))
    with torch.no_grad():
        m, s = model.sets(xc, data.fields["y"][:, :5], xt)
        perm = torch.tensor([3, 0, 4, 1, 2])  # context order does not matter
        m2, _ = model.sets(xc[:, perm], data.fields["y"][:, perm], xt)
        m3, _ = model.sets(xc, data.fields["y"][:, :5], xt[:, :1])  # nor do the other targets
        mean, sd = model.predict_mean_sd(data)
    torch.testing.assert_close(m, m2, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(m[:, :1], m3, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mean[:, 5], m[:, 0].double())
    assert torch.isnan(mean[:, 0]).all() and torch.isfinite(model.loss(data))


def test_gp_attention_holds_the_bayes_predictive():
    """With W^Q = W^K = I, channel embeddings √(offset variance)·e_k, γ = ℓ²/x_scale², λ =
    noise² + jitter and W^V reading y, the CME head's two outputs are the predictive mean and
    variance (less λ) of the oracle's GP applied to the standardised y with a zero prior mean,
    at every point with a context (the standardised Bayes mean when the training mean of y is
    0; docs/in-context-regression.md)."""
    gp = replace(NOISY, length=12)
    data = sample_note(gp, 5, seed=2)
    model = gp_attention(data).double()
    enc_x, enc_y = model.encoders["x"], model.encoders["y"]
    attn = model.blocks[0].attn
    with torch.no_grad():
        model.encoders["channel"].table.weight[:2] = math.sqrt(gp.offset_var) * torch.eye(
            2, dtype=torch.float64)
        attn.v.weight.zero_()
        attn.v.weight[0, 0] = 1.0
        attn.kernel.log_bandwidth.fill_(math.log(gp.lengthscale**2 / float(enc_x.scale) ** 2))
        attn.kernel.log_ridge.fill_(math.log(gp.noise**2 + gp.jitter - attn.kernel.min_ridge))
    at = data.valid() & (torch.arange(12) > 0)
    with torch.no_grad():
        state, _ = model.states(data, "y", at)
    y_std = (data.fields["y"].double() - float(enc_y.loc)) / float(enc_y.scale)
    cov = covariance(gp, data.fields["x"][..., 0], data.fields["channel"])
    mean, sd = causal_gaussian(cov, y_std, data.valid())
    var_y = sd**2 - (gp.noise**2 + gp.jitter)  # the oracle's, in the data's units
    torch.testing.assert_close(state[:, 3], mean[at], rtol=0, atol=1e-10)
    torch.testing.assert_close(state[:, -1], var_y[at], rtol=0, atol=1e-10)


# --------------------------------------------------------------------------- bad input


def test_bad_input_is_refused_or_documented():
    torch.manual_seed(0)
    data = small(n=2)
    model = note_efa(data)
    for name, value, match in (("x", float("nan"), "NaN/inf attribute"),
                               ("y", float("nan"), "y"), ("channel", 2, "channel")):
        bad = Sequences({k: v.clone() for k, v in data.fields.items()}, data.lengths)
        bad.fields[name][1, 3] = value
        with pytest.raises(ValueError, match=match) as err:
            model.log_likelihood_sums(bad)
        assert "sequence 1, position 3" in str(err.value)
    # σ collapsing: the read-out's σ is floored at min_scale × the y scale.
    with torch.no_grad():
        model.readouts["y"].net[2].weight[1] = -1e6 * model.readouts["y"].net[2].weight[1].sign()
        model.readouts["y"].net[2].weight[1, 0] = -1e6
    _, sd = causal_predictive(model, data)
    floor = model.fields[1].family.min_scale * model.fields[1].scale
    assert (sd[:, 1:] >= floor * (1 - 1e-6)).all()
    # The first point has an empty context: it sees only its own masked token (documented),
    # and the likelihood does not score it.
    assert torch.isfinite(sd[:, 0]).all() and not data.scored[:, 0].any()


def test_user_table_round_trip_and_errors(tmp_path):
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"fn": np.repeat(["a", "b", "c"], 6), "x": rng.uniform(5, 15, 18),
                       "y": rng.normal(size=18), "ch": rng.choice(["left", "right"], 18)})
    data, labels = functions_to_sequences(df, "fn", "x", "y", "ch")
    assert labels == ["left", "right"] and data.fields["x"].shape == (3, 6, 1)
    assert data.fields["y"][1, 2].item() == pytest.approx(df.y.iloc[8])
    model = regression_efa(data, layers=1, channels=labels)
    new = pd.DataFrame({"fn": ["c", "a"], "x": [6.0, 9.0], "ch": ["right", "left"]})
    out = predict_frame(model, df, new, "fn", "x", "y", "ch")
    assert np.isfinite(out[["mean", "sd"]].to_numpy()).all()
    # #32.7: ids come from the model, not from the table at hand: a context without channel
    # 'left' still maps 'right' to id 1, as training did
    only_right = df[df.ch == "right"]
    got = predict_frame(model, only_right, new.iloc[:1], "fn", "x", "y", "ch")
    ctx, _ = functions_to_sequences(only_right, "fn", "x", "y", "ch", channels=labels)
    assert int(ctx.fields["channel"].max()) == 1
    direct = predict_frame(model, only_right, new.iloc[:1], "fn", "x", "y", "ch",
                           channels=labels)
    np.testing.assert_array_equal(got[["mean", "sd"]], direct[["mean", "sd"]])
    with pytest.raises(ValueError, match="unknown channel 'up'"):
        predict_frame(model, df, new.assign(ch="up"), "fn", "x", "y", "ch")
    with pytest.raises(ValueError, match="does not know its channel labels"):
        predict_frame(regression_efa(data, layers=1), df, new, "fn", "x", "y", "ch")
    with pytest.raises(ValueError, match="differ from the labels the model was built with"):
        predict_frame(model, df, new, "fn", "x", "y", "ch", channels=["right", "left"])
    import efa

    saved = efa.load(efa.save(model, tmp_path / "m"))
    assert [f.labels for f in saved.fields if f.name == "channel"] == [("left", "right")]
    with pytest.raises(ValueError, match="unknown channel 'up' in row 4"):
        functions_to_sequences(df.assign(ch=df.ch.where(df.index != 4, "up")), "fn", "x", "y", "ch",
                           channels=labels)
    with pytest.raises(ValueError, match="column 'x', first in row 2 .function 'a'"):
        functions_to_sequences(df.assign(x=df.x.where(df.index != 2)), "fn", "x", "y", "ch")
    with pytest.raises(ValueError, match="no context rows"):
        predict_frame(model, df, pd.DataFrame({"fn": ["z"], "x": [6.0], "ch": ["left"]}),
                      "fn", "x", "y", "ch")


# --------------------------------------------------------------------------- the experiment


@pytest.mark.slow
def test_quick_reproduce_writes_the_results_contract(tmp_path):
    result = CliRunner().invoke(app, ["reproduce", "in-context-regression", "--seeds", "1",
                                      "--quick", "--out", str(tmp_path), "--no-progress"])
    assert result.exit_code == 0, result.output
    folder = tmp_path / "in-context-regression"
    doc = json.loads((folder / "results.json").read_text())
    rows = {(r["setting"], r["model"], r["metric"]) for r in doc["rows"]}
    for model in ("note's model (exact)", "EFA (pre-LN blocks)", "TNP-D",
                  "GP fitted per sequence", "Nadaraya–Watson", "GP oracle (true kernel)"):
        assert ("UNN data + noise sd 0.1", model, "NLL per point, context ≥ 10") in rows
    assert ("TNP benchmark (RBF)", "GP oracle (true kernel)", "target log-likelihood") in rows
    oracle = next(r for r in doc["runs"] if r["model"] == "oracle" and r["setting"] == "noisy")
    assert oracle["chain_rule_gap"] < 1e-8
    for png in ("nll_by_context.png", "pit.png", "bands.png"):
        assert (folder / png).exists()
