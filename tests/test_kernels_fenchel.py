"""Attention as inference (Paper A, docs/fenchel.md): the generalized, fenchel, second_order
and ot kernels tested as math in float64 (identities to 1e-8 or better), against a naive
per-copy computation in every mode of the masked pseudo-likelihood, against T5's bucketing and
attention, and against POT's Sinkhorn solver."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from efa import EFA, EFAConfig
from efa.core.kernels import KERNELS
from efa.core.kernels.fenchel import (
    dual_objective,
    fenchel_lambda,
    primal_objective,
    second_order_lambda,
    solve_dual,
    tilt_weights,
)
from efa.core.kernels.ot import (
    check_cost,
    ot_true_mean,
    ot_true_preference,
    ot_weights,
)
from efa.core.kernels.preference import generalized_weights, relative_position_bucket
from tests.helpers import make_model, mixed_data, naive_natural_params

D64 = torch.float64


def random_problem(n=8, d=4, seed=0, spread=1.0):
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(n, d, generator=g, dtype=D64) * spread
    z = torch.randn(1, d, generator=g, dtype=D64)
    log_u = torch.log(torch.distributions.Dirichlet(torch.ones(n, dtype=D64)).sample())
    return t, z, log_u[None]


def cov_u(t, log_u):
    u = torch.softmax(log_u, -1)[0]
    mu = u @ t
    return (t - mu).T @ ((t - mu) * u[:, None]), mu


# --------------------------------------------------------------------------- exact in every mode

# (kernel spec, α large enough that the exact and approximate tilts differ visibly)
SPECS = {
    "generalized": {"kernel": "generalized", "relative": "auto", "context": 2},
    "fenchel": {"kernel": "fenchel", "alpha": 4.0, "relative": "auto", "context": 2},
    "second_order": {"kernel": "second_order", "alpha": 4.0, "relative": "auto"},
    "ot": {"kernel": "ot", "cost": "sqeuclidean", "relative": "auto", "context": 2,
           "gamma": 0.5},
}
# Two-stream (own template at the diagonal) causal and bidirectional, and the masked copies
# (the other combinations run the same code: tests/test_model.py covers the strategies).
MODES = [("unidirectional", 2, "two_stream"), ("bidirectional", 1, "two_stream"),
         ("bidirectional", 2, "auto")]


def _perturbed(model):
    """Random (not initial) preference biases and networks, so every part of log u acts."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "rel_bias" in name or "pref_w2" in name:
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5)
    return model


@pytest.mark.parametrize("name,mode", list(itertools.product(SPECS, MODES)))
def test_kernels_are_exact_in_every_mode(name, mode):
    direction, layers, strategy = mode
    model = _perturbed(make_model(num_layers=layers, direction=direction, attention=SPECS[name],
                                  mode=strategy, block="post_ln"))
    data = mixed_data(n=3)
    fast = model.natural_params(data)
    slow = naive_natural_params(model, data)
    for field, eta in slow.items():
        m = data.predicted(field)
        torch.testing.assert_close(fast[field][m].detach(), eta[m].detach(), atol=1e-10, rtol=0)


def test_the_kernels_differ_from_softmax_where_they_should():
    """Non-vacuous: with α = 4 the exact and second-order tilts move away from Eq. 17."""
    data = mixed_data(n=2, missing=False)
    rows = {}
    for name in ("generalized", "fenchel", "second_order"):
        spec = {"kernel": name, "alpha": 4.0}
        rows[name] = make_model(num_layers=1, attention=spec).attention_weights(data, "item")
    assert (rows["fenchel"] - rows["generalized"]).abs().max() > 1e-3
    assert (rows["second_order"] - rows["generalized"]).abs().max() > 1e-3


def test_generalized_with_defaults_is_softmax():
    """Equal to float64 precision (softmax's fused scaled_dot_product_attention path adds in
    another order, so not bit for bit)."""
    data = mixed_data(n=3)
    a = make_model(num_layers=2, attention="softmax").natural_params(data)
    b = make_model(num_layers=2, attention="generalized").natural_params(data)
    for name in a:
        m = data.predicted(name)
        torch.testing.assert_close(a[name][m], b[name][m], atol=1e-12, rtol=0)


# --------------------------------------------------------------------------- generalized attention


def test_uniform_preference_is_scaled_dot_product_attention():
    """Paper A's mapping (Sec. 8): t_i = x_i/√d', z = KᵀQx_k, α = 1, u uniform, V' = V√d'."""
    g = torch.Generator().manual_seed(0)
    n, D, dh = 7, 6, 3
    x = torch.randn(n, D, generator=g, dtype=D64)
    K, Q, V = (torch.randn(dh, D, generator=g, dtype=D64) for _ in range(3))
    sdpa = torch.softmax((x @ Q.T) @ (x @ K.T).T / math.sqrt(dh), -1) @ (x @ V.T)
    t = x / math.sqrt(dh)
    for k in range(n):
        z = K.T @ Q @ x[k]
        p = generalized_weights(t, z, torch.zeros(n, dtype=D64), 1.0)
        out = (V * math.sqrt(dh)) @ (p @ t)
        torch.testing.assert_close(out, sdpa[k], atol=1e-12, rtol=0)


def _t5_bucket_reference(rel: int, bidirectional: bool, num_buckets: int, max_distance: int):
    """A line-by-line scalar port of T5's _relative_position_bucket (float32 log, as T5)."""
    ret = 0
    n = -rel  # T5's Mesh TensorFlow form: n = query − key
    if bidirectional:
        num_buckets //= 2
        ret += (n < 0) * num_buckets
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return ret + n
    val = max_exact + int(np.float32(np.log(np.float32(n) / np.float32(max_exact)))
                          / np.float32(math.log(max_distance / max_exact))
                          * np.float32(num_buckets - max_exact))
    return ret + min(val, num_buckets - 1)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("buckets,distance", [(32, 128), (8, 20), (16, 64)])
def test_relative_buckets_are_t5s(bidirectional, buckets, distance):
    rel = torch.arange(-300, 301)
    got = relative_position_bucket(rel, bidirectional, buckets, distance)
    want = [_t5_bucket_reference(int(r), bidirectional, buckets, distance) for r in rel]
    assert got.tolist() == want


def test_relative_buckets_known_values():
    b = lambda r, bi: int(relative_position_bucket(torch.tensor(r), bi))  # noqa: E731
    # T5 defaults (32 buckets, max distance 128): keys after the query use buckets 16..31.
    assert [b(r, True) for r in (0, -1, 1, -7, -8, 8, -300, 300)] == [0, 1, 17, 7, 8, 24, 15, 31]
    assert [b(r, False) for r in (5, 0, -5, -15, -16, -1000)] == [0, 0, 5, 15, 16, 31]


@pytest.mark.parametrize("relative,causal", [("bidirectional", False), ("causal", True)])
def test_preference_of_relative_buckets_and_mask_is_t5_attention(relative, causal):
    """Eq. 19: log u = b_{bucket(j − i)} + mask (correctly normalised: Eq. 21 drops u_j in
    the denominator) is T5's attention softmax(q·k + position bias + mask)."""
    g = torch.Generator().manual_seed(0)
    B, H, n, d = 2, 3, 9, 4
    kern = KERNELS["generalized"](H, d, 1.0, causal, relative=relative, num_buckets=8,
                                  max_distance=12).double()
    with torch.no_grad():
        kern.rel_bias.copy_(torch.randn(8, H, generator=g, dtype=D64))
    q, k, v = (torch.randn(B, H, n, d, generator=g, dtype=D64) for _ in range(3))
    allowed = torch.rand(B, 1, n, n, generator=g) > 0.3
    allowed |= torch.eye(n, dtype=torch.bool)
    if causal:
        allowed &= torch.ones(n, n, dtype=torch.bool).tril()
    out, w = kern(q, k, v, allowed)
    pos = torch.arange(n)
    bias = torch.empty(H, n, n, dtype=D64)
    for i in range(n):
        for j in range(n):
            bias[:, i, j] = kern.rel_bias[_t5_bucket_reference(j - i, not causal, 8, 12)]
    t5 = torch.softmax(q @ k.transpose(-1, -2) + bias + torch.where(allowed, 0.0, -math.inf), -1)
    torch.testing.assert_close(w, t5, atol=1e-12, rtol=0)
    torch.testing.assert_close(out, t5 @ v, atol=1e-12, rtol=0)
    assert torch.all(w[~allowed.expand_as(w)] == 0)  # masked templates: exactly zero
    assert pos.shape == (n,)


@pytest.mark.parametrize("name", ["generalized", "fenchel", "second_order", "ot"])
def test_masked_templates_get_zero_and_a_shift_of_log_u_changes_nothing(name):
    g = torch.Generator().manual_seed(3)
    B, H, n, d = 2, 2, 6, 3
    kern = KERNELS[name](H, d, 0.5, False, alpha=2.0).double()
    q, k, v = (torch.randn(B, H, n, d, generator=g, dtype=D64) for _ in range(3))
    allowed = (torch.rand(B, 1, n, n, generator=g) > 0.4) | torch.eye(n, dtype=torch.bool)
    log_u = torch.randn(B, H, n, n, generator=g, dtype=D64).masked_fill(~allowed, -math.inf)
    w = kern.tilt(q, k, log_u, None, None, torch.arange(n)[None])
    shifted = kern.tilt(q, k, log_u + 7.5, None, None, torch.arange(n)[None])
    assert torch.all(w[~allowed.expand_as(w)] == 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(B, H, n, dtype=D64), atol=1e-12, rtol=0)
    torch.testing.assert_close(shifted, w, atol=1e-12, rtol=0)


# --------------------------------------------------------------------------- exact (Fenchel dual)


@pytest.mark.parametrize("alpha", [0.05, 0.5, 2.0, 20.0])
def test_kkt_and_strong_duality(alpha):
    t, z, log_u = random_problem(seed=1)
    lam, iters, done = solve_dual(z, t, log_u, torch.tensor([alpha], dtype=D64), tol=1e-13)
    assert bool(done.all()) and int(iters.max()) <= 20
    p = tilt_weights(lam, t, log_u)
    h = p @ t
    mu = torch.softmax(log_u, -1) @ t
    torch.testing.assert_close(h, mu + z - lam / alpha, atol=1e-10, rtol=0)  # KKT
    primal = primal_objective(p, z, t, log_u, alpha)
    dual = dual_objective(lam, z, t, log_u, alpha)
    torch.testing.assert_close(primal, dual, atol=1e-10, rtol=0)
    # λ* maximises the dual: no random direction does better.
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        other = lam + 1e-3 * torch.randn(lam.shape, generator=g, dtype=D64)
        assert dual_objective(other, z, t, log_u, alpha) < dual
    # And p̃ minimises the primal over the simplex: compare with random distributions.
    for _ in range(20):
        q = torch.softmax(torch.log(p) + 0.05 * torch.randn(p.shape, generator=g, dtype=D64), -1)
        assert primal_objective(q, z, t, log_u, alpha) > primal


def _gauss_hermite_u(mean, d=2, nodes=30):
    """A discrete u whose MGF equals that of N(mean, I) to rounding (tensor Gauss–Hermite)."""
    x, w = np.polynomial.hermite_e.hermegauss(nodes)  # weight exp(−x²/2)
    w = w / w.sum()
    grid = np.stack(np.meshgrid(*[x] * d, indexing="ij"), -1).reshape(-1, d)
    weights = np.prod(np.stack(np.meshgrid(*[w] * d, indexing="ij"), -1).reshape(-1, d), -1)
    t = torch.tensor(grid, dtype=D64) + torch.tensor(mean, dtype=D64)
    return t, torch.log(torch.tensor(weights, dtype=D64))[None]


@pytest.mark.parametrize("alpha", [0.1, 1.0, 3.0])
def test_gaussian_preference_has_the_closed_form_of_section_5(alpha):
    mean = [0.3, -1.2]
    t, log_u = _gauss_hermite_u(mean)
    z = torch.tensor([[0.8, 0.5]], dtype=D64)
    lam = fenchel_lambda(z, t, log_u, alpha, tol=1e-13)
    b = torch.tensor(mean, dtype=D64) + z
    closed = alpha / (1 + alpha) * (b - torch.tensor(mean, dtype=D64))
    torch.testing.assert_close(lam, closed, atol=1e-9, rtol=0)
    h = tilt_weights(lam, t, log_u) @ t
    want = torch.tensor(mean, dtype=D64) / (1 + alpha) + alpha * b / (1 + alpha)
    torch.testing.assert_close(h, want, atol=1e-9, rtol=0)
    # Eq. 14 is exact for a Gaussian u.
    torch.testing.assert_close(second_order_lambda(z, t, log_u, alpha), lam, atol=1e-9, rtol=0)


def test_deviation_from_alpha_z_is_first_order_and_second_order_is_better():
    """‖λ* − αz‖/‖λ*‖ ≈ α‖Σλ*‖/‖λ*‖ → 0 linearly in α‖Σ‖; Eq. 14's error is O(α²) and
    strictly smaller (the notes' n = 8, d = 4 table shows the same pattern)."""
    t, z, log_u = random_problem(seed=2)
    sigma, _ = cov_u(t, log_u)
    norm = float(torch.linalg.matrix_norm(sigma, 2))
    dev, dev2 = [], []
    for alpha in (1e-1, 1e-2, 1e-3):
        lam = fenchel_lambda(z, t, log_u, alpha, tol=1e-14)
        two = second_order_lambda(z, t, log_u, alpha)
        r1 = float((lam - alpha * z).norm() / lam.norm())
        r2 = float((lam - two).norm() / lam.norm())
        assert r2 < r1 < 1.5 * alpha * norm
        dev.append(r1)
        dev2.append(r2)
        if alpha == 1e-3:
            first_order = float((sigma @ lam[0]).norm() / lam.norm()) * alpha
            assert r1 == pytest.approx(first_order, rel=1e-2)
    assert dev[1] / dev[2] == pytest.approx(10, rel=0.05)  # linear in α
    assert dev2[1] / dev2[2] == pytest.approx(100, rel=0.1)  # quadratic in α


def test_second_order_is_the_dense_formula_of_eq_14():
    t, z, log_u = random_problem(seed=4)
    sigma, _ = cov_u(t, log_u)
    for alpha in (0.3, 3.0):
        want = alpha * torch.linalg.solve(torch.eye(4, dtype=D64) + alpha * sigma, z[0])
        torch.testing.assert_close(second_order_lambda(z, t, log_u, alpha)[0], want,
                                   atol=1e-12, rtol=0)


def test_newton_converges_fast_even_far_from_the_approximation():
    g = torch.Generator().manual_seed(5)
    B, n, d = 64, 20, 8
    t = torch.randn(B, n, d, generator=g, dtype=D64)
    z = torch.randn(B, 5, d, generator=g, dtype=D64)
    log_u = torch.randn(B, 5, n, generator=g, dtype=D64)
    for alpha, most in ((0.01, 3), (1.0, 12), (10.0, 20), (100.0, 50)):
        lam, iters, done = solve_dual(z, t, log_u, torch.tensor([alpha], dtype=D64), tol=1e-12)
        assert bool(done.all()) and int(iters.max()) <= most, (alpha, int(iters.max()))
        grad = (torch.softmax(log_u, -1) @ t) + z - lam / alpha - tilt_weights(lam, t, log_u) @ t
        assert float(((alpha * grad).norm(dim=-1) / lam.norm(dim=-1)).max()) < 1e-11


def test_float32_solve_is_accurate_to_its_tolerance():
    t, z, log_u = random_problem(seed=6, n=30, d=8)
    ref = fenchel_lambda(z, t, log_u, 2.0, tol=1e-13)
    got = fenchel_lambda(z.float(), t.float(), log_u.float(), 2.0, tol=1e-5)
    assert got.dtype == torch.float32
    assert float((got.double() - ref).norm() / ref.norm()) < 1e-5
    # float64 solve of float32 inputs returns float32
    hi = fenchel_lambda(z.float(), t.float(), log_u.float(), 2.0, dtype=D64)
    assert hi.dtype == torch.float32


def test_implicit_gradients_pass_gradcheck():
    g = torch.Generator().manual_seed(7)
    n, d = 4, 3
    t = torch.randn(1, n, d, generator=g, dtype=D64, requires_grad=True)
    own = torch.randn(1, n, d, generator=g, dtype=D64, requires_grad=True)
    z = torch.randn(1, n, d, generator=g, dtype=D64, requires_grad=True)
    log_u = torch.randn(1, n, n, generator=g, dtype=D64, requires_grad=True)
    alpha = torch.tensor([[1.5]], dtype=D64, requires_grad=True)

    def exact(z, t, own, log_u, alpha):
        return fenchel_lambda(z, t, log_u, alpha, own=own, tol=1e-14)

    def second(z, t, own, log_u, alpha):
        return second_order_lambda(z, t, log_u, alpha, own=own, tol=1e-14)

    inputs = (z, t, own, log_u, alpha)
    assert torch.autograd.gradcheck(exact, inputs, atol=1e-7)
    assert torch.autograd.gradcheck(second, inputs, atol=1e-7)


def test_model_loss_gradcheck_with_the_exact_kernel():
    model = make_model(num_layers=1, head_dim=2, direction="bidirectional", block="post_ln",
                       attention={"kernel": "fenchel", "alpha": 3.0, "tol": 1e-14})
    data = mixed_data(n=2, max_len=3, missing=False)
    params = dict(model.named_parameters())
    names = ("blocks.0.attn.k.bias", "blocks.0.attn.q.bias", "blocks.0.attn.kernel.log_alpha")
    from torch.func import functional_call

    def loss(*values):
        etas = functional_call(model, {**params, **dict(zip(names, values, strict=True))},
                               (data,))
        return -sum(f.family.log_prob(data.fields[f.name][data.predicted(f.name)],
                                      etas[f.name][data.predicted(f.name)]).sum()
                    for f in model.target_fields)

    inputs = tuple(params[n].detach().clone().requires_grad_() for n in names)
    assert torch.autograd.gradcheck(loss, inputs, atol=1e-6)


# --------------------------------------------------------------------------- OT attention


def test_ot_synonym_group_shares_the_weight_of_its_member():
    """Sec. 9: M = 0 inside a group and ∞ across, equal ⟨t, z⟩ inside the group, and t_i the
    only input template of group G: every t ∈ G gets u_i/|G|."""
    z = torch.tensor([1.0, 0.0], dtype=D64)
    # Group G = {0, 1, 2} (same first coordinate, hence the same ⟨t, z⟩), then {3}, {4, 5}.
    t = torch.tensor([[0.5, 0.0], [0.5, 1.0], [0.5, -2.0], [1.5, 0.0], [-1.0, 0.3], [2.0, 0.3]],
                     dtype=D64)
    groups = [0, 0, 0, 1, 2, 2]
    M = torch.tensor([[0.0 if a == b else math.inf for b in groups] for a in groups], dtype=D64)
    u = torch.tensor([0.0, 0.5, 0.0, 0.3, 0.2, 0.0], dtype=D64)  # inputs: 1 (in G), 3, 4
    p = ot_weights(t, z, torch.log(u), M, alpha=0.7, gamma=0.4)
    torch.testing.assert_close(p[:3], torch.full((3,), 0.5 / 3, dtype=D64), atol=1e-14, rtol=0)
    assert float(p[3]) == pytest.approx(0.3, abs=1e-14)  # a singleton group keeps its mass
    torch.testing.assert_close(p.sum(), torch.tensor(1.0, dtype=D64), atol=1e-14, rtol=0)
    # Within {4, 5} the evidence decides: softmax of α⟨t, z⟩/γ.
    ratio = math.exp(0.7 * (2.0 - (-1.0)) / 0.4)
    assert float(p[5] / p[4]) == pytest.approx(ratio, rel=1e-12)


def test_ot_small_gamma_limit():
    """γ → 0 with α fixed: each mass u_i moves to argmax_t (α⟨t, z⟩ − M(t, t_i)); with a
    cost that dominates the evidence it stays put, p* → u; and ũ → u (Prop. 1)."""
    t, z, log_u = random_problem(n=6, d=3, seed=8)
    u = torch.softmax(log_u[0], -1)
    g = torch.Generator().manual_seed(9)
    A = torch.rand(6, 6, generator=g, dtype=D64)
    M = (A + A.T).fill_diagonal_(0)
    alpha = 0.8
    s = alpha * (t @ z[0])
    target = s[:, None] - M  # [t, i]
    hard = torch.zeros(6, dtype=D64)
    for i in range(6):
        hard[int(target[:, i].argmax())] += u[i]
    p = ot_weights(t, z[0], log_u[0], M, alpha, gamma=1e-4)
    torch.testing.assert_close(p, hard, atol=1e-10, rtol=0)
    big = M + 100 * (1 - torch.eye(6, dtype=D64))
    torch.testing.assert_close(ot_weights(t, z[0], log_u[0], big, alpha, 1e-3), u, atol=1e-12,
                               rtol=0)
    torch.testing.assert_close(ot_true_preference(log_u[0], M, 1e-4), u, atol=1e-10, rtol=0)


def test_ot_true_preference_is_pots_semi_relaxed_sinkhorn_solution():
    """Prop. 1: ũ = argmin_p W_γ(p, u; M). POT's unbalanced Sinkhorn with a free first
    marginal (reg_m = (0, ∞), entropic regulariser) solves exactly that problem."""
    import ot

    t, z, log_u = random_problem(n=7, d=3, seed=10)
    u = torch.softmax(log_u[0], -1)
    g = torch.Generator().manual_seed(11)
    A = torch.rand(7, 7, generator=g, dtype=D64)
    M = (A + A.T).fill_diagonal_(0)
    for gamma in (0.1, 2.0):
        ut = ot_true_preference(log_u[0], M, gamma)
        plan = ot.unbalanced.sinkhorn_unbalanced(
            np.full(7, 1 / 7), u.numpy(), M.numpy(), gamma, reg_m=(0, float("inf")),
            reg_type="entropy", numItermax=20000, stopThr=1e-16)
        np.testing.assert_allclose(ut.numpy(), plan.sum(1), atol=1e-12, rtol=0)
        # ũ is optimal: the balanced Sinkhorn potential of its marginal is constant, and
        # nearby distributions cost more (W_γ from POT).
        _, log = ot.sinkhorn(ut.numpy(), u.numpy(), M.numpy(), gamma, log=True,
                             stopThr=1e-13, numItermax=5000)
        f = gamma * np.log(log["u"])
        assert np.ptp(f) < 1e-9
        def w_gamma(p, gamma=gamma):  # ⟨M, X⟩ − γH(X) at POT's entropic plan from p to u
            X = ot.sinkhorn(p, u.numpy(), M.numpy(), gamma, stopThr=1e-12, numItermax=5000)
            return float((M.numpy() * X).sum() + gamma * (X * np.log(X)).sum())

        w0 = w_gamma(ut.numpy())
        for _ in range(3):
            p = torch.softmax(torch.log(ut) + 0.05 * torch.randn(7, generator=g, dtype=D64), -1)
            assert w_gamma(p.numpy()) > w0
        mean = ot_true_mean(t, log_u[0], M, gamma)
        torch.testing.assert_close(mean, ut @ t, atol=1e-14, rtol=0)


def test_ot_weights_sum_to_one_and_zero_cost_is_softmax():
    t, z, log_u = random_problem(n=9, d=4, seed=12)
    g = torch.Generator().manual_seed(13)
    A = torch.rand(9, 9, generator=g, dtype=D64)
    M = (A + A.T).fill_diagonal_(0)
    p = ot_weights(t, z[0], log_u[0], M, 0.6, 0.9)
    torch.testing.assert_close(p.sum(), torch.tensor(1.0, dtype=D64), atol=1e-14, rtol=0)
    flat = ot_weights(t, z[0], log_u[0], torch.zeros(9, 9, dtype=D64), 0.6, 0.9)
    torch.testing.assert_close(flat, torch.softmax(0.6 / 0.9 * (t @ z[0]), -1), atol=1e-14,
                               rtol=0)


def test_ot_kernel_exposes_the_true_preference():
    B, H, n, d = 2, 2, 5, 3
    g = torch.Generator().manual_seed(14)
    kern = KERNELS["ot"](H, d, 0.5, False, gamma=0.7).double()
    k = torch.randn(B, H, n, d, generator=g, dtype=D64)
    allowed = torch.ones(B, 1, n, n, dtype=torch.bool)
    ut, mt = kern.true_preference(k, allowed)
    t = k * 0.5
    for b, h in itertools.product(range(B), range(H)):
        M = ((t[b, h, :, None] - t[b, h, None]) ** 2).sum(-1)
        want = ot_true_preference(torch.zeros(n, dtype=D64), M, float(kern.gamma()[h].detach()))
        torch.testing.assert_close(ut[b, h, 0], want, atol=1e-12, rtol=0)
        torch.testing.assert_close(mt[b, h, 0], want @ t[b, h], atol=1e-12, rtol=0)


# --------------------------------------------------------------------------- bad settings


@pytest.mark.parametrize("name", ["generalized", "fenchel", "second_order", "ot"])
@pytest.mark.parametrize("alpha", [0, -1.0, float("nan")])
def test_non_positive_alpha_is_refused(name, alpha):
    with pytest.raises(ValueError, match="alpha must be > 0"):
        EFAConfig(mixed_fields_small(), attention={"kernel": name, "alpha": alpha})


@pytest.mark.parametrize("name", ["generalized", "fenchel", "second_order", "ot"])
@pytest.mark.parametrize("option,value", [("alpha", 1e308), ("alpha", 1e-320), ("gamma", 1e39)])
def test_reliability_beyond_float32_is_refused(name, option, value):
    # log α (log γ) is a float32 parameter: exp of it would be inf or 0 at the first forward.
    if option == "gamma" and name != "ot":
        return
    with pytest.raises(ValueError, match=f"{option} must lie in"):
        EFAConfig(mixed_fields_small(), attention={"kernel": name, option: value})


def mixed_fields_small():
    from efa import Category

    return [Category("item", 5)]


@pytest.mark.parametrize("gamma", [0, -0.5])
def test_non_positive_gamma_is_refused(gamma):
    with pytest.raises(ValueError, match="gamma must be > 0"):
        EFAConfig(mixed_fields_small(), attention={"kernel": "ot", "gamma": gamma})
    t, z, log_u = random_problem(n=3, d=2)
    with pytest.raises(ValueError, match="gamma must be > 0"):
        ot_weights(t, z[0], log_u[0], torch.zeros(3, 3, dtype=D64), 1.0, gamma)


@pytest.mark.parametrize("M,match", [
    ([[0, 1], [2, 0]], "symmetric"),
    ([[0, -1], [-1, 0]], "non-negative"),
    ([[0, 1, 2], [1, 0, 3]], "square"),
    ([[1, 0], [0, 1]], "diagonal"),
])
def test_bad_cost_matrices_are_refused(M, match):
    with pytest.raises(ValueError, match=match):
        EFAConfig(mixed_fields_small(), attention={"kernel": "ot", "cost": M})
    with pytest.raises(ValueError, match=match):
        check_cost(M)


def test_a_prior_that_masks_every_template_is_refused():
    t, z, _ = random_problem(n=4, d=2)
    dead = torch.full((1, 4), -math.inf, dtype=D64)
    for call in (lambda: generalized_weights(t, z[0], dead[0], 1.0),
                 lambda: fenchel_lambda(z, t, dead, 1.0),
                 lambda: second_order_lambda(z, t, dead, 1.0)):
        with pytest.raises(ValueError, match="masks every template"):
            call()
    with pytest.raises(ValueError, match="zero mass to every template"):
        ot_weights(t, z[0], dead[0], torch.zeros(4, 4, dtype=D64), 1.0, 1.0)
    for name in ("generalized", "fenchel", "second_order", "ot"):
        kern = KERNELS[name](2, 2, 1.0, False)
        q = k = v = torch.randn(1, 2, 3, 2)
        allowed = torch.ones(1, 1, 3, 3, dtype=torch.bool)
        allowed[0, 0, 1] = False  # query 1 may see nothing
        with pytest.raises(ValueError, match="masks every template of sequence 0, head 0, query 1"):
            kern(q, k, v, allowed)


def test_unknown_options_and_bad_types_are_refused():
    with pytest.raises(ValueError, match="has no option"):
        EFAConfig(mixed_fields_small(), attention={"kernel": "generalized", "gamma": 1.0})
    with pytest.raises(ValueError, match="relative must be one of"):
        EFAConfig(mixed_fields_small(), attention={"kernel": "generalized", "relative": "yes"})
    with pytest.raises(ValueError, match="tol must be"):
        EFAConfig(mixed_fields_small(), attention={"kernel": "fenchel", "tol": 2})


def test_kernel_options_are_saved_and_loaded(tmp_path):
    import efa

    spec = {"kernel": "ot", "cost": [[0, 1, 2], [1, 0, 1], [2, 1, 0]], "relative": "auto",
            "context": 2}
    model = make_model(num_layers=1, attention=spec, max_len=3, dtype=torch.float32)
    data = mixed_data(n=2, max_len=3, dtype=torch.float32)
    efa.save(model, tmp_path / "m")
    again = efa.load(tmp_path / "m")
    assert isinstance(again, EFA) and again.config.attention == spec
    a, b = model.natural_params(data), again.natural_params(data)
    for name in a:
        m = data.predicted(name)
        torch.testing.assert_close(a[name][m], b[name][m])


MATRIX = [[0, 1, 3, 4, 9], [1, 0.5, 2, 3, 4], [3, 2, 1, 2, 3], [4, 3, 2, 1.5, 2], [9, 4, 3, 2, 1]]


@pytest.mark.parametrize("cost", ["sqeuclidean", "positions", MATRIX])
@pytest.mark.parametrize("gamma", [0.5, 1e-3])
def test_ot_kernel_factorised_form_is_the_log_domain_formula(cost, gamma):
    """The kernel's matrix-product form (with the own-template corrections, and its
    log-domain fallback when a normaliser under-flows) equals Eq. 24 computed directly."""
    from efa.core.kernels.ot import _mix

    g = torch.Generator().manual_seed(15)
    B, H, n, d = 2, 2, 5, 3
    kern = KERNELS["ot"](H, d, 0.7, False, gamma=gamma, cost=cost, relative="bidirectional",
                         num_buckets=4, max_distance=8).double()
    with torch.no_grad():
        kern.rel_bias.normal_(generator=g)
    q, k, own = (3 * torch.randn(B, H, n, d, generator=g, dtype=D64) for _ in range(3))
    allowed = (torch.rand(B, 1, n, n, generator=g) > 0.3) | torch.eye(n, dtype=torch.bool)
    pos = torch.arange(n)[None]
    for mine in (None, own):
        log_u = kern.log_preference(k, allowed, pos, pos, mine)
        w = kern.tilt(q, k, log_u, mine, pos, pos)
        t = k * 0.7
        s = kern.alpha()[None, :, None, None] * ((q @ t.transpose(-1, -2)) if mine is None else
                                                 torch.where(torch.eye(n, dtype=torch.bool),
                                                             (q * mine * 0.7).sum(-1)[..., None],
                                                             q @ t.transpose(-1, -2)))
        direct = _mix(s, log_u, kern.costs(t, None if mine is None else mine * 0.7, pos),
                      kern.gamma()[None, :, None, None, None], torch.isfinite(log_u))
        torch.testing.assert_close(w, direct, atol=1e-12, rtol=0)
        assert torch.all(w[~allowed.expand_as(w)] == 0)


def test_ot_gradient_is_finite_when_a_masked_template_is_far_from_all():
    """A masked template (u = 0) whose costs to every template under-flow exp(−M/γ) has
    Z = 0; the weights never use it, and neither may the gradient (no 0/0 through the branch
    the forward does not take). This made OT attention diverge on the temperature sets."""
    from efa.core.kernels.ot import _mix_factorised

    g = torch.Generator().manual_seed(0)
    s = torch.randn(1, 1, 4, 4, generator=g, requires_grad=True)
    log_u = torch.zeros(1, 1, 4, 4)
    log_u[..., 3] = float("-inf")
    base = torch.zeros(1, 1, 4, 4)
    base[..., 3, :3] = base[..., :3, 3] = 200.0  # exp(−200) = 0 in float32
    base.requires_grad_()
    w = _mix_factorised(s, log_u, base, None, torch.ones(1, 1, 1, 1), torch.isfinite(log_u))
    assert w is not None and bool(torch.isfinite(w).all()) and bool((w[..., 3] == 0).all())
    (w[..., 0] * torch.arange(4.0)).sum().backward()
    assert bool(s.grad.isfinite().all()) and bool(base.grad.isfinite().all())


def test_ot_factorised_form_declines_a_z_whose_gradient_would_overflow():
    """Z = e^-60 is representable in float32, but the gradient through u / Z scales as 1/Z²
    (e^120 > float32's max): the float32 factorised form must hand over (None), and the float64
    one give finite gradients."""
    from efa.core.kernels.ot import _mix_factorised

    s = torch.zeros(1, 1, 1, 3)
    s[..., 2] = -60.0  # template 2: e = exp(-60) relative to the best template
    base = torch.zeros(1, 1, 3, 3)
    base[..., 2, :2] = base[..., :2, 2] = 200.0  # and far from the others: Z_2 = e^-60
    log_u = torch.zeros(1, 1, 1, 3)
    allowed = torch.ones(1, 1, 1, 3, dtype=torch.bool)
    gamma = torch.ones(1, 1, 1, 1)
    assert _mix_factorised(s, log_u, base, None, gamma, allowed) is None
    s64, base64 = s.double().requires_grad_(), base.double().requires_grad_()
    w = _mix_factorised(s64, log_u.double(), base64, None, gamma.double(), allowed)
    (w * torch.arange(3.0, dtype=torch.float64)).sum().backward()
    assert bool(torch.isfinite(s64.grad).all()) and bool(torch.isfinite(base64.grad).all())


def test_ot_kernel_names_a_ragged_cost_matrix():
    from efa.core.kernels.ot import check_cost

    with pytest.raises(ValueError, match=r"square matrix of numbers; got rows of lengths \[2, 1\]"):
        check_cost([[0.0, 1.0], [1.0]])
