"""Math tests for efa.core.families, in float64 against scipy.stats / torch.distributions; a
learned σ left unset starts at the data's scale, a gamma read-out in standardised units scales
the rate."""

import json
import math

import numpy as np
import pytest
import torch
from scipy import special, stats

from efa.core.families import (
    FAMILIES,
    Bernoulli,
    Binomial,
    Categorical,
    Family,
    Gamma,
    Gaussian,
    HeteroscedasticGaussian,
    LearnedGaussian,
    NegativeBinomial,
    Ordinal,
    Poisson,
    family_from_config,
)
from tests.helpers import item_value_data, item_value_model

F64 = torch.float64


def _softplus(x):
    return np.logaddexp(0.0, x)


def _learned_gaussian():
    family = LearnedGaussian(init_sigma=0.7).double()
    with torch.no_grad():
        family.log_sigma.fill_(math.log(0.7))  # the float32 init is rounded; make it exact
    return family


ORDINAL_STEPS, ORDINAL_BASE = np.array([0.4, 1.3, 0.7]), np.array([0.2, -0.5, 0.9, 0.1])


def _ordinal():
    family = Ordinal(4).double()
    with torch.no_grad():  # softplus(u) = step: u = log(exp(step) - 1)
        family.raw_steps.copy_(torch.from_numpy(np.log(np.expm1(ORDINAL_STEPS))))
        family.base.copy_(torch.from_numpy(ORDINAL_BASE))
    return family


def _ordinal_ref(z):
    scores = np.concatenate([[0.0], np.cumsum(ORDINAL_STEPS)])
    return stats.rv_discrete(values=(np.arange(4), special.softmax(z[0] * scores + ORDINAL_BASE)))


# Each case: a family and, independently written, the scipy distribution it should equal for a
# single readout row z (numpy, shape [num_outputs]), in the classical parameterisation.
CASES = {
    "categorical": (
        lambda: Categorical(4),
        lambda z: stats.rv_discrete(values=(np.arange(4), special.softmax(z))),
    ),
    "ordinal": (_ordinal, _ordinal_ref),
    "bernoulli": (Bernoulli, lambda z: stats.bernoulli(special.expit(z[0]))),
    "gaussian": (lambda: Gaussian(sigma=2.0), lambda z: stats.norm(z[0], 2.0)),
    "learned_gaussian": (_learned_gaussian, lambda z: stats.norm(z[0], 0.7)),
    "heteroscedastic_gaussian": (
        HeteroscedasticGaussian,
        lambda z: stats.norm(z[0], _softplus(z[1]) + 1e-4),
    ),
    "poisson_v1": (lambda: Poisson(shift=1), lambda z: stats.poisson(np.exp(z[0]), loc=1)),
    "poisson_v2": (lambda: Poisson(link="softplus"), lambda z: stats.poisson(1 + np.exp(z[0]))),
    "poisson_shift3_v2": (
        lambda: Poisson(shift=3, link="softplus"),
        lambda z: stats.poisson(1 + np.exp(z[0]), loc=3),
    ),
    "binomial": (lambda: Binomial(7), lambda z: stats.binom(7, special.expit(z[0]))),
    # scipy's nbinom counts failures before r successes, so its p is torch's 1 - p.
    "negative_binomial": (
        lambda: NegativeBinomial(2.5),
        lambda z: stats.nbinom(2.5, special.expit(-z[0])),
    ),
    "gamma": (
        Gamma,
        lambda z: stats.gamma(_softplus(z[0]) + 1e-4, scale=1 / (_softplus(z[1]) + 1e-4)),
    ),
}
IDS = list(CASES)


@pytest.fixture(params=IDS)
def case(request):
    make, ref = CASES[request.param]
    return make(), ref


def _draw(family, n=5, seed=0, dtype=F64):
    """Random readouts z, their eta, and one valid y per row."""
    g = torch.Generator().manual_seed(seed)
    z = (torch.rand(n, family.num_outputs, generator=g, dtype=F64) * 3 - 1.5).to(dtype)
    eta = family.to(dtype).link(z).detach()
    y = family.sample(eta, generator=g)
    return z, eta, y


def _stat(family, k):
    """t_k as a numpy function, for scipy's ``expect``."""
    return lambda y: family.sufficient_stat(torch.as_tensor(y, dtype=F64))[..., k].detach().numpy()


def _ref_logp(frozen, y):
    return frozen.logpmf(y) if hasattr(frozen, "logpmf") else frozen.logpdf(y)


# -- log_prob ---------------------------------------------------------------------------------


def test_log_prob_matches_scipy(case):
    family, ref = case
    z, eta, y = _draw(family)
    got = family.log_prob(y, family.link(z)).detach().numpy()
    want = [_ref_logp(ref(zi), yi) for zi, yi in zip(z.numpy(), y.numpy(), strict=True)]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)


def test_log_prob_matches_torch_distribution(case):
    family, _ = case
    _, eta, y = _draw(family)
    shift = getattr(family, "shift", 0)
    want = family.distribution(eta).log_prob((y - shift).to(F64))
    torch.testing.assert_close(family.log_prob(y, eta), want, rtol=0, atol=1e-10)


def test_negative_binomial_uses_torch_convention():
    # probs is the success probability; y counts successes before total_count failures.
    z = torch.tensor([[-1.0], [0.3], [2.0]], dtype=F64)
    y = torch.tensor([0, 4, 11])
    family = NegativeBinomial(3.0)
    want = torch.distributions.NegativeBinomial(3.0, logits=z[:, 0]).log_prob(y.to(F64))
    torch.testing.assert_close(family.log_prob(y, family.link(z)), want, rtol=0, atol=1e-10)
    p = torch.sigmoid(z[:, 0])
    torch.testing.assert_close(family.mean(family.link(z)), 3.0 * p / (1 - p))


def test_log_prob_accepts_float_targets_and_float32(case):
    family, _ = case
    z, eta, y = _draw(family, dtype=torch.float32)
    z.requires_grad_(True)
    lp = family.log_prob(y, family.link(z))
    assert lp.dtype == torch.float32 and lp.shape == y.shape and torch.isfinite(lp).all()
    lp.sum().backward()
    assert torch.isfinite(z.grad).all()
    torch.testing.assert_close(family.log_prob(y.float(), eta), family.log_prob(y, eta))


def test_eta_without_trailing_dim_is_rejected():
    with pytest.raises(ValueError, match=r"eta must have a trailing dim of size 1"):
        Poisson().log_prob(torch.tensor([1, 2]), torch.zeros(2))
    with pytest.raises(ValueError, match=r"z must have a trailing dim of size 2"):
        Gamma().link(torch.zeros(3, 1))


# -- gradient of the log-partition ------------------------------------------------------------


def test_grad_log_partition_is_expected_sufficient_stat(case):
    family, ref = case
    z, eta, _ = _draw(family, n=3)
    eta.requires_grad_(True)
    (grad,) = torch.autograd.grad(family.log_partition(eta).sum(), eta)
    for zi, gi in zip(z.numpy(), grad, strict=True):
        frozen = ref(zi)
        if isinstance(family, Categorical):
            expected = frozen.pmf(np.arange(family.num_categories))
        else:
            # E[t_k(y)] by summation over the support or quadrature, using the reference pmf.
            expected = [frozen.expect(_stat(family, k)) for k in range(family.num_natural)]
        np.testing.assert_allclose(gi.numpy(), expected, rtol=1e-7, atol=1e-8)


def test_mean_matches_reference(case):
    family, ref = case
    z, eta, _ = _draw(family)
    got = family.mean(eta).detach().numpy()
    if isinstance(family, Categorical):
        want = special.softmax(z.numpy(), axis=-1)
    else:
        want = [ref(zi).mean() for zi in z.numpy()]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_mean_is_grad_log_partition_for_scalar_families():
    eta = torch.tensor([[-0.7], [0.2], [1.3]], dtype=F64, requires_grad=True)
    for family in [Bernoulli(), Gaussian(1.5), Poisson(), Poisson(shift=2), Binomial(4)]:
        (grad,) = torch.autograd.grad(family.log_partition(eta).sum(), eta)
        shift = getattr(family, "shift", 0)
        torch.testing.assert_close(family.mean(eta), shift + grad[:, 0])


def test_negative_binomial_log_partition_is_stable_near_domain_edges():
    family = NegativeBinomial(2.0)
    eta = torch.tensor([[-1e-9], [-0.5], [-0.9], [-60.0]], dtype=F64, requires_grad=True)
    (grad,) = torch.autograd.grad(family.log_partition(eta).sum(), eta)
    p = torch.exp(eta.detach()[:, 0])
    torch.testing.assert_close(grad[:, 0], 2.0 * p / (1 - p), rtol=1e-7, atol=0)
    torch.testing.assert_close(family.mean(eta.detach()), grad[:, 0], rtol=1e-12, atol=0)


# -- autograd ---------------------------------------------------------------------------------


def test_gradcheck_through_link(case):
    family, _ = case
    z, eta, y = _draw(family, n=4)
    z.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda z: family.log_prob(y, family.link(z)), (z,))
    eta.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda eta: family.log_prob(y, eta), (eta,))


def test_gradcheck_learned_sigma():
    family = LearnedGaussian(init_sigma=0.8).double()
    z, _, y = _draw(family, n=4)

    def f(log_sigma):
        eta = torch.func.functional_call(family, {"log_sigma": log_sigma}, (z,))
        return family.log_prob(y, eta)

    assert torch.autograd.gradcheck(f, (family.log_sigma.detach().clone().requires_grad_(),))


class _LogProb(torch.nn.Module):
    def __init__(self, family):
        super().__init__()
        self.family = family

    def forward(self, y, eta):
        return self.family.log_prob(y, eta)


def test_gradcheck_ordinal_scores_and_base_measure():
    family = _ordinal()
    _, eta, y = _draw(family, n=6)
    inputs = (family.raw_steps.detach().clone().requires_grad_(),
              family.base.detach().clone().requires_grad_())

    def log_prob(raw_steps, base):
        params = {"family.raw_steps": raw_steps, "family.base": base}
        return torch.func.functional_call(_LogProb(family), params, (y, eta))

    assert torch.autograd.gradcheck(log_prob, inputs)
    # the logits are ordered: log p(k+1)/p(k) increases with η for every k
    lo, hi = family.logits(eta[:1] - 1.0), family.logits(eta[:1] + 1.0)
    assert (torch.diff(hi, dim=-1) > torch.diff(lo, dim=-1)).all()


# -- sampling ---------------------------------------------------------------------------------


def test_sample_mean_matches_mean(case):
    family, ref = case
    z, eta, _ = _draw(family, n=3)
    n = 20_000
    g = torch.Generator().manual_seed(1)
    y = family.sample(eta.expand(n, *eta.shape), generator=g)
    assert y.shape == (n, 3)
    assert y.dtype == (torch.long if family.is_discrete else F64)
    family.validate(y, "samples")
    if isinstance(family, Categorical):
        freq = torch.nn.functional.one_hot(y, family.num_categories).to(F64).mean(0)
        torch.testing.assert_close(freq, family.mean(eta), rtol=0, atol=0.02)
    else:
        std = torch.tensor([ref(zi).std() for zi in z.numpy()])
        err = (y.to(F64).mean(0) - family.mean(eta)).abs()
        assert (err < 5 * std / math.sqrt(n)).all(), (err, std)


def test_sampling_is_reproducible(case):
    family, _ = case
    _, eta, _ = _draw(family)
    a = family.sample(eta, generator=torch.Generator().manual_seed(7))
    b = family.sample(eta, generator=torch.Generator().manual_seed(7))
    torch.manual_seed(3)
    c = family.sample(eta)
    torch.manual_seed(3)
    d = family.sample(eta)
    assert torch.equal(a, b) and torch.equal(c, d)


# -- base measure convention ------------------------------------------------------------------


def test_base_measure_false_drops_exactly_log_h(case):
    family, _ = case
    _, eta, y = _draw(family)
    full = family.log_prob(y, eta)
    reduced = family.log_prob(y, eta, base_measure=False)
    torch.testing.assert_close(full - reduced, family.log_base_measure(y.to(F64)))


def test_poisson_v1_matches_paper_formula():
    z = torch.tensor([[-1.0], [0.0], [2.5]], dtype=F64)
    y = torch.tensor([1, 4, 9])
    mu = z[:, 0].exp()
    family = Poisson(shift=1, link="log")
    got = family.log_prob(y, family.link(z), base_measure=False)
    torch.testing.assert_close(got, -(mu - (y - 1) * mu.log()), rtol=0, atol=1e-12)


def test_poisson_v2_matches_paper_formula():
    z = torch.tensor([[-1.0], [0.0], [2.5]], dtype=F64)
    y = torch.tensor([0, 4, 9])
    rate = 1 + z[:, 0].exp()
    family = Poisson(link="softplus")
    got = family.log_prob(y, family.link(z), base_measure=False)
    torch.testing.assert_close(got, -(rate - y * rate.log()), rtol=0, atol=1e-12)


# -- validation -------------------------------------------------------------------------------


def test_validate_accepts_valid_targets():
    Categorical(3).validate(torch.tensor([0, 2, 1]), "field 'genre'")
    Bernoulli().validate(torch.tensor([0, 1]), "field 'click'")
    Poisson(shift=1).validate(torch.tensor([1, 5]), "field 'count'")
    Binomial(3).validate(torch.tensor([0, 3]), "field 'hits'")
    NegativeBinomial(2).validate(torch.tensor([0, 40]), "field 'count'")
    Gaussian().validate(torch.tensor([-3.0, 1e6]), "field 'x'")
    Gamma().validate(torch.tensor([1e-30, 2.0]), "field 'duration'")


@pytest.mark.parametrize(
    ("family", "y", "pattern"),
    [
        (Gaussian(), torch.tensor([0.0, math.nan, math.nan]), r"2 of 3 values are NaN"),
        (Gaussian(), torch.tensor([0.0, -math.inf]), r"1 of 2 values are infinite.*-inf"),
        (Poisson(), torch.tensor([1.0, math.nan]), r"are NaN"),
        (
            Categorical(5),
            torch.tensor([[0, 4], [5, -1]]),
            r"2 of 4 values are out of range \(first: 5 at index \(1, 0\)\).*\[0, 5\)",
        ),
        (Poisson(), torch.tensor([3, -2]), r"1 of 2 values are negative \(first: -2"),
        (Poisson(shift=1), torch.tensor([1, 0]), r"are below shift=1.*counts >= 1"),
        (NegativeBinomial(2.0), torch.tensor([-1]), r"are negative"),
        (Binomial(4), torch.tensor([2, 5]), r"are out of range.*counts in 0\.\.4"),
        (Poisson(), torch.tensor([1.0, 2.5]), r"1 of 2 values are not whole numbers \(first: 2.5"),
        (Poisson(), torch.tensor([1.0, 2.0]), r"expects an integer tensor.*float32.*\.long\(\)"),
        (Categorical(3), torch.tensor([True, False]), r"expects an integer tensor.*\.long\(\)"),
        (Bernoulli(), torch.tensor([0, 1, 2]), r"1 of 3 values are not 0 or 1 \(first: 2"),
        (Gamma(), torch.tensor([1.0, 0.0, -1.0]), r"2 of 3 values are not positive"),
        (Gaussian(), torch.tensor([1, 2]), r"expects a floating-point tensor.*int64.*\.float\(\)"),
        (Gamma(), [1.0, 2.0], r"expected a torch.Tensor.*got list"),
    ],
)
def test_validate_rejects(family, y, pattern):
    with pytest.raises(ValueError, match=r"^field 'rating': .*" + pattern):
        family.validate(y, "field 'rating'")


def test_constructor_arguments_are_checked():
    with pytest.raises(ValueError, match="LearnedGaussian"):
        Gaussian(sigma="learned")
    with pytest.raises(ValueError, match="link must be one of"):
        Poisson(link="identity")
    with pytest.raises(ValueError, match="num_categories"):
        Categorical(1)
    with pytest.raises(ValueError, match="total_count"):
        NegativeBinomial(0)


# -- config -----------------------------------------------------------------------------------


def test_config_round_trip(case):
    family, _ = case
    config = json.loads(json.dumps(family.config()))
    rebuilt = family_from_config(config).to(F64)
    rebuilt.load_state_dict(family.state_dict())  # learned parameters travel in state_dict
    assert type(rebuilt) is type(family) and isinstance(rebuilt, Family)
    assert rebuilt.config() == family.config() and repr(rebuilt) == repr(family)
    _, eta, y = _draw(family)
    torch.testing.assert_close(rebuilt.log_prob(y, eta), family.log_prob(y, eta))


def test_every_family_is_registered():
    assert {cls.name for cls in FAMILIES.values()} == set(FAMILIES)
    assert {type(CASES[k][0]()) for k in CASES} == set(FAMILIES.values())


def test_learned_sigma_round_trips_through_state_dict():
    family = LearnedGaussian(init_sigma=1.0)
    with torch.no_grad():
        family.log_sigma.fill_(math.log(0.3))
    rebuilt = family_from_config(family.config())
    rebuilt.load_state_dict(family.state_dict())
    assert rebuilt.sigma.item() == pytest.approx(0.3)
    assert repr(family) == "LearnedGaussian(init_sigma=1.0)"


def test_unknown_family_config():
    with pytest.raises(ValueError, match="unknown family 'weibull'"):
        family_from_config({"family": "weibull"})


def test_a_learned_sigma_left_unset_starts_at_the_datas_scale_once():
    # It started at 1 in the data's units: values in the thousands got 2 % coverage.
    from efa.core.families import LearnedGaussian
    data = item_value_data(scale=1e3)
    model = item_value_model(LearnedGaussian())
    model.standardise(data)
    family = model.field("y").family
    assert family.init_sigma == pytest.approx(model.field("y").scale)
    assert float(family.sigma) == pytest.approx(model.field("y").scale, rel=1e-6)
    with torch.no_grad():
        family.log_sigma.fill_(0.0)  # as if learned: a second standardise keeps it
    model.standardise(data)
    assert float(family.sigma) == 1.0
    given = item_value_model(LearnedGaussian(2.0))
    given.standardise(data)
    assert float(given.field("y").family.sigma) == pytest.approx(2.0)


def test_gamma_read_out_in_standardised_units_scales_the_rate():
    # Gamma ignored the standardisation: its rate stayed in the data's units (a mean capped
    # at alpha / floor; -7.4 nats where -1.9 was reachable at y ~ 1e5).
    from efa.core.families import Gamma
    family = Gamma()
    z = torch.randn(7, 2, dtype=torch.float64)
    y = torch.rand(7, dtype=torch.float64) + 0.1
    for scale in (1e-5, 1.0, 1e5):
        got = family.log_prob(scale * y, family.link_standardised(z, 3.0, scale))
        torch.testing.assert_close(got, family.log_prob(y, family.link(z)) - math.log(scale))
