"""The statistics every experiment's tables use, written once: a mean with its standard error
over seeds (or positions), paired differences, least-squares trend slopes, the 2-SE verdict,
and markdown tables.

An experiment's claim is "shown" when its estimate clears the threshold by more than two
standard errors; with one seed the standard error is NaN and nothing is shown.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Estimate:
    """A mean over ``n`` values with its standard error (NaN below 2 values). Unpacks as
    ``mean, se = estimate(values)``."""

    mean: float
    se: float
    n: int

    def __iter__(self) -> Iterator[float]:
        yield self.mean
        yield self.se

    def above(self, threshold: float = 0.0, k: float = 2.0) -> bool:
        """More than ``k`` standard errors above ``threshold`` (never with a NaN SE)."""
        return self.mean - k * self.se > threshold

    def below(self, threshold: float = 0.0, k: float = 2.0) -> bool:
        """More than ``k`` standard errors below ``threshold`` (never with a NaN SE)."""
        return self.mean + k * self.se < threshold

    def __format__(self, spec: str) -> str:
        """``f"{e:+.3f}"`` → "+0.123 ± 0.004": the format applies to the mean, the same
        number of digits (no sign) to the SE."""
        digits = spec.lstrip("+- ")
        return f"{format(self.mean, spec)} ± {format(self.se, digits)}"


def standard_error(values: Sequence[float] | np.ndarray) -> float:
    """Sample standard deviation / √n (NaN below 2 values)."""
    v = np.asarray(values, dtype=float)
    return float(v.std(ddof=1) / math.sqrt(len(v))) if len(v) > 1 else float("nan")


def estimate(values: Sequence[float] | np.ndarray) -> Estimate:
    """The mean of ``values`` and its standard error."""
    v = np.asarray(values, dtype=float)
    mean = float(v.mean()) if len(v) else float("nan")
    return Estimate(mean, standard_error(v), len(v))


def paired(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> Estimate:
    """The mean difference a − b over pairs (the same seed or position) and its SE."""
    return estimate(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))


def lower_on(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> int:
    """The pairs (seeds) on which a is lower than b."""
    return int((np.asarray(a, dtype=float) < np.asarray(b, dtype=float)).sum())


def said_lower(lower: int, n: int) -> str:
    """"lower on every seed" or "lower on k of n seeds"."""
    return "lower on every seed" if lower == n else f"lower on {lower} of {n} seeds"


def bootstrap_interval(values: Sequence[float] | np.ndarray, reps: int,
                       seed: int = 0) -> tuple[float, float]:
    """95 % percentile bootstrap interval of the mean of ``values`` (rows resampled with
    ``numpy.random.RandomState(seed)``, ``reps`` draws)."""
    v = np.asarray(values, dtype=float)
    idx = np.random.RandomState(seed).randint(0, len(v), size=(reps, len(v)))
    means = v[idx].mean(1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def slope(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Least-squares slope of y on x."""
    return float(np.polyfit(np.asarray(x, dtype=float), np.asarray(y, dtype=float), 1)[0])


def slopes(x: Sequence[float] | np.ndarray, ys: Sequence[Sequence[float]] | np.ndarray,
           ) -> list[float]:
    """One least-squares slope per row of ``ys`` (per seed), each against ``x``."""
    return [slope(x, y) for y in ys]


def verdict(shown: bool) -> str:
    return "shown" if shown else "NOT shown"


def mean_std(values: Sequence[float] | np.ndarray, digits: int = 4) -> str:
    """"mean ± sample std" of per-seed values (std 0 for one value)."""
    v = np.asarray(values, dtype=float)
    sd = float(v.std(ddof=1)) if len(v) > 1 else 0.0
    return f"{v.mean():.{digits}f} ± {sd:.{digits}f}"


def table(header: Sequence[str], rows: Sequence[Sequence[object]], title: str | None = None,
          ) -> str:
    """A markdown table (cells formatted already), with an optional ``## title`` above it."""
    for k, row in enumerate(rows):
        if len(row) != len(header):
            raise ValueError(f"row {k} has {len(row)} cells for {len(header)} columns: {row!r}")
    lines = [f"## {title}", ""] if title else []
    lines += ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
