"""The encoding room of the table estimator: the columns of a frame → cells (categorical ids,
quantile bins or standardised numbers, observed masks) → :class:`efa.Sequences`, one row per
sequence with the response last. The functions read and write the estimator's fitted state
(``levels_``, ``bins_``, ``stats_``, ...), the scikit-learn way."""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import torch

from efa.core.data import Sequences

if TYPE_CHECKING:  # for annotations only
    from efa.tabular.estimator import AttentionTableClassifier


def as_1d(y: npt.ArrayLike) -> np.ndarray:
    """``y`` as a 1-d array (an error naming the shape otherwise).

    A column vector, shape (n, 1), is raveled with scikit-learn's ``DataConversionWarning``.

    Parameters
    ----------
    y : array-like
        The labels.

    Returns
    -------
    numpy.ndarray, shape (n,)
        The labels.

    Raises
    ------
    ValueError
        If ``y`` is not 1-dimensional (nor a column vector).
    """
    arr = np.asarray(y)
    if arr.ndim == 2 and arr.shape[1] == 1:
        from sklearn.exceptions import DataConversionWarning

        warnings.warn("A column-vector y was passed when a 1d array was expected. Please "
                      "change the shape of y to (n_samples, ), for example using ravel().",
                      DataConversionWarning, stacklevel=3)
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ValueError(f"y must be 1-dimensional, got shape {arr.shape}")
    return arr


def lookup(levels: Iterable[Any]) -> dict:
    """Level → code (its position in ``levels``); a NumPy scalar level is also found as its
    Python value.

    Parameters
    ----------
    levels : iterable
        A column's levels, in code order.

    Returns
    -------
    dict
        Each level (and each NumPy scalar level's Python value) → its code.
    """
    out = {}
    for k, v in enumerate(levels):
        out[v] = k
        if isinstance(v, np.generic):
            out[v.item()] = k
    return out


def bin_edges(v: np.ndarray, n_bins: int, column: Hashable) -> np.ndarray:
    """Interior edges of at most ``n_bins`` bins of the values ``v`` (a cell goes to the bin
    ``searchsorted(edges, x, "right")``). Every edge lies halfway between two distinct training
    values, so no bin is empty and no value straddles an edge. A column with at most
    ``n_bins`` distinct values keeps each apart; one with more gets quantile bins, and a
    warning names it if ties leave it fewer than ``n_bins``.

    Parameters
    ----------
    v : numpy.ndarray, shape (n,)
        A column's finite training values.
    n_bins : int
        The most bins.
    column : hashable
        The column's name, for the warning.

    Returns
    -------
    numpy.ndarray
        The sorted interior edges, at most ``n_bins`` − 1 of them.
    """
    u = np.unique(v)
    if len(u) <= n_bins:
        gaps = np.arange(1, len(u))
    else:
        q = np.quantile(v, np.linspace(0, 1, n_bins + 1)[1:-1])
        gaps = np.unique(np.clip(np.searchsorted(u, q, "right"), 1, len(u) - 1))
    lo, hi = u[gaps - 1], u[gaps]
    mid = lo / 2 + hi / 2  # (hi - lo) overflows for values near ±1.8e308
    edges = np.where(mid > lo, mid, hi)  # adjacent floats: the upper value opens its bin
    if len(u) > n_bins and len(edges) + 1 < n_bins:
        warnings.warn(f"column {column!r}: ties leave {len(edges) + 1} quantile bins of the "
                      f"{n_bins} asked for, so some bins merge several values", stacklevel=4)
    return edges


def check_scalars(values: pd.Series, column: Hashable) -> None:
    """Check that a column holds scalars only; raises naming the column.

    Parameters
    ----------
    values : pandas.Series
        The column's (non-missing) cells.
    column : hashable
        The column's name, for the error.

    Raises
    ------
    TypeError
        If a cell is not a string, a number, a bool or a NumPy scalar.
    """
    for v in values:
        if not isinstance(v, str | numbers.Number | bool | np.generic):
            raise TypeError(f"column {column!r}: argument must be a string or a number, got "
                            f"{type(v).__name__} {v!r}")


def split_rows(y_codes: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) row indices: labelled rows stratified by class where every class has
    at least 2 of them, unlabelled rows split at random; at least one row stays in training.

    Each code (the unlabelled rows' −1 included) gives ``round(fraction · rows)`` of its rows
    to validation when it has at least 2; a table of fewer than 4 rows keeps them all in
    training.

    Parameters
    ----------
    y_codes : numpy.ndarray, shape (n,)
        The rows' response codes, −1 where the label is missing.
    fraction : float
        The validation fraction.
    seed : int
        Seeds the shuffle (``numpy.random.RandomState``).

    Returns
    -------
    train : numpy.ndarray
        The training rows' indices, sorted.
    validation : numpy.ndarray
        The validation rows' indices, sorted.
    """
    rng = np.random.RandomState(seed)
    n = len(y_codes)
    if n < 4:
        return np.arange(n), np.arange(0)
    picked: list[int] = []
    for c in np.unique(y_codes):
        rows = np.flatnonzero(y_codes == c)
        rng.shuffle(rows)
        k = int(round(fraction * len(rows))) if len(rows) >= 2 else 0
        picked.extend(rows[:k])
    val = np.sort(np.array(picked, dtype=int))
    train = np.setdiff1d(np.arange(n), val)
    return train, val


def as_frame(X: pd.DataFrame | npt.ArrayLike) -> pd.DataFrame:
    """``X`` as a pandas DataFrame (a DataFrame as it is, an array with columns 0, 1, …).

    Parameters
    ----------
    X : pandas.DataFrame or array-like of shape (n, d)
        The table.

    Returns
    -------
    pandas.DataFrame
        ``X`` itself if it is a DataFrame (not a copy), else a frame of the 2-d array.

    Raises
    ------
    TypeError
        If ``X`` is a sparse matrix.
    ValueError
        If ``X`` holds complex numbers or is not 2-dimensional.
    """
    if isinstance(X, pd.DataFrame):
        return X
    if hasattr(X, "toarray") or hasattr(X, "tocsr"):
        raise TypeError("sparse input is not supported: pass a dense array or a DataFrame")
    arr = np.asarray(X)
    if arr.dtype.kind == "c":
        raise ValueError("Complex data not supported")
    if arr.ndim != 2:
        raise ValueError(f"Expected 2D array, got {arr.ndim}D array instead. Reshape your "
                         "data with array.reshape(-1, 1) for a single feature or "
                         "array.reshape(1, -1) for a single sample")
    return pd.DataFrame(arr)


def column_kinds(est: AttentionTableClassifier, X: pd.DataFrame) -> list[str]:
    """'cat' or 'num' per column; refuse dtypes the estimator cannot take.

    With the estimator's ``categorical`` set, the columns it names (by name or position) are
    categorical and the others numeric; without it, floating-point columns are numeric and
    every other column categorical.

    Parameters
    ----------
    est : AttentionTableClassifier
        The estimator, whose ``categorical`` is read.
    X : pandas.DataFrame
        The table.

    Returns
    -------
    list of str
        ``"cat"`` or ``"num"`` per column of ``X``.

    Raises
    ------
    ValueError
        If ``categorical`` names a column (or a position) that ``X`` does not have.
    TypeError
        If a column holds datetimes, timedeltas, complex numbers, periods or intervals.
    """
    chosen = None
    if est.categorical is not None:
        out = [c for c in est.categorical if isinstance(c, numbers.Integral)
               and c not in X.columns and not -X.shape[1] <= c < X.shape[1]]
        if out:
            raise ValueError(f"categorical index {out[0]} is out of range: X has "
                             f"{X.shape[1]} columns")
        chosen = {X.columns[c] if isinstance(c, numbers.Integral) and c not in X.columns
                  else c for c in est.categorical}
        unknown = chosen - set(X.columns)
        if unknown:
            raise ValueError(f"categorical names columns {sorted(map(str, unknown))} that X "
                             "does not have")
    kinds = []
    for c in X.columns:
        dt = X[c].dtype
        if dt.kind in "mMc" or isinstance(dt, pd.PeriodDtype | pd.IntervalDtype):
            raise TypeError(f"column {c!r} has dtype {dt}, which the estimator cannot take "
                            "(use numbers, strings, booleans or categoricals)")
        if chosen is not None:
            kinds.append("cat" if c in chosen else "num")
        else:
            kinds.append("num" if dt.kind == "f" else "cat")
    return kinds


def nan_error(col: Hashable, rows: Sequence[int] | np.ndarray) -> ValueError:
    """The error for a missing value in a column, naming the column and the row.

    Parameters
    ----------
    col : hashable
        The column's name.
    rows : sequence of int
        The rows with a missing value (at least one).

    Returns
    -------
    ValueError
        The error to raise, which points to ``missing='mask'``.
    """
    return ValueError(
        f"column {col!r} has NaN (a missing value) in {len(rows)} row(s) (first: row "
        f"{rows[0]}); pass missing='mask' to treat missing cells as unobserved")


def numeric_cells(col: pd.Series, column: Hashable) -> np.ndarray:
    """A numeric column's cells as float64, NaN where a cell is missing (NaN, None, NA).

    Parameters
    ----------
    col : pandas.Series
        The column.
    column : hashable
        Its name, for the errors.

    Returns
    -------
    numpy.ndarray, shape (n,)
        The numbers.

    Raises
    ------
    ValueError
        If a cell is not missing but not a number, or is infinite (naming column and row).
    """
    v = pd.to_numeric(col, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    # coercion turns a stray string into NaN: only a cell pandas calls missing may be NaN
    bad = np.isnan(v) & ~col.isna().to_numpy()
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise ValueError(f"column {column!r} has the value {col.iloc[r]!r} (row {r}) where a "
                         f"number was expected ({int(bad.sum())} such row(s))")
    # inf is a value, not a missing cell: neither a bin nor a standardised number can hold it
    inf = np.isinf(v)
    if inf.any():
        r = int(np.flatnonzero(inf)[0])
        raise ValueError(f"column {column!r} has inf in {int(inf.sum())} row(s) (first: row "
                         f"{r}); a number must be finite (NaN or None marks a missing cell)")
    return v


def learn_columns(est: AttentionTableClassifier, X: pd.DataFrame) -> None:
    """Learn each column's kind and its levels, bin edges or moments from the training table
    ``X`` onto the estimator's fitted attributes.

    Sets ``kinds_``, ``levels_`` (a categorical column's sorted levels, a binned column's bin
    indices), ``bins_`` and ``bin_values_`` (each bin's training median) with
    ``numeric="quantile"``, and ``stats_`` (mean, standard deviation) with
    ``numeric="gaussian"``.

    Parameters
    ----------
    est : AttentionTableClassifier
        The estimator being fitted; its fitted attributes are written.
    X : pandas.DataFrame
        The training table's feature columns.

    Raises
    ------
    ValueError
        If a numeric column has no number, or a cell that is not a number or is infinite
        (and as :func:`column_kinds`).
    TypeError
        If a categorical column holds a cell that is not a scalar (and as
        :func:`column_kinds`).
    """
    est.kinds_ = column_kinds(est, X)
    est.levels_, est.bins_, est.stats_, est.bin_values_ = {}, {}, {}, {}
    for c, kind in zip(X.columns, est.kinds_, strict=True):
        col = X[c]
        if kind == "num":
            v = numeric_cells(col, c)
            ok = ~np.isnan(v)
            if not ok.any():
                raise ValueError(f"column {c!r} has no finite value")
            if est.numeric == "quantile":
                est.bins_[c] = bin_edges(v[ok], est.n_bins, c)
                est.levels_[c] = list(range(len(est.bins_[c]) + 1))
                # each bin's training median: what impute() writes, in the column's units
                b = np.searchsorted(est.bins_[c], v[ok], "right")
                est.bin_values_[c] = [float(np.median(v[ok][b == k]))
                                       for k in est.levels_[c]]
            else:
                mu, sd = float(v[ok].mean()), float(v[ok].std())
                est.stats_[c] = (mu, sd if sd > 0 else 1.0)
        else:
            values = col[col.notna()]
            check_scalars(values, c)
            levels = pd.unique(values)
            try:
                levels = sorted(levels)
            except TypeError:
                levels = sorted(levels, key=str)
            est.levels_[c] = list(levels)


def cells(est: AttentionTableClassifier, X: pd.DataFrame, columns: Sequence[Hashable],
          unknown_ok: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The cells of the given feature columns of ``X``, encoded with the fitted state.

    Parameters
    ----------
    est : AttentionTableClassifier
        The fitted estimator.
    X : pandas.DataFrame
        The table.
    columns : sequence of hashable
        The K feature columns to encode.
    unknown_ok : bool
        Let a level that fit never saw through as unobserved even with
        ``handle_unknown="error"``.

    Returns
    -------
    ids : numpy.ndarray, shape (N, K)
        int64 ids into the shared categorical vocabulary (a category's or a bin's).
    values : numpy.ndarray, shape (N, K)
        The standardised numbers of the numeric columns with ``numeric="gaussian"`` (0
        elsewhere).
    observed : numpy.ndarray, shape (N, K)
        Bool, False at missing cells and unseen levels.

    Raises
    ------
    ValueError
        If a cell is missing with ``missing="error"``, a cell is infinite, a numeric cell is
        not a number, or a level is unseen (a bool among numbers, a number among bools
        included) with ``handle_unknown="error"`` and not ``unknown_ok``.
    """
    n, k = len(X), len(columns)
    ids = np.zeros((n, k), dtype=np.int64)
    vals = np.zeros((n, k), dtype=float)
    obs = np.ones((n, k), dtype=bool)
    for j, c in enumerate(columns):
        col = X[c]
        num = numeric_cells(col, c) if est.kinds_[est._index[c]] == "num" else None
        missing = col.isna().to_numpy() if num is None else np.isnan(num)
        if missing.any():
            if est.missing == "error":
                raise nan_error(c, np.flatnonzero(missing))
            obs[missing, j] = False
        if num is not None:
            if est.numeric == "quantile":
                ids[:, j] = est.offsets_[c] + np.searchsorted(est.bins_[c],
                                                               np.nan_to_num(num), "right")
            else:
                mu, sd = est.stats_[c]
                vals[:, j] = np.where(missing, 0.0, (np.nan_to_num(num) - mu) / sd)
            continue
        check_scalars(col[~missing], c)
        infinite = np.array([isinstance(v, float | np.floating) and np.isinf(v)
                             for v in col], dtype=bool)
        if infinite.any():  # not a level, and not missing either: never an unknown
            raise ValueError(f"column {c!r} has inf in {int(infinite.sum())} row(s) (first: "
                             f"row {int(np.flatnonzero(infinite)[0])}); a level must be "
                             "finite")
        lookup, levels = est.lookup_[c], est.levels_[c]
        codes = np.array([lookup.get(v, -1) for v in col.where(~col.isna(), None)])
        # True == 1 in a dict: a bool found among numbers (or a number among bools) is a
        # value fit never saw, not the level that compares equal to it
        flag = [isinstance(x, bool | np.bool_) for x in col]
        codes[[k >= 0 and f != isinstance(levels[k], bool | np.bool_)
               for f, k in zip(flag, codes, strict=True)]] = -1
        unseen = (codes < 0) & ~missing
        if unseen.any():
            r = int(np.flatnonzero(unseen)[0])
            if est.handle_unknown == "error" and not unknown_ok:
                more = " ..." if len(levels) > 10 else ""
                raise ValueError(
                    f"column {c!r} has the value {col.iloc[r]!r} (row {r}) that fit never "
                    f"saw (known: {levels[:10]}{more}); pass handle_unknown='unk' to treat "
                    "unseen values as unknown")
            obs[unseen, j] = False
        ids[:, j] = est.offsets_[c] + np.where(codes < 0, 0, codes)
    return ids, vals, obs


def sequences(est: AttentionTableClassifier, X: pd.DataFrame, y_codes: np.ndarray | None = None,
              unknown_ok: bool = False) -> Sequences:
    """Rows → Sequences over the K feature columns and the response (last position).

    Parameters
    ----------
    est : AttentionTableClassifier
        The fitted estimator.
    X : pandas.DataFrame
        The table's feature columns.
    y_codes : numpy.ndarray, shape (N,), optional
        The response codes, −1 where unlabelled (default: every row unlabelled).
    unknown_ok : bool, default False
        As for :func:`cells`.

    Returns
    -------
    Sequences
        N sequences of length K + 1: the field ``cat`` (vocabulary ids), with ``num``
        (standardised numbers) when a column is a Gaussian value and ``resp`` (the response's
        code, at the last position) with ``response="ordinal"``; each observed where its
        cell is.
    """
    n = len(X)
    ids, vals, obs = cells(est, X, list(X.columns), unknown_ok)
    if y_codes is None:
        y_codes = np.full(n, -1)
    y_obs = y_codes >= 0
    y_ids = est.offsets_.get(est._target, 0) + np.where(y_obs, y_codes, 0)
    ids = np.concatenate([ids, y_ids[:, None]], 1)
    vals = np.concatenate([vals, np.zeros((n, 1))], 1)
    obs = np.concatenate([obs, y_obs[:, None]], 1)
    cat_pos = np.array(est.is_cat_)
    fields = {"cat": torch.from_numpy(ids)}
    observed = {"cat": torch.from_numpy(obs & cat_pos[None])}
    if est.has_num_:
        num_pos = ~cat_pos
        num_pos[-1] = False
        fields["num"] = torch.from_numpy(vals.astype(np.float32))
        observed["num"] = torch.from_numpy(obs & num_pos[None])
    if est.response_ == "ordinal":  # the response is its own field, at the last position
        resp = np.zeros_like(ids)
        resp[:, -1] = np.where(y_obs, y_codes, 0)
        at_last = np.zeros_like(obs)
        at_last[:, -1] = y_obs
        fields["resp"] = torch.from_numpy(resp)
        observed["resp"] = torch.from_numpy(at_last)
    return Sequences(fields, torch.full((n,), ids.shape[1]), observed)
