"""Is a fitted model's predictive honest? ``calibration(model, data, field)``: for a value field,
the coverage of central intervals at several levels and the PIT histogram (randomised for
discrete families, so that a calibrated model gives uniform PITs exactly); for a category,
the reliability curve of the top-1 probability and the expected calibration error.
``conformal_level(model, held_out, field, level)``: the level of the predictive's own central
interval that holds ``level`` of new values, calibrated on held-out data (split conformal)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from scipy import stats
from torch import distributions as D

from efa.core.conditional import ConditionalModel
from efa.core.data import Sequences
from efa.core.families.base import Shifted
from efa.core.fields import Category
from efa.training.predictive import check_level, interval, scipy_law
from efa.training.scoring import check_int, in_batches, scoring_mode

__all__ = ["Calibration", "calibration", "cdf", "conformal_level"]


def cdf(dist: D.Distribution, y: torch.Tensor) -> torch.Tensor:
    """Return P(Y ≤ y) of each distribution in the batch at its own y.

    Categorical and shifted distributions are handled directly, the others through their
    scipy law (:func:`efa.training.predictive.scipy_law`).

    Parameters
    ----------
    dist : torch.distributions.Distribution
        A batch of predictive distributions, e.g. from ``model.predictive``.
    y : torch.Tensor
        One value per distribution, the batch's shape.

    Returns
    -------
    torch.Tensor
        The CDF values, float64, on the CPU.
    """
    if isinstance(dist, Shifted):
        return cdf(dist.base, y - dist.shift)
    if isinstance(dist, D.Categorical):
        c = dist.probs.detach().double().cpu().cumsum(-1)
        k = y.detach().cpu().long()
        out = torch.where(k < 0, 0.0, c.gather(-1, k.clamp(0, c.shape[-1] - 1)[..., None])[..., 0])
        return torch.where(k >= c.shape[-1], 1.0, out)
    out = scipy_law(dist).cdf(y.detach().double().cpu().numpy())
    return torch.as_tensor(np.asarray(out, dtype=np.float64))


def _discrete(dist: D.Distribution) -> bool:
    base = dist.base if isinstance(dist, Shifted) else dist
    return not isinstance(base, D.Normal | D.Gamma)


def _pit(dist: D.Distribution, y: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """The PIT F(y), drawn uniformly in [F(y − 1), F(y)] for a discrete family, so that it is
    uniform exactly when the predictive is the law of y."""
    upper = cdf(dist, y)
    lower = cdf(dist, y - 1) if _discrete(dist) else upper
    return lower + torch.rand(len(y), generator=g, dtype=torch.float64) * (upper - lower)


@dataclass
class Calibration:
    """What :func:`calibration` measured.

    A value field fills ``levels``, ``coverage``, ``pit`` and ``pit_p_value``; a category
    fills ``confidence``, ``accuracy``, ``count`` and ``ece``. The other fields keep their
    empty defaults.

    Parameters
    ----------
    field : str
        The field measured.
    kind : {"value", "category"}
        Which kind of field it is.
    n : int
        The number of predicted positions used.
    levels : tuple of float, default ()
        The nominal levels of the central intervals.
    coverage : tuple of float, default ()
        The share of observations inside each level's central interval.
    pit : tuple of int, default ()
        The PIT histogram: counts in equal bins of [0, 1].
    pit_p_value : float or None, default None
        The p-value of a χ² test of the PIT histogram's uniformity (None with fewer than 5
        values per bin, too few for the test).
    confidence : tuple of float, default ()
        The reliability curve: the mean top-1 probability in each non-empty bin.
    accuracy : tuple of float, default ()
        The share of hits in each bin (a tie of k classes for the top counts as 1/k of a hit).
    count : tuple of int, default ()
        The predictions in each bin.
    ece : float or None, default None
        The expected calibration error, the count-weighted mean of
        ``|accuracy − confidence|``.
    """

    field: str
    kind: str  # "value" or "category"
    n: int
    levels: tuple[float, ...] = ()
    coverage: tuple[float, ...] = ()
    pit: tuple[int, ...] = ()
    pit_p_value: float | None = None
    confidence: tuple[float, ...] = ()
    accuracy: tuple[float, ...] = ()
    count: tuple[int, ...] = ()
    ece: float | None = None

    def frame(self) -> pd.DataFrame:
        """Return the measurements as a DataFrame.

        Returns
        -------
        pandas.DataFrame
            Columns ``level, coverage`` for a value field, or ``confidence, accuracy, count``
            (the reliability curve) for a category.
        """
        if self.kind == "value":
            return pd.DataFrame({"level": self.levels, "coverage": self.coverage})
        return pd.DataFrame({"confidence": self.confidence, "accuracy": self.accuracy,
                             "count": self.count})

    def plot(self, path: str | Path) -> Path:
        """Draw a figure: coverage against level and the PIT histogram, or the reliability curve.

        Parameters
        ----------
        path : str or pathlib.Path
            Where to write the figure, at 110 dpi (matplotlib picks the format from the
            suffix, e.g. ``.png``).

        Returns
        -------
        pathlib.Path
            ``path``.
        """
        from matplotlib.figure import Figure

        fig = Figure(figsize=(8, 3.5) if self.kind == "value" else (4, 4))
        if self.kind == "value":
            a, b = fig.subplots(1, 2)
            a.plot([0, 1], [0, 1], color="grey", lw=0.8)
            a.plot(self.levels, self.coverage, "o-")
            a.set(xlabel="nominal level", ylabel="coverage", title=f"{self.field}: intervals")
            b.bar((np.arange(len(self.pit)) + 0.5) / len(self.pit), self.pit,
                  width=1 / len(self.pit), edgecolor="white")
            b.axhline(self.n / len(self.pit), color="grey", lw=0.8)
            b.set(xlabel="PIT", ylabel="count",
                  title="PIT" + ("" if self.pit_p_value is None
                                 else f" (uniformity p = {self.pit_p_value:.3g})"))
        else:
            a = fig.subplots()
            a.plot([0, 1], [0, 1], color="grey", lw=0.8)
            a.plot(self.confidence, self.accuracy, "o-")
            a.set(xlabel="top-1 probability", ylabel="accuracy",
                  title=f"{self.field}: ECE {self.ece:.4f}")
        fig.tight_layout()
        path = Path(path)
        fig.savefig(path, dpi=110)
        return path


@torch.no_grad()
def calibration(model: ConditionalModel, data: Sequences, field: str,
                levels: float | Sequence[float] | None = None, bins: int = 10,
                seed: int = 0, batch_size: int = 1024) -> Calibration:
    """How well calibrated ``model``'s predictive of ``field`` is on ``data``.

    Parameters
    ----------
    model : ConditionalModel
        A fitted model.
    data : Sequences
        Held-out data; every predicted position of ``field`` is used.
    field : str
        A target field: a value field gets interval coverage and the PIT histogram, a category
        the reliability curve and the expected calibration error.
    levels : float or sequence of float, optional
        Central interval levels of a value field, each in (0, 1) (default: 0.5, 0.8, 0.9 and
        0.95); a category has none.
    bins : int, default 10
        Bins of the PIT histogram or of the reliability curve.
    seed : int, default 0
        Draws the randomisation of discrete PITs (uniform exactly under calibration).
    batch_size : int, default 1024
        Sequences per batch.

    Returns
    -------
    Calibration
        The measurements, with ``frame()`` and ``plot(path)``.

    Raises
    ------
    ValueError
        If a level is not in (0, 1), none is given for a value field or one is for a category,
        ``bins`` is not an integer ≥ 2, or ``field`` has no predicted position in ``data``.
    """
    check_int("bins", bins, 2)
    category = isinstance(model.target(field), Category)
    if category and levels is not None:
        raise ValueError(f"field {field!r} is a category: it has no intervals, so no levels "
                         "(its calibration is the reliability curve over `bins` bins)")
    if levels is None:
        levels = () if category else (0.5, 0.8, 0.9, 0.95)
    elif isinstance(levels, str):
        raise ValueError(f"levels must be numbers in (0, 1), got the string {levels!r}")
    elif isinstance(levels, np.ndarray | torch.Tensor):  # a 0-d array is one level
        flat = np.asarray(levels, dtype=float)
        if flat.ndim > 1:
            raise ValueError(f"levels must be one number or a flat sequence, got an array of "
                             f"shape {flat.shape}")
        levels = tuple(flat.reshape(-1))
    elif not isinstance(levels, Iterable):  # one level
        levels = (levels,)
    levels = tuple(check_level("level", q) for q in levels)
    if not category and not levels:
        raise ValueError("levels is empty: give at least one interval level in (0, 1)")
    g = torch.Generator().manual_seed(seed)
    covered: list[list[torch.Tensor]] = [[] for _ in levels]
    pits: list[torch.Tensor] = []
    conf: list[torch.Tensor] = []
    hits: list[torch.Tensor] = []
    with scoring_mode(model, data):
        for _, batch in in_batches(data, batch_size, model.device):
            at = batch.predicted(field)
            if not at.any():  # a batch may hold none (missing or unscored values)
                continue
            dist = model.predictive(batch, field, at)
            y = batch.fields[field][at].cpu()
            if category:
                p = dist.probs.detach().double().cpu()  # type: ignore[attr-defined]
                top = p.max(-1).values
                tied = p >= top[:, None] * (1 - 1e-12)
                conf.append(top)
                hits.append(tied.gather(-1, y.long()[:, None])[:, 0].double() / tied.sum(-1))
                continue
            yd = y.double()
            for k, q in enumerate(levels):
                lo, hi = interval(dist, q)
                covered[k].append((yd >= lo) & (yd <= hi))
            pits.append(_pit(dist, yd, g))
    if not (conf or pits):
        raise ValueError(f"calibration: field {field!r} has no predicted position in the data "
                         "(every value missing, unscored or padding): nothing to calibrate")
    if category:
        c, h = torch.cat(conf), torch.cat(hits)
        which = (c * bins).long().clamp(max=bins - 1)
        count = torch.bincount(which, minlength=bins)
        keep = count > 0
        mean_c = torch.zeros(bins, dtype=torch.float64).index_add_(0, which, c)[keep] / count[keep]
        mean_h = torch.zeros(bins, dtype=torch.float64).index_add_(0, which, h)[keep] / count[keep]
        ece = float(((mean_h - mean_c).abs() * count[keep]).sum() / len(c))
        return Calibration(field, "category", len(c), confidence=tuple(mean_c.tolist()),
                           accuracy=tuple(mean_h.tolist()),
                           count=tuple(count[keep].tolist()), ece=ece)
    u = torch.cat(pits).numpy()
    hist = np.histogram(u, bins=bins, range=(0, 1))[0]
    # The χ² approximation needs about 5 expected values per bin; below that, no p-value.
    p_value = float(stats.chisquare(hist).pvalue) if len(u) >= 5 * bins else None
    return Calibration(field, "value", len(u), levels=levels,
                       coverage=tuple(float(torch.cat(cv).double().mean()) for cv in covered),
                       pit=tuple(int(v) for v in hist), pit_p_value=p_value)


@torch.no_grad()
def conformal_level(model: ConditionalModel, data: Sequences, field: str, level: float = 0.9,
                    seed: int = 0, batch_size: int = 1024) -> float:
    """The level q̂ whose central interval of ``model``'s predictive holds ``level`` of new
    values, calibrated on held-out ``data`` (split conformal prediction).

    Each held-out value gets the score s = ``|2u − 1|``, u its PIT (randomised for a discrete
    family), and q̂ is the ⌈(n + 1) · level⌉-th smallest of the n scores. A new value is in
    the predictive's central q̂ interval whenever its score is at most q̂, so if it is
    exchangeable with the held-out values, that interval holds it with probability at least
    ``level`` (and below ``level + 1 / (n + 1)`` for a continuous family), whatever the
    predictive's shape: too narrow, too wide or heavy-tailed. The guarantee is marginal, over
    new values drawn like the held-out ones; data from another period or place need not be.
    Use it with :func:`~efa.training.predictive.predictive_frame`::

        q = efa.conformal_level(model, val, "temp", level=0.9)
        frame = efa.predictive_frame(model, test, "temp", level=q)

    Parameters
    ----------
    model : ConditionalModel
        A fitted model.
    data : Sequences
        Held-out data the model was not fitted to (ideally not the data that chose its epoch
        either, though that mild reuse is common); every predicted position of ``field`` is
        used.
    field : str
        A value field (a category has no central intervals).
    level : float, default 0.9
        The share of new values the interval should hold, in (0, 1).
    seed : int, default 0
        Draws the randomisation of discrete PITs.
    batch_size : int, default 1024
        Sequences per batch.

    Returns
    -------
    float
        q̂, in (0, 1): the level to ask of the predictive.

    Raises
    ------
    ValueError
        If ``field`` is a category, if ``level`` is not in (0, 1), if ``data`` holds too few
        values of ``field`` for ``level`` (n + 1 ≥ 1 / (1 − level) is needed), or if the
        interval it calls for is degenerate: of level 0, or with no bound (held-out values
        where the predictive's CDF is 0 or 1).
    """
    level = check_level("level", level)
    if isinstance(model.target(field), Category):
        raise ValueError(f"conformal_level: field {field!r} is a category, which has no "
                         "central intervals; calibration() gives its reliability curve")
    g = torch.Generator().manual_seed(seed)
    pits = []
    with scoring_mode(model, data):
        for _, batch in in_batches(data, batch_size, model.device):
            at = batch.predicted(field)
            if not at.any():
                continue
            pits.append(_pit(model.predictive(batch, field, at),
                             batch.fields[field][at].cpu().double(), g))
    scores = np.sort(np.abs(2 * torch.cat(pits).numpy() - 1)) if pits else np.zeros(0)
    n = len(scores)
    k = math.ceil((n + 1) * level - 1e-9)  # (n + 1) · level is whole for n + 1 = 10, level 0.9
    if k > n:
        raise ValueError(
            f"conformal_level: {n} held-out values of field {field!r} are too few for level "
            f"{level:g}: at least {math.ceil(level / (1 - level) - 1e-9)} are needed")
    q = float(scores[k - 1])
    if q <= 0:
        raise ValueError(
            f"conformal_level: {level:g} of the held-out values of field {field!r} lie at the "
            "predictive's median, so no central interval of positive level is called for")
    if q >= 1:
        raise ValueError(
            f"conformal_level: the interval that holds {level:g} of the held-out values of "
            f"field {field!r} is the predictive's central {q:g} interval, which has no bound; "
            "held-out values lie where the predictive gives them no probability")
    return q
