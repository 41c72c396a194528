"""The gamma family of positive observations, shape and rate both read out."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from efa.core.families.base import Family, _as_real, _check_last_dim, _positive


class Gamma(Family):
    """Positive y ~ Gamma(shape alpha, rate beta), both predicted: z = (raw alpha, raw beta).

    alpha = softplus(z0) + ``floor``, beta = softplus(z1) + ``floor`` (default 1e-4, which
    keeps eta strictly inside the domain); a read-out in standardised units (``efa.fit``
    standardises every Value field) gives y's rate beta / scale. eta = (alpha - 1, -beta),
    t = (log y, y), A = lgamma(eta1 + 1) - (eta1 + 1) log(-eta2), h = 1. Mean alpha / beta.

    Parameters
    ----------
    floor : float
        The floor on α and β (> 0, finite: at 0 a finite read-out's α can round to 0).

    Raises
    ------
    ValueError
        If ``floor`` is not positive and finite.
    """

    name, args, num_outputs, num_natural = "gamma", ("floor",), 2, 2

    def __init__(self, floor: float = 1e-4):
        super().__init__()
        self.floor = _positive("floor", floor)

    def link(self, z: Tensor) -> Tensor:
        """η = (α − 1, −β) with α = softplus(z₀) + ``floor`` and β = softplus(z₁) + ``floor``.

        Parameters
        ----------
        z : torch.Tensor, shape (..., 2)
            The raw shape and rate.

        Returns
        -------
        torch.Tensor, shape (..., 2)
            The natural parameter η.
        """
        _check_last_dim(z, self.num_outputs, "z", self)
        alpha_beta = F.softplus(z) + self.floor
        return torch.stack([alpha_beta[..., 0] - 1, -alpha_beta[..., 1]], dim=-1)

    def link_standardised(self, z: Tensor, loc: float, scale: float) -> Tensor:
        """η for a read-out in standardised units: y / scale ~ Gamma(α, β), so y has rate
        β / scale (the shape does not change; ``loc`` is not used, a shift would leave the
        support).

        Parameters
        ----------
        z : torch.Tensor, shape (..., 2)
            The raw shape and rate, in standardised units.
        loc : float
            The location the values were standardised with (unused).
        scale : float
            The scale the values were standardised with.

        Returns
        -------
        torch.Tensor, shape (..., 2)
            The natural parameter η, in the data's units.
        """
        eta = self.link(z)
        return torch.stack([eta[..., 0], eta[..., 1] / scale], dim=-1)

    def _shape_rate(self, eta: Tensor) -> tuple[Tensor, Tensor]:
        return eta[..., 0] + 1, -eta[..., 1]

    def sufficient_stat(self, y: Tensor) -> Tensor:
        """t(y) = (log y, y).

        Parameters
        ----------
        y : torch.Tensor, shape (...)
            Positive values.

        Returns
        -------
        torch.Tensor, shape (..., 2)
            t(y).
        """
        y = _as_real(y)
        return torch.stack([torch.log(y), y], dim=-1)

    def log_partition(self, eta: Tensor) -> Tensor:
        """A(η) = lgamma(α) − α log β, with α = η₁ + 1 and β = −η₂.

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 2)
            The natural parameter.

        Returns
        -------
        torch.Tensor, shape (...)
            A(η).
        """
        alpha, beta = self._shape_rate(eta)
        return torch.lgamma(alpha) - alpha * torch.log(beta)

    def log_base_measure(self, y: Tensor) -> Tensor:
        """log h(y) = 0.

        Parameters
        ----------
        y : torch.Tensor, shape (...)
            Values.

        Returns
        -------
        torch.Tensor, shape (...)
            Zeros.
        """
        return torch.zeros_like(_as_real(y))

    def mean(self, eta: Tensor) -> Tensor:
        """The mean α / β.

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 2)
            The natural parameter.

        Returns
        -------
        torch.Tensor, shape (...)
            α / β.
        """
        alpha, beta = self._shape_rate(eta)
        return alpha / beta

    def sample(self, eta: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Draw y ~ Gamma(α, β) (no gradient); a draw that underflows to 0 becomes the
        smallest positive number of the dtype, so it stays in the support.

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 2)
            The natural parameter.
        generator : torch.Generator, optional
            The random number generator (default: torch's global one).

        Returns
        -------
        torch.Tensor, shape (...)
            The draws, in ``eta``'s dtype.
        """
        alpha, beta = self._shape_rate(eta.detach())
        y = torch._standard_gamma(alpha, generator=generator) / beta
        # Small shapes can underflow to 0, which is outside the support (as torch does).
        return y.clamp(min=torch.finfo(y.dtype).tiny)

    def distribution(self, eta: Tensor) -> torch.distributions.Gamma:
        """Gamma(α, β) as a ``torch.distributions.Gamma`` (shape α, rate β).

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 2)
            The natural parameter.

        Returns
        -------
        torch.distributions.Gamma
            Batch shape ``eta.shape[:-1]``.
        """
        return torch.distributions.Gamma(*self._shape_rate(eta))

    def _check_support(self, y: Tensor, where: str) -> None:
        self._reject(where, y, y <= 0, "are not positive", "values > 0")
