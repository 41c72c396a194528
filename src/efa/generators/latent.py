"""Exchangeable latent-variable generators and their Bayes predictors.

de Finetti (Prop. 3.1 of Zhang et al., "An analysis of attention via the lens of
exchangeability and latent variable models"): an exchangeable sequence is a mixture of i.i.d.
sequences, P(x¹..x^L) = ∫ Πₗ P(xˡ | z) P(z) dz. Each generator here draws one latent per
sequence and then the tokens i.i.d. given it, so the tokens of a sequence are exchangeable by
construction; a token is a covariate c ∈ R^d (an ``Attribute``, always observed) and a response
y (a ``Value``):

- :class:`LinearGaussian` (eq. 3.4): z ~ N(0, τ² I_d), y = z·c + ε, ε ~ N(0, σ²);
- :class:`GPLatent` (eq. 4.1 / App. B.1): f ~ GP(0, s² exp(−‖c − c'‖²/(2ℓ²))), y = f(c) + ε;
- :class:`ExpFamilyLatent`: z ~ N(0, τ² I_d), y ~ Bernoulli(sigmoid(z·c + b)) or
  Poisson(exp(z·c + b)).

``sample(n, length)`` returns a :class:`LatentSample` whose ``sequences`` go straight into
``efa.fit`` with ``fields()`` (whose y is left unstandardised, loc 0 and scale 1: the models'
responses are on unit scale already, and the experiments' numbers stay independent of the
training split's moments); ``bayes(sequences)`` is the Bayes-optimal prediction of each
token's response from the others of its sequence (bidirectional: all others, the masked
pseudo-likelihood's conditional; unidirectional: the earlier ones), i.e. the best any EFA can
do on this data: the posterior predictive mean and log-density at every predicted position.

Bayes references: closed form for the Gaussian models (a Gaussian process: the leave-one-out
identities of Rasmussen & Williams eq. 5.12, equal to CME attention with values y, see
:func:`efa.core.kernels.cme.cme`); for the exponential-family emissions a Laplace approximation of
p(z | context) refined by self-normalised importance sampling with the Laplace Gaussian (inflated)
as proposal (``method="laplace"`` gives the Laplace answer alone).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from efa.core.data import Sequences
from efa.core.families import Bernoulli, Gaussian, Poisson, poisson_counts
from efa.core.fields import Attribute, Field, Value

__all__ = [
    "BayesPrediction",
    "ExpFamilyLatent",
    "GPLatent",
    "LatentSample",
    "LinearGaussian",
]

COVARIATES = ("normal", "circle", "uniform")
DIRECTIONS = ("bidirectional", "unidirectional")


@dataclass
class LatentSample:
    """One draw: ``sequences`` (fields ``c`` [N, I, d] and ``y`` [N, I]), the per-sequence
    ``latent`` (z [N, d], or f at the tokens [N, I] for the GP), ``signal`` = E[y | latent, c]
    at every token [N, I] (0 on padding) and the ``generator`` that made it."""

    sequences: Sequences
    latent: Tensor
    signal: Tensor
    generator: object


@dataclass
class BayesPrediction:
    """Posterior predictive ``mean`` and ``log_density`` (log p(y_i | context), full, with the
    base measure) [N, I]; NaN where a position is not predicted. ``ess``: the smallest
    effective sample size of the importance sampler and ``mean_se`` [N, I] the Monte Carlo
    standard error of its ``mean`` (delta method); None for closed forms."""

    mean: Tensor
    log_density: Tensor
    ess: float | None = None
    mean_se: Tensor | None = None



def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed))


def _check_size(n: int, length: int, min_length: int | None) -> int:
    n, length = positive_int("n", n), positive_int("length", length)
    lo = length if min_length is None else min_length
    if not isinstance(lo, int) or not 1 <= lo <= length:
        raise ValueError(f"min_length must be an integer in 1..{length}, got {min_length!r}")
    return lo


def _covariates(kind: str, n: int, length: int, dim: int, g) -> Tensor:
    if kind == "normal":
        return torch.randn(n, length, dim, generator=g, dtype=torch.float64)
    if kind == "uniform":
        return torch.rand(n, length, dim, generator=g, dtype=torch.float64) * 2 - 1
    if kind == "circle":
        if dim != 2:
            raise ValueError(f"covariates='circle' needs dim=2, got {dim}")
        theta = torch.rand(n, length, generator=g, dtype=torch.float64) * 2 * math.pi
        return torch.stack([theta.cos(), theta.sin()], -1)
    raise ValueError(f"covariates must be one of {COVARIATES}, got {kind!r}")


def _lengths(n: int, length: int, lo: int, g) -> Tensor:
    if lo == length:
        return torch.full((n,), length)
    return torch.randint(lo, length + 1, (n,), generator=g)


def _draw_linear(gen, n, length, seed, min_length, covariates):
    """The random generator, latents z ~ N(0, prior_var·I), covariates and lengths shared by
    the linear-latent generators (in this order: same seed, same draws)."""
    lo = _check_size(n, length, min_length)
    g = _generator(seed)
    z = torch.randn(n, gen.dim, generator=g, dtype=torch.float64) * math.sqrt(gen.prior_var)
    c = _covariates(gen.covariates, n, length, gen.dim, g)
    if covariates is not None:
        c = _given_covariates(covariates, n, length, gen.dim)
    return g, z, c, _lengths(n, length, lo, g)


def _given_covariates(covariates, n: int, length: int, dim: int) -> Tensor:
    """The caller's covariates as float64 [n, length, dim] (broadcast), finite."""
    c = torch.as_tensor(covariates).double()
    try:
        c = c.expand(n, length, dim).clone()
    except RuntimeError:
        raise ValueError(f"covariates must broadcast to [n, length, dim] = [{n}, {length}, "
                         f"{dim}], got shape {tuple(c.shape)}") from None
    if not torch.isfinite(c).all():
        raise ValueError("covariates must be finite (they have NaN or inf)")
    return c


def _pack(c, y, signal, lengths, y_dtype=torch.float32):
    """The Sequences of (c, y) and the signal, with their padding zeroed."""
    valid = torch.arange(y.shape[1]) < lengths[:, None]
    y, signal = torch.where(valid, y, 0.0), torch.where(valid, signal, 0.0)
    c = torch.where(valid[..., None], c, 0.0)
    return Sequences({"c": c.float(), "y": y.to(y_dtype)}, lengths), signal


def _check_design(dim, covariates: str) -> None:
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise ValueError(f"dim must be a positive integer, got {dim!r}")
    if covariates not in COVARIATES:
        raise ValueError(f"covariates must be one of {COVARIATES}, got {covariates!r}")


def _check_positive(**values) -> None:
    for name, v in values.items():
        if not (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                and v > 0):
            raise ValueError(f"{name} must be a positive finite number, got {v!r}")


def _context(data: Sequences, direction: str) -> tuple[Tensor, Tensor]:
    """(predicted [N, I], context [N, I(target), I(context)]): which observed tokens each
    predicted token is conditioned on (observed, real, j ≠ i; j < i unidirectionally)."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    pred = data.predicted("y")
    seen = data.valid() & data.observed.get("y", data.valid())
    n = data.max_len
    ctx = seen[:, None, :] & ~torch.eye(n, dtype=torch.bool)
    if direction == "unidirectional":
        ctx = ctx & torch.ones(n, n, dtype=torch.bool).tril(-1)
    return pred, ctx


def positive_int(name: str, v: object) -> int:
    """``v`` if it is an integer >= 1, else an error naming ``name``."""
    if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")
    return int(v)


def _check_data(data: Sequences, dim: int, support=None) -> tuple[Tensor, Tensor]:
    """Covariates and responses as float64, after checking their shapes and that every real,
    observed value is finite (and in ``support``: (test, description), if given)."""
    for name in ("c", "y"):
        if name not in data.fields:
            raise KeyError(f"the sequences need fields 'c' and 'y' (have {list(data.fields)})")
    c, y = data.fields["c"].double(), data.fields["y"].double()
    if c.dim() != 3 or c.shape[-1] != dim:
        raise ValueError(f"field 'c' must have shape [N, I, {dim}], got {tuple(c.shape)}")
    seen = data.valid() & data.observed.get("y", data.valid())
    checks = [("c", ~torch.isfinite(c).all(-1) & data.valid(), "a finite vector"),
              ("y", ~torch.isfinite(y) & seen, "a finite number")]
    if support is not None:
        ok, what = support
        checks.append(("y", torch.isfinite(y) & ~ok(y) & seen, what))
    for name, bad, what in checks:
        if bad.any():
            n, i = (int(v) for v in bad.nonzero()[0])
            value = (c if name == "c" else y)[n, i]
            raise ValueError(f"field {name!r}, sequence {n}, position {i}: expected {what}, got "
                             f"{value.tolist()}")
    return c, y


def _nan_outside(values: Tensor, mask: Tensor) -> Tensor:
    return torch.where(mask, values, torch.full_like(values, float("nan")))



def _gaussian_loo(cov: Tensor, y: Tensor, seen: Tensor, direction: str, noise_var: float):
    """Posterior predictive mean and variance [N, I] of every observed y_i given the other
    observed tokens (bidirectional) or the earlier ones (unidirectional), for
    y ~ N(0, cov + σ²I) per sequence. One Cholesky factor per sequence of K (unobserved tokens
    decoupled): bidirectionally μ_i = y_i − [K⁻¹y]_i / [K⁻¹]_ii, v_i = 1 / [K⁻¹]_ii (Rasmussen &
    Williams eq. 5.12); unidirectionally, with K = LLᵀ and e = L⁻¹y, μ_i = y_i − L_ii e_i and
    v_i = L_ii² (the sequential conditionals of the factor)."""
    sf = seen.to(cov.dtype)
    eye = torch.eye(y.shape[-1], dtype=cov.dtype)
    k = (cov + noise_var * eye) * sf[..., :, None] * sf[..., None, :] + torch.diag_embed(1 - sf)
    y = y * sf
    chol = torch.linalg.cholesky(k)
    if direction == "bidirectional":
        inv = torch.cholesky_inverse(chol)
        d = torch.diagonal(inv, dim1=-2, dim2=-1)
        return y - (inv @ y[..., None])[..., 0] / d, 1 / d
    e = torch.linalg.solve_triangular(chol, y[..., None], upper=False)[..., 0]
    diag = torch.diagonal(chol, dim1=-2, dim2=-1)
    return y - diag * e, diag**2


def _gaussian_prediction(cov, y, data: Sequences, direction: str, noise_var) -> BayesPrediction:
    pred, _ = _context(data, direction)
    seen = data.valid() & data.observed.get("y", data.valid())
    mean, var = _gaussian_loo(cov, y, seen, direction, noise_var)
    logp = -0.5 * (math.log(2 * math.pi) + var.log() + (y - mean) ** 2 / var)
    return BayesPrediction(_nan_outside(mean, pred), _nan_outside(logp, pred))


class _GaussianLatent:
    """What the Gaussian-response generators share: their fields and Bayes predictor."""

    dim: int
    noise_var: float

    def fields(self, dim: int = 16, hidden: int = 32) -> list[Field]:
        """efa fields for the generated sequences (covariate c, response y), at width ``dim``."""
        return [Attribute("c", size=self.dim, dim=dim, hidden=hidden),
                Value("y", Gaussian(math.sqrt(self.noise_var)), dim=dim, hidden=hidden,
                      loc=0.0, scale=1.0)]

    def bayes(self, data: Sequences, direction: str = "bidirectional") -> BayesPrediction:
        """The Bayes-optimal prediction of every token of ``data`` from the others."""
        c, y = _check_data(data, self.dim)
        cov = self.covariance(c)  # type: ignore[attr-defined]  # each subclass's kernel
        return _gaussian_prediction(cov, y, data, direction, self.noise_var)


@dataclass(frozen=True)
class LinearGaussian(_GaussianLatent):
    """y = z·c + ε with z ~ N(0, prior_var·I_dim) per sequence and ε ~ N(0, noise_var)
    (Sec. 3.1, eq. 3.4, one response). The Bayes predictor of y at covariate c given the
    context (C, y) is Bayesian linear regression, z̄·c with z̄ = Cᵀ(CCᵀ + (σ²/τ²)I)⁻¹y: CME
    attention with the linear similarity and ridge σ²/τ² (the paper's z̄(X))."""

    dim: int = 2
    prior_var: float = 1.0
    noise_var: float = 0.25
    covariates: str = "normal"

    def __post_init__(self):
        _check_positive(prior_var=self.prior_var, noise_var=self.noise_var)
        _check_design(self.dim, self.covariates)

    @property
    def ridge(self) -> float:
        """The CME ridge λ = σ²/τ² of the Bayes predictor (linear similarity, bandwidth 1)."""
        return self.noise_var / self.prior_var

    def sample(self, n: int, length: int, seed: int = 0, min_length: int | None = None,
               covariates: Tensor | None = None) -> LatentSample:
        """``n`` sequences of ``length`` tokens (lengths uniform in min_length..length when
        given; padding is zero). ``covariates`` [n, length, dim] overrides the drawn ones."""
        g, z, c, lengths = _draw_linear(self, n, length, seed, min_length, covariates)
        signal = (c * z[:, None, :]).sum(-1)
        y = signal + torch.randn(n, length, generator=g, dtype=torch.float64) * math.sqrt(
            self.noise_var)
        data, signal = _pack(c, y, signal, lengths)
        return LatentSample(data, z, signal, self)

    def covariance(self, c: Tensor) -> Tensor:
        """Cov(f(c_i), f(c_j)) = τ² c_i·c_j [..., I, I]."""
        return self.prior_var * c @ c.transpose(-1, -2)

    def posterior_mean(self, c: Tensor, y: Tensor) -> Tensor:
        """E[z | C, y] [..., dim] for one context (C [..., L, dim], y [..., L]): the paper's
        z̄(X) = yᵀ(CCᵀ + λI)⁻¹C, λ = σ²/τ² (Sec. 3.1)."""
        c, y = c.double(), y.double()
        gram = c @ c.transpose(-1, -2) + self.ridge * torch.eye(c.shape[-2], dtype=c.dtype)
        return (torch.linalg.solve(gram, y[..., None]).transpose(-1, -2) @ c)[..., 0, :]


@dataclass(frozen=True)
class GPLatent(_GaussianLatent):
    """y = f(c) + ε with f ~ GP(0, signal_var·exp(−‖c − c'‖²/(2·lengthscale²))) per sequence
    and ε ~ N(0, noise_var) (eq. 4.1, App. B.1). The Bayes predictor is the GP posterior mean,
    i.e. CME attention with the RBF similarity, bandwidth γ = lengthscale² and ridge
    λ = noise_var / signal_var on values y."""

    dim: int = 1
    lengthscale: float = 0.5
    signal_var: float = 1.0
    noise_var: float = 0.1
    covariates: str = "uniform"

    def __post_init__(self):
        _check_positive(lengthscale=self.lengthscale, signal_var=self.signal_var,
                        noise_var=self.noise_var)
        _check_design(self.dim, self.covariates)

    @property
    def ridge(self) -> float:
        return self.noise_var / self.signal_var

    @property
    def bandwidth(self) -> float:
        return self.lengthscale**2

    def covariance(self, c: Tensor) -> Tensor:
        """Cov(f(c_i), f(c_j)) [..., I, I] of the GP at the inputs ``c`` [..., I, dim]."""
        sq = ((c[..., :, None, :] - c[..., None, :, :]) ** 2).sum(-1)
        return self.signal_var * torch.exp(-sq / (2 * self.lengthscale**2))

    def sample(self, n: int, length: int, seed: int = 0, min_length: int | None = None,
               covariates: Tensor | None = None) -> LatentSample:
        """``n`` sequences of ``length`` points, each from its own draw of f (seeded)."""
        lo = _check_size(n, length, min_length)
        g = _generator(seed)
        c = _covariates(self.covariates, n, length, self.dim, g)
        if covariates is not None:
            c = _given_covariates(covariates, n, length, self.dim)
        lengths = _lengths(n, length, lo, g)
        # f at the tokens: a joint Gaussian draw (jitter 1e-9·s² for duplicate covariates).
        cov = self.covariance(c) + 1e-9 * self.signal_var * torch.eye(length, dtype=c.dtype)
        f = (torch.linalg.cholesky(cov) @ torch.randn(n, length, 1, generator=g,
                                                        dtype=torch.float64))[..., 0]
        y = f + torch.randn(n, length, generator=g, dtype=torch.float64) * math.sqrt(
            self.noise_var)
        data, f = _pack(c, y, f, lengths)
        return LatentSample(data, f, f, self)



@dataclass(frozen=True)
class ExpFamilyLatent:
    """y ~ Bernoulli(sigmoid(η)) or Poisson(exp(η)) with η = z·c + offset and
    z ~ N(0, prior_var·I_dim) per sequence: the exponential-family emissions of the EFA library
    with a latent natural parameter. No closed-form posterior: :meth:`bayes` uses Laplace's
    approximation refined by importance sampling (``samples`` draws per prediction)."""

    family: str = "bernoulli"
    dim: int = 2
    prior_var: float = 1.0
    offset: float = 0.0
    covariates: str = "normal"
    samples: int = 2000

    def __post_init__(self):
        if self.family not in ("bernoulli", "poisson"):
            raise ValueError(f"family must be 'bernoulli' or 'poisson', got {self.family!r}")
        _check_positive(prior_var=self.prior_var)
        if isinstance(self.offset, bool) or not isinstance(self.offset, int | float) or \
                not math.isfinite(self.offset):
            raise ValueError(f"offset must be finite, got {self.offset!r}")
        _check_design(self.dim, self.covariates)
        if not isinstance(self.samples, int) or self.samples < 10:
            raise ValueError(f"samples must be an integer >= 10, got {self.samples!r}")

    def efa_family(self) -> Bernoulli | Poisson:
        """The efa family of the emissions."""
        return Bernoulli() if self.family == "bernoulli" else Poisson()

    def fields(self, dim: int = 16, hidden: int = 32) -> list[Field]:
        """efa fields for the generated sequences, at width ``dim``."""
        return [Attribute("c", size=self.dim, dim=dim, hidden=hidden),
                Value("y", self.efa_family(), dim=dim, hidden=hidden, loc=0.0, scale=1.0)]

    def mean(self, eta: Tensor) -> Tensor:
        """The emissions' mean given the latent natural parameter."""
        return torch.sigmoid(eta) if self.family == "bernoulli" else torch.exp(eta)

    def log_density(self, y: Tensor, eta: Tensor) -> Tensor:
        """log p(y | latent) of the emissions."""
        if self.family == "bernoulli":
            return y * eta - torch.nn.functional.softplus(eta)
        return y * eta - torch.exp(eta) - torch.lgamma(y + 1)

    def _variance(self, eta: Tensor) -> Tensor:
        m = self.mean(eta)
        return m * (1 - m) if self.family == "bernoulli" else m

    def sample(self, n: int, length: int, seed: int = 0, min_length: int | None = None,
               covariates: Tensor | None = None) -> LatentSample:
        """``n`` sequences of ``length`` tokens, one latent per sequence (seeded)."""
        g, z, c, lengths = _draw_linear(self, n, length, seed, min_length, covariates)
        eta = (c * z[:, None, :]).sum(-1) + self.offset
        signal = self.mean(eta)
        if self.family == "bernoulli":
            y = torch.bernoulli(signal, generator=g)
        else:
            y = poisson_counts(signal, g, "Poisson").double()
        data, signal = _pack(c, y, signal, lengths, torch.long)
        return LatentSample(data, z, signal, self)

    def laplace(self, c: Tensor, y: Tensor, ctx: Tensor,
                steps: int = 50) -> tuple[Tensor, Tensor]:
        """Mode and covariance of the Laplace approximation of p(z | context) for every
        predicted token: c [N, I, d], y [N, I], ctx [N, I(target), I(context)] →
        (mode [N, I, d], cov [N, I, d, d]). Newton's method on the (concave) log posterior."""
        d = self.dim
        cf = ctx.to(c.dtype)
        z = c.new_zeros(*ctx.shape[:2], d)
        eye = torch.eye(d, dtype=c.dtype)
        for _ in range(steps):
            eta = (z[:, :, None, :] * c[:, None, :, :]).sum(-1) + self.offset  # [N, I, J]
            resid = (y[:, None, :] - self.mean(eta)) * cf
            grad = (resid[..., None] * c[:, None]).sum(-2) - z / self.prior_var
            w = self._variance(eta) * cf
            hess = (w[..., None, None] * c[:, None, :, :, None] * c[:, None, :, None, :]).sum(
                -3) + eye / self.prior_var
            step = torch.linalg.solve(hess, grad[..., None])[..., 0]
            z = z + step
            if float(step.abs().max()) < 1e-12:
                break
        eta = (z[:, :, None, :] * c[:, None, :, :]).sum(-1) + self.offset
        w = self._variance(eta) * cf
        hess = (w[..., None, None] * c[:, None, :, :, None] * c[:, None, :, None, :]).sum(
            -3) + eye / self.prior_var
        return z, torch.linalg.inv(hess)

    def bayes(self, data: Sequences, direction: str = "bidirectional", method: str = "importance",
              seed: int = 0) -> BayesPrediction:
        """Posterior predictive of each predicted y_i given its context. ``method``:
        'importance' (default: Laplace proposal, covariance inflated 1.5², self-normalised
        weights, ``samples`` draws; the reported ``ess`` is the smallest effective sample size)
        or 'laplace' (Gaussian posterior: for Bernoulli the probit approximation of
        E[sigmoid], for Poisson E[exp(η)] exactly under it; log-density by 1-D quadrature)."""
        if method not in ("importance", "laplace"):
            raise ValueError(f"method must be 'importance' or 'laplace', got {method!r}")
        support = ((lambda v: (v == 0) | (v == 1), "0 or 1 (Bernoulli)")
                   if self.family == "bernoulli" else
                   (lambda v: (v >= 0) & (v == v.round()), "a count 0, 1, 2, … (Poisson)"))
        c, y = _check_data(data, self.dim, support)
        pred, ctx = _context(data, direction)
        g = _generator(seed)
        # Chunks of sequences: the sampler holds [chunk, I, samples, I] numbers.
        per = max(1, int(2e7 // (data.max_len**2 * (self.samples if method == "importance"
                                                     else 40))))
        parts = [self._bayes(c[a : a + per], y[a : a + per], pred[a : a + per],
                             ctx[a : a + per], method, g) for a in range(0, len(data), per)]
        mean = torch.cat([p[0] for p in parts])
        logp = torch.cat([p[1] for p in parts])
        ess = min((p[2] for p in parts if p[2] is not None), default=None)
        se = None if method == "laplace" else _nan_outside(torch.cat([p[3] for p in parts]), pred)
        return BayesPrediction(_nan_outside(mean, pred), _nan_outside(logp, pred), ess, se)

    def _bayes(self, c, y, pred, ctx, method, g):
        mode, cov = self.laplace(c, y, ctx)
        eta_mean = (mode * c).sum(-1) + self.offset
        if method == "laplace":
            var = (c[..., None, :] @ cov @ c[..., :, None])[..., 0, 0]
            nodes, weights = _gauss_hermite(40, c.dtype)
            eta = eta_mean[..., None] + var.sqrt()[..., None] * nodes  # [N, I, Q]
            mean = (self.mean(eta) * weights).sum(-1)
            logp = torch.logsumexp(self.log_density(y[..., None], eta) + weights.log(), -1)
            return mean, logp, None, None
        s = self.samples
        chol = torch.linalg.cholesky(cov * 1.5**2)
        eps = torch.randn(s, self.dim, generator=g, dtype=c.dtype)
        z = mode[..., None, :] + (chol[..., None, :, :] @ eps[..., None])[..., 0]  # [N, I, S, d]
        log_q = -0.5 * (eps**2).sum(-1) - torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(
            -1)[..., None]
        eta = (z[:, :, :, None, :] * c[:, None, None, :, :]).sum(-1) + self.offset  # [N,I,S,J]
        loglik = (self.log_density(y[:, None, None, :], eta) * ctx[:, :, None, :]).sum(-1)
        log_prior = -0.5 * (z**2).sum(-1) / self.prior_var
        logw = loglik + log_prior - log_q
        logw = torch.where(pred[..., None], logw, 0.0)
        w = torch.softmax(logw, -1)
        eta_i = (z * c[:, :, None, :]).sum(-1) + self.offset  # [N, I, S]
        mean = (w * self.mean(eta_i)).sum(-1)
        logp = torch.logsumexp(torch.log(w) + self.log_density(y[..., None], eta_i), -1)
        ess = 1 / (w**2).sum(-1)
        se = ((w**2) * (self.mean(eta_i) - mean[..., None]) ** 2).sum(-1).sqrt()
        return mean, logp, (float(ess[pred].min()) if pred.any() else None), se


def _gauss_hermite(order: int, dtype) -> tuple[Tensor, Tensor]:
    """Nodes and weights for E[f(X)], X ~ N(0, 1)."""
    import numpy as np

    x, w = np.polynomial.hermite_e.hermegauss(order)
    return (torch.as_tensor(x, dtype=dtype), torch.as_tensor(w / w.sum(), dtype=dtype))
