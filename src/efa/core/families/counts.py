"""Families of counts: Poisson (with a shift), binomial (successes of known trials) and
negative binomial."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from efa.core.families.base import (
    Family,
    _as_real,
    _check_last_dim,
    _integer,
    _IntegerValues,
    _log1mexp,
    _number,
    _positive,
)


def poisson_counts(rate: Tensor, generator: torch.Generator | None, family: str) -> Tensor:
    """Poisson draws of ``rate`` as int64 counts.

    A rate whose counts int64 cannot hold (beyond 2⁶², or inf or NaN) is an error:
    ``torch.poisson`` would wrap it to a negative count.

    Parameters
    ----------
    rate : torch.Tensor
        The Poisson rates (any shape).
    generator : torch.Generator or None
        The random number generator (None: torch's global one).
    family : str
        Names the family in the error message.

    Returns
    -------
    torch.Tensor of torch.long
        One count per rate.

    Raises
    ------
    ValueError
        If a rate is not finite or above 2⁶².
    """
    bad = ~torch.isfinite(rate) | (rate > float(2**62))
    if bool(bad.any()):
        raise ValueError(f"{family} sample: a rate of {float(rate[bad][0]):.3g} gives counts "
                         "beyond what int64 holds; the natural parameter is too large")
    return torch.poisson(rate, generator=generator).long()


class Poisson(Family):
    """Counts y >= shift with y - shift ~ Poisson(rate); eta = log rate, t = y - shift.

    ``link="log"`` takes the readout as the log-rate (eta = z). ``link="softplus"`` uses
    eta = softplus(z), i.e. rate = 1 + exp(z), which keeps the rate >= 1. In the EFA paper's
    terms, "v1" is ``Poisson(shift=1, link="log")`` and "v2" is ``Poisson(link="softplus")``.

    Parameters
    ----------
    shift : int
        The smallest count (e.g. 1 for ratings 1, 2, ...).
    link : {"log", "softplus"}
        How the read-out becomes η (kept as the attribute ``link_name``; ``link`` is the
        method).

    Raises
    ------
    ValueError
        If ``shift`` is not an integer or ``link`` is not one of the two.
    """

    name = "poisson"
    is_discrete = True
    _links = ("log", "softplus")

    def __init__(self, shift: int = 0, link: str = "log"):
        super().__init__()
        number = _number("shift", shift)
        if not math.isfinite(number) or number != int(number):
            raise ValueError(f"shift must be an integer, got {shift!r}")
        if link not in self._links:
            raise ValueError(f"link must be one of {self._links}, got {link!r}")
        self.shift = int(shift)
        self.link_name = link  # ``self.link`` is the method

    def _config_args(self) -> dict[str, Any]:
        return {"shift": self.shift, "link": self.link_name}

    def link(self, z: Tensor) -> Tensor:
        """η = z (``link="log"``) or η = softplus(z) (``link="softplus"``).

        Parameters
        ----------
        z : torch.Tensor, shape (..., 1)
            The read-out.

        Returns
        -------
        torch.Tensor, shape (..., 1)
            The log-rate η.
        """
        _check_last_dim(z, self.num_outputs, "z", self)
        return F.softplus(z) if self.link_name == "softplus" else z

    def sufficient_stat(self, y: Tensor) -> Tensor:
        """t(y) = y − shift.

        Parameters
        ----------
        y : torch.Tensor, shape (...)
            Counts.

        Returns
        -------
        torch.Tensor, shape (..., 1)
            t(y), in a floating dtype.
        """
        return (_as_real(y) - self.shift).unsqueeze(-1)

    def log_partition(self, eta: Tensor) -> Tensor:
        """A(η) = e^η, the rate.

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 1)
            The log-rate.

        Returns
        -------
        torch.Tensor, shape (...)
            A(η).
        """
        return torch.exp(eta[..., 0])

    def log_base_measure(self, y: Tensor) -> Tensor:
        """log h(y) = −log (y − shift)!.

        Parameters
        ----------
        y : torch.Tensor, shape (...)
            Counts.

        Returns
        -------
        torch.Tensor, shape (...)
            log h(y).
        """
        return -torch.lgamma(_as_real(y) - self.shift + 1)

    def mean(self, eta: Tensor) -> Tensor:
        """E[y] = shift + e^η.

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 1)
            The log-rate.

        Returns
        -------
        torch.Tensor, shape (...)
            E[y].
        """
        return self.shift + torch.exp(eta[..., 0])

    def sample(self, eta: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Draw y = shift + Poisson(e^η) (no gradient).

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 1)
            The log-rate.
        generator : torch.Generator, optional
            The random number generator (default: torch's global one).

        Returns
        -------
        torch.Tensor of torch.long, shape (...)
            The counts drawn.

        Raises
        ------
        ValueError
            If a rate is too large for int64 counts (see :func:`poisson_counts`).
        """
        rate = torch.exp(eta.detach()[..., 0])
        return poisson_counts(rate, generator, "Poisson") + self.shift

    def distribution(self, eta: Tensor) -> torch.distributions.Poisson:
        """The distribution of y − shift, a ``torch.distributions.Poisson`` with rate e^η
        (``efa.core.families.base.Shifted`` adds the shift back).

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 1)
            The log-rate.

        Returns
        -------
        torch.distributions.Poisson
            Batch shape ``eta.shape[:-1]``.
        """
        return _Poisson(torch.exp(eta[..., 0]))

    def _check_support(self, y: Tensor, where: str) -> None:
        problem = "are negative" if self.shift == 0 else f"are below shift={self.shift}"
        self._reject(where, y, y < self.shift, problem, f"integer counts >= {self.shift}")


class Binomial(Family):
    """y in {0, ..., n} successes of n known trials; eta = logit, A = n softplus(eta).

    Parameters
    ----------
    total_count : int
        n, the number of trials (≥ 1).

    Raises
    ------
    ValueError
        If ``total_count`` is not an integer ≥ 1.
    """

    name = "binomial"
    args = ("total_count",)
    is_discrete = True

    def __init__(self, total_count: int):
        super().__init__()
        self.total_count = _integer("total_count", total_count, 1)

    def log_partition(self, eta: Tensor) -> Tensor:
        """A(η) = n softplus(η).

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 1)
            The logit of a trial's success.

        Returns
        -------
        torch.Tensor, shape (...)
            A(η).
        """
        return self.total_count * F.softplus(eta[..., 0])

    def log_base_measure(self, y: Tensor) -> Tensor:
        """log h(y) = log C(n, y).

        Parameters
        ----------
        y : torch.Tensor, shape (...)
            Counts in 0..n.

        Returns
        -------
        torch.Tensor, shape (...)
            log h(y).
        """
        y, n = _as_real(y), self.total_count
        return math.lgamma(n + 1) - torch.lgamma(y + 1) - torch.lgamma(n - y + 1)

    def mean(self, eta: Tensor) -> Tensor:
        """E[y] = n sigmoid(η).

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 1)
            The logit of a trial's success.

        Returns
        -------
        torch.Tensor, shape (...)
            E[y].
        """
        return self.total_count * torch.sigmoid(eta[..., 0])

    def sample(self, eta: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Draw y ~ Binomial(n, sigmoid(η)) (no gradient).

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 1)
            The logit of a trial's success.
        generator : torch.Generator, optional
            The random number generator (default: torch's global one).

        Returns
        -------
        torch.Tensor of torch.long, shape (...)
            The counts drawn.
        """
        probs = torch.sigmoid(eta.detach()[..., 0])
        count = torch.full_like(probs, self.total_count)
        return torch.binomial(count, probs, generator=generator).long()

    def distribution(self, eta: Tensor) -> torch.distributions.Binomial:
        """The ``torch.distributions.Binomial`` with n trials and logit η.

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 1)
            The logit of a trial's success.

        Returns
        -------
        torch.distributions.Binomial
            Batch shape ``eta.shape[:-1]``.
        """
        return _Binomial(self.total_count, logits=eta[..., 0])

    def _check_support(self, y: Tensor, where: str) -> None:
        n = self.total_count
        self._reject(where, y, (y < 0) | (y > n), "are out of range", f"counts in 0..{n}")


class NegativeBinomial(Family):
    """Counts y >= 0 with known ``total_count`` r, in torch's convention.

    y counts successes before r failures, each trial succeeding with probability p:
    p(y) = C(y + r - 1, y) (1 - p)^r p^y. Natural parameter eta = log p < 0, t = y,
    A = -r log(1 - e^eta). The link eta = logsigmoid(z) means p = sigmoid(z).
    Mean r p / (1 - p).

    Parameters
    ----------
    total_count : float
        r, the number of failures (> 0, finite; need not be whole).

    Raises
    ------
    ValueError
        If ``total_count`` is not a positive finite number.
    """

    name = "negative_binomial"
    args = ("total_count",)
    is_discrete = True

    def __init__(self, total_count: float):
        super().__init__()
        self.total_count = _positive("total_count", total_count)

    def link(self, z: Tensor) -> Tensor:
        """η = logsigmoid(z), i.e. p = sigmoid(z), at most −(the dtype's smallest normal).

        Parameters
        ----------
        z : torch.Tensor, shape (..., 1)
            The logit of p.

        Returns
        -------
        torch.Tensor, shape (..., 1)
            η = log p (< 0).
        """
        _check_last_dim(z, self.num_outputs, "z", self)
        # Past z ≈ 87 (float32) logsigmoid rounds to 0, outside the domain: A(0) = inf and a
        # NaN gradient. Capped, p saturates at 1 − tiny and A stays finite.
        return F.logsigmoid(z).clamp(max=-torch.finfo(z.dtype).tiny)

    def log_partition(self, eta: Tensor) -> Tensor:
        """A(η) = −r log(1 − e^η), computed stably.

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 1)
            η = log p (< 0).

        Returns
        -------
        torch.Tensor, shape (...)
            A(η).
        """
        return -self.total_count * _log1mexp(eta[..., 0])

    def log_base_measure(self, y: Tensor) -> Tensor:
        """log h(y) = log C(y + r − 1, y) = lgamma(y + r) − lgamma(r) − lgamma(y + 1).

        Parameters
        ----------
        y : torch.Tensor, shape (...)
            Counts.

        Returns
        -------
        torch.Tensor, shape (...)
            log h(y).
        """
        y, r = _as_real(y), self.total_count
        return torch.lgamma(y + r) - math.lgamma(r) - torch.lgamma(y + 1)

    def _odds(self, eta: Tensor) -> Tensor:
        return torch.exp(eta[..., 0]) / -torch.expm1(eta[..., 0])  # p / (1 - p)

    def mean(self, eta: Tensor) -> Tensor:
        """E[y] = r p / (1 − p).

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 1)
            η = log p (< 0).

        Returns
        -------
        torch.Tensor, shape (...)
            E[y].
        """
        return self.total_count * self._odds(eta)

    def sample(self, eta: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Draw y (no gradient) as a gamma-Poisson mixture, as ``torch.distributions`` does,
        but with ``generator``.

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 1)
            η = log p (< 0).
        generator : torch.Generator, optional
            The random number generator (default: torch's global one).

        Returns
        -------
        torch.Tensor of torch.long, shape (...)
            The counts drawn.

        Raises
        ------
        ValueError
            If a rate is too large for int64 counts (see :func:`poisson_counts`).
        """
        # Gamma-Poisson mixture, as in torch.distributions, but threading the generator.
        odds = self._odds(eta.detach())
        shape = torch.full_like(odds, self.total_count)
        rate = torch._standard_gamma(shape, generator=generator) * odds
        return poisson_counts(rate, generator, "negative binomial")

    def distribution(self, eta: Tensor) -> torch.distributions.NegativeBinomial:
        """The ``torch.distributions.NegativeBinomial`` with r and logits log(p / (1 − p)).

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 1)
            η = log p (< 0).

        Returns
        -------
        torch.distributions.NegativeBinomial
            Batch shape ``eta.shape[:-1]``.
        """
        logits = eta[..., 0] - _log1mexp(eta[..., 0])
        return _NegativeBinomial(self.total_count, logits=logits)

    def _check_support(self, y: Tensor, where: str) -> None:
        self._reject(where, y, y < 0, "are negative", "integer counts >= 0")


# torch's count laws, whose log_prob takes a count field's integers in the parameters' dtype
class _Poisson(_IntegerValues, torch.distributions.Poisson):
    pass


class _Binomial(_IntegerValues, torch.distributions.Binomial):
    pass


class _NegativeBinomial(_IntegerValues, torch.distributions.NegativeBinomial):
    pass
