"""What the latent-variable generators share: argument checks, seeded draws, data checks.

The generators of :mod:`efa.generators.latent` and :mod:`efa.generators.emissions` draw their
covariates, sequence lengths and (linear) latents here, in one fixed order from one seeded
``torch.Generator``, so that a seed gives the same data in each generator; their Bayes
predictors check the data and find each predicted token's context here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from numpy.typing import ArrayLike
from torch import Tensor

from efa.core.data import Sequences
from efa.training.scoring import check_int

__all__ = [
    "COVARIATES",
    "DIRECTIONS",
    "check_data",
    "check_design",
    "check_positive",
    "context_masks",
    "draw_design",
    "draw_linear",
    "nan_outside",
    "pack",
    "positive_int",
]

COVARIATES = ("normal", "circle", "uniform")
DIRECTIONS = ("bidirectional", "unidirectional")


def positive_int(name: str, v: object) -> int:
    """Return ``v`` if it is an integer >= 1, else raise an error naming ``name``.

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    v : object
        The value to check; a ``bool`` is not an integer here.

    Returns
    -------
    int
        ``v`` as a Python int.

    Raises
    ------
    ValueError
        When ``v`` is not an integer >= 1.
    """
    if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")
    return int(v)


def check_positive(**values: float) -> None:
    """Check that every keyword's value is a positive finite number.

    Parameters
    ----------
    **values
        Argument name → value; each must be an int or float (not a bool), finite and > 0.

    Raises
    ------
    ValueError
        Naming the first value that is not.
    """
    for name, v in values.items():
        if not (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                and v > 0):
            raise ValueError(f"{name} must be a positive finite number, got {v!r}")


def check_design(dim: int, covariates: str) -> None:
    """Check a generator's covariate dimension and covariate distribution.

    Parameters
    ----------
    dim : int
        The covariate dimension; must be a positive integer (not a bool).
    covariates : str
        The covariate distribution; must be one of :data:`COVARIATES`.

    Raises
    ------
    ValueError
        When either is not.
    """
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise ValueError(f"dim must be a positive integer, got {dim!r}")
    if covariates not in COVARIATES:
        raise ValueError(f"covariates must be one of {COVARIATES}, got {covariates!r}")


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


def draw_design(kind: str, n: int, length: int, dim: int, seed: int, min_length: int | None,
                covariates: ArrayLike | None = None) -> tuple[torch.Generator, Tensor, Tensor]:
    """Draw the covariates and lengths of ``n`` sequences, in this order, from one seed.

    Parameters
    ----------
    kind : {"normal", "circle", "uniform"}
        The covariate distribution: standard normal, uniform on the unit circle (``dim=2``
        only) or uniform on [-1, 1]^dim.
    n : int
        The number of sequences, >= 1.
    length : int
        The (largest) sequence length, >= 1.
    dim : int
        The covariate dimension.
    seed : int
        Seed of the ``torch.Generator`` that everything is drawn from.
    min_length : int or None
        With an int in 1..``length``, lengths are uniform in ``min_length..length``; with
        ``None`` every sequence has ``length`` tokens.
    covariates : array_like or None, default None
        Covariates that broadcast to ``[n, length, dim]``; they replace the drawn ones (which
        are still drawn, so the later draws of the stream do not change).

    Returns
    -------
    generator : torch.Generator
        The seeded generator, advanced past these draws, for the caller's further draws.
    c : torch.Tensor, shape (n, length, dim)
        The covariates, float64.
    lengths : torch.Tensor, shape (n,)
        The sequence lengths.

    Raises
    ------
    ValueError
        For a non-positive ``n`` or ``length``, a ``min_length`` outside 1..``length``, an
        unknown ``kind``, ``kind="circle"`` with ``dim != 2``, or given covariates that do not
        broadcast or are not finite.
    """
    lo = _check_size(n, length, min_length)
    check_int("seed", seed, None)  # int(1.5) would seed 1 silently
    g = torch.Generator().manual_seed(int(seed))
    c = _covariates(kind, n, length, dim, g)
    if covariates is not None:
        c = _given_covariates(covariates, n, length, dim)
    return g, c, _lengths(n, length, lo, g)


def draw_linear(gen: Any, n: int, length: int, seed: int, min_length: int | None,
                covariates: ArrayLike | None = None
                ) -> tuple[torch.Generator, Tensor, Tensor, Tensor]:
    """Draw the latents z ~ N(0, prior_var·I), covariates and lengths of a linear-latent model.

    Shared by the generators whose natural parameter is z·c (+ offset), in this order: same
    seed, same draws.

    Parameters
    ----------
    gen : object
        The generator; its ``dim``, ``prior_var`` and ``covariates`` attributes are read.
    n : int
        The number of sequences, >= 1.
    length : int
        The (largest) sequence length, >= 1.
    seed : int
        Seed of the ``torch.Generator``.
    min_length : int or None
        Lengths uniform in ``min_length..length``, or all ``length`` with ``None``.
    covariates : array_like or None, default None
        Covariates that broadcast to ``[n, length, dim]``, replacing the drawn ones.

    Returns
    -------
    generator : torch.Generator
        The seeded generator, advanced past these draws.
    z : torch.Tensor, shape (n, dim)
        The latents, float64.
    c : torch.Tensor, shape (n, length, dim)
        The covariates, float64.
    lengths : torch.Tensor, shape (n,)
        The sequence lengths.

    Raises
    ------
    ValueError
        As :func:`draw_design`.
    """
    lo = _check_size(n, length, min_length)
    check_int("seed", seed, None)  # int(1.5) would seed 1 silently
    g = torch.Generator().manual_seed(int(seed))
    z = torch.randn(n, gen.dim, generator=g, dtype=torch.float64) * math.sqrt(gen.prior_var)
    c = _covariates(gen.covariates, n, length, gen.dim, g)
    if covariates is not None:
        c = _given_covariates(covariates, n, length, gen.dim)
    return g, z, c, _lengths(n, length, lo, g)


def pack(c: Tensor, y: Tensor, signal: Tensor, lengths: Tensor,
         y_dtype: torch.dtype = torch.float32) -> tuple[Sequences, Tensor]:
    """Pack covariates and responses into ``Sequences``, with their padding zeroed.

    Parameters
    ----------
    c : torch.Tensor, shape (N, I, d)
        The covariates.
    y : torch.Tensor, shape (N, I)
        The responses.
    signal : torch.Tensor, shape (N, I)
        E[y | latent, c] at every token.
    lengths : torch.Tensor, shape (N,)
        The sequence lengths.
    y_dtype : torch.dtype, default torch.float32
        The dtype of the field ``y`` (``torch.long`` for counts and binary responses).

    Returns
    -------
    sequences : Sequences
        Fields ``c`` (float32) and ``y``, zero beyond each length.
    signal : torch.Tensor, shape (N, I)
        ``signal``, zero beyond each length.
    """
    valid = torch.arange(y.shape[1]) < lengths[:, None]
    y, signal = torch.where(valid, y, 0.0), torch.where(valid, signal, 0.0)
    c = torch.where(valid[..., None], c, 0.0)
    return Sequences({"c": c.float(), "y": y.to(y_dtype)}, lengths), signal


def context_masks(data: Sequences, direction: str) -> tuple[Tensor, Tensor]:
    """Find which observed tokens each predicted token is conditioned on.

    A predicted token i is conditioned on every real, observed token j ≠ i (bidirectional) or
    on those with j < i (unidirectional).

    Parameters
    ----------
    data : Sequences
        Sequences with a field ``y``.
    direction : {"bidirectional", "unidirectional"}
        The context of a token.

    Returns
    -------
    predicted : torch.Tensor of bool, shape (N, I)
        The tokens whose ``y`` is predicted (real and observed).
    context : torch.Tensor of bool, shape (N, I, I)
        ``context[n, i, j]``: whether token j is in the context of token i.

    Raises
    ------
    ValueError
        For an unknown ``direction``.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    pred = data.predicted("y")
    seen = data.predicted("y", scored=False)
    n = data.max_len
    ctx = seen[:, None, :] & ~torch.eye(n, dtype=torch.bool)
    if direction == "unidirectional":
        ctx = ctx & torch.ones(n, n, dtype=torch.bool).tril(-1)
    return pred, ctx


def check_data(data: Sequences, dim: int,
               support: tuple[Callable[[Tensor], Tensor], str] | None = None
               ) -> tuple[Tensor, Tensor]:
    """Check the sequences a Bayes predictor is given and return their fields as float64.

    Parameters
    ----------
    data : Sequences
        Sequences with fields ``c`` (shape ``[N, I, dim]``) and ``y`` (shape ``[N, I]``).
    dim : int
        The generator's covariate dimension.
    support : tuple of (callable, str) or None, default None
        ``(test, description)``: a function of the responses that is True where a value is in
        the family's support, and what the support is, for the message.

    Returns
    -------
    c : torch.Tensor, shape (N, I, dim)
        The covariates, float64.
    y : torch.Tensor, shape (N, I)
        The responses, float64.

    Raises
    ------
    KeyError
        When a field ``c`` or ``y`` is missing.
    ValueError
        When ``c`` has the wrong shape, or a real covariate vector or observed response is not
        finite or (with ``support``) outside the support; the message names the field, the
        sequence and the position.
    """
    for name in ("c", "y"):
        if name not in data.fields:
            raise KeyError(f"the sequences need fields 'c' and 'y' (have {list(data.fields)})")
    c, y = data.fields["c"].double(), data.fields["y"].double()
    if c.dim() != 3 or c.shape[-1] != dim:
        raise ValueError(f"field 'c' must have shape [N, I, {dim}], got {tuple(c.shape)}")
    seen = data.predicted("y", scored=False)
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


def nan_outside(values: Tensor, mask: Tensor) -> Tensor:
    """Return ``values`` where ``mask`` holds and NaN elsewhere.

    Parameters
    ----------
    values : torch.Tensor
        Any floating tensor.
    mask : torch.Tensor of bool
        Broadcastable to ``values``.

    Returns
    -------
    torch.Tensor
        ``values`` with NaN where ``mask`` is False.
    """
    return torch.where(mask, values, torch.full_like(values, float("nan")))
