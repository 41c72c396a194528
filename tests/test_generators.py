"""The exchangeable latent-variable generators (efa.generators.latent): exchangeability, and
Bayes predictors that are what they claim (against Monte Carlo and against CME attention)."""

from __future__ import annotations

import math

import pytest
import torch

import efa
from efa.core.data import Sequences
from efa.core.kernels.cme import cme
from efa.generators import ExpFamilyLatent, GPLatent, LinearGaussian

D = torch.float64


def _z(diff: torch.Tensor) -> float:
    """|mean| / standard error of paired differences."""
    return float(diff.mean().abs() / (diff.std() / math.sqrt(len(diff))))


def _asymmetric_statistics(c: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    """Statistics of (token 0, token 1, token 2) that change when the tokens are permuted."""
    y = y.double()
    return [y[:, 0], y[:, 0] * y[:, 1] ** 2, y[:, 0] * c[:, 1, 0], (y[:, 0] - y[:, 2]) ** 3,
            y[:, 1] * c[:, 0, -1] * c[:, 2, 0]]


GENERATORS = [LinearGaussian(dim=2), GPLatent(dim=1),
              ExpFamilyLatent("bernoulli", dim=2), ExpFamilyLatent("poisson", dim=2,
                                                                    prior_var=0.5)]


@pytest.mark.parametrize("gen", GENERATORS, ids=lambda g: type(g).__name__ + getattr(
    g, "family", ""))
def test_permuting_tokens_leaves_the_distribution_unchanged(gen):
    """E[T(x) − T(πx)] = 0 for statistics T that are not symmetric: paired z-scores < 4.5.
    The same test rejects a deliberately non-exchangeable variant (position 0 shifted)."""
    s = gen.sample(20000, 3, seed=1)
    c, y = s.sequences.fields["c"].double(), s.sequences.fields["y"].double()
    perm = torch.tensor([2, 0, 1])
    for t, tp in zip(_asymmetric_statistics(c, y), _asymmetric_statistics(c[:, perm], y[:, perm]),
                     strict=True):
        assert _z(t - tp) < 4.5
    shifted = y.clone()
    shifted[:, 0] += 0.1 * y.std()
    assert _z(shifted[:, 0] - shifted[:, perm][:, 0]) > 4.5  # the check can fail


@pytest.mark.parametrize("direction", ["bidirectional", "unidirectional"])
@pytest.mark.parametrize("gen", [LinearGaussian(dim=2, prior_var=2.0),
                                 GPLatent(dim=2, lengthscale=0.8, noise_var=0.2)],
                         ids=["linear", "gp"])
def test_gaussian_bayes_predictor_is_cme_attention(gen, direction):
    """The closed-form leave-one-out predictive equals CME attention over the context tokens
    (linear similarity with λ = σ²/τ²; RBF with γ = ℓ², λ = σ²/s²), padding included."""
    s = gen.sample(4, 6, seed=2, min_length=2)
    bayes = gen.bayes(s.sequences, direction)
    c, y = s.sequences.fields["c"].double(), s.sequences.fields["y"].double()
    kind, bw = ("linear", 1.0) if isinstance(gen, LinearGaussian) else ("rbf", gen.bandwidth)
    for b in range(4):
        n = int(s.sequences.lengths[b])
        for i in range(n):
            ctx = [j for j in range(n) if j != i and (direction == "bidirectional" or j < i)]
            want = cme(c[b, i][None], c[b, ctx], y[b, ctx, None], gen.ridge, kind, bw)
            assert abs(float(want) - float(bayes.mean[b, i])) < 1e-10
        assert torch.isnan(bayes.mean[b, n:]).all()


def _importance_from_prior(gen, c, y, i, draws, g):
    """E[y_i | y_-i] by importance sampling from the prior (weights = likelihood of the
    context), with its delta-method standard error."""
    others = [j for j in range(len(y)) if j != i]
    if isinstance(gen, LinearGaussian):
        z = torch.randn(draws, gen.dim, generator=g, dtype=D) * math.sqrt(gen.prior_var)
        f = z @ c.T
    else:
        cov = gen.covariance(c) + 1e-10 * torch.eye(len(y), dtype=D)
        f = torch.randn(draws, len(y), generator=g, dtype=D) @ torch.linalg.cholesky(cov).T
    logw = -0.5 * ((y[others] - f[:, others]) ** 2).sum(-1) / gen.noise_var
    w = torch.softmax(logw, 0)
    est = (w * f[:, i]).sum()
    se = ((w**2) * (f[:, i] - est) ** 2).sum().sqrt()
    return float(est), float(se)


@pytest.mark.parametrize("gen", [LinearGaussian(dim=2, noise_var=0.3),
                                 GPLatent(dim=1, noise_var=0.3)], ids=["linear", "gp"])
def test_gaussian_bayes_predictor_against_monte_carlo(gen):
    s = gen.sample(1, 4, seed=3)
    bayes = gen.bayes(s.sequences)
    c, y = s.sequences.fields["c"][0].double(), s.sequences.fields["y"][0].double()
    g = torch.Generator().manual_seed(4)
    for i in range(4):
        est, se = _importance_from_prior(gen, c, y, i, 200_000, g)
        assert abs(est - float(bayes.mean[0, i])) < 4.5 * se + 1e-4, (i, est, se)


@pytest.mark.parametrize("family", ["bernoulli", "poisson"])
def test_exp_family_bayes_predictor_against_rejection_sampling(family):
    """Exact Monte Carlo of E[y_i | y_-i]: draw z from the prior and the context responses
    given z, keep the draws that reproduce the observed context exactly."""
    gen = ExpFamilyLatent(family, dim=2, prior_var=0.7, covariates="circle", samples=4000)
    s = gen.sample(2, 4, seed=2)
    bayes = gen.bayes(s.sequences)
    laplace = gen.bayes(s.sequences, method="laplace")
    assert bayes.ess > 500
    c, y = s.sequences.fields["c"].double(), s.sequences.fields["y"].double()
    g = torch.Generator().manual_seed(5)
    for b in range(2):
        z = torch.randn(200_000, 2, generator=g, dtype=D) * math.sqrt(gen.prior_var)
        eta = z @ c[b].T
        mean = gen.mean(eta)
        ys = torch.bernoulli(mean, generator=g) if family == "bernoulli" else torch.poisson(
            mean, generator=g)
        for i in range(4):
            others = [j for j in range(4) if j != i]
            keep = (ys[:, others] == y[b, others]).all(-1)
            mc = mean[keep, i]
            se = math.sqrt(float(mc.var()) / len(mc) + float(bayes.mean_se[b, i]) ** 2)
            assert abs(float(mc.mean()) - float(bayes.mean[b, i])) < 4.5 * se, (b, i)
            # Laplace alone is an approximation: close, not exact.
            assert abs(float(laplace.mean[b, i]) - float(bayes.mean[b, i])) < 0.15


@pytest.mark.parametrize("gen", GENERATORS[:3], ids=["linear", "gp", "bernoulli"])
def test_bayes_predictions_permute_with_the_tokens(gen):
    s = gen.sample(3, 5, seed=6)
    perm = torch.tensor([3, 0, 4, 1, 2])
    data = s.sequences
    moved = Sequences({k: v[:, perm] for k, v in data.fields.items()}, data.lengths)
    a, b = gen.bayes(data).mean, gen.bayes(moved).mean
    torch.testing.assert_close(a[:, perm], b, rtol=0, atol=1e-8)


def test_samples_train_an_efa_model():
    gen = GPLatent()
    train, val = gen.sample(64, 8, seed=0).sequences, gen.sample(16, 8, seed=1).sequences
    model = efa.EFA(efa.EFAConfig(gen.fields(dim=8, hidden=16), num_layers=1, num_heads=1,
                                  attention="cme"))
    efa.fit(model, train, val, max_epochs=2, progress=False)
    assert math.isfinite(efa.mean_squared_error(model, val, "y"))
    bayes = gen.bayes(val)
    m = val.predicted("y")
    assert torch.isfinite(bayes.mean[m]).all() and torch.isfinite(bayes.log_density[m]).all()


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="noise_var"):
        LinearGaussian(noise_var=0)
    with pytest.raises(ValueError, match="circle"):
        LinearGaussian(dim=3, covariates="circle").sample(2, 3)
    with pytest.raises(ValueError, match="min_length"):
        GPLatent().sample(2, 3, min_length=5)
    with pytest.raises(ValueError, match="family"):
        ExpFamilyLatent("gamma")
    with pytest.raises(ValueError, match="direction"):
        GPLatent().bayes(GPLatent().sample(2, 3).sequences, "sideways")
    for gen in GENERATORS:  # int(1.5) would have seeded 1 without a word
        with pytest.raises(ValueError, match="seed must be an integer, got 1.5"):
            gen.sample(2, 3, seed=1.5)
    with pytest.raises(ValueError, match="seed must be an integer, got 1.5"):
        ExpFamilyLatent("poisson", dim=2).bayes(
            ExpFamilyLatent("poisson", dim=2).sample(2, 3).sequences, seed=1.5)


def _teacher():
    from efa.core.families import Poisson
    from efa.core.fields import Category, Value
    from efa.generators import attention_teacher

    return attention_teacher([Category("item", 8), Value("count", Poisson())], max_len=5)


@pytest.mark.parametrize("call, message", [
    (lambda g: g.sample(_teacher(), 0), "n must be a positive integer, got 0"),
    (lambda g: g.sample(_teacher(), 2, length=0), "length must be a positive integer, got 0"),
    (lambda g: g.sample(_teacher(), 2, batch_size=0), "batch_size must be a positive integer"),
    (lambda g: g.attention_teacher([], max_len=5), "at least one field"),
    (lambda g: g.sample_note(g.LITERAL, 0, 0), "num must be a positive integer, got 0"),
    (lambda g: g.sample_note(g.LITERAL, 1.5, 0), "num must be a positive integer, got 1.5"),
    (lambda g: g.sample_tnp(g.TNPGP(), 0, 0), "num_batches must be a positive integer"),
    (lambda g: g.sample_tnp(g.TNPGP(), 1, 0, sizes=(0, 5)), r"sizes\[0\] \(context points\)"),
    (lambda g: g.TNPGP(batch_size=0), "batch_size must be a positive integer"),
    (lambda g: g.TNPGP(max_num_points=5), "max_num_points must be >= 7"),
    (lambda g: g.LinearGaussian(dim=2).sample(0, 5), "n must be a positive integer"),
])
def test_generators_refuse_empty_and_degenerate_sizes(call, message):
    from efa import generators

    with pytest.raises(ValueError, match=message):
        call(generators)


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), float("inf")])
def test_teacher_strength_must_be_positive_and_finite(value):
    from efa.core.fields import Category
    from efa.generators import attention_teacher

    with pytest.raises(ValueError, match="strength must be a positive finite number"):
        attention_teacher([Category("item", 8)], max_len=5, strength=value)


def test_bayes_predictors_refuse_values_outside_the_support():
    import torch

    from efa.core.data import Sequences
    from efa.generators import ExpFamilyLatent, GPLatent

    for gen, value, message in ((ExpFamilyLatent("bernoulli", dim=2), 5.0, "0 or 1"),
                                (ExpFamilyLatent("poisson", dim=2), 1.5, "a count"),
                                (ExpFamilyLatent("poisson", dim=2), -1.0, "a count"),
                                (GPLatent(dim=1), float("nan"), "a finite number")):
        s = gen.sample(3, 4, seed=0).sequences
        y = s.fields["y"].double()  # (Poisson counts come as integers)
        y[1, 2] = value
        with pytest.raises(ValueError, match=f"field 'y', sequence 1, position 2: expected "
                                             f"{message}"):
            gen.bayes(Sequences({"c": s.fields["c"], "y": y}, s.lengths))
    ok = ExpFamilyLatent("poisson", dim=2).sample(3, 4, seed=0).sequences
    assert torch.isfinite(ExpFamilyLatent("poisson", dim=2).bayes(ok).mean).any()
