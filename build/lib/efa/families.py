"""Exponential families for the output layer of exponential family attention.

Each family describes how an observation y is modelled given the network's readout. A density
is written in natural form

    log p(y | eta) = <eta, t(y)> - A(eta) + log h(y)

and a family bundles the pieces: ``link`` (raw readout z -> natural parameter eta), the
sufficient statistic ``t``, the log-partition ``A``, the log base measure ``log h``, plus
``mean``, ``sample``, ``validate`` and a JSON ``config``.

Shape conventions, shared by every family:

* ``z`` has shape ``[..., num_outputs]`` and ``eta`` has shape ``[..., num_natural]``, even when
  ``num_natural == 1``; a missing trailing dim would otherwise broadcast silently.
* ``y`` has shape ``[...]`` (the batch shape of ``eta``); ``t(y)`` has shape ``[..., num_natural]``.
* ``log_partition``, ``log_base_measure``, ``log_prob`` and ``mean`` return ``[...]``, except
  ``Categorical.mean`` which returns the class probabilities ``[..., K]``.
* Discrete families (``is_discrete``) take integer-dtype targets and sample ``torch.long``;
  continuous families take and sample floating tensors. Computations follow ``eta``'s dtype.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "FAMILIES",
    "Bernoulli",
    "Binomial",
    "Categorical",
    "Family",
    "Gamma",
    "Gaussian",
    "HeteroscedasticGaussian",
    "LearnedGaussian",
    "NegativeBinomial",
    "Ordinal",
    "Poisson",
    "family_from_config",
]

_LOG_2 = math.log(2.0)
_LOG_2PI = math.log(2.0 * math.pi)


def _as_real(y: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    # Integer targets must be cast before they meet eta in arithmetic or lgamma.
    if dtype is None:
        dtype = y.dtype if y.is_floating_point() else torch.get_default_dtype()
    return y.to(dtype)


def _log1mexp(x: Tensor) -> Tensor:
    """log(1 - exp(x)) for x < 0, accurate on both sides of -log 2 (Maechler, 2012)."""
    near_zero = x > -_LOG_2
    # Each branch sees a clamped input so the branch torch.where discards has a finite
    # gradient; otherwise 0 * inf = nan leaks into the backward pass.
    a = torch.log(-torch.expm1(torch.where(near_zero, x, -_LOG_2)))
    b = torch.log1p(-torch.exp(torch.where(near_zero, -_LOG_2, x)))
    return torch.where(near_zero, a, b)


def _integer(name: str, value, low: int) -> int:
    """``value`` as an int >= ``low`` (a whole float counts), or an error naming ``name``."""
    number = _number(name, value)  # refuses None, strings and bools by name
    if not math.isfinite(number) or number != int(number) or number < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(number)


def _number(name: str, value) -> float:
    """``value`` as a float, or an error naming the parameter (not int()'s or float()'s)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"{name} must be a number, got {value!r}")
    return float(value)


def _non_negative(name: str, value) -> float:
    value = _number(name, value)
    if not 0 <= value < math.inf:
        raise ValueError(f"{name} must be >= 0 and finite, got {value!r}")
    return value


def _positive(name: str, value) -> float:
    value = _number(name, value)
    if not 0 < value < math.inf:
        raise ValueError(f"{name} must be > 0 and finite, got {value!r}")
    return value


class InvalidValues(ValueError):
    """Bad target values; ``index`` is the (flat) index of the first offender in the tensor
    that was validated, so a caller can translate it into a (sequence, position)."""

    def __init__(self, message: str, index: tuple[int, ...] | None = None):
        super().__init__(message)
        self.index = index


def _check_last_dim(x: Tensor, size: int, what: str, family: Family) -> None:
    if x.dim() == 0 or x.shape[-1] != size:
        raise ValueError(
            f"{family!r}: {what} must have a trailing dim of size {size}, "
            f"got shape {tuple(x.shape)}"
        )


class Family(nn.Module):
    """Base class: an exponential family parameterised by its natural parameter ``eta``.

    Subclasses implement ``link``, ``sufficient_stat``, ``log_partition``,
    ``log_base_measure``, ``mean``, ``sample``, ``distribution`` and ``_check_support``;
    the base class supplies ``log_prob``, the generic parts of ``validate``, ``config`` and
    ``repr``. It is an ``nn.Module`` so that a family can own learnable parameters
    (``LearnedGaussian``); calling the module applies ``link``.
    """

    name: str = "family"
    is_discrete: bool = False
    num_outputs: int = 1
    num_natural: int = 1

    # -- the exponential family --------------------------------------------------------------

    def link(self, z: Tensor) -> Tensor:
        """Map an unconstrained readout ``z [..., num_outputs]`` to ``eta [..., num_natural]``
        (default: the canonical link, η = z)."""
        _check_last_dim(z, self.num_outputs, "z", self)
        return z

    def forward(self, z: Tensor) -> Tensor:
        return self.link(z)

    def link_standardised(self, z: Tensor, loc: float, scale: float) -> Tensor:
        """``link`` for a read-out made in standardised units, (y − loc) / scale: location-scale
        families (the Gaussians) map it back to the data's units; the others ignore it."""
        return self.link(z)

    def sufficient_stat(self, y: Tensor) -> Tensor:
        """t(y) [..., num_natural] (default: t(y) = y, one natural parameter)."""
        return _as_real(y).unsqueeze(-1)

    def log_partition(self, eta: Tensor) -> Tensor:
        raise NotImplementedError

    def log_base_measure(self, y: Tensor) -> Tensor:
        raise NotImplementedError

    def log_prob(self, y: Tensor, eta: Tensor, base_measure: bool = True) -> Tensor:
        """``<eta, t(y)> - A(eta) + log h(y)``, shape ``[...]``.

        With ``base_measure=False`` the ``log h(y)`` term is dropped. It does not depend on
        eta, so gradients are unchanged, but the value is then *not* a log-likelihood. This is
        the reporting convention of the EFA paper, whose Poisson "cross-entropy" omits the
        ``-log y!`` term; use ``base_measure=True`` (the default) for comparable
        log-likelihoods, and say which one you report.
        """
        _check_last_dim(eta, self.num_natural, "eta", self)
        y = y.to(eta.dtype)
        lp = (eta * self.sufficient_stat(y)).sum(-1) - self.log_partition(eta)
        if base_measure:
            lp = lp + self.log_base_measure(y)
        return lp

    def mean(self, eta: Tensor) -> Tensor:
        """E[y] under ``eta``."""
        raise NotImplementedError

    def sample(self, eta: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Draw one y per element of ``eta``'s batch shape (no gradient)."""
        raise NotImplementedError

    def distribution(self, eta: Tensor) -> torch.distributions.Distribution:
        """The equivalent ``torch.distributions`` object (of the unshifted variable)."""
        raise NotImplementedError

    # -- validation -----------------------------------------------------------------------

    def validate(self, y: Any, where: str) -> None:
        """Raise ``ValueError`` unless ``y`` is a valid target tensor for this family.

        ``where`` names the data in the message, e.g. ``"field 'rating'"``. Checks are strict:
        discrete families need an integer dtype (whole-valued floats are rejected too, so a
        silent ``float -> long`` truncation can never happen), continuous ones a floating
        dtype; then finiteness and the support.
        """
        if not isinstance(y, Tensor):
            raise ValueError(
                f"{where}: expected a torch.Tensor for {self!r}, got {type(y).__name__}"
            )
        if y.is_floating_point():
            self._reject(where, y, torch.isnan(y), "are NaN", "no missing values")
            self._reject(where, y, torch.isinf(y), "are infinite", "finite values")
        integer = not (y.is_floating_point() or y.is_complex() or y.dtype == torch.bool)
        if self.is_discrete and not integer:
            hint = "convert it with .long()"
            if y.is_floating_point():
                fractional = y != torch.round(y)
                if fractional.any():
                    self._reject(
                        where,
                        y,
                        fractional,
                        "are not whole numbers",
                        f"integer values in an integer tensor (got {y.dtype})",
                    )
                hint = "its values are whole numbers, so convert it with .long()"
            raise ValueError(
                f"{where}: {self!r} expects an integer tensor, got dtype {y.dtype}; {hint}"
            )
        if not self.is_discrete and not y.is_floating_point():
            raise ValueError(
                f"{where}: {self!r} expects a floating-point tensor, got dtype {y.dtype}; "
                "convert it with .float()"
            )
        self._check_support(y, where)

    def _check_support(self, y: Tensor, where: str) -> None:
        pass

    def _reject(self, where: str, y: Tensor, bad: Tensor, problem: str, expected: str) -> None:
        """Raise if any element of ``bad`` is set, citing the count and the first offender."""
        if not bad.any():
            return
        bad_idx = bad.nonzero()
        first = tuple(bad_idx[0].tolist())
        raise InvalidValues(
            f"{where}: {len(bad_idx)} of {y.numel()} values {problem} "
            f"(first: {y[first].item()!r} at index {first}); {self!r} expects {expected}",
            first,
        )

    # -- serialisation --------------------------------------------------------------------

    args: tuple[str, ...] = ()  # constructor arguments, saved in config()

    def _config_args(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.args}

    def config(self) -> dict[str, Any]:
        """JSON-serialisable constructor arguments; learned parameters live in state_dict."""
        return {"family": self.name, **self._config_args()}

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self._config_args().items())


# -- discrete families ------------------------------------------------------------------------


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


class Gaussian(Family):
    """Real y ~ N(mu, sigma^2) with a fixed, known sigma; the readout z is the mean.

    eta = mu / sigma^2, t = y, A = sigma^2 eta^2 / 2,
    log h = -y^2 / (2 sigma^2) - log(2 pi sigma^2) / 2. For a learned sigma use
    ``LearnedGaussian`` (one global sigma) or ``HeteroscedasticGaussian`` (per prediction):
    they have two natural parameters, so they are separate classes rather than a mode here.
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
        _check_last_dim(z, self.num_outputs, "z", self)
        return z / self.sigma**2

    def link_standardised(self, z: Tensor, loc: float, scale: float) -> Tensor:
        return self.link(loc + scale * z)

    def log_partition(self, eta: Tensor) -> Tensor:
        return 0.5 * self.sigma**2 * eta[..., 0] ** 2

    def log_base_measure(self, y: Tensor) -> Tensor:
        var = self.sigma**2
        return -(_as_real(y) ** 2) / (2 * var) - 0.5 * (_LOG_2PI + math.log(var))

    def mean(self, eta: Tensor) -> Tensor:
        return self.sigma**2 * eta[..., 0]

    def sample(self, eta: Tensor, generator: torch.Generator | None = None) -> Tensor:
        mu = self.mean(eta.detach())
        return mu + self.sigma * torch.randn(
            mu.shape, generator=generator, dtype=mu.dtype, device=mu.device
        )

    def distribution(self, eta: Tensor) -> torch.distributions.Normal:
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
    ``log(init_sigma)``. ``config`` records only ``init_sigma``; the learned value travels
    with ``state_dict`` like any other parameter.
    """

    name = "learned_gaussian"
    args = ("init_sigma",)
    num_outputs = 1

    def __init__(self, init_sigma: float = 1.0):
        super().__init__()
        self.init_sigma = _positive("init_sigma", init_sigma)
        self.log_sigma = nn.Parameter(torch.tensor(math.log(self.init_sigma)))

    @property
    def sigma(self) -> Tensor:
        return self.log_sigma.exp()

    def link(self, z: Tensor) -> Tensor:
        _check_last_dim(z, self.num_outputs, "z", self)
        return self._natural(z[..., 0], self.log_sigma.to(z.dtype).exp())

    def link_standardised(self, z: Tensor, loc: float, scale: float) -> Tensor:
        return self.link(loc + scale * z)  # σ is learned in the data's units


class HeteroscedasticGaussian(_NormalNatural):
    """Real y ~ N(mu, sigma^2) with mean and scale both predicted: z = (mu, raw scale).

    sigma = softplus(raw) + ``min_scale``. The floor (default 1e-4) keeps the likelihood
    bounded: without it the model can drive sigma -> 0 on a well-fit point and log p -> inf.
    """

    name = "heteroscedastic_gaussian"
    args = ("min_scale",)
    num_outputs = 2

    def __init__(self, min_scale: float = 1e-4):
        super().__init__()
        self.min_scale = _non_negative("min_scale", min_scale)

    def link(self, z: Tensor) -> Tensor:
        _check_last_dim(z, self.num_outputs, "z", self)
        return self._natural(z[..., 0], F.softplus(z[..., 1]) + self.min_scale)

    def link_standardised(self, z: Tensor, loc: float, scale: float) -> Tensor:
        _check_last_dim(z, self.num_outputs, "z", self)
        sigma = scale * (F.softplus(z[..., 1]) + self.min_scale)
        return self._natural(loc + scale * z[..., 0], sigma)


class Gamma(Family):
    """Positive y ~ Gamma(shape alpha, rate beta), both predicted: z = (raw alpha, raw beta).

    alpha = softplus(z0) + ``floor``, beta = softplus(z1) + ``floor`` (default 1e-4, which
    keeps eta strictly inside the domain). eta = (alpha - 1, -beta), t = (log y, y),
    A = lgamma(eta1 + 1) - (eta1 + 1) log(-eta2), h = 1. Mean alpha / beta.
    """

    name, args, num_outputs, num_natural = "gamma", ("floor",), 2, 2

    def __init__(self, floor: float = 1e-4):
        super().__init__()
        self.floor = _non_negative("floor", floor)

    def link(self, z: Tensor) -> Tensor:
        _check_last_dim(z, self.num_outputs, "z", self)
        alpha_beta = F.softplus(z) + self.floor
        return torch.stack([alpha_beta[..., 0] - 1, -alpha_beta[..., 1]], dim=-1)

    def _shape_rate(self, eta: Tensor) -> tuple[Tensor, Tensor]:
        return eta[..., 0] + 1, -eta[..., 1]

    def sufficient_stat(self, y: Tensor) -> Tensor:
        y = _as_real(y)
        return torch.stack([torch.log(y), y], dim=-1)

    def log_partition(self, eta: Tensor) -> Tensor:
        alpha, beta = self._shape_rate(eta)
        return torch.lgamma(alpha) - alpha * torch.log(beta)

    def log_base_measure(self, y: Tensor) -> Tensor:
        return torch.zeros_like(_as_real(y))

    def mean(self, eta: Tensor) -> Tensor:
        alpha, beta = self._shape_rate(eta)
        return alpha / beta

    def sample(self, eta: Tensor, generator: torch.Generator | None = None) -> Tensor:
        alpha, beta = self._shape_rate(eta.detach())
        y = torch._standard_gamma(alpha, generator=generator) / beta
        # Small shapes can underflow to 0, which is outside the support (as torch does).
        return y.clamp(min=torch.finfo(y.dtype).tiny)

    def distribution(self, eta: Tensor) -> torch.distributions.Gamma:
        return torch.distributions.Gamma(*self._shape_rate(eta))

    def _check_support(self, y: Tensor, where: str) -> None:
        self._reject(where, y, y <= 0, "are not positive", "values > 0")


FAMILIES: dict[str, type[Family]] = {
    cls.name: cls
    for cls in (
        Categorical,
        Ordinal,
        Bernoulli,
        Gaussian,
        LearnedGaussian,
        HeteroscedasticGaussian,
        Poisson,
        Binomial,
        NegativeBinomial,
        Gamma,
    )
}


def family_from_config(config: dict[str, Any]) -> Family:
    """Rebuild a family from ``Family.config()``; learned parameters come from state_dict."""
    args = dict(config)
    name = args.pop("family", None)
    if name not in FAMILIES:
        raise ValueError(f"unknown family {name!r}; expected one of {sorted(FAMILIES)}")
    return FAMILIES[name](**args)
