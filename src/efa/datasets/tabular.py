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

from efa.datasets.root import data_root, read_csv, require_file, warn_row_count

#: ``np.random.seed(2023); np.random.randint(10000, size=20)`` — the 20 data sets per setting.
SIMULATION_SEEDS = (4951, 5657, 2743, 6049, 5852, 6659, 9076, 470, 357, 5088,
                    7605, 9549, 8231, 8408, 5763, 7226, 9244, 2257, 4295, 8433)
#: The 12 settings (n_c, noise, corr) in the order of the paper's Table 1.
SIMULATION_SETTINGS = tuple((n_c, noise, corr) for n_c in (1, 5) for noise in (0, 0.5, 1.5)
                            for corr in (0.1, 0.9))


def simulation_seeds() -> tuple[int, ...]:
    """Recompute the seed list the way the reference notebooks do (a check on the constant).

    NumPy's global random state is restored afterwards.

    Returns
    -------
    tuple of int
        The 20 seeds of ``np.random.seed(2023); np.random.randint(10000, size=20)``, which
        should equal :data:`SIMULATION_SEEDS`.
    """
    state = np.random.get_state()
    try:
        np.random.seed(2023)
        return tuple(int(s) for s in np.random.randint(10000, size=20))
    finally:
        np.random.set_state(state)


def equicorrelated(rng: np.random.RandomState | np.random.Generator, rho: float, n: int,
                   d: int) -> np.ndarray:
    """Draw ``n`` rows of N(0, Σ) with Σ = (1 − ρ) I + ρ 11ᵀ (unit variances, correlation ρ).

    x = Σ^½ z for n × d standard normals z, with Σ's symmetric square root in closed form,
    Σ^½ = a I + c 11ᵀ, a = √(1 − ρ), c = (√(1 − ρ + dρ) − a) / d.

    Why not ``multivariate_normal``: it factors Σ by SVD, and this Σ has one eigenvalue repeated
    d − 1 times, so the basis LAPACK returns inside that eigenspace is not unique and changes
    with the BLAS kernel, and so did the data. The symmetric square root is unique, and here it
    is element-wise arithmetic with a fixed left-to-right row sum (no BLAS), so the same seed
    gives the same bits on every CPU. It takes n × d normals from ``rng``, as
    ``multivariate_normal`` does, so every later draw of a stream is the one it would have
    been there.

    Parameters
    ----------
    rng : numpy.random.RandomState or numpy.random.Generator
        The stream the n × d standard normals are drawn from (advanced by exactly that many).
    rho : float
        The correlation ρ between any two columns, in [0, 1].
    n : int
        The number of rows.
    d : int
        The number of columns.

    Returns
    -------
    numpy.ndarray, shape (n, d)
        The draws.

    Raises
    ------
    ValueError
        When ``rho`` is outside [0, 1].
    """
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
    """Simulate one data set: ``train``, ``test`` with integer bins in columns x0..x{d-1}, y.

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

    Parameters
    ----------
    n_c : int
        The number of covariates y depends on (the first ``n_c`` columns), in 1..d.
    noise : float
        The scale of the feature noise, >= 0: the observed features are the true ones plus
        normal noise of standard deviation ``0.4 * noise`` in the first ``n_c`` columns and
        ``0.3 * noise`` in the others.
    corr : float
        The training covariates' correlation, in [0, 1].
    seed : int
        Seed of the ``np.random.RandomState`` stream, e.g. one of :data:`SIMULATION_SEEDS`.
    n : int, default 2000
        Rows per split.
    d : int, default 5
        The number of covariates.
    y_noise : float, default 2.0
        Standard deviation of the response noise, >= 0.
    n_cat : int, default 10
        The number of quantile bins per column, >= 2.
    shift : bool, default True
        Whether the test covariates have correlation ``1 - corr`` (the covariate shift) rather
        than ``corr``.
    variant : {"code", "paper"}, default "code"
        ``"code"``: the authors' generator (sign flip on both splits, bins over the pooled 2n
        rows); ``"paper"``: the paper's text (sign flip on the training split only, bins per
        split).

    Returns
    -------
    train : pandas.DataFrame
        ``n`` rows, columns ``x0``..``x{d-1}`` and ``y``, each an integer bin in
        0..``n_cat`` − 1.
    test : pandas.DataFrame
        The same for the test split.

    Raises
    ------
    ValueError
        For an unknown ``variant``, ``n_c`` outside 1..d, ``corr`` outside [0, 1], ``n``, ``d``
        or ``n_cat`` not an integer of at least 1, 1 and 2, or a negative or infinite noise.
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
    """Read ordered levels as numbers.

    Each column of ``levels`` becomes the position of its value in ``levels[column]`` (the
    order of an ordered category); every other column its values. All columns float, so efa
    and the peers read them as numeric.

    Parameters
    ----------
    X : pandas.DataFrame
        The table.
    levels : dict or None, default None
        Column name → the sequence of its levels in order, e.g. :data:`CAR_LEVELS`.

    Returns
    -------
    pandas.DataFrame
        The same columns and index, all float.

    Raises
    ------
    ValueError
        When a value is not among its column's levels, or a column without levels holds a
        value that is not a number; the message names the column and the value.
    """
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
    """Load UCI auto-mpg with the reference notebook's preprocessing and origin split.

    Drop '?' horsepower, keep 4/6/8 cylinders (385 rows), cylinders → 0/1/2, every other column
    and mpg in 3 quantile bins over all 385 rows, origin 1 → train (245 rows), origins 2/3 →
    test (140).

    Parameters
    ----------
    path : str or os.PathLike or None, default None
        The CSV file (with columns ``mpg``, the six of :data:`AUTO_MPG_COLUMNS` and ``origin``);
        ``None`` reads ``tabular/auto-mpg.csv`` under the data root.

    Returns
    -------
    train : pandas.DataFrame
        Columns x0..x5 (cylinders, displacement, horsepower, weight, acceleration, model year)
        and y (the mpg bin), all integer bins.
    test : pandas.DataFrame
        The same columns.

    Raises
    ------
    FileNotFoundError
        When the file does not exist.
    ValueError
        When a column is missing, or a cell is empty or not a number (naming its line).
    """
    path = require_file(path or data_root() / "tabular" / "auto-mpg.csv", "UCI auto-mpg CSV")
    raw = read_csv(path, dtype=str)
    missing = [c for c in ["mpg", *AUTO_MPG_COLUMNS, "origin"] if c not in raw]
    if missing:
        raise ValueError(f"{path}: columns {missing} are missing (has {list(raw)})")
    warn_row_count(path, len(raw), 398, "UCI auto-mpg file")
    raw = raw[raw["horsepower"].fillna("").str.strip() != "?"].copy()  # the file's missing mark
    for c in ["mpg", *AUTO_MPG_COLUMNS, "origin"]:
        raw[c] = _numbers(raw[c], path, c)
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
    """Load UCI Car Evaluation (1,728 rows, all categorical) split by one feature.

    The response is ``deal``. Rows whose ``shift`` column is in ``train_levels`` train, the
    others test. The default trains on cheap cars (buying low/med, 864 rows: unacc 526, acc 204,
    good 69, vgood 65) and tests on expensive ones (buying high/vhigh, 864 rows: unacc 684,
    acc 180): the test rows carry buying levels never seen in training and a different label
    mix, while p(deal | features) is the same deterministic rule. (The reverse split has no
    'good'/'vgood' in training, so no model could predict them.)

    Parameters
    ----------
    path : str or os.PathLike or None, default None
        The CSV file, with exactly the columns of :data:`CAR_COLUMNS`; ``None`` reads
        ``tabular/car.csv`` under the data root.
    shift : str, default "buying"
        The feature column that splits the rows.
    train_levels : iterable of str, default ("low", "med")
        The levels of ``shift`` whose rows train.

    Returns
    -------
    train : pandas.DataFrame
        The training rows, columns of :data:`CAR_COLUMNS` with their string levels as ordered
        pandas Categoricals (the levels of :data:`CAR_LEVELS`).
    test : pandas.DataFrame
        The other rows, the same columns.

    Raises
    ------
    FileNotFoundError
        When the file does not exist.
    ValueError
        For other columns, an unknown level, a ``shift`` that is not a feature column, or
        ``train_levels`` that leave a split empty.
    """
    path = require_file(path or data_root() / "tabular" / "car.csv", "UCI Car Evaluation CSV")
    raw = read_csv(path, dtype=str)
    if list(raw) != CAR_COLUMNS:
        raise ValueError(f"{path}: expected columns {CAR_COLUMNS}, got {list(raw)}")
    warn_row_count(path, len(raw), 1728, "UCI Car Evaluation file")
    empty = raw.isna().any(axis=1).to_numpy()
    if empty.any():  # a line cut short leaves its last cells empty
        k = int(np.flatnonzero(empty)[0])
        raise ValueError(f"{path}, line {k + 2}: cells of {list(raw.columns[raw.iloc[k].isna()])} "
                         "are empty (a line cut short?)")
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


def _numbers(col: pd.Series, path: str | os.PathLike[str], name: str) -> pd.Series:
    """A column of text cells as numbers, or a ValueError naming the file's line (the header
    is line 1) and the cell."""
    v = pd.to_numeric(col, errors="coerce")
    bad = v.isna().to_numpy()
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{path}, line {int(col.index[k]) + 2}: column {name!r} holds "
                         f"{col.iloc[k]!r} where a number was expected ({int(bad.sum())} such "
                         "line(s))")
    return v
