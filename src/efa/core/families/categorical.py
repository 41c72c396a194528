"""Families of classes: categorical (unordered), ordinal (ordered, with learned scores) and
Bernoulli (two classes, 0 and 1)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from efa.core.families.base import Family, _as_real, _check_last_dim, _integer, _IntegerValues


class Categorical(Family):
    """y in {0, ..., K-1}; eta = logits, t = one-hot(y), A = logsumexp, h = 1.

    Parameters
    ----------
    num_categories : int
        K, the number of classes (≥ 2); it is also ``num_outputs`` and ``num_natural``.

    Raises
    ------
    ValueError
        If ``num_categories`` is not an integer ≥ 2.
    """

    name, args, is_discrete = "categorical", ("num_categories",), True

    def __init__(self, num_categories: int):
        super().__init__()
        self.num_categories = _integer("num_categories", num_categories, 2)
        self.num_outputs = self.num_natural = self.num_categories

    def sufficient_stat(self, y: Tensor) -> Tensor:
        """t(y) = one-hot(y).

        Parameters
        ----------
        y : torch.Tensor, shape (...)
            Class indices.

        Returns
        -------
        torch.Tensor, shape (..., K)
            The one-hot encoding, in a floating dtype.
        """
        dtype = y.dtype if y.is_floating_point() else torch.get_default_dtype()
        return F.one_hot(y.long(), self.num_categories).to(dtype)

    def log_partition(self, eta: Tensor) -> Tensor:
        """A(η) = logsumexp_k η_k.

        Parameters
        ----------
        eta : torch.Tensor, shape (..., K)
            The logits.

        Returns
        -------
        torch.Tensor, shape (...)
            A(η).
        """
        return torch.logsumexp(eta, dim=-1)

    def log_base_measure(self, y: Tensor) -> Tensor:
        """log h(y) = 0.

        Parameters
        ----------
        y : torch.Tensor, shape (...)
            Class indices.

        Returns
        -------
        torch.Tensor, shape (...)
            Zeros.
        """
        return torch.zeros(y.shape, dtype=_as_real(y).dtype, device=y.device)

    def log_prob(self, y: Tensor, eta: Tensor, base_measure: bool = True) -> Tensor:
        """η_y − logsumexp(η) = ⟨η, one-hot(y)⟩ − A(η), without the [..., K] one-hot.

        It uses PyTorch's fused log-softmax + NLL (forward and backward in one pass over the
        logits, where a separate logsumexp, its backward's exp and the gather's scatter were
        the largest cost after the matrix products at 10³ categories).

        Parameters
        ----------
        y : torch.Tensor, shape (...)
            Class indices.
        eta : torch.Tensor, shape (..., K)
            The logits.
        base_measure : bool
            Ignored: log h(y) = 0.

        Returns
        -------
        torch.Tensor, shape (...)
            log p(y).

        Raises
        ------
        ValueError
            If the last dimension of ``eta`` is not K.
        """
        _check_last_dim(eta, self.num_natural, "eta", self)
        flat = eta.reshape(-1, self.num_categories)
        return -F.cross_entropy(flat, y.long().reshape(-1), reduction="none").reshape(y.shape)

    def mean(self, eta: Tensor) -> Tensor:
        """The class probabilities (the mean of the one-hot encoding).

        Parameters
        ----------
        eta : torch.Tensor, shape (..., K)
            The logits.

        Returns
        -------
        torch.Tensor, shape (..., K)
            softmax(η); unlike other families, not a scalar per element.
        """
        return torch.softmax(eta, dim=-1)

    def sample(self, eta: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Draw a class per distribution (no gradient).

        Parameters
        ----------
        eta : torch.Tensor, shape (..., K)
            The logits.
        generator : torch.Generator, optional
            The random number generator (default: torch's global one).

        Returns
        -------
        torch.Tensor of torch.long, shape (...)
            The classes drawn.
        """
        probs = self.mean(eta.detach()).reshape(-1, self.num_categories)
        y = torch.multinomial(probs, 1, generator=generator)
        return y.reshape(eta.shape[:-1])

    def distribution(self, eta: Tensor) -> torch.distributions.Categorical:
        """The ``torch.distributions.Categorical`` with logits η; the classes are not ordered,
        so its ``mean`` and ``variance`` are refused (torch's are NaN).

        Parameters
        ----------
        eta : torch.Tensor, shape (..., K)
            The logits.

        Returns
        -------
        torch.distributions.Categorical
            Batch shape ``eta.shape[:-1]``.
        """
        return _Nominal(logits=eta)

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

    Parameters
    ----------
    num_classes : int
        K, the number of classes (≥ 2).

    Raises
    ------
    ValueError
        If ``num_classes`` is not an integer ≥ 2.
    """

    name, args, is_discrete = "ordinal", ("num_classes",), True

    def __init__(self, num_classes: int):
        super().__init__()
        self.num_classes = _integer("num_classes", num_classes, 2)
        self.raw_steps = nn.Parameter(torch.full((self.num_classes - 1,), math.log(math.e - 1)))
        self.base = nn.Parameter(torch.zeros(self.num_classes))

    def scores(self, dtype: torch.dtype | None = None) -> Tensor:
        """The class scores s: 0, then the cumulative sum of the positive steps.

        Parameters
        ----------
        dtype : torch.dtype, optional
            The dtype to compute them in (default: the parameters').

        Returns
        -------
        torch.Tensor, shape (K,)
            s_0 = 0 < s_1 < ... < s_{K−1}.
        """
        steps = F.softplus(self.raw_steps if dtype is None else self.raw_steps.to(dtype))
        return torch.cat([steps.new_zeros(1), steps.cumsum(0)])

    def logits(self, eta: Tensor) -> Tensor:
        """The class logits η s_k + b_k.

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 1)
            The natural parameter.

        Returns
        -------
        torch.Tensor, shape (..., K)
            The logits.

        Raises
        ------
        ValueError
            If the last dimension of ``eta`` is not 1.
        """
        _check_last_dim(eta, 1, "eta", self)
        return eta * self.scores(eta.dtype) + self.base.to(eta.dtype)

    def sufficient_stat(self, y: Tensor) -> Tensor:
        """t(y) = s_y, the class's score.

        Parameters
        ----------
        y : torch.Tensor, shape (...)
            Class indices.

        Returns
        -------
        torch.Tensor, shape (..., 1)
            t(y).
        """
        dtype = y.dtype if y.is_floating_point() else torch.get_default_dtype()
        return self.scores(dtype)[y.long()].unsqueeze(-1)

    def log_partition(self, eta: Tensor) -> Tensor:
        """A(η) = logsumexp_k (η s_k + b_k).

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 1)
            The natural parameter.

        Returns
        -------
        torch.Tensor, shape (...)
            A(η).
        """
        return torch.logsumexp(self.logits(eta), dim=-1)

    def log_base_measure(self, y: Tensor) -> Tensor:
        """log h(y) = b_y, the learned base measure of the class.

        Parameters
        ----------
        y : torch.Tensor, shape (...)
            Class indices.

        Returns
        -------
        torch.Tensor, shape (...)
            log h(y).
        """
        dtype = y.dtype if y.is_floating_point() else torch.get_default_dtype()
        return self.base.to(dtype)[y.long()]

    def log_prob(self, y: Tensor, eta: Tensor, base_measure: bool = True) -> Tensor:
        """The log-probability log_softmax_k(η s_k + b_k) at k = y.

        The natural form η s_y − A(η) + b_y subtracts terms of size η·s_{K−1} (in float32,
        positive log-probabilities at η ~ ±1e8); without the base measure the value is that
        form's η s_y − A(η), as in :meth:`Family.log_prob`.

        Parameters
        ----------
        y : torch.Tensor, shape (...)
            Class indices.
        eta : torch.Tensor, shape (..., 1)
            The natural parameter.
        base_measure : bool, default True
            Whether to add log h(y) = b_y.

        Returns
        -------
        torch.Tensor, shape (...)
            The log-probability of each class.
        """
        if not base_measure:
            return super().log_prob(y, eta, base_measure)
        logp = torch.log_softmax(self.logits(eta), dim=-1)
        shape = torch.broadcast_shapes(y.shape, logp.shape[:-1])
        index = y.long().expand(shape).unsqueeze(-1)
        return logp.expand(*shape, logp.shape[-1]).gather(-1, index).squeeze(-1)

    def probabilities(self, eta: Tensor) -> Tensor:
        """p(y = k) for every class k: softmax over k of η·s_k + b_k.

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 1)
            The natural parameter.

        Returns
        -------
        torch.Tensor, shape (..., K)
            The class probabilities.
        """
        return torch.softmax(self.logits(eta), dim=-1)

    def mean(self, eta: Tensor) -> Tensor:
        """E[y], the expected class index Σ_k k p(y = k).

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 1)
            The natural parameter.

        Returns
        -------
        torch.Tensor, shape (...)
            E[y].
        """
        k = torch.arange(self.num_classes, dtype=eta.dtype, device=eta.device)
        return self.probabilities(eta) @ k

    def sample(self, eta: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Draw a class per distribution (no gradient).

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 1)
            The natural parameter.
        generator : torch.Generator, optional
            The random number generator (default: torch's global one).

        Returns
        -------
        torch.Tensor of torch.long, shape (...)
            The classes drawn.
        """
        probs = self.probabilities(eta.detach()).reshape(-1, self.num_classes)
        return torch.multinomial(probs, 1, generator=generator).reshape(eta.shape[:-1])

    def distribution(self, eta: Tensor) -> torch.distributions.Categorical:
        """The ``torch.distributions.Categorical`` with the class logits of :meth:`logits`,
        whose ``mean`` and ``variance`` are those of the class index 0..K−1 (torch's are NaN).

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 1)
            The natural parameter.

        Returns
        -------
        torch.distributions.Categorical
            Batch shape ``eta.shape[:-1]``.
        """
        return _Ordered(logits=self.logits(eta))

    def _check_support(self, y: Tensor, where: str) -> None:
        K = self.num_classes
        self._reject(where, y, (y < 0) | (y >= K), "are out of range", f"class indices in [0, {K})")


class Bernoulli(Family):
    """y in {0, 1}; eta = logit, t = y, A = softplus(eta), h = 1."""

    name = "bernoulli"
    is_discrete = True

    def log_partition(self, eta: Tensor) -> Tensor:
        """A(η) = softplus(η) = log(1 + e^η).

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 1)
            The logit.

        Returns
        -------
        torch.Tensor, shape (...)
            A(η).
        """
        return F.softplus(eta[..., 0])

    def log_base_measure(self, y: Tensor) -> Tensor:
        """log h(y) = 0.

        Parameters
        ----------
        y : torch.Tensor, shape (...)
            Values in {0, 1}.

        Returns
        -------
        torch.Tensor, shape (...)
            Zeros.
        """
        return torch.zeros_like(_as_real(y))

    def mean(self, eta: Tensor) -> Tensor:
        """p(y = 1) = sigmoid(η).

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 1)
            The logit.

        Returns
        -------
        torch.Tensor, shape (...)
            The probability of a 1.
        """
        return torch.sigmoid(eta[..., 0])

    def sample(self, eta: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Draw y ~ Bernoulli(sigmoid(η)) (no gradient).

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 1)
            The logit.
        generator : torch.Generator, optional
            The random number generator (default: torch's global one).

        Returns
        -------
        torch.Tensor of torch.long, shape (...)
            Zeros and ones.
        """
        return torch.bernoulli(self.mean(eta.detach()), generator=generator).long()

    def distribution(self, eta: Tensor) -> torch.distributions.Bernoulli:
        """The ``torch.distributions.Bernoulli`` with logit η.

        Parameters
        ----------
        eta : torch.Tensor, shape (..., 1)
            The logit.

        Returns
        -------
        torch.distributions.Bernoulli
            Batch shape ``eta.shape[:-1]``.
        """
        return _Bernoulli(logits=eta[..., 0])

    def _check_support(self, y: Tensor, where: str) -> None:
        self._reject(where, y, (y != 0) & (y != 1), "are not 0 or 1", "values in {0, 1}")


class _Bernoulli(_IntegerValues, torch.distributions.Bernoulli):
    """torch's Bernoulli, whose ``log_prob`` also takes the integer 0/1 of a Bernoulli field."""


class _Nominal(torch.distributions.Categorical):
    """torch's Categorical for unordered classes: a mean of class indices means nothing."""

    @property
    def mean(self) -> Tensor:
        raise ValueError("a categorical field's classes are not ordered: it has no mean or "
                         "variance (use .probs, .mode or .sample())")

    @property
    def variance(self) -> Tensor:
        return self.mean


class _Ordered(torch.distributions.Categorical):
    """torch's Categorical over ordered classes: moments of the class index 0..K−1."""

    @property
    def mean(self) -> Tensor:
        return (self.probs * torch.arange(self._num_events).to(self.probs)).sum(-1)

    @property
    def variance(self) -> Tensor:
        # Centred (two passes): E[k²] − E[k]² cancels where the law sits on a high class.
        k = torch.arange(self._num_events).to(self.probs)
        return (self.probs * (k - self.mean[..., None]) ** 2).sum(-1)
