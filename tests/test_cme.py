"""CME attention (efa.core.kernels.cme) as mathematics: the GP posterior mean (against
scikit-learn), Bayesian linear regression, invariances, limits, Lemma 3.2, exactness of the
masked pseudo-likelihood in every mode, gradients, and degenerate input."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF
from torch.func import functional_call

from efa.core import strategies
from efa.core.config import EFAConfig
from efa.core.kernels.cme import CME, cme, cme_weights, similarity
from efa.generators import LinearGaussian
from tests.helpers import make_model, mixed_data, naive_natural_params

D = torch.float64


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=D)


# --------------------------------------------------------------------------- the formula


def test_cme_is_the_gp_posterior_mean_of_scikit_learn():
    x, xq, y = _rand(30, 3, seed=1), _rand(7, 3, seed=2), _rand(30, 2, seed=3)
    for lengthscale, noise in [(0.7, 0.05), (1.9, 1.3)]:
        gp = GaussianProcessRegressor(RBF(lengthscale), alpha=noise, optimizer=None,
                                      normalize_y=False).fit(x.numpy(), y.numpy())
        ours = cme(xq, x, y, ridge=noise, bandwidth=lengthscale**2)
        np.testing.assert_allclose(ours.numpy(), gp.predict(xq.numpy()), rtol=0, atol=1e-8)


def test_linear_kernel_is_bayesian_linear_regression():
    """Sec. 3.1: z̄(X) c^msk with z ~ N(0, τ²I), noise σ²: weight-space posterior mean
    (CᵀC + σ²/τ² I)⁻¹Cᵀr against the kernel-space CME with the linear similarity."""
    gen = LinearGaussian(dim=3, prior_var=2.0, noise_var=0.3)
    c, r, cq = _rand(12, 3, seed=4), _rand(12, 1, seed=5), _rand(5, 3, seed=6)
    lam = gen.noise_var / gen.prior_var
    w = np.linalg.solve(c.numpy().T @ c.numpy() + lam * np.eye(3), c.numpy().T @ r.numpy())
    ours = cme(cq, c, r, ridge=lam, similarity_kind="linear")
    np.testing.assert_allclose(ours.numpy(), cq.numpy() @ w, rtol=0, atol=1e-10)
    zbar = gen.posterior_mean(c, r[:, 0])  # the paper's Rᵀ(CCᵀ + λI)⁻¹C
    np.testing.assert_allclose(zbar.numpy(), w[:, 0], rtol=0, atol=1e-10)


@pytest.mark.parametrize("kind", ["rbf", "exponential", "linear"])
def test_permuting_key_value_pairs_changes_nothing(kind):
    k, v, q = _rand(9, 2, seed=7), _rand(9, 3, seed=8), _rand(4, 2, seed=9)
    perm = torch.randperm(9, generator=torch.Generator().manual_seed(0))
    a = cme(q, k, v, ridge=0.2, similarity_kind=kind)
    b = cme(q, k[perm], v[perm], ridge=0.2, similarity_kind=kind)
    torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    wa = cme_weights(q, k, 0.2, kind)
    torch.testing.assert_close(wa[:, perm], cme_weights(q, k[perm], 0.2, kind), rtol=0,
                               atol=1e-12)


def test_ridge_limits_zero_and_interpolation():
    k, v = _rand(8, 2, seed=10), _rand(8, 2, seed=11)
    q = _rand(3, 2, seed=12)
    assert cme(q, k, v, ridge=1e12).abs().max() < 1e-10  # λ → ∞: the prior mean 0
    # λ → 0 with distinct keys: the value of a key is returned at that key.
    out = cme(k, k, v, ridge=1e-11, bandwidth=0.5)
    torch.testing.assert_close(out, v, rtol=0, atol=1e-6)


def test_lemma_3_2_same_sufficient_statistics_same_output():
    """Two contexts with the same CᵀC and Cᵀr (C' = OC, r' = Or with OᵀO = I, of another
    length) have the same posterior of z, hence the same Bayes prediction and the same
    linear-kernel CME attention output."""
    gen = LinearGaussian(dim=2, prior_var=1.0, noise_var=0.5)
    c, r, cq = _rand(5, 2, seed=13), _rand(5, seed=14), _rand(3, 2, seed=15)
    o, _ = torch.linalg.qr(_rand(8, 5, seed=16))  # 8 × 5, orthonormal columns
    c2, r2 = o @ c, o @ r
    assert not torch.allclose(c2[:5], c)  # a different sequence
    torch.testing.assert_close(c2.T @ c2, c.T @ c)
    for a, b in [(gen.posterior_mean(c, r), gen.posterior_mean(c2, r2)),
                 (cme(cq, c, r[:, None], gen.ridge, "linear"),
                  cme(cq, c2, r2[:, None], gen.ridge, "linear"))]:
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


# --------------------------------------------------------------------------- the kernel


def _naive(ker, q, k, v, allowed, own=None):
    """One linear solve per (sequence, head, query) over its allowed keys."""
    b_, h_, iq, _ = q.shape
    extra = int(ker.posterior_variance)
    out = torch.zeros(b_, h_, iq, v.shape[-1] + extra, dtype=D)
    lam, bw, r = ker.ridge().detach(), ker.bandwidth().detach(), ker.rbf_dims
    for b, h, i in itertools.product(range(b_), range(h_), range(iq)):
        qi = q[b, h, i][None]
        if extra:  # the prior variance, less what the allowed keys explain
            out[b, h, i, -1] = similarity(qi, qi, ker.similarity, bw[h], ker.scale, r)[0, 0]
        idx = allowed[b, 0, i].nonzero().flatten().tolist()
        if not idx:
            continue
        kk, vv = k[b, h, idx].clone(), v[b, h, idx].clone()
        if own is not None and i in idx:
            kk[idx.index(i)], vv[idx.index(i)] = own[0][b, h, i], own[1][b, h, i]
        g = similarity(kk, kk, ker.similarity, bw[h], ker.scale, r)
        kq = similarity(kk, qi, ker.similarity, bw[h], ker.scale, r)
        alpha = torch.linalg.solve(g + lam[h] * torch.eye(len(idx), dtype=D), kq)
        out[b, h, i, : v.shape[-1]] = (vv.T @ alpha)[:, 0]
        if extra:
            out[b, h, i, -1] -= (kq * alpha).sum()
    return out


@pytest.mark.parametrize("kind,options", [
    ("rbf", {}), ("exponential", {}),
    ("rbf+linear", {"rbf_dims": 1, "posterior_variance": True}),  # GP mean and variance
    ("rbf", {"posterior_variance": True})])
def test_kernel_matches_a_naive_loop_for_every_mask(kind, options):
    ker = CME(2, 3, 0.5, False, similarity=kind, **options).to(D)
    with torch.no_grad():
        ker.log_bandwidth.copy_(torch.tensor([0.2, -0.1]))
        ker.log_ridge.copy_(torch.tensor([-1.0, 0.5]))
    b, n = 3, 6
    q, k, v = _rand(b, 2, n, 3, seed=1), _rand(b, 2, n, 3, seed=2), _rand(b, 2, n, 4, seed=3)
    own = (_rand(b, 2, n, 3, seed=4), _rand(b, 2, n, 4, seed=5))
    valid = torch.arange(n) < torch.tensor([6, 4, 2])[:, None]
    eye = torch.eye(n, dtype=torch.bool)
    tril = torch.ones(n, n, dtype=torch.bool).tril()
    masks = {  # the model's masks (with padding), a mask without the diagonal, any mask
        "full": valid[:, None, :] | eye, "causal": (valid[:, None, :] & tril) | eye,
        "no diagonal": valid[:, None, :] & ~eye,
        "random": torch.rand(b, n, n, generator=torch.Generator().manual_seed(6)) > 0.4,
    }
    for m, mine in itertools.product(masks.values(), [None, own]):
        m = m[:, None]
        ref = _naive(ker, q, k, v, m, mine)
        for structured in (True, False):
            out, _ = ker(q, k, v, m, own=mine, structured=structured)
            torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    q1 = _rand(b, 2, 1, 3, seed=7)  # one query row per copy (the copies' last layer)
    out, _ = ker(q1, k, v, valid[:, None, None, :])
    torch.testing.assert_close(out, _naive(ker, q1, k, v, valid[:, None, None, :]), rtol=0,
                               atol=1e-12)


def _compare(model, data, atol=1e-9):
    fast, slow = model.natural_params(data), naive_natural_params(model, data)
    for name, eta in slow.items():
        m = data.predicted(name)
        torch.testing.assert_close(fast[name][m], eta[m], atol=atol, rtol=0)


@pytest.mark.parametrize("direction,layers", list(itertools.product(
    ["unidirectional", "bidirectional"], [1, 2])))
def test_exact_masked_pseudo_likelihood_in_every_mode(direction, layers):
    data = mixed_data(n=3, max_len=5)
    for mode in ("auto", "copies"):
        model = make_model(num_layers=layers, direction=direction, mode=mode, block="post_ln",
                           attention={"kernel": "cme", "ridge": 0.5})
        assert model.config.strategy == "copies"
        _compare(model, data)
    with pytest.raises(ValueError, match="row-local"):
        make_model(num_layers=layers, direction=direction, mode="two_stream",
                   attention="cme")


@pytest.mark.parametrize("block", ["residual", "concat"])
def test_posterior_variance_widens_the_heads_output_exactly(block):
    """The variance column goes through W^O (residual) or into the state (concat, no W^O):
    the model is still the naive per-copy computation, in both directions and depths."""
    data = mixed_data(n=3, max_len=5)
    attention = {"kernel": "cme", "similarity": "rbf+linear", "rbf_dims": 2,
                 "posterior_variance": True}
    for direction, layers in itertools.product(["unidirectional", "bidirectional"], [1, 2]):
        model = make_model(num_layers=layers, direction=direction, block=block,
                           out_proj=block != "concat", attention=attention)
        _compare(model, data)


def test_copies_block_update_and_fresh_solves_agree(monkeypatch):
    """A one-layer model's copies come from one factorisation per sequence (the kernel's own
    form) when enough positions are asked, from one solve per copy otherwise: same numbers,
    same attention rows."""
    model = make_model(num_layers=1, attention={"kernel": "cme", "similarity": "exponential"},
                       block="pre_ln")
    data = mixed_data(n=3, max_len=6, missing=False)
    calls = []
    real = strategies._own_form_copies
    monkeypatch.setattr(strategies, "_own_form_copies", lambda *a: calls.append(1) or real(*a))
    dense, rows = model.natural_params(data), model.attention_weights(data, "count")
    assert calls
    monkeypatch.setattr(strategies, "OWN_FORM_MIN_ASKED", 10**9)  # never the update
    calls.clear()
    fresh, rows2 = model.natural_params(data), model.attention_weights(data, "count")
    assert not calls
    for name in dense:
        m = data.predicted(name)
        torch.testing.assert_close(dense[name][m], fresh[name][m], rtol=0, atol=1e-12)
    torch.testing.assert_close(rows, rows2, rtol=0, atol=1e-12)


def test_gradients_of_bandwidth_ridge_and_queries():
    ker = CME(2, 2, 0.7, False).to(D)
    q, k, v = _rand(2, 2, 4, 2, seed=1), _rand(2, 2, 4, 2, seed=2), _rand(2, 2, 4, 1, seed=3)
    own = (_rand(2, 2, 4, 2, seed=4), _rand(2, 2, 4, 1, seed=5))
    valid = torch.arange(4) < torch.tensor([4, 3])[:, None]
    allowed = (valid[:, None, :] | torch.eye(4, dtype=torch.bool))[:, None]

    def f(log_bw, log_ridge, qq):
        params = {"log_bandwidth": log_bw, "log_ridge": log_ridge}
        a, _ = functional_call(ker, params, (qq, k, v, allowed), {"own": own})
        b, _ = functional_call(ker, params, (qq, k, v, allowed))
        return (a * valid[:, None, :, None]).sum() + (b * valid[:, None, :, None]).sum()

    args = (torch.tensor([0.3, -0.2], dtype=D, requires_grad=True),
            torch.tensor([-0.5, 0.1], dtype=D, requires_grad=True), q.requires_grad_())
    assert torch.autograd.gradcheck(f, args)


def test_options_are_saved_and_positive_by_parameterisation():
    cfg = EFAConfig(make_model(num_layers=1).config.fields, num_layers=1,
                    attention={"kernel": "cme", "similarity": "linear", "ridge": 0.3,
                               "min_ridge": 0.01})
    assert EFAConfig.from_dict(cfg.to_dict()).attention["ridge"] == 0.3
    ker = CME(2, 3, 1.0, False, ridge=0.3, min_ridge=0.01)
    with torch.no_grad():
        ker.log_ridge.fill_(-1e3)
        ker.log_bandwidth.fill_(-50)
    assert (ker.ridge() >= 0.01).all() and (ker.bandwidth() > 0).all()
    for bad, match in [({"similarity": "cosine"}, "similarity"), ({"ridge": 0}, "ridge"),
                       ({"min_ridge": 0}, "min_ridge"), ({"ridge": 1e-5}, "exceed"),
                       ({"bandwidth": float("inf")}, "bandwidth"), ({"lam": 1}, "takes options"),
                       ({"learn": 1}, "learn"), ({"posterior_variance": 1}, "posterior_variance"),
                       ({"similarity": "rbf+linear"}, "rbf_dims"), ({"rbf_dims": 1}, "rbf_dims"),
                       ({"similarity": "rbf+linear", "rbf_dims": 0}, "rbf_dims"),
                       ({"similarity": "rbf+linear", "rbf_dims": 99}, "rbf_dims between")]:
        with pytest.raises(ValueError, match=match):
            make_model(attention={"kernel": "cme", **bad})


# --------------------------------------------------------------------------- degenerate input


def test_duplicate_keys_with_zero_ridge_are_an_error_not_a_nan():
    k = torch.tensor([[0.0, 1.0], [0.0, 1.0], [1.0, 0.0]], dtype=D)
    v = _rand(3, 1)
    with pytest.raises(ValueError, match="singular.*duplicate"):
        cme(k, k, v, ridge=0.0, similarity_kind="linear")
    assert torch.isfinite(cme(k, k, v, ridge=1e-3)).all()  # any λ > 0 is fine


def test_empty_context_gives_the_prior_mean():
    q = _rand(2, 3)
    assert torch.equal(cme(q, q.new_zeros(0, 3), q.new_zeros(0, 4), 0.1), q.new_zeros(2, 4))
    k, v = _rand(5, 3, seed=1), _rand(5, 4, seed=2)
    none = torch.zeros(5, dtype=torch.bool)
    assert torch.equal(cme(q, k, v, 0.0, key_mask=none), q.new_zeros(2, 4))
    ker = CME(1, 3, 1.0, False).to(D)
    allowed = torch.zeros(1, 1, 5, 5, dtype=torch.bool)
    allowed[0, 0, 1, :3] = True
    out, w = ker(k[None, None], k[None, None], v[None, None], allowed)
    assert torch.isfinite(out).all() and (out[0, 0, [0, 2, 3, 4]] == 0).all()
    assert (w[0, 0, 0] == 0).all()


def test_non_finite_kernel_values_are_an_error():
    big = torch.full((1, 1, 3, 2), 30.0, dtype=D)
    ker = CME(1, 2, 1.0, False, similarity="exponential", bandwidth=1e-2).to(D)
    with pytest.raises(ValueError, match="non-finite kernel values"):
        ker(big, big, big, torch.ones(1, 1, 3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="non-finite queries"):
        cme(torch.tensor([[math.nan, 0.0]]), big[0, 0], big[0, 0], 0.1)
    with pytest.raises(ValueError, match="ridge"):
        cme(big[0, 0], big[0, 0], big[0, 0], -1.0)
