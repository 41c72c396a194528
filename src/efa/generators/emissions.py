"""Exponential-family emissions with a latent natural parameter, and their Bayes predictor.

:class:`ExpFamilyLatent` draws one latent z ~ N(0, τ² I_d) per sequence and then each token's
response y ~ Bernoulli(sigmoid(z·c + b)) or Poisson(exp(z·c + b)) given its covariate c, so the
tokens of a sequence are exchangeable (see :mod:`efa.generators.latent` for the Gaussian-response
generators and what ``sample`` and ``bayes`` return). There is no closed-form posterior: the
Bayes predictor is a Laplace approximation of p(z | context) refined by self-normalised
importance sampling with the Laplace Gaussian (inflated) as proposal (``method="laplace"`` gives
the Laplace answer alone).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from efa.core.data import Sequences
from efa.core.families import Bernoulli, Poisson, poisson_counts
from efa.core.fields import Attribute, Field, Value
from efa.generators.draws import (
    check_data,
    check_design,
    check_positive,
    context_masks,
    draw_linear,
    nan_outside,
    pack,
)
from efa.generators.latent import BayesPrediction, LatentSample
from efa.training.scoring import check_int

__all__ = ["ExpFamilyLatent"]


@dataclass(frozen=True)
class ExpFamilyLatent:
    """y ~ Bernoulli(sigmoid(η)) or Poisson(exp(η)) with η = z·c + offset, z ~ N(0, prior_var·I).

    One z per sequence: the exponential-family emissions of the EFA library with a latent
    natural parameter. No closed-form posterior: :meth:`bayes` uses Laplace's approximation
    refined by importance sampling (``samples`` draws per prediction).

    Parameters
    ----------
    family : {"bernoulli", "poisson"}, default "bernoulli"
        The emission family.
    dim : int, default 2
        The covariate dimension d.
    prior_var : float, default 1.0
        The prior variance τ² of each component of z, > 0.
    offset : float, default 0.0
        The offset b added to the natural parameter; finite.
    covariates : {"normal", "circle", "uniform"}, default "normal"
        The covariate distribution: standard normal, the unit circle (``dim=2``) or uniform on
        [-1, 1]^dim.
    samples : int, default 2000
        Importance samples per prediction in :meth:`bayes`, >= 10.

    Raises
    ------
    ValueError
        For an unknown family or covariates, a non-positive ``prior_var`` or ``dim``, an
        offset that is not a finite number, or fewer than 10 samples.
    """

    family: str = "bernoulli"
    dim: int = 2
    prior_var: float = 1.0
    offset: float = 0.0
    covariates: str = "normal"
    samples: int = 2000

    def __post_init__(self):
        if self.family not in ("bernoulli", "poisson"):
            raise ValueError(f"family must be 'bernoulli' or 'poisson', got {self.family!r}")
        check_positive(prior_var=self.prior_var)
        if isinstance(self.offset, bool) or not isinstance(self.offset, int | float) or \
                not math.isfinite(self.offset):
            raise ValueError(f"offset must be finite, got {self.offset!r}")
        check_design(self.dim, self.covariates)
        if not isinstance(self.samples, int) or self.samples < 10:
            raise ValueError(f"samples must be an integer >= 10, got {self.samples!r}")

    def efa_family(self) -> Bernoulli | Poisson:
        """Return the efa family of the emissions.

        Returns
        -------
        Bernoulli or Poisson
            A fresh :class:`efa.core.families.Bernoulli` or :class:`efa.core.families.Poisson`.
        """
        return Bernoulli() if self.family == "bernoulli" else Poisson()

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
            ``Attribute("c")`` and ``Value("y")`` with the emission family
            (:meth:`efa_family`), left unstandardised (loc 0, scale 1).
        """
        return [Attribute("c", size=self.dim, dim=dim, hidden=hidden),
                Value("y", self.efa_family(), dim=dim, hidden=hidden, loc=0.0, scale=1.0)]

    def mean(self, eta: Tensor) -> Tensor:
        """Return the emissions' mean given the natural parameter.

        Parameters
        ----------
        eta : torch.Tensor
            The natural parameter η = z·c + offset, any shape.

        Returns
        -------
        torch.Tensor
            sigmoid(η) (Bernoulli) or exp(η) (Poisson), the shape of ``eta``.
        """
        return torch.sigmoid(eta) if self.family == "bernoulli" else torch.exp(eta)

    def log_density(self, y: Tensor, eta: Tensor) -> Tensor:
        """Return log p(y | η) of the emissions, with the base measure.

        Parameters
        ----------
        y : torch.Tensor
            Responses (0/1 or counts), broadcastable with ``eta``.
        eta : torch.Tensor
            The natural parameter.

        Returns
        -------
        torch.Tensor
            y η − log(1 + e^η) (Bernoulli) or y η − e^η − log y! (Poisson), broadcast.
        """
        if self.family == "bernoulli":
            return y * eta - torch.nn.functional.softplus(eta)
        return y * eta - torch.exp(eta) - torch.lgamma(y + 1)

    def _variance(self, eta: Tensor) -> Tensor:
        m = self.mean(eta)
        return m * (1 - m) if self.family == "bernoulli" else m

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
            Seed of the draws (z, covariates, lengths, responses, in this order).
        min_length : int or None, default None
            When given, lengths are uniform in ``min_length..length``; padding is zero.
        covariates : torch.Tensor or None, default None
            Covariates ``[n, length, dim]`` (or broadcastable) that override the drawn ones.

        Returns
        -------
        LatentSample
            The sequences (``y`` as int64), z ``[n, dim]`` as ``latent`` and the emissions'
            mean at every token as ``signal``.

        Raises
        ------
        ValueError
            For bad sizes or covariates, or Poisson rates too large for int64 counts.
        """
        g, z, c, lengths = draw_linear(self, n, length, seed, min_length, covariates)
        eta = (c * z[:, None, :]).sum(-1) + self.offset
        signal = self.mean(eta)
        if self.family == "bernoulli":
            y = torch.bernoulli(signal, generator=g)
        else:
            y = poisson_counts(signal, g, "Poisson").double()
        data, signal = pack(c, y, signal, lengths, torch.long)
        return LatentSample(data, z, signal, self)

    def laplace(self, c: Tensor, y: Tensor, ctx: Tensor,
                steps: int = 50) -> tuple[Tensor, Tensor]:
        """Laplace-approximate p(z | context) for every token: mode and covariance.

        Newton's method on the (concave) log posterior, from z = 0, for at most ``steps``
        iterations (it stops once no component moves by 1e-12); the covariance is the inverse
        of the negative Hessian at the mode.

        Parameters
        ----------
        c : torch.Tensor, shape (N, I, d)
            Covariates.
        y : torch.Tensor, shape (N, I)
            Responses.
        ctx : torch.Tensor of bool, shape (N, I, I)
            ``ctx[n, i, j]``: whether token j is in the context of token i (see
            :func:`efa.generators.draws.context_masks`).
        steps : int, default 50
            The most Newton steps.

        Returns
        -------
        mode : torch.Tensor, shape (N, I, d)
            The posterior mode of z given each token's context.
        cov : torch.Tensor, shape (N, I, d, d)
            The Laplace covariance.
        """
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
        """Predict each predicted y_i from its context: posterior predictive mean and density.

        Parameters
        ----------
        data : Sequences
            Fields ``c`` ``[N, I, dim]`` and ``y`` ``[N, I]`` (0/1 or counts), e.g. a sample's
            ``sequences``.
        direction : {"bidirectional", "unidirectional"}, default "bidirectional"
            Condition each token on all other observed tokens, or on the earlier ones.
        method : {"importance", "laplace"}, default "importance"
            ``"importance"``: the Laplace Gaussian with its covariance inflated 1.5² as
            proposal, self-normalised weights, ``samples`` draws per prediction (the same
            standard normals for every prediction of a chunk of sequences). ``"laplace"``:
            the Laplace Gaussian as the posterior, the mean and log-density by 40-point
            Gauss–Hermite quadrature over η.
        seed : int, default 0
            Seed of the importance samples.

        Returns
        -------
        BayesPrediction
            ``mean`` and ``log_density`` ``[N, I]`` (NaN where not predicted); with
            ``"importance"`` also ``ess`` (the smallest effective sample size) and ``mean_se``
            (the Monte Carlo standard error of ``mean``).

        Raises
        ------
        KeyError, ValueError
            For missing fields, data that are not finite or outside the family's support, an
            unknown ``direction`` or an unknown ``method``.
        """
        if method not in ("importance", "laplace"):
            raise ValueError(f"method must be 'importance' or 'laplace', got {method!r}")
        support = ((lambda v: (v == 0) | (v == 1), "0 or 1 (Bernoulli)")
                   if self.family == "bernoulli" else
                   (lambda v: (v >= 0) & (v == v.round()), "a count 0, 1, 2, … (Poisson)"))
        c, y = check_data(data, self.dim, support)
        pred, ctx = context_masks(data, direction)
        check_int("seed", seed, None)  # int(1.5) would seed 1 silently
        g = torch.Generator().manual_seed(int(seed))
        # Chunks of sequences: the sampler holds [chunk, I, samples, I] numbers.
        per = max(1, int(2e7 // (data.max_len**2 * (self.samples if method == "importance"
                                                     else 40))))
        parts = [self._bayes(c[a : a + per], y[a : a + per], pred[a : a + per],
                             ctx[a : a + per], method, g) for a in range(0, len(data), per)]
        mean = torch.cat([p[0] for p in parts])
        logp = torch.cat([p[1] for p in parts])
        ess = min((p[2] for p in parts if p[2] is not None), default=None)
        se = None if method == "laplace" else nan_outside(torch.cat([p[3] for p in parts]), pred)
        return BayesPrediction(nan_outside(mean, pred), nan_outside(logp, pred), ess, se)

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
