"""Families of real observations: Gaussian with a fixed, learned or heteroscedastic scale
(the gamma family: :mod:`efa.core.families.gamma`)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from efa.core.families.base import (
    _LOG_2PI,
    Family,
    _as_real,
    _check_last_dim,
    _positive,
)
from efa.core.families.gamma import Gamma as Gamma  # its home until session 39 (old imports)


class Gaussian(Family):
    """Real y ~ N(mu, sigma^2) with a fixed, known sigma; the readout z is the mean.

    eta = mu / sigma^2, t = y, A = sigma^2 eta^2 / 2, log h = -y^2 / (2 sigma^2) - log(2 pi
    sigma^2) / 2. A learned sigma (two natural parameters): ``LearnedGaussian`` (one global
    sigma) or ``HeteroscedasticGaussian`` (one per prediction).

    Parameters
    ----------
    sigma : float
        The standard deviation σ (> 0, finite).

    Raises
    ------
    ValueError
        If ``sigma`` is not a positive finite number.
    """

    name = "gaussian"
    args = ("sigma",)

    def __init__(self, sigma: float = 1.0):
        super().__init__()
        if isinstance(sigma, str):
            raise ValueError(
                f"sigma must be a positive number, got {sigma!r}; "
                "for a learned sigma use LearnedGaussian or HeteroscedasticGaussian"
            )
        _positive("sigma", sigma)
        self.sigma = float(sigma)

    def link(self, z: Tensor) -> Tensor:
        """η = z / σ²: the read-out is the mean μ.

        Parameters
        ----------
        z : torch.Tensor, shape (..., 1)
            The mean μ.

        Returns
        -------
        torch.Tensor, shape (..., 1)
            The natural parameter η.
        """
        _check_last_dim(z, self.num_outputs, "z", self)
        return z / self.sigma**2

    def link_standardised(self, z: Tensor, loc: float, scale: float) -> Tensor:
        """η for the mean μ = loc + scale · z read out in standardised units.

        Parameters
        ----------
        z : torch.Tensor, shape (..., 1)
            The mean in standardised units.
        loc : float
            The location the values were standardised with.
        scale : float
            The scale the values were standardised with.

        Returns
        -------
        torch.Tensor, shape (..., 1)
            The natural parameter η, in the data's units (σ is in the data's units).
        """
        return self.link(loc + scale * z)

    def log_partition(self, eta: Tensor) -> Tensor:
        """A(η) = σ² η² / 2.

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 1)
            The natural parameter.

        Returns
        -------
        torch.Tensor, shape (...)
            A(η).
        """
        return 0.5 * self.sigma**2 * eta[..., 0] ** 2

    def log_base_measure(self, y: Tensor) -> Tensor:
        """log h(y) = −y² / (2σ²) − log(2πσ²) / 2.

        Parameters
        ----------
        y : torch.Tensor, shape (...)
            Values.

        Returns
        -------
        torch.Tensor, shape (...)
            log h(y).
        """
        var = self.sigma**2
        return -(_as_real(y) ** 2) / (2 * var) - 0.5 * (_LOG_2PI + math.log(var))

    def log_prob(self, y: Tensor, eta: Tensor, base_measure: bool = True) -> Tensor:
        """The log-density, computed as −(y − μ)²/(2σ²) − log(2πσ²)/2.

        The natural form ⟨η, y⟩ − A(η) + log h(y) has terms of size (y/σ)² that cancel (in
        float32, 0.1 nats off at y = 2,000 with σ = 1); without the base measure the value
        is that form's ⟨η, y⟩ − A(η), as in :meth:`Family.log_prob`.

        Parameters
        ----------
        y : torch.Tensor, shape (...)
            Values (cast to ``eta``'s dtype).
        eta : torch.Tensor, shape (..., 1)
            The natural parameter.
        base_measure : bool, default True
            Whether to add log h(y).

        Returns
        -------
        torch.Tensor, shape (...)
            The log-density of each value.
        """
        if not base_measure:
            return super().log_prob(y, eta, base_measure)
        _check_last_dim(eta, self.num_natural, "eta", self)
        var = self.sigma**2
        return -((_as_real(y).to(eta.dtype) - self.mean(eta)) ** 2) / (2 * var) \
            - 0.5 * (_LOG_2PI + math.log(var))

    def mean(self, eta: Tensor) -> Tensor:
        """The mean μ = σ² η.

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 1)
            The natural parameter.

        Returns
        -------
        torch.Tensor, shape (...)
            μ.
        """
        return self.sigma**2 * eta[..., 0]

    def sample(self, eta: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Draw y ~ N(μ, σ²) (no gradient).

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 1)
            The natural parameter.
        generator : torch.Generator, optional
            The random number generator (default: torch's global one).

        Returns
        -------
        torch.Tensor, shape (...)
            The draws, in ``eta``'s dtype.
        """
        mu = self.mean(eta.detach())
        return mu + self.sigma * torch.randn(
            mu.shape, generator=generator, dtype=mu.dtype, device=mu.device
        )

    def distribution(self, eta: Tensor) -> torch.distributions.Normal:
        """N(μ, σ²) as a ``torch.distributions.Normal``.

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 1)
            The natural parameter.

        Returns
        -------
        torch.distributions.Normal
            Batch shape ``eta.shape[:-1]``.
        """
        return torch.distributions.Normal(self.mean(eta), self.sigma)


class _NormalNatural(Family):
    """Gaussian with both natural parameters: eta = (mu / sigma^2, -1 / (2 sigma^2)).

    t = (y, y^2), A = -eta1^2 / (4 eta2) - log(-2 eta2) / 2, log h = -log(2 pi) / 2.
    Subclasses only differ in where sigma comes from, i.e. in ``link``.
    """

    num_natural = 2

    @staticmethod
    def _natural(mu: Tensor, sigma: Tensor) -> Tensor:
        var = sigma**2
        return torch.stack(torch.broadcast_tensors(mu / var, -0.5 / var), dim=-1)

    def _loc_scale(self, eta: Tensor) -> tuple[Tensor, Tensor]:
        eta1, eta2 = eta[..., 0], eta[..., 1]
        return eta1 / (-2 * eta2), torch.rsqrt(-2 * eta2)

    def sufficient_stat(self, y: Tensor) -> Tensor:
        y = _as_real(y)
        return torch.stack([y, y**2], dim=-1)

    def log_partition(self, eta: Tensor) -> Tensor:
        eta1, eta2 = eta[..., 0], eta[..., 1]
        return -(eta1**2) / (4 * eta2) - 0.5 * torch.log(-2 * eta2)

    def log_base_measure(self, y: Tensor) -> Tensor:
        return torch.full(y.shape, -0.5 * _LOG_2PI, dtype=_as_real(y).dtype, device=y.device)

    def log_prob(self, y: Tensor, eta: Tensor, base_measure: bool = True) -> Tensor:
        # −((y − μ)/σ)²/2 − log σ [− log(2π)/2]: the natural form's terms are of size (y/σ)²
        # and cancel (in float32, 0.7 nats off at y = 1, σ = 1e-4).
        _check_last_dim(eta, self.num_natural, "eta", self)
        mu, sigma = self._loc_scale(eta)
        lp = -0.5 * ((_as_real(y).to(eta.dtype) - mu) / sigma) ** 2 + 0.5 * torch.log(
            -2 * eta[..., 1])
        return lp - 0.5 * _LOG_2PI if base_measure else lp

    def mean(self, eta: Tensor) -> Tensor:
        return self._loc_scale(eta)[0]

    def sample(self, eta: Tensor, generator: torch.Generator | None = None) -> Tensor:
        mu, sigma = self._loc_scale(eta.detach())
        return mu + sigma * torch.randn(
            mu.shape, generator=generator, dtype=mu.dtype, device=mu.device
        )

    def distribution(self, eta: Tensor) -> torch.distributions.Normal:
        return torch.distributions.Normal(*self._loc_scale(eta))


class LearnedGaussian(_NormalNatural):
    """Real y ~ N(mu, sigma^2) with one global learnable sigma; the readout z is the mean.

    sigma is stored as the parameter ``log_sigma`` (scalar), initialised to
    ``log(init_sigma)``. sigma is in the data's units. ``config`` records only
    ``init_sigma``; the learned value travels with ``state_dict`` like any other parameter.

    Parameters
    ----------
    init_sigma : float or None, default None
        The initial σ (> 0, finite). None: the scale ``efa.fit`` standardises the field with
        (its training values' standard deviation; ``EFA.standardise`` sets it, once), and 1
        until then. A fixed 1 would start σ a thousandfold off for values in the thousands.

    Raises
    ------
    ValueError
        If ``init_sigma`` is not a positive finite number.
    """

    name = "learned_gaussian"
    args = ("init_sigma",)
    num_outputs = 1

    def __init__(self, init_sigma: float | None = None):
        super().__init__()
        self.init_sigma = None if init_sigma is None else _positive("init_sigma", init_sigma)
        self.log_sigma = nn.Parameter(torch.tensor(math.log(self.init_sigma or 1.0)))

    @torch.no_grad()
    def start_at(self, sigma: float) -> None:
        """Set an unset ``init_sigma`` (None) to ``sigma`` and start σ there; a σ given at
        construction, or set before, is kept (so a refit does not undo what was learned).

        Parameters
        ----------
        sigma : float
            The initial σ (> 0, finite), e.g. the field's standardisation scale.
        """
        if self.init_sigma is None:
            self.init_sigma = _positive("init_sigma", sigma)
            self.log_sigma.fill_(math.log(self.init_sigma))

    @property
    def sigma(self) -> Tensor:
        return self.log_sigma.exp()

    def link(self, z: Tensor) -> Tensor:
        """η = (μ / σ², −1 / (2σ²)) with the mean μ = z and the learned σ.

        Parameters
        ----------
        z : torch.Tensor, shape (..., 1)
            The mean μ.

        Returns
        -------
        torch.Tensor, shape (..., 2)
            The natural parameter η.
        """
        _check_last_dim(z, self.num_outputs, "z", self)
        return self._natural(z[..., 0], self.log_sigma.to(z.dtype).exp())

    def link_standardised(self, z: Tensor, loc: float, scale: float) -> Tensor:
        """η for the mean μ = loc + scale · z read out in standardised units; σ is learned in
        the data's units.

        Parameters
        ----------
        z : torch.Tensor, shape (..., 1)
            The mean in standardised units.
        loc : float
            The location the values were standardised with.
        scale : float
            The scale the values were standardised with.

        Returns
        -------
        torch.Tensor, shape (..., 2)
            The natural parameter η, in the data's units.
        """
        return self.link(loc + scale * z)  # σ is learned in the data's units


class HeteroscedasticGaussian(_NormalNatural):
    """Real y ~ N(mu, sigma^2) with mean and scale both predicted: z = (mu, raw scale).

    sigma = softplus(raw) + ``min_scale``. The floor (default 1e-4) keeps the likelihood
    bounded: without it the model can drive sigma -> 0 on a well-fit point and log p -> inf.

    Parameters
    ----------
    min_scale : float
        The floor on σ (> 0, finite: at 0 a finite read-out's σ can underflow to 0).

    Raises
    ------
    ValueError
        If ``min_scale`` is not positive and finite.
    """

    name = "heteroscedastic_gaussian"
    args = ("min_scale",)
    num_outputs = 2

    def __init__(self, min_scale: float = 1e-4):
        super().__init__()
        self.min_scale = _positive("min_scale", min_scale)

    def link(self, z: Tensor) -> Tensor:
        """η = (μ / σ², −1 / (2σ²)) with μ = z₀ and σ = softplus(z₁) + ``min_scale``.

        Parameters
        ----------
        z : torch.Tensor, shape (..., 2)
            The mean and the raw scale.

        Returns
        -------
        torch.Tensor, shape (..., 2)
            The natural parameter η.
        """
        _check_last_dim(z, self.num_outputs, "z", self)
        return self._natural(z[..., 0], F.softplus(z[..., 1]) + self.min_scale)

    def link_standardised(self, z: Tensor, loc: float, scale: float) -> Tensor:
        """η for a read-out in standardised units: μ = loc + scale · z₀ and
        σ = scale · (softplus(z₁) + ``min_scale``).

        Parameters
        ----------
        z : torch.Tensor, shape (..., 2)
            The mean and the raw scale, in standardised units.
        loc : float
            The location the values were standardised with.
        scale : float
            The scale the values were standardised with.

        Returns
        -------
        torch.Tensor, shape (..., 2)
            The natural parameter η, in the data's units.
        """
        _check_last_dim(z, self.num_outputs, "z", self)
        sigma = scale * (F.softplus(z[..., 1]) + self.min_scale)
        return self._natural(loc + scale * z[..., 0], sigma)
