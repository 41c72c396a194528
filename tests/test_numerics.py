"""The math core at the edges of float32 (families, kernels): Gaussian log-likelihoods that do
not cancel, finite attention at large α, dual and transport solves that fail loudly, CME's
downdate near duplicate keys, negative binomial logits past float32's range."""

from __future__ import annotations

import pytest
import torch

from efa.core.families import Gamma, Gaussian, HeteroscedasticGaussian, LearnedGaussian, Ordinal
from efa.core.families.base import Family
from efa.core.kernels.base import KERNELS
from efa.core.kernels.newton import check_finite


@pytest.mark.parametrize("family,z,y", [
    (Gaussian(sigma=1.0), [[1e4 + 0.5]], 1e4),
    (Gaussian(sigma=1.0), [[2000.3]], 2000.0),
    (HeteroscedasticGaussian(), [[300.01, -30.0]], 300.0),
    (HeteroscedasticGaussian(), [[1.0001, -12.0]], 1.0),
    (LearnedGaussian(), [[2000.3]], 2000.0)])
def test_gaussian_log_likelihoods_do_not_cancel_in_float32(family, z, y):
    # The natural form's terms are of size (y/σ)² and cancel; torch's Normal, at the same
    # precision, does not (before: 0.0 for -1.04, -524288.9 for -5001.5).
    eta = family.link(torch.tensor(z))
    y = torch.tensor([y])
    want = family.distribution(eta).log_prob(y)
    torch.testing.assert_close(family.log_prob(y, eta), want, rtol=1e-6, atol=1e-5)
    # without the base measure: the same value less log h(y) (in float64: the sum cancels)
    y, eta = y.double(), eta.double()
    drop = family.log_prob(y, eta, base_measure=False)
    torch.testing.assert_close(drop + family.log_base_measure(y),
                               family.distribution(eta).log_prob(y), rtol=1e-9, atol=1e-6)


def test_a_floor_of_zero_is_refused():
    with pytest.raises(ValueError, match="floor must be > 0"):
        Gamma(floor=0.0)
    with pytest.raises(ValueError, match="min_scale must be > 0"):
        HeteroscedasticGaussian(min_scale=0.0)


def _qkv(n=6, d=4):
    torch.manual_seed(0)
    return (torch.randn(1, 1, n, d) for _ in range(3))


@pytest.mark.parametrize("name", ["fenchel", "second_order"])
@pytest.mark.parametrize("alpha", [1e5, 1e8, 1e10])
def test_a_large_alpha_gives_finite_attention(name, alpha):
    q, k, v = _qkv()
    allowed = torch.ones(1, 1, 6, 6, dtype=torch.bool)
    out, w = KERNELS[name](1, 4, 0.5, False, alpha=alpha)(q, k, v, allowed)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()


def test_a_dual_solution_that_is_not_finite_is_an_error():
    with pytest.raises(FloatingPointError, match="'fenchel': the dual solution"):
        check_finite(torch.tensor([1.0, float("nan")]), "fenchel", torch.tensor([1e5]))


def test_ot_weights_that_overflow_are_an_error_not_nan():
    q, k, v = _qkv(5, 3)
    allowed = torch.ones(1, 1, 5, 5, dtype=torch.bool)
    kernel = KERNELS["ot"](1, 3, 0.577, False, gamma=1e-30, alpha=1e10)
    with pytest.raises(FloatingPointError, match="'ot': the weights are not finite"):
        kernel(q * 3, k * 3, v, allowed)


def test_cme_own_keys_near_duplicates_stay_accurate_in_float32():
    torch.manual_seed(0)
    k = torch.randn(1, 1, 6, 2)
    k[..., 1, :] = k[..., 0, :] + 0.01  # keys the others nearly repeat
    k[..., 3, :] = k[..., 2, :] - 0.01
    q, ko = torch.randn(1, 1, 6, 2), k + 0.01 * torch.randn(1, 1, 6, 2)
    v, vo = torch.randn(1, 1, 6, 1), torch.randn(1, 1, 6, 1)
    allowed = torch.ones(1, 1, 6, 6, dtype=torch.bool)
    cme = KERNELS["cme"](1, 2, 1.0, False, ridge=2e-4)
    ref = cme.double()(q.double(), k.double(), v.double(), allowed,
                       own=(ko.double(), vo.double()))[0]
    out = cme.float()(q, k, v, allowed, own=(ko, vo))[0]
    assert float((out.double() - ref).abs().max() / ref.abs().max()) < 5e-3  # was 0.34


def test_an_unconverged_dual_solve_is_warned_of_in_evaluation():
    q, k, v = _qkv()
    allowed = torch.ones(1, 1, 6, 6, dtype=torch.bool)
    kernel = KERNELS["fenchel"](1, 4, 0.5, False, alpha=1e4)
    kernel(q, k, v, allowed)  # training: the flags are kept, nothing is said
    assert not bool(kernel.last_solve["converged"].all())
    with pytest.warns(RuntimeWarning, match="did not converge for some queries"):
        kernel.eval()(q, k, v, allowed)


def test_a_negative_binomial_logit_past_float32s_range_stays_finite():
    from efa.core.families import NegativeBinomial

    nb = NegativeBinomial(3.0)
    z = torch.tensor([[110.0], [5.0]], requires_grad=True)
    eta = nb.link(z)
    lp = nb.log_prob(torch.tensor([2, 2]), eta)
    lp.sum().backward()
    assert torch.isfinite(lp).all() and torch.isfinite(z.grad).all()  # was −inf and NaN
    assert nb.mean(eta)[0] > 0
    assert eta[1, 0] == torch.nn.functional.logsigmoid(z[1, 0])  # the usual range: unchanged


def test_ordinal_log_probabilities_stay_at_or_below_zero_at_large_eta():
    # The natural form η s_y − logsumexp + b_y cancelled in float32: +1.84 at |η| ~ 1e8.
    torch.manual_seed(0)
    family = Ordinal(5)
    with torch.no_grad():
        family.raw_steps.copy_(torch.randn(4))
        family.base.copy_(3 * torch.randn(5))
    worst = max(family.log_prob(torch.arange(5), torch.full((5, 1), s * float(e))).max().item()
                for e in torch.logspace(0, 9, 100) for s in (1, -1))
    assert worst <= 0.0
    # and it is the same function: float64, against the natural form, broadcasting y
    family = family.double()
    eta = 3 * torch.randn(6, 3, 1, dtype=torch.float64)
    y = torch.randint(0, 5, (6, 3))
    torch.testing.assert_close(family.log_prob(y, eta), Family.log_prob(family, y, eta),
                               rtol=0, atol=1e-12)
    torch.testing.assert_close(family.log_prob(torch.arange(5), eta[:1, :1]),
                               Family.log_prob(family, torch.arange(5), eta[:1, :1]),
                               rtol=0, atol=1e-12)
    torch.testing.assert_close(family.log_prob(y, eta, base_measure=False),
                               Family.log_prob(family, y, eta, base_measure=False))
