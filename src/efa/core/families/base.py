"""The exponential-family contract (:class:`Family`) and the checks every family shares."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

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
    """Bad target values, raised by :meth:`Family.validate`.

    Parameters
    ----------
    message : str
        What is wrong, naming the first offender.
    index : tuple of int, optional
        The index of the first offender in the tensor that was validated (kept as the
        attribute ``index``), so that a caller can translate it into a (sequence, position).
    """

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

    Class attributes say what a family is: ``name`` (its key in ``FAMILIES`` and in saved
    configs), ``is_discrete`` (integer targets), ``num_outputs`` (the width of the read-out z)
    and ``num_natural`` (the width of η); ``args`` names the constructor arguments that
    ``config`` saves.
    """

    name: str = "family"
    is_discrete: bool = False
    num_outputs: int = 1
    num_natural: int = 1

    def __init__(self) -> None:  # declares "no arguments" (nn.Module's reads as *args)
        super().__init__()

    # -- the exponential family --------------------------------------------------------------

    def link(self, z: Tensor) -> Tensor:
        """Map an unconstrained read-out z to the natural parameter η.

        The base class is the canonical link, η = z.

        Parameters
        ----------
        z : torch.Tensor, shape (..., num_outputs)
            The network's read-out.

        Returns
        -------
        torch.Tensor, shape (..., num_natural)
            The natural parameter η.

        Raises
        ------
        ValueError
            If the last dimension of ``z`` is not ``num_outputs``.
        """
        _check_last_dim(z, self.num_outputs, "z", self)
        return z

    def forward(self, z: Tensor) -> Tensor:
        """Calling the family applies :meth:`link`.

        Parameters
        ----------
        z : torch.Tensor, shape (..., num_outputs)
            The network's read-out.

        Returns
        -------
        torch.Tensor, shape (..., num_natural)
            The natural parameter η.
        """
        return self.link(z)

    def link_standardised(self, z: Tensor, loc: float, scale: float) -> Tensor:
        """:meth:`link` for a read-out made in standardised units, (y − loc) / scale.

        Location-scale families (the Gaussians) map it back to the data's units; the others,
        as the base class, ignore ``loc`` and ``scale``.

        Parameters
        ----------
        z : torch.Tensor, shape (..., num_outputs)
            The network's read-out, in standardised units.
        loc : float
            The location the values were standardised with.
        scale : float
            The scale the values were standardised with.

        Returns
        -------
        torch.Tensor, shape (..., num_natural)
            The natural parameter η, for the values in the data's units.
        """
        return self.link(z)

    def sufficient_stat(self, y: Tensor) -> Tensor:
        """The sufficient statistic t(y); the base class is t(y) = y (one natural parameter).

        Parameters
        ----------
        y : torch.Tensor, shape (...)
            Values (integer targets are cast to a floating dtype).

        Returns
        -------
        torch.Tensor, shape (..., num_natural)
            t(y).
        """
        return _as_real(y).unsqueeze(-1)

    def log_partition(self, eta: Tensor) -> Tensor:
        """A(η), the log-partition function.

        Parameters
        ----------
        eta : torch.Tensor, shape (..., num_natural)
            The natural parameter.

        Returns
        -------
        torch.Tensor, shape (...)
            A(η).
        """
        raise NotImplementedError

    def log_base_measure(self, y: Tensor) -> Tensor:
        """log h(y), the log base measure.

        Parameters
        ----------
        y : torch.Tensor, shape (...)
            Values.

        Returns
        -------
        torch.Tensor, shape (...)
            log h(y), elementwise.
        """
        raise NotImplementedError

    def log_prob(self, y: Tensor, eta: Tensor, base_measure: bool = True) -> Tensor:
        """The log-density ⟨η, t(y)⟩ − A(η) + log h(y).

        With ``base_measure=False`` the log h(y) term is dropped. It does not depend on
        η, so gradients are unchanged, but the value is then *not* a log-likelihood. This is
        the reporting convention of the EFA paper, whose Poisson "cross-entropy" omits the
        −log y! term; use ``base_measure=True`` (the default) for comparable
        log-likelihoods, and say which one you report.

        Parameters
        ----------
        y : torch.Tensor, shape (...)
            Values (cast to ``eta``'s dtype).
        eta : torch.Tensor, shape (..., num_natural)
            The natural parameter.
        base_measure : bool
            Whether to add log h(y).

        Returns
        -------
        torch.Tensor, shape (...)
            The log-density of each value.

        Raises
        ------
        ValueError
            If the last dimension of ``eta`` is not ``num_natural``.
        """
        _check_last_dim(eta, self.num_natural, "eta", self)
        y = y.to(eta.dtype)
        lp = (eta * self.sufficient_stat(y)).sum(-1) - self.log_partition(eta)
        if base_measure:
            lp = lp + self.log_base_measure(y)
        return lp

    def mean(self, eta: Tensor) -> Tensor:
        """E[y] under η.

        Parameters
        ----------
        eta : torch.Tensor, shape (..., num_natural)
            The natural parameter.

        Returns
        -------
        torch.Tensor, shape (...)
            The mean of each distribution.
        """
        raise NotImplementedError

    def sample(self, eta: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Draw one y per element of η's batch shape (no gradient).

        Parameters
        ----------
        eta : torch.Tensor, shape (..., num_natural)
            The natural parameter.
        generator : torch.Generator, optional
            The random number generator (default: torch's global one).

        Returns
        -------
        torch.Tensor, shape (...)
            The draws: ``torch.long`` for discrete families, ``eta``'s dtype otherwise.
        """
        raise NotImplementedError

    def distribution(self, eta: Tensor) -> torch.distributions.Distribution:
        """The equivalent ``torch.distributions`` object (of the unshifted variable).

        Parameters
        ----------
        eta : torch.Tensor, shape (..., num_natural)
            The natural parameter.

        Returns
        -------
        torch.distributions.Distribution
            The distribution, with batch shape ``eta.shape[:-1]``.
        """
        raise NotImplementedError

    def enumerable_support(self) -> Tensor | None:
        """The values y can take, when there are finitely many: what the family's
        ``torch.distributions`` object enumerates.

        Returns
        -------
        torch.Tensor or None
            The support in order (classes, 0/1, 0..n), or None where it is not finite
            (counts without bound, continuous values).
        """
        if not self.is_discrete:
            return None
        # any natural parameter gives the support; -1 is inside every discrete family's domain
        dist = self.distribution(torch.full((self.num_natural,), -1.0))
        if not dist.has_enumerate_support:
            return None
        return dist.enumerate_support(expand=False).reshape(-1).long()

    # -- validation -----------------------------------------------------------------------

    def validate(self, y: Any, where: str) -> None:
        """Raise ``ValueError`` unless ``y`` is a valid target tensor for this family.

        Checks are strict: discrete families need an integer dtype (whole-valued floats are
        rejected too, so a silent ``float -> long`` truncation can never happen), continuous
        ones a floating dtype; then finiteness and the support.

        Parameters
        ----------
        y : torch.Tensor
            The target values (any shape).
        where : str
            Names the data in the message, e.g. ``"field 'rating'"``.

        Raises
        ------
        InvalidValues
            If some values are NaN, infinite, not whole (discrete families) or outside the
            support; it is a ``ValueError`` whose ``index`` is the first offender's.
        ValueError
            If ``y`` is not a tensor or has the wrong kind of dtype.
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
        """The family as a JSON-serialisable dict (its name and constructor arguments).

        Learned parameters are not in it: they live in ``state_dict``.

        Returns
        -------
        dict
            ``{"family": name, **arguments}``, which
            :func:`efa.core.families.family_from_config` rebuilds the family from.
        """
        return {"family": self.name, **self._config_args()}

    def extra_repr(self) -> str:
        """The constructor arguments, for ``repr``.

        Returns
        -------
        str
            ``"name=value, ..."``.
        """
        return ", ".join(f"{k}={v!r}" for k, v in self._config_args().items())


# -- discrete families ------------------------------------------------------------------------


class _IntegerValues(torch.distributions.Distribution):
    """Put first among a torch distribution's bases: ``log_prob`` of the integer values a
    discrete field holds, in the parameters' dtype. torch's own needs floats (Bernoulli) or
    computes lgamma(y + 1) of an int64 count in float32 (0.03 nats off at y = 1e5 in a
    float64 model)."""

    def log_prob(self, value: Tensor) -> Tensor:
        return super().log_prob(value if value.is_floating_point()
                                else value.to(self.mean.dtype))


class Shifted(torch.distributions.Distribution):
    """y = shift + z with z ~ ``base`` (a family with ``shift``, e.g. ratings 1 + Poisson):
    moments, samples and ``log_prob`` of y itself.

    Parameters
    ----------
    base : torch.distributions.Distribution
        The distribution of z.
    shift : int
        The shift added to z.
    """

    arg_constraints: dict = {}

    def __init__(self, base: torch.distributions.Distribution, shift: int):
        self.base, self.shift = base, shift
        super().__init__(base.batch_shape, base.event_shape, validate_args=False)

    @property
    def support(self) -> Any:
        return torch.distributions.constraints.greater_than_eq(self.shift)

    @property
    def mean(self) -> Tensor:
        return self.base.mean + self.shift

    @property
    def variance(self) -> Tensor:
        return self.base.variance

    def sample(self, sample_shape: torch.Size | list[int] | tuple[int, ...] = ()) -> Tensor:
        """Draw y = shift + z.

        Parameters
        ----------
        sample_shape : torch.Size or sequence of int
            The shape of draws per distribution (default: one draw).

        Returns
        -------
        torch.Tensor
            The draws, of shape ``sample_shape + batch_shape``.
        """
        return self.base.sample(torch.Size(sample_shape)) + self.shift

    def log_prob(self, value: Tensor) -> Tensor:
        """log p(y) = log p_base(y − shift).

        Parameters
        ----------
        value : torch.Tensor
            Values of y, broadcastable to the batch shape.

        Returns
        -------
        torch.Tensor
            Their log-probabilities.
        """
        return self.base.log_prob(value - self.shift)
