"""Scoring a trained model: per-position and mean log-likelihoods, predicted means and their
squared error, over data of any size in batches, each number checked finite (an error names
the field, sequence and position of one that is not)."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable, Iterator
from typing import NoReturn

import numpy as np
import torch

from efa.core.conditional import ConditionalModel, evaluating
from efa.core.data import Sequences


def check_bool(name: str, v: object) -> None:
    """Check that ``v`` is True or False (a string such as "no" is truthy).

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    v : object
        The value.

    Raises
    ------
    ValueError
        When ``v`` is not a bool.
    """
    if not isinstance(v, bool | np.bool_):
        raise ValueError(f"{name} must be True or False, got {v!r}")


def check_int(name: str, v: object, low: int | None) -> None:
    """Check that ``v`` is an integer (not a bool), at least ``low`` when given.

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    v : object
        The value.
    low : int or None
        The smallest value allowed; None for no bound.

    Raises
    ------
    ValueError
        When ``v`` is not such an integer.
    """
    if isinstance(v, bool) or not isinstance(v, int | np.integer) or (low is not None and v < low):
        bound = f" >= {low}" if low is not None else ""
        raise ValueError(f"{name} must be an integer{bound}, got {v!r}")


def in_batches(data: Sequences, batch_size: int,
               device: torch.device | None = None) -> Iterator[tuple[torch.Tensor, Sequences]]:
    """Iterate over ``data`` in batches of ``batch_size`` sequences, in order.

    Parameters
    ----------
    data : Sequences
        The data.
    batch_size : int
        Sequences per batch, >= 1 (the last batch may be smaller).
    device : torch.device or None, default None
        Move each batch there (None: leave it where it is).

    Yields
    ------
    indices : torch.Tensor
        The batch's sequence indices in ``data``.
    batch : Sequences
        The sequences ``data[indices]``, on ``device``.

    Raises
    ------
    ValueError
        When ``batch_size`` is not a positive integer.
    """
    check_int("batch_size", batch_size, 1)
    for start in range(0, len(data), batch_size):
        idx = torch.arange(start, min(start + batch_size, len(data)))
        batch = data[idx]
        yield idx, batch if device is None or batch.device == device else batch.to(device)


@contextlib.contextmanager
def scoring_mode(model: ConditionalModel, data: Sequences) -> Iterator[None]:
    """Check ``data`` against the model and score in eval mode (a context manager).

    The model's training mode is restored afterwards, also when scoring raises.

    Parameters
    ----------
    model : ConditionalModel
        The model to score with.
    data : Sequences
        The data, checked with ``model.check`` on entering.

    Yields
    ------
    None
        Inside the block the model is in eval mode.
    """
    model.check(data)
    with evaluating(model):
        yield


@torch.no_grad()
def log_likelihoods(model: ConditionalModel, data: Sequences, batch_size: int = 1024,
                    base_measure: bool = True) -> dict[str, torch.Tensor]:
    """Per-position log-likelihoods log p(y_i | context) of every target field.

    The numbers behind :func:`evaluate`, for paired comparisons between models.

    Parameters
    ----------
    model : ConditionalModel
        A fitted model (``efa.EFA`` or a peer).
    data : Sequences
        The data to score; checked against the model's fields.
    batch_size : int
        Sequences per batch.
    base_measure : bool
        Include log h(y) (the full likelihood); False drops it, as some papers do.

    Returns
    -------
    dict of str to Tensor
        Per target field, an [N, I] float64 tensor, NaN where the field is not predicted.

    Raises
    ------
    FloatingPointError
        A non-finite value at a predicted position, naming the field, sequence and position.
    """
    check_bool("base_measure", base_measure)
    out = {f.name: torch.full(data.valid().shape, float("nan"), dtype=torch.float64)
           for f in model.target_fields}
    with scoring_mode(model, data):
        for idx, batch in in_batches(data, batch_size, model.device):
            for name, lp in model.position_log_likelihoods(batch, base_measure).items():
                if not torch.isfinite(lp[batch.predicted(name)]).all():
                    raise_non_finite(model, batch, idx, "log_likelihoods")
                out[name][idx, : lp.shape[1]] = lp.double().cpu()
    return out


@torch.no_grad()
def evaluate(model: ConditionalModel, data: Sequences, batch_size: int = 1024,
             base_measure: bool = True, fields: tuple[str, ...] | None = None
             ) -> dict[str, float]:
    """Mean log-likelihood per target field over all predicted positions of ``data``.

    Parameters
    ----------
    model : ConditionalModel
        A fitted model.
    data : Sequences
        The data to score.
    batch_size : int
        Sequences per batch.
    base_measure : bool
        Include log h(y) (the full likelihood).
    fields : tuple of str, optional
        Score these target fields only.

    Returns
    -------
    dict of str to float
        Nats per predicted position, per field. A field with no predicted position gets NaN
        and a warning, never a perfect score.

    Raises
    ------
    FloatingPointError
        A non-finite log-likelihood, naming the field, sequence and position.

    Examples
    --------
    >>> efa.evaluate(model, val)  # doctest: +SKIP
    {'movie': -3.41, 'rating': -1.02}
    """
    check_bool("base_measure", base_measure)
    if fields is not None:
        check_targets(model, fields)
    names = [f.name for f in model.target_fields if fields is None or f.name in fields]
    sums: dict[str, float] = dict.fromkeys(names, 0.0)
    counts: dict[str, int] = dict.fromkeys(names, 0)
    with scoring_mode(model, data):
        for idx, batch in in_batches(data, batch_size, model.device):
            for name, (s, n) in model.log_likelihood_sums(batch, base_measure, check=False).items():
                if name not in sums:
                    continue
                if not torch.isfinite(s):
                    raise_non_finite(model, batch, idx, "evaluate")
                sums[name] += float(s)
                counts[name] += n
    out = {}
    for name in sums:
        if counts[name] == 0:
            warn_nothing_predicted(name)
            out[name] = float("nan")
        else:
            out[name] = sums[name] / counts[name]
    return out


def warn_nothing_predicted(name: str) -> None:
    """Warn that field ``name`` has no predicted position, so its mean is NaN (never a perfect
    score); the warning points at the caller of the public scoring function.

    Parameters
    ----------
    name : str
        The field.
    """
    warnings.warn(f"field {name!r} has no predicted position in the data (all values missing "
                  "or not scored): its log-likelihood is NaN", stacklevel=3)


def check_targets(model: ConditionalModel, names: Iterable[str]) -> None:
    """Check that ``names`` are target fields of ``model``.

    Parameters
    ----------
    model : ConditionalModel
        The model.
    names : iterable of str
        Field names.

    Raises
    ------
    ValueError
        Naming the fields that are not targets, and the model's target fields.
    TypeError
        If ``names`` is a string (a tuple of one name is meant).
    """
    if isinstance(names, str):
        raise TypeError(f"fields must be a tuple of names, got the string {names!r}; write "
                        f"({names!r},)")
    names = list(names)
    if not names:
        raise ValueError("fields=() names no field: pass None for every target field")
    targets = [f.name for f in model.target_fields]
    unknown = [n for n in names if n not in targets]
    if unknown:
        raise ValueError(f"{unknown} are not target fields of the model; its target fields "
                         f"are {targets}")


def raise_non_finite(model: ConditionalModel, batch: Sequences, idx: torch.Tensor, where: str,
                     extra: str = "") -> NoReturn:
    """Find the first position whose log-likelihood is not finite and say where it is.

    Always raises: called once a loss or score was found not finite.

    Parameters
    ----------
    model : ConditionalModel
        The model.
    batch : Sequences
        The batch with the non-finite number.
    idx : torch.Tensor
        The batch's sequence indices in the whole data, for the message.
    where : str
        What found it (e.g. ``"evaluate"``), the start of the message.
    extra : str, default ""
        Appended to the location in the message (e.g. the epoch).

    Raises
    ------
    FloatingPointError
        Naming the field, sequence, position and value of the first non-finite
        log-likelihood, or saying that the parameters diverged when every one is finite.
    """
    with torch.no_grad():
        lps = model.position_log_likelihoods(batch)
    for name, lp in lps.items():
        bad = batch.predicted(name) & ~torch.isfinite(lp)
        if bad.any():
            b, i = bad.nonzero()[0].tolist()
            y = batch.fields[name][b, i].item()
            raise FloatingPointError(
                f"{where}: non-finite log-likelihood {lp[b, i].item()} of field {name!r} at "
                f"sequence {int(idx[b])}, position {i} (value {y!r}){extra}: the value may be "
                "extreme for the model (check it, and a Value field's loc/scale) or the "
                "parameters diverged (lower the learning rate)"
            )
    raise FloatingPointError(f"{where}: non-finite loss with finite log-likelihoods at every "
                             f"position{extra}: the parameters diverged; lower the learning rate")


@torch.no_grad()
def predictions(model: ConditionalModel, data: Sequences, name: str,
                batch_size: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the observed y and the predicted mean E[y | context] at every predicted position.

    Parameters
    ----------
    model : ConditionalModel
        A fitted model.
    data : Sequences
        The data.
    name : str
        A target field.
    batch_size : int, default 1024
        Sequences per batch.

    Returns
    -------
    observed : torch.Tensor
        The values at the predicted positions of ``name``, in row-major order.
    mean : torch.Tensor
        The predicted means there (class probabilities ``[n, K]`` for a category).

    Raises
    ------
    FloatingPointError
        A non-finite predicted mean, naming the field, sequence and position.
    """
    f = model.target(name)
    ys, means = [], []
    with scoring_mode(model, data):
        for idx, batch in in_batches(data, batch_size, model.device):
            mask = batch.predicted(name)
            mean = model._means_at(batch, mask)[0][name][mask]  # checked here: global ids
            bad = ~torch.isfinite(mean.reshape(len(mean), -1) if len(mean) else
                                  mean.new_zeros(0, 1)).all(1)
            if bad.any():
                b, i = mask.nonzero()[bad][0]
                raise FloatingPointError(
                    f"predictions: non-finite predicted mean of field {f.name!r} at sequence "
                    f"{int(idx[b])}, position {int(i)}"
                )
            ys.append(batch.fields[name][mask].cpu())
            means.append(mean.cpu())
    return torch.cat(ys), torch.cat(means)


def mean_squared_error(model: ConditionalModel, data: Sequences, name: str) -> float:
    """Compute the mean squared error of the predicted mean of a value field.

    Parameters
    ----------
    model : ConditionalModel
        A fitted model.
    data : Sequences
        The data; every predicted position of ``name`` counts.
    name : str
        A target value field.

    Returns
    -------
    float
        The mean of (y − E[y | context])², in the field's units².

    Raises
    ------
    ValueError
        When ``name`` is not a value field or has no predicted position in ``data``.
    """
    f = model.target(name)
    if f.kind != "value":
        raise ValueError(f"field {name!r} is a {f.kind}: the mean squared error needs a numeric "
                         "value field (use evaluate for a log-likelihood)")
    y, mu = predictions(model, data, name)
    if len(y) == 0:
        raise ValueError(f"field {name!r} has no predicted position in the data")
    return float(((y.to(mu.dtype) - mu) ** 2).mean())
