"""Families of discrete observations: categorical, ordinal, Bernoulli, Poisson, binomial and
negative binomial."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from efa.core.families.base import (
    Family,
    _as_real,
    _check_last_dim,
    _integer,
    _log1mexp,
    _number,
    _positive,
)


class Categorical(Family):
    """y in {0, ..., K-1}; eta = logits, t = one-hot(y), A = logsumexp, h = 1."""

    name, args, is_discrete = "categorical", ("num_categories",), True

    def __init__(self, num_categories: int):
        super().__init__()
        self.num_categories = _integer("num_categories", num_categories, 2)
        self.num_outputs = self.num_natural = self.num_categories

    def sufficient_stat(self, y: Tensor) -> Tensor:
        dtype = y.dtype if y.is_floating_point() else torch.get_default_dtype()
        return F.one_hot(y.long(), self.num_categories).to(dtype)

    def log_partition(self, eta: Tensor) -> Tensor:
        return torch.logsumexp(eta, dim=-1)

    def log_base_measure(self, y: Tensor) -> Tensor:
        return torch.zeros(y.shape, dtype=_as_real(y).dtype, device=y.device)

    def log_prob(self, y: Tensor, eta: Tensor, base_measure: bool = True) -> Tensor:
        """η_y − logsumexp(η) = ⟨η, one-hot(y)⟩ − A(η), without the [..., K] one-hot, by
        PyTorch's fused log-softmax + NLL (forward and backward in one pass over the logits,
        where a separate logsumexp, its backward's exp and the gather's scatter were the
        largest cost after the matrix products at 10³ categories)."""
        _check_last_dim(eta, self.num_natural, "eta", self)
        flat = eta.reshape(-1, self.num_categories)
        return -F.cross_entropy(flat, y.long().reshape(-1), reduction="none").reshape(y.shape)

    def mean(self, eta: Tensor) -> Tensor:
        """Class probabilities ``[..., K]`` (the mean of the one-hot encoding)."""
        return torch.softmax(eta, dim=-1)

    def sample(self, eta: Tensor, generator: torch.Generator | None = None) -> Tensor:
        probs = self.mean(eta.detach()).reshape(-1, self.num_categories)
        y = torch.multinomial(probs, 1, generator=generator)
        return y.reshape(eta.shape[:-1])

    def distribution(self, eta: Tensor) -> torch.distributions.Categorical:
        return torch.distributions.Categorical(logits=eta)

    def _check_support(self, y: Tensor, where: str) -> None:
        K = self.num_categories
        self._reject(where, y, (y < 0) | (y >= K), "are out of range", f"class indices in [0, {K})")


class Ordinal(Family):
    """Ordered classes y in {0, ..., K-1}: a one-parameter family with learned scores,
    p(y = k | η) ∝ exp(η·s_k + b_k), t(y) = s_y, log h(y) = b_y, A = logsumexp_k(η s_k + b_k).

    The scores are increasing (s_0 = 0, steps softplus(u) > 0, initialised to s_k = k) and the
    base measure b is learned: the adjacent-categories logit with learned spacing (Anderson's
    ordered stereotype model). Against ``Categorical`` it ties the K logits to one direction of
    the read-out, ordered: log p(k+1)/p(k) increases with η for every k, so a readout that is
    additive in its inputs moves every class boundary the same way, which is how a binned
    continuous response behaves. ``mean`` is E[y] (the expected class index); ``probabilities``
    gives the class probabilities. Scores and base measure are learned parameters (in
    ``state_dict``); for fixed values it is an exponential family in η.
    """

    name, args, is_discrete = "ordinal", ("num_classes",), True

    def __init__(self, num_classes: int):
        super().__init__()
        self.num_classes = _integer("num_classes", num_classes, 2)
        self.raw_steps = nn.Parameter(torch.full((self.num_classes - 1,), math.log(math.e - 1)))
        self.base = nn.Parameter(torch.zeros(self.num_classes))

    def scores(self, dtype: torch.dtype | None = None) -> Tensor:
        """s [K]: 0, then the cumulative sum of the positive steps."""
        steps = F.softplus(self.raw_steps if dtype is None else self.raw_steps.to(dtype))
        return torch.cat([steps.new_zeros(1), steps.cumsum(0)])

    def logits(self, eta: Tensor) -> Tensor:
        """η s + b [..., K]: the class logits."""
        _check_last_dim(eta, 1, "eta", self)
        return eta * self.scores(eta.dtype) + self.base.to(eta.dtype)

    def sufficient_stat(self, y: Tensor) -> Tensor:
        dtype = y.dtype if y.is_floating_point() else torch.get_default_dtype()
        return self.scores(dtype)[y.long()].unsqueeze(-1)

    def log_partition(self, eta: Tensor) -> Tensor:
        return torch.logsumexp(self.logits(eta), dim=-1)

    def log_base_measure(self, y: Tensor) -> Tensor:
        dtype = y.dtype if y.is_floating_point() else torch.get_default_dtype()
        return self.base.to(dtype)[y.long()]

    def probabilities(self, eta: Tensor) -> Tensor:
        """p(y = k) for every class k: softmax over k of η·s_k + b_k."""
        return torch.softmax(self.logits(eta), dim=-1)

    def mean(self, eta: Tensor) -> Tensor:
        k = torch.arange(self.num_classes, dtype=eta.dtype, device=eta.device)
        return self.probabilities(eta) @ k

    def sample(self, eta: Tensor, generator: torch.Generator | None = None) -> Tensor:
        probs = self.probabilities(eta.detach()).reshape(-1, self.num_classes)
        return torch.multinomial(probs, 1, generator=generator).reshape(eta.shape[:-1])

    def distribution(self, eta: Tensor) -> torch.distributions.Categorical:
        return torch.distributions.Categorical(logits=self.logits(eta))

    def _check_support(self, y: Tensor, where: str) -> None:
        K = self.num_classes
        self._reject(where, y, (y < 0) | (y >= K), "are out of range", f"class indices in [0, {K})")


class Bernoulli(Family):
    """y in {0, 1}; eta = logit, t = y, A = softplus(eta), h = 1."""

    name = "bernoulli"
    is_discrete = True

    def log_partition(self, eta: Tensor) -> Tensor:
        return F.softplus(eta[..., 0])

    def log_base_measure(self, y: Tensor) -> Tensor:
        return torch.zeros_like(_as_real(y))

    def mean(self, eta: Tensor) -> Tensor:
        return torch.sigmoid(eta[..., 0])

    def sample(self, eta: Tensor, generator: torch.Generator | None = None) -> Tensor:
        return torch.bernoulli(self.mean(eta.detach()), generator=generator).long()

    def distribution(self, eta: Tensor) -> torch.distributions.Bernoulli:
        return torch.distributions.Bernoulli(logits=eta[..., 0])

    def _check_support(self, y: Tensor, where: str) -> None:
        self._reject(where, y, (y != 0) & (y != 1), "are not 0 or 1", "values in {0, 1}")


def poisson_counts(rate: Tensor, generator: torch.Generator | None, family: str) -> Tensor:
    """Poisson draws of ``rate`` as int64 counts. A rate whose counts int64 cannot hold (beyond
    2⁶², or inf or NaN) is an error: torch.poisson would wrap it to a negative count."""
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
        _check_last_dim(z, self.num_outputs, "z", self)
        return F.softplus(z) if self.link_name == "softplus" else z

    def sufficient_stat(self, y: Tensor) -> Tensor:
        return (_as_real(y) - self.shift).unsqueeze(-1)

    def log_partition(self, eta: Tensor) -> Tensor:
        return torch.exp(eta[..., 0])

    def log_base_measure(self, y: Tensor) -> Tensor:
        return -torch.lgamma(_as_real(y) - self.shift + 1)

    def mean(self, eta: Tensor) -> Tensor:
        return self.shift + torch.exp(eta[..., 0])

    def sample(self, eta: Tensor, generator: torch.Generator | None = None) -> Tensor:
        rate = torch.exp(eta.detach()[..., 0])
        return poisson_counts(rate, generator, "Poisson") + self.shift

    def distribution(self, eta: Tensor) -> torch.distributions.Poisson:
        """Distribution of ``y - shift``."""
        return torch.distributions.Poisson(torch.exp(eta[..., 0]))

    def _check_support(self, y: Tensor, where: str) -> None:
        problem = "are negative" if self.shift == 0 else f"are below shift={self.shift}"
        self._reject(where, y, y < self.shift, problem, f"integer counts >= {self.shift}")


class Binomial(Family):
    """y in {0, ..., n} successes of n known trials; eta = logit, A = n softplus(eta)."""

    name = "binomial"
    args = ("total_count",)
    is_discrete = True

    def __init__(self, total_count: int):
        super().__init__()
        self.total_count = _integer("total_count", total_count, 1)

    def log_partition(self, eta: Tensor) -> Tensor:
        return self.total_count * F.softplus(eta[..., 0])

    def log_base_measure(self, y: Tensor) -> Tensor:
        y, n = _as_real(y), self.total_count
        return math.lgamma(n + 1) - torch.lgamma(y + 1) - torch.lgamma(n - y + 1)

    def mean(self, eta: Tensor) -> Tensor:
        return self.total_count * torch.sigmoid(eta[..., 0])

    def sample(self, eta: Tensor, generator: torch.Generator | None = None) -> Tensor:
        probs = torch.sigmoid(eta.detach()[..., 0])
        count = torch.full_like(probs, self.total_count)
        return torch.binomial(count, probs, generator=generator).long()

    def distribution(self, eta: Tensor) -> torch.distributions.Binomial:
        return torch.distributions.Binomial(self.total_count, logits=eta[..., 0])

    def _check_support(self, y: Tensor, where: str) -> None:
        n = self.total_count
        self._reject(where, y, (y < 0) | (y > n), "are out of range", f"counts in 0..{n}")


class NegativeBinomial(Family):
    """Counts y >= 0 with known ``total_count`` r, in torch's convention.

    y counts successes before r failures, each trial succeeding with probability p:
    p(y) = C(y + r - 1, y) (1 - p)^r p^y. Natural parameter eta = log p < 0, t = y,
    A = -r log(1 - e^eta). The link eta = logsigmoid(z) means p = sigmoid(z).
    Mean r p / (1 - p).
    """

    name = "negative_binomial"
    args = ("total_count",)
    is_discrete = True

    def __init__(self, total_count: float):
        super().__init__()
        self.total_count = _positive("total_count", total_count)

    def link(self, z: Tensor) -> Tensor:
        _check_last_dim(z, self.num_outputs, "z", self)
        return F.logsigmoid(z)

    def log_partition(self, eta: Tensor) -> Tensor:
        return -self.total_count * _log1mexp(eta[..., 0])

    def log_base_measure(self, y: Tensor) -> Tensor:
        y, r = _as_real(y), self.total_count
        return torch.lgamma(y + r) - math.lgamma(r) - torch.lgamma(y + 1)

    def _odds(self, eta: Tensor) -> Tensor:
        return torch.exp(eta[..., 0]) / -torch.expm1(eta[..., 0])  # p / (1 - p)

    def mean(self, eta: Tensor) -> Tensor:
        return self.total_count * self._odds(eta)

    def sample(self, eta: Tensor, generator: torch.Generator | None = None) -> Tensor:
        # Gamma-Poisson mixture, as in torch.distributions, but threading the generator.
        odds = self._odds(eta.detach())
        shape = torch.full_like(odds, self.total_count)
        rate = torch._standard_gamma(shape, generator=generator) * odds
        return poisson_counts(rate, generator, "negative binomial")

    def distribution(self, eta: Tensor) -> torch.distributions.NegativeBinomial:
        logits = eta[..., 0] - _log1mexp(eta[..., 0])
        return torch.distributions.NegativeBinomial(self.total_count, logits=logits)

    def _check_support(self, y: Tensor, where: str) -> None:
        self._reject(where, y, y < 0, "are negative", "integer counts >= 0")


# -- continuous families ----------------------------------------------------------------------
