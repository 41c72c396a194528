"""Exchangeable latent-variable generators and their Bayes predictors.

de Finetti (Prop. 3.1 of Zhang et al., "An analysis of attention via the lens of
exchangeability and latent variable models"): an exchangeable sequence is a mixture of i.i.d.
sequences, P(x¹..x^L) = ∫ Πₗ P(xˡ | z) P(z) dz. Each generator here draws one latent per
sequence and then the tokens i.i.d. given it, so the tokens of a sequence are exchangeable by
construction; a token is a covariate c ∈ R^d (an ``Attribute``, always observed) and a response
y (a ``Value``):

- :class:`LinearGaussian` (eq. 3.4): z ~ N(0, τ² I_d), y = z·c + ε, ε ~ N(0, σ²);
- :class:`GPLatent` (eq. 4.1 / App. B.1): f ~ GP(0, s² exp(−‖c − c'‖²/(2ℓ²))), y = f(c) + ε;
- :class:`~efa.generators.emissions.ExpFamilyLatent` (in :mod:`efa.generators.emissions`):
  z ~ N(0, τ² I_d), y ~ Bernoulli(sigmoid(z·c + b)) or Poisson(exp(z·c + b)).

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
as proposal (``method="laplace"`` gives the Laplace answer alone). The draws and checks the
generators share are in :mod:`efa.generators.draws`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from efa.core.data import Sequences
from efa.core.families import Gaussian
from efa.core.fields import Attribute, Field, Value
from efa.deprecation import moved_out
from efa.generators.draws import (
    check_data,
    check_design,
    check_positive,
    context_masks,
    draw_design,
    draw_linear,
    nan_outside,
    pack,
)

__getattr__ = moved_out(__name__)  # names moved out: efa.deprecation.MOVED_NAMES

__all__ = [
    "BayesPrediction",
    "GPLatent",
    "LatentSample",
    "LinearGaussian",
]


@dataclass
class LatentSample:
    """One draw of a latent-variable generator.

    Parameters
    ----------
    sequences : Sequences
        Fields ``c`` (covariates, shape ``[N, I, d]``) and ``y`` (responses, shape ``[N, I]``),
        zero on padding.
    latent : torch.Tensor
        The per-sequence latent: z, shape ``[N, d]``, or for the GP f at the tokens, shape
        ``[N, I]``.
    signal : torch.Tensor, shape (N, I)
        E[y | latent, c] at every token (0 on padding).
    generator : object
        The generator that made it.
    """

    sequences: Sequences
    latent: Tensor
    signal: Tensor
    generator: object


@dataclass
class BayesPrediction:
    """The Bayes-optimal prediction of every predicted token of a batch of sequences.

    Parameters
    ----------
    mean : torch.Tensor, shape (N, I)
        The posterior predictive mean; NaN where a position is not predicted.
    log_density : torch.Tensor, shape (N, I)
        log p(y_i | context), full, with the base measure; NaN where a position is not
        predicted.
    ess : float or None, default None
        The smallest effective sample size of the importance sampler; None for closed forms.
    mean_se : torch.Tensor or None, default None
        Shape ``[N, I]``: the Monte Carlo standard error of ``mean`` (delta method); None for
        closed forms.
    """

    mean: Tensor
    log_density: Tensor
    ess: float | None = None
    mean_se: Tensor | None = None


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
    pred, _ = context_masks(data, direction)
    seen = data.predicted("y", scored=False)
    mean, var = _gaussian_loo(cov, y, seen, direction, noise_var)
    logp = -0.5 * (math.log(2 * math.pi) + var.log() + (y - mean) ** 2 / var)
    return BayesPrediction(nan_outside(mean, pred), nan_outside(logp, pred))


class _GaussianLatent:
    """What the Gaussian-response generators share: their fields and Bayes predictor."""

    dim: int
    noise_var: float

    def fields(self, dim: int = 16, hidden: int = 32) -> list[Field]:
        """Return efa fields for the generated sequences (covariate c, response y).

        Parameters
        ----------
        dim : int, default 16
            The fields' embedding width.
        hidden : int, default 32
            The width of their hidden layers.

        Returns
        -------
        list of Field
            ``Attribute("c")`` and ``Value("y")`` with a Gaussian family of the generator's
            noise scale, left unstandardised (loc 0, scale 1).
        """
        return [Attribute("c", size=self.dim, dim=dim, hidden=hidden),
                Value("y", Gaussian(math.sqrt(self.noise_var)), dim=dim, hidden=hidden,
                      loc=0.0, scale=1.0)]

    def bayes(self, data: Sequences, direction: str = "bidirectional") -> BayesPrediction:
        """Predict every token of ``data`` from the others, Bayes-optimally (closed form).

        Parameters
        ----------
        data : Sequences
            Fields ``c`` ``[N, I, dim]`` and ``y`` ``[N, I]``, e.g. a sample's ``sequences``.
        direction : {"bidirectional", "unidirectional"}, default "bidirectional"
            Condition each token on all other observed tokens, or on the earlier ones.

        Returns
        -------
        BayesPrediction
            The posterior predictive mean and log-density (``ess`` and ``mean_se`` None).

        Raises
        ------
        KeyError, ValueError
            For missing fields or data that are not finite (see
            :func:`efa.generators.draws.check_data`), or an unknown ``direction``.
        """
        c, y = check_data(data, self.dim)
        cov = self.covariance(c)  # type: ignore[attr-defined]  # each subclass's kernel
        return _gaussian_prediction(cov, y, data, direction, self.noise_var)


@dataclass(frozen=True)
class LinearGaussian(_GaussianLatent):
    """y = z·c + ε with z ~ N(0, prior_var·I_dim) per sequence and ε ~ N(0, noise_var).

    Sec. 3.1, eq. 3.4, one response. The Bayes predictor of y at covariate c given the context
    (C, y) is Bayesian linear regression, z̄·c with z̄ = Cᵀ(CCᵀ + (σ²/τ²)I)⁻¹y: CME attention
    with the linear similarity and ridge σ²/τ² (the paper's z̄(X)). ``fields()`` and
    ``bayes(data, direction)`` are those of every Gaussian-response generator.

    Parameters
    ----------
    dim : int, default 2
        The covariate dimension d.
    prior_var : float, default 1.0
        The prior variance τ² of each component of z, > 0.
    noise_var : float, default 0.25
        The noise variance σ², > 0.
    covariates : {"normal", "circle", "uniform"}, default "normal"
        The covariate distribution: standard normal, the unit circle (``dim=2``) or uniform on
        [-1, 1]^dim.

    Raises
    ------
    ValueError
        For a non-positive variance or dimension, or unknown covariates.
    """

    dim: int = 2
    prior_var: float = 1.0
    noise_var: float = 0.25
    covariates: str = "normal"

    def __post_init__(self):
        check_positive(prior_var=self.prior_var, noise_var=self.noise_var)
        check_design(self.dim, self.covariates)

    @property
    def ridge(self) -> float:
        """The CME ridge λ = σ²/τ² of the Bayes predictor (linear similarity, bandwidth 1)."""
        return self.noise_var / self.prior_var

    def sample(self, n: int, length: int, seed: int = 0, min_length: int | None = None,
               covariates: Tensor | None = None) -> LatentSample:
        """Draw ``n`` sequences of ``length`` tokens, one latent z per sequence.

        Parameters
        ----------
        n : int
            The number of sequences.
        length : int
            The (largest) sequence length.
        seed : int, default 0
            Seed of the draws (z, covariates, lengths, noise, in this order).
        min_length : int or None, default None
            When given, lengths are uniform in ``min_length..length``; padding is zero.
        covariates : torch.Tensor or None, default None
            Covariates ``[n, length, dim]`` (or broadcastable) that override the drawn ones.

        Returns
        -------
        LatentSample
            The sequences, z ``[n, dim]`` as ``latent`` and z·c as ``signal``.
        """
        g, z, c, lengths = draw_linear(self, n, length, seed, min_length, covariates)
        signal = (c * z[:, None, :]).sum(-1)
        y = signal + torch.randn(n, length, generator=g, dtype=torch.float64) * math.sqrt(
            self.noise_var)
        data, signal = pack(c, y, signal, lengths)
        return LatentSample(data, z, signal, self)

    def covariance(self, c: Tensor) -> Tensor:
        """Return Cov(f(c_i), f(c_j)) = τ² c_i·c_j of f(c) = z·c.

        Parameters
        ----------
        c : torch.Tensor, shape (..., I, dim)
            Covariates.

        Returns
        -------
        torch.Tensor, shape (..., I, I)
            The covariance matrix.
        """
        return self.prior_var * c @ c.transpose(-1, -2)

    def posterior_mean(self, c: Tensor, y: Tensor) -> Tensor:
        """Return E[z | C, y], the paper's z̄(X) = yᵀ(CCᵀ + λI)⁻¹C with λ = σ²/τ² (Sec. 3.1).

        Parameters
        ----------
        c : torch.Tensor, shape (..., L, dim)
            The context's covariates C.
        y : torch.Tensor, shape (..., L)
            The context's responses.

        Returns
        -------
        torch.Tensor, shape (..., dim)
            The posterior mean of z, float64.
        """
        c, y = c.double(), y.double()
        gram = c @ c.transpose(-1, -2) + self.ridge * torch.eye(c.shape[-2], dtype=c.dtype)
        return (torch.linalg.solve(gram, y[..., None]).transpose(-1, -2) @ c)[..., 0, :]


@dataclass(frozen=True)
class GPLatent(_GaussianLatent):
    """y = f(c) + ε with f ~ GP(0, signal_var·exp(−‖c − c'‖²/(2·lengthscale²))) per sequence.

    ε ~ N(0, noise_var) (eq. 4.1, App. B.1). The Bayes predictor is the GP posterior mean,
    i.e. CME attention with the RBF similarity, bandwidth γ = lengthscale² and ridge
    λ = noise_var / signal_var on values y. ``fields()`` and ``bayes(data, direction)`` are
    those of every Gaussian-response generator.

    Parameters
    ----------
    dim : int, default 1
        The covariate dimension.
    lengthscale : float, default 0.5
        The RBF kernel's lengthscale ℓ, > 0.
    signal_var : float, default 1.0
        The kernel's variance s², > 0.
    noise_var : float, default 0.1
        The noise variance σ², > 0.
    covariates : {"normal", "circle", "uniform"}, default "uniform"
        The covariate distribution: standard normal, the unit circle (``dim=2``) or uniform on
        [-1, 1]^dim.

    Raises
    ------
    ValueError
        For a non-positive scale or dimension, or unknown covariates.
    """

    dim: int = 1
    lengthscale: float = 0.5
    signal_var: float = 1.0
    noise_var: float = 0.1
    covariates: str = "uniform"

    def __post_init__(self):
        check_positive(lengthscale=self.lengthscale, signal_var=self.signal_var,
                       noise_var=self.noise_var)
        check_design(self.dim, self.covariates)

    @property
    def ridge(self) -> float:
        """The CME ridge λ = noise_var / signal_var of the Bayes predictor."""
        return self.noise_var / self.signal_var

    @property
    def bandwidth(self) -> float:
        """The RBF bandwidth γ = lengthscale² of the Bayes predictor."""
        return self.lengthscale**2

    def covariance(self, c: Tensor) -> Tensor:
        """Return Cov(f(c_i), f(c_j)) of the GP at the inputs ``c``.

        Parameters
        ----------
        c : torch.Tensor, shape (..., I, dim)
            Covariates.

        Returns
        -------
        torch.Tensor, shape (..., I, I)
            s² exp(−‖c_i − c_j‖²/(2ℓ²)).
        """
        sq = ((c[..., :, None, :] - c[..., None, :, :]) ** 2).sum(-1)
        return self.signal_var * torch.exp(-sq / (2 * self.lengthscale**2))

    def sample(self, n: int, length: int, seed: int = 0, min_length: int | None = None,
               covariates: Tensor | None = None) -> LatentSample:
        """Draw ``n`` sequences of ``length`` points, each from its own draw of f.

        Parameters
        ----------
        n : int
            The number of sequences.
        length : int
            The (largest) sequence length.
        seed : int, default 0
            Seed of the draws (covariates, lengths, f, noise, in this order).
        min_length : int or None, default None
            When given, lengths are uniform in ``min_length..length``; padding is zero.
        covariates : torch.Tensor or None, default None
            Covariates ``[n, length, dim]`` (or broadcastable) that override the drawn ones.

        Returns
        -------
        LatentSample
            The sequences, with f at the tokens ``[n, length]`` as both ``latent`` and
            ``signal``.
        """
        g, c, lengths = draw_design(self.covariates, n, length, self.dim, seed, min_length,
                                    covariates)
        # f at the tokens: a joint Gaussian draw (jitter 1e-9·s² for duplicate covariates).
        cov = self.covariance(c) + 1e-9 * self.signal_var * torch.eye(length, dtype=c.dtype)
        f = (torch.linalg.cholesky(cov) @ torch.randn(n, length, 1, generator=g,
                                                        dtype=torch.float64))[..., 0]
        y = f + torch.randn(n, length, generator=g, dtype=torch.float64) * math.sqrt(
            self.noise_var)
        data, f = pack(c, y, f, lengths)
        return LatentSample(data, f, f, self)
