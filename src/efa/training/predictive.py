"""Predictive distributions in data sets: quantiles and central intervals of
``model.predictive`` (scipy's inverse CDFs, exact for the discrete families too), and a pandas
table per predicted position (mean, standard deviation, interval, surprisal, residual)."""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import pandas as pd
import torch
from scipy import stats
from torch import distributions as D

from efa.core.conditional import ConditionalModel
from efa.core.data import Sequences
from efa.core.families.base import Shifted
from efa.core.fields import Category
from efa.training.scoring import in_batches, scoring_mode

__all__ = ["interval", "predictive_frame", "quantile"]


def check_level(name: str, q: float) -> float:
    """Check an interval level or quantile: a number strictly between 0 and 1.

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    q : float
        The value.

    Returns
    -------
    float
        ``q`` as a float.

    Raises
    ------
    ValueError
        When ``q`` is not an int or float (a bool is not) in (0, 1).
    """
    if (isinstance(q, bool) or not isinstance(q, int | float | np.integer | np.floating)
            or not 0 < q < 1):
        raise ValueError(f"{name} must be a number strictly between 0 and 1, got {q!r}")
    return float(q)


def scipy_law(dist: D.Distribution) -> Any:
    """Return the same law as a frozen scipy distribution (batched), for its exact CDF and inverse.

    Parameters
    ----------
    dist : torch.distributions.Distribution
        A batch of normal, gamma, Poisson, binomial, Bernoulli or negative binomial
        distributions.

    Returns
    -------
    scipy.stats frozen distribution
        With float64 parameters of the batch's shape (a Bernoulli as a binomial with one
        trial).

    Raises
    ------
    TypeError
        For another distribution.
    """
    as_np = lambda t: t.detach().double().cpu().numpy()  # noqa: E731
    # Probabilities from the logits in float64: a float32 p near 1 keeps few digits of 1 − p
    # (a negative binomial's median at mean 1e7 was 15 % off).
    p = lambda d, sign=1: as_np(torch.sigmoid(sign * d.logits.detach().double()))  # noqa: E731
    if isinstance(dist, D.Normal):
        return stats.norm(as_np(dist.loc), as_np(dist.scale))
    if isinstance(dist, D.Gamma):
        return stats.gamma(as_np(dist.concentration), scale=1 / as_np(dist.rate))
    if isinstance(dist, D.Poisson):
        return stats.poisson(as_np(dist.rate))
    if isinstance(dist, D.Binomial):
        return stats.binom(as_np(dist.total_count), p(dist))
    if isinstance(dist, D.Bernoulli):
        return stats.binom(1, p(dist))
    if isinstance(dist, D.NegativeBinomial):
        # torch counts successes (probability p) before total_count failures; scipy counts
        # failures before n successes: the same law with scipy's p = 1 − torch's.
        return stats.nbinom(as_np(dist.total_count), p(dist, -1))
    raise TypeError(f"no scipy law for {type(dist).__name__}")


def quantile(dist: D.Distribution, q: float) -> torch.Tensor:
    """Return the q-quantile of each distribution in the batch.

    For a discrete distribution, the smallest y with F(y) ≥ q.

    Parameters
    ----------
    dist : torch.distributions.Distribution
        Normal, gamma, (shifted) Poisson, binomial, negative binomial or Bernoulli; a
        Categorical over ordered classes (an ordinal field) reads its classes in index order.
    q : float
        The quantile's level, in (0, 1).

    Returns
    -------
    torch.Tensor
        The quantiles, float64, on the CPU, the batch's shape.

    Raises
    ------
    ValueError
        When ``q`` is not in (0, 1).
    TypeError
        For another distribution.
    """
    q = check_level("q", q)
    if isinstance(dist, Shifted):
        return quantile(dist.base, q) + dist.shift
    if isinstance(dist, D.Categorical):
        cdf = dist.probs.detach().double().cumsum(-1).cpu()
        return (cdf < q - 1e-12).sum(-1).clamp(max=cdf.shape[-1] - 1).double()
    return torch.as_tensor(np.asarray(scipy_law(dist).ppf(q), dtype=np.float64))


def _moments(dist: D.Distribution) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and standard deviation, float64 on the CPU (an ordinal's over its class
    indices)."""
    return dist.mean.detach().double().cpu(), dist.stddev.detach().double().cpu()


def interval(dist: D.Distribution, level: float = 0.9) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the central ``level`` interval: the (1 − level)/2 and (1 + level)/2 quantiles.

    Parameters
    ----------
    dist : torch.distributions.Distribution
        A batch of distributions, as for :func:`quantile`.
    level : float, default 0.9
        The interval's level, in (0, 1).

    Returns
    -------
    lower : torch.Tensor
        The lower ends, float64.
    upper : torch.Tensor
        The upper ends, float64.

    Raises
    ------
    ValueError
        When ``level`` is not in (0, 1).
    """
    level = check_level("level", level)
    return quantile(dist, (1 - level) / 2), quantile(dist, (1 + level) / 2)


@torch.no_grad()
def predictive_frame(model: ConditionalModel, data: Sequences, field: str, level: float = 0.9,
                     batch_size: int = 1024) -> pd.DataFrame:
    """The predictive distribution at every predicted position of ``field``, as a table.

    Parameters
    ----------
    model : ConditionalModel
        A fitted model.
    data : Sequences
        The data; its predicted positions (``data.predicted(field)``) are tabulated.
    field : str
        A target field.
    level : float, default 0.9
        The central interval's level, in (0, 1).
    batch_size : int, default 1024
        Sequences per batch.

    Returns
    -------
    pandas.DataFrame
        One row per predicted position: sequence, position, the observed value, the predictive
        mean and standard deviation, the central ``level`` interval, whether it covers the
        observation, the surprisal −log p(y_i | context) (nats, efa's log-likelihood) and the
        standardised residual (y − mean) / sd. For a category, mean and sd are left out and
        the most probable label and its probability are given instead.
    """
    level = check_level("level", level)
    f = model.target(field)
    categorical = isinstance(f, Category)
    parts = []
    with scoring_mode(model, data):
        for idx, batch in in_batches(data, batch_size, model.device):
            at = batch.predicted(field)
            if not at.any():  # a batch may hold none (missing or unscored values)
                continue
            dist = model.predictive(batch, field, at)
            y = batch.fields[field][at]
            rows, pos = at.nonzero(as_tuple=True)
            part = {"sequence": idx.cpu()[rows.cpu()].numpy(), "position": pos.cpu().numpy(),
                    "observed": y.detach().cpu().numpy()}
            discrete = isinstance(dist, D.Categorical)
            surprisal = -dist.log_prob(y.long() if discrete else y.to(dist.mean.dtype))
            if categorical:
                probs = cast(D.Categorical, dist).probs.detach().cpu()
                part |= {"predicted": probs.argmax(-1).numpy(),
                         "probability": probs.max(-1).values.double().numpy()}
            else:
                mean, sd = _moments(dist)
                lower, upper = interval(dist, level)
                flat = (sd == 0) & (y.cpu().double() != mean)
                if flat.any():  # (y − mean) / 0: a probability saturated at 0 or 1
                    k = int(flat.nonzero()[0, 0])
                    raise FloatingPointError(
                        f"predictive_frame: the predictive of field {field!r} has no spread at "
                        f"sequence {int(idx.cpu()[rows.cpu()[k]])}, position {int(pos[k])} (a "
                        "probability of 0 or 1) and the observed value differs from its mean: the "
                        "standardised residual is undefined there")
                spread = torch.where(sd == 0, 1.0, sd)  # y equals the mean there: residual 0
                part |= {"mean": mean.numpy(), "sd": sd.numpy(), "lower": lower.numpy(),
                         "upper": upper.numpy(),
                         "covered": ((y.cpu().double() >= lower) & (y.cpu().double() <= upper)
                                     ).numpy(),
                         "residual": ((y.cpu().double() - mean) / spread).numpy()}
            part["surprisal"] = surprisal.detach().double().cpu().numpy()
            if not np.isfinite(part["surprisal"]).all():
                k = int(np.flatnonzero(~np.isfinite(part["surprisal"]))[0])
                raise FloatingPointError(
                    f"predictive_frame: non-finite log-likelihood of field {field!r} at sequence "
                    f"{part['sequence'][k]}, position {part['position'][k]}")
            parts.append(pd.DataFrame(part))
    if not parts:  # nothing predicted: the table's columns, no rows
        columns = (["predicted", "probability"] if categorical
                   else ["mean", "sd", "lower", "upper", "covered", "residual"])
        parts.append(pd.DataFrame({c: [] for c in ["sequence", "position", "observed",
                                                   *columns, "surprisal"]}))
    frame = pd.concat(parts, ignore_index=True)
    frame.attrs["level"] = level
    frame.attrs["field"] = field
    return frame if len(frame) else frame.astype({"sequence": int, "position": int})
