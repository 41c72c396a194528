"""Categorical tables of the attention-as-mixture-of-experts paper (Wibisono & Wang, UAI 2023).

- :func:`simulate`: the covariate-shift simulation of Section 3.2.1 / Appendix D: the model of
  the authors' ``generate_data`` (the sign flip of the first D//2 columns on *both* splits,
  pooled quantile bins), or the paper's text (``variant="paper"``: sign flip on the training
  split only, bins per split), drawn the same on every machine (see :func:`equicorrelated`).
- :func:`auto_mpg`: UCI auto-mpg with the reference preprocessing and the origin split.
- :func:`car`: UCI Car Evaluation with a split by one feature (a second covariate shift case).

Every loader returns ``(train, test)`` pandas DataFrames with the response in the last column.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable

import numpy as np
import pandas as pd

from efa.datasets.root import data_root, require_file

#: ``np.random.seed(2023); np.random.randint(10000, size=20)`` — the 20 data sets per setting.
SIMULATION_SEEDS = (4951, 5657, 2743, 6049, 5852, 6659, 9076, 470, 357, 5088,
                    7605, 9549, 8231, 8408, 5763, 7226, 9244, 2257, 4295, 8433)
#: The 12 settings (n_c, noise, corr) in the order of the paper's Table 1.
SIMULATION_SETTINGS = tuple((n_c, noise, corr) for n_c in (1, 5) for noise in (0, 0.5, 1.5)
                            for corr in (0.1, 0.9))


def simulation_seeds() -> tuple[int, ...]:
    """Recompute the seed list the way the reference notebooks do (a check on the constant)."""
    state = np.random.get_state()
    try:
        np.random.seed(2023)
        return tuple(int(s) for s in np.random.randint(10000, size=20))
    finally:
        np.random.set_state(state)


def equicorrelated(rng: np.random.RandomState | np.random.Generator, rho: float, n: int,
                   d: int) -> np.ndarray:
    """``n`` rows of N(0, Σ) with Σ = (1 − ρ) I + ρ 11ᵀ (unit variances, correlation ``rho`` in
    [0, 1]): x = Σ^½ z for n × d standard normals z, with Σ's symmetric square root in closed
    form, Σ^½ = a I + c 11ᵀ, a = √(1 − ρ), c = (√(1 − ρ + dρ) − a) / d.

    Why not ``multivariate_normal``: it factors Σ by SVD, and this Σ has one eigenvalue repeated
    d − 1 times, so the basis LAPACK returns inside that eigenspace is not unique and changes
    with the BLAS kernel, and so did the data. The symmetric square root is unique, and here it
    is element-wise arithmetic with a fixed left-to-right row sum (no BLAS), so the same seed
    gives the same bits on every CPU. It takes n × d normals from ``rng``, as
    ``multivariate_normal`` does, so every later draw of a stream is the one it would have
    been there."""
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"the correlation must be in [0, 1], got {rho!r}")
    z = rng.standard_normal((n, d))
    a = math.sqrt(1.0 - rho)
    c = (math.sqrt(1.0 - rho + d * rho) - a) / d
    total = z[:, 0]
    for j in range(1, d):
        total = total + z[:, j]
    return a * z + c * total[:, None]


def simulate(n_c: int, noise: float, corr: float, seed: int, n: int = 2000, d: int = 5,
             y_noise: float = 2.0, n_cat: int = 10, shift: bool = True,
             variant: str = "code") -> tuple[pd.DataFrame, pd.DataFrame]:
    """One simulated data set: ``train``, ``test`` with integer bins in columns x0..x{d-1}, y.

    The model of the authors' generator: x ~ N(0, Σ) with correlation ``corr`` in training and
    1 − ``corr`` in test (the covariate shift), the first d//2 columns' signs flipped, features
    observed with noise, y = x[:, :n_c] @ coef + N(0, ``y_noise``²) with coef ~ U(0, 10), then
    every column in ``n_cat`` quantile bins. Draws come from the authors' stream,
    ``np.random.RandomState(seed)`` (their ``np.random.seed(seed)``), in their order (train x,
    test x, train noise, test noise, coefficients, train y noise, test y noise), with the
    covariates by the closed form of :func:`equicorrelated` and element-wise arithmetic only,
    so a seed gives the same table on every machine. The coefficients and every noise are the
    authors' draws; the covariates are not: theirs went through ``multivariate_normal``'s SVD,
    whose result depends on the CPU's BLAS kernel, and ours are another, unique, factor of the
    same Σ applied to the same normals. So a data set is a fresh draw of the authors' data
    set with its coefficients, not that data set.
    """
    if variant not in ("code", "paper"):
        raise ValueError(f"variant must be 'code' (the authors' generator) or 'paper', got "
                         f"{variant!r}")
    if not 1 <= n_c <= d:
        raise ValueError(f"n_c must be in 1..{d}, got {n_c}")
    if not 0.0 <= corr <= 1.0:
        raise ValueError(f"corr must be in [0, 1], got {corr!r}")
    for name, v, lo in (("n", n, 1), ("d", d, 1), ("n_cat", n_cat, 2)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    for name, x in (("noise", noise), ("y_noise", y_noise)):
        if not 0.0 <= x < math.inf:
            raise ValueError(f"{name} must be >= 0 and finite, got {x!r}")
    rng = np.random.RandomState(seed)  # the authors' np.random.seed(seed) stream
    flip = np.concatenate([-np.ones(d // 2), np.ones(d - d // 2)])
    train_true = equicorrelated(rng, corr, n, d) * flip
    test_true = equicorrelated(rng, 1.0 - corr if shift else corr, n, d)
    if variant == "code":  # the reference flips the test split too (the paper says train only)
        test_true = test_true * flip
    scale = np.array([0.4] * n_c + [0.3] * (d - n_c)) * noise
    train_x = train_true + scale * rng.standard_normal((n, d))
    test_x = test_true + scale * rng.standard_normal((n, d))
    coef = rng.uniform(size=n_c) * 10

    def linear(true):  # a fixed left-to-right sum: `@` would go through BLAS
        out = true[:, 0] * coef[0]
        for j in range(1, n_c):
            out = out + true[:, j] * coef[j]
        return out

    train_y = linear(train_true) + y_noise * rng.standard_normal(n)
    test_y = linear(test_true) + y_noise * rng.standard_normal(n)
    cols = [f"x{i}" for i in range(d)]
    train = pd.DataFrame(train_x, columns=cols).assign(y=train_y)
    test = pd.DataFrame(test_x, columns=cols).assign(y=test_y)
    if variant == "code":  # quantile bins on the pooled 2n rows
        pooled = pd.concat([train, test]).reset_index(drop=True)
        binned = pooled.apply(lambda c: pd.qcut(c, n_cat, labels=False))
        return (binned.iloc[:n].reset_index(drop=True),
                binned.iloc[n:].reset_index(drop=True))
    return tuple(t.apply(lambda c: pd.qcut(c, n_cat, labels=False)) for t in (train, test))


def as_numbers(X: pd.DataFrame, levels: dict | None = None) -> pd.DataFrame:
    """Ordered levels read as numbers: each column of ``levels`` becomes the position of its
    value in ``levels[column]`` (the order of an ordered category); every other column its
    values. All columns float, so efa and the peers read them as numeric. A value not among
    its column's levels is an error naming column and value."""
    out = {}
    for c in X:
        if levels is not None and c in levels:
            rank = {v: float(k) for k, v in enumerate(levels[c])}
            bad = ~X[c].isin(list(rank))
            if bad.any():
                raise ValueError(f"column {c!r} has {X[c][bad].iloc[0]!r}, which is not among "
                                 f"its ordered levels {list(levels[c])}")
            out[c] = X[c].map(rank).astype(float)
        else:
            v = pd.to_numeric(X[c], errors="coerce")
            bad = v.isna() & X[c].notna()
            if bad.any():
                raise ValueError(f"column {c!r} has {X[c][bad].iloc[0]!r}, which is not a "
                                 "number: give its ordered levels in `levels`")
            out[c] = v.astype(float)
    return pd.DataFrame(out, index=X.index)


AUTO_MPG_COLUMNS = ["cylinders", "displacement", "horsepower", "weight", "acceleration",
                    "model year"]


def auto_mpg(path: str | os.PathLike[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """auto-mpg as in the reference notebook: drop '?' horsepower, keep 4/6/8 cylinders
    (385 rows), cylinders → 0/1/2, every other column and mpg in 3 quantile bins over all 385
    rows, origin 1 → train (245 rows), origins 2/3 → test (140). Columns x0..x5 (cylinders,
    displacement, horsepower, weight, acceleration, model year) and y (the mpg bin)."""
    path = require_file(path or data_root() / "tabular" / "auto-mpg.csv", "UCI auto-mpg CSV")
    raw = pd.read_csv(path)
    missing = [c for c in ["mpg", *AUTO_MPG_COLUMNS, "origin"] if c not in raw]
    if missing:
        raise ValueError(f"{path}: columns {missing} are missing (has {list(raw)})")
    raw = raw[raw["horsepower"].astype(str).str.strip() != "?"]
    raw = raw[raw["cylinders"].isin([4, 6, 8])].copy()
    raw["horsepower"] = raw["horsepower"].astype(int)
    out = pd.DataFrame(index=raw.index)
    for i, c in enumerate(AUTO_MPG_COLUMNS):
        if c == "cylinders":
            out[f"x{i}"] = (raw[c] // 2 - 2).astype(int)
        else:
            out[f"x{i}"] = pd.qcut(raw[c], 3, labels=False)
    out["y"] = pd.qcut(raw["mpg"], 3, labels=False)
    train = out[raw["origin"] == 1].reset_index(drop=True)
    test = out[raw["origin"] != 1].reset_index(drop=True)
    return train, test


CAR_COLUMNS = ["buying", "maint", "doors", "persons", "lug_boot", "safety", "deal"]
CAR_LEVELS = {
    "buying": ["low", "med", "high", "vhigh"],
    "maint": ["low", "med", "high", "vhigh"],
    "doors": ["2", "3", "4", "5more"],
    "persons": ["2", "4", "more"],
    "lug_boot": ["small", "med", "big"],
    "safety": ["low", "med", "high"],
    "deal": ["unacc", "acc", "good", "vgood"],
}


def car(path: str | os.PathLike[str] | None = None, shift: str = "buying",
        train_levels: Iterable[str] = ("low", "med")) -> tuple[pd.DataFrame, pd.DataFrame]:
    """UCI Car Evaluation (1,728 rows, all categorical; response ``deal``) split by one
    feature: rows whose ``shift`` column is in ``train_levels`` train, the others test. The
    default trains on cheap cars (buying low/med, 864 rows: unacc 526, acc 204, good 69,
    vgood 65) and tests on expensive ones (buying high/vhigh, 864 rows: unacc 684, acc 180):
    the test rows carry buying levels never seen in training and a different label mix, while
    p(deal | features) is the same deterministic rule. (The reverse split has no 'good'/'vgood'
    in training, so no model could predict them.) Columns keep their string levels as ordered
    pandas Categoricals (the levels of :data:`CAR_LEVELS`)."""
    path = require_file(path or data_root() / "tabular" / "car.csv", "UCI Car Evaluation CSV")
    raw = pd.read_csv(path, dtype=str)
    if list(raw) != CAR_COLUMNS:
        raise ValueError(f"{path}: expected columns {CAR_COLUMNS}, got {list(raw)}")
    for c, levels in CAR_LEVELS.items():
        bad = set(raw[c]) - set(levels)
        if bad:
            raise ValueError(f"{path}: column {c!r} has unknown levels {sorted(bad)}")
        raw[c] = pd.Categorical(raw[c], categories=levels, ordered=True)
    if shift not in CAR_COLUMNS[:-1]:
        raise ValueError(f"shift must be a feature column {CAR_COLUMNS[:-1]}, got {shift!r}")
    inside = raw[shift].isin(list(train_levels))
    if not inside.any() or inside.all():
        raise ValueError(f"train_levels {train_levels} leave an empty split of {shift!r}")
    return raw[inside].reset_index(drop=True), raw[~inside].reset_index(drop=True)
