"""The checks of :func:`efa.spatial.sites_to_sequences` on its table and arguments, and how a
lag finds its rows: what the table must hold (columns, site ids that can be ordered, times
that are numbers or datetimes, coordinates on the globe, one place per site) and which
``step`` and ``lags`` it can take. Each error names the column, the site or the lag at fault
and what was expected."""

from __future__ import annotations

import math
import numbers
from collections.abc import Hashable, Iterable
from typing import Any

import numpy as np
import pandas as pd

from efa.geo import LATITUDES, LONGITUDES, off_the_globe

# A lag on float times matches the time nearest t − l·step within this fraction of a step:
# floating-point subtraction misses exact matches (0.3 − 0.1 ≠ 0.2).
LAG_TOLERANCE = 1e-6


def check_table(df: pd.DataFrame, *, site: str, time: str, lat: str, lon: str, value: str,
                target: str | None, lags: int, layout: str) -> None:
    """Refuse a table or argument that :func:`~efa.spatial.sites_to_sequences` would misread.

    Parameters
    ----------
    df : pandas.DataFrame
        The long table, one row per (site, time).
    site, time, lat, lon, value : str
        Its columns.
    target : str or None
        The bool column of the target rows, if any.
    lags : int
        The number of lags, >= 0.
    layout : str
        "tokens" or "fields".

    Raises
    ------
    KeyError
        If a column is not in the table.
    ValueError
        Naming the column (and the site or row) of a missing, non-numeric, infinite or
        out-of-range coordinate, a missing site or time, site ids of types that cannot be
        ordered, times that are neither numbers nor datetimes, a target column that is not
        True/False, or a bad ``lags`` or ``layout``.
    """
    for col in (site, time, lat, lon, value, *([target] if target else [])):
        if col not in df.columns:
            raise KeyError(f"column {col!r} not in the table (has {list(df.columns)})")
    if isinstance(lags, bool) or not isinstance(lags, int | np.integer) or lags < 0:
        raise ValueError(f"lags must be an integer >= 0, got {lags!r}")
    if layout not in ("tokens", "fields"):
        raise ValueError(f"layout must be 'tokens' or 'fields', got {layout!r}")
    for col in (lat, lon):
        if not pd.api.types.is_numeric_dtype(df[col]) or pd.api.types.is_bool_dtype(df[col]):
            raise ValueError(f"column {col!r} must hold numbers (degrees), got {df[col].dtype}")
    if df[[lat, lon]].isna().any().any():
        raise ValueError(f"columns {lat!r}/{lon!r} have missing coordinates")
    if df[site].isna().any():
        row = df.index[df[site].isna().to_numpy()][0]
        raise ValueError(f"column {site!r} (the site) is missing in row {row!r}")
    _check_globe(df, site, lat, lon)
    try:
        sorted(df[site].unique())  # the default site order, and pandas' pivot, sort the ids
    except TypeError:
        kinds = sorted({type(s).__name__ for s in df[site].unique()})
        raise ValueError(f"column {site!r} (the site) mixes ids of types {kinds} that cannot "
                         "be ordered: make them one type (e.g. all str)") from None
    if df[time].isna().any():
        row = df.index[df[time].isna().to_numpy()][0]
        raise ValueError(f"column {time!r} is missing in row {row!r}: every row needs a time")
    kind = df[time].dtype
    if not (pd.api.types.is_datetime64_any_dtype(kind) or (
            pd.api.types.is_numeric_dtype(kind) and not pd.api.types.is_bool_dtype(kind))):
        # Times are shifted by the lag step and ordered: text cannot be.
        raise ValueError(f"column {time!r} (the time) must hold numbers or datetimes, got "
                         f"{kind}; convert text dates with pd.to_datetime")
    if target is not None:
        flags = df[target]
        if flags.isna().any() or not pd.api.types.is_bool_dtype(flags.dtype):
            raise ValueError(f"column {target!r} (target) must hold True/False only, got dtype "
                             f"{flags.dtype}" + (" with missing values" if flags.isna().any()
                                                  else ""))


def _check_globe(df: pd.DataFrame, site: str, lat: str, lon: str) -> None:
    # An infinite or impossible coordinate would reach the model (and the k-NN distances)
    # as a number: refuse it, naming the site.
    bad = off_the_globe(df[lat].to_numpy(), df[lon].to_numpy())
    for col, what, (lo, hi), miss in ((lat, "latitude", LATITUDES, bad[0]),
                                      (lon, "longitude", LONGITUDES, bad[1])):
        if miss.any():
            i = int(np.flatnonzero(miss)[0])
            raise ValueError(f"column {col!r} ({what}) of site {df[site].iloc[i]!r} is "
                             f"{float(df[col].iloc[i])!r}: expected finite degrees in "
                             f"[{lo:g}, {hi:g}]")


def site_order(ids: pd.Series, sites: Iterable[Hashable] | None) -> pd.Index:
    """The sites in order: ``sites`` as given, or the sorted unique ids.

    Parameters
    ----------
    ids : pandas.Series
        The site column (checked by :func:`check_table`).
    sites : iterable or None
        The caller's sites and order.

    Returns
    -------
    pandas.Index
        The site ids, in the order of the tokens.

    Raises
    ------
    ValueError
        If ``sites`` repeats a site or misses one of the table's.
    """
    order = pd.Index(sorted(ids.unique()) if sites is None else list(sites))
    if order.has_duplicates:
        raise ValueError(f"sites must be distinct, got {list(order[order.duplicated()])[:5]} "
                         "more than once")
    unknown = set(ids.unique()) - set(order)
    if unknown:
        raise ValueError(f"sites not in `sites`: {sorted(unknown, key=repr)[:5]}")
    return order


def check_step(step: Any, times: pd.Index, time: str, lags: int) -> Any:
    """The lag step: ``step`` checked, or the default (one day for datetimes, else 1).

    Parameters
    ----------
    step : Timedelta, numpy.timedelta64, number or None
        The caller's step.
    times : pandas.Index
        The sequences' times.
    time : str
        The time column, for the messages.
    lags : int
        The number of lags (a step of the wrong kind only matters with lags).

    Returns
    -------
    Timedelta, numpy.timedelta64 or number
        The step, unchanged when given.

    Raises
    ------
    ValueError
        If ``step`` is zero, negative, NaN, NaT or infinite (a lag would then hold the target
        itself, the future, or nothing), not a number or a time span, or with lags not of the
        kind of the times.
    """
    dated = pd.api.types.is_datetime64_any_dtype(times)
    if step is None:
        return pd.Timedelta(days=1) if dated else 1
    span = isinstance(step, pd.Timedelta | np.timedelta64)
    if span:
        length = pd.Timedelta(step)
        good = not pd.isna(length) and length > pd.Timedelta(0)
    else:
        good = (isinstance(step, numbers.Real) and not isinstance(step, bool | np.bool_)
                and math.isfinite(step) and float(step) > 0)
    if not good:
        raise ValueError(f"step must be positive and finite (a number, or a pd.Timedelta for "
                         f"datetime times), got {step!r}")
    if lags and dated != span:
        raise ValueError(f"step {step!r} does not fit column {time!r} of {times.dtype}: "
                         "datetime times take a pd.Timedelta step, numeric times a number")
    return step


def lag_block(wide: pd.DataFrame, times: pd.Index, lag: int, step: Any,
              time: str) -> np.ndarray:
    """The values of every site ``lag`` steps before each time, NaN where there is no row.

    Parameters
    ----------
    wide : pandas.DataFrame
        Times (sorted) × sites, the values.
    times : pandas.Index
        The sequences' times.
    lag : int
        How many steps back (0: the times themselves).
    step : Timedelta or number
        The step, from :func:`check_step`.
    time : str
        The time column, for the message.

    Returns
    -------
    numpy.ndarray, shape (len(times), n_sites)
        float64, NaN where no row holds a site's value at that time.

    Raises
    ------
    ValueError
        If ``lag`` > 0 matches no time of the table at all: the step does not fit the times'
        spacing, or the table does not reach that far back.
    """
    if not lag:  # the times themselves, whatever the step (it need not fit them without lags)
        return wide.reindex(times).to_numpy()
    wanted = times - lag * step
    near: dict[str, Any] = {}
    if pd.api.types.is_float_dtype(wide.index) or isinstance(step, float | np.floating):
        near = dict(method="nearest", tolerance=LAG_TOLERANCE * step)
    if len(times) and not (wide.index.get_indexer(wanted, **near) >= 0).any():
        raise ValueError(_no_lag_rows(wide.index, lag, step, time))
    return wide.reindex(wanted, **near).to_numpy()


def _no_lag_rows(index: pd.Index, lag: int, step: Any, time: str) -> str:
    gaps = np.diff(index.to_numpy())
    where = (f"lag {lag} (t − {lag}·step, step={step!r}) matches no row of column {time!r} "
             "at any of the times")
    if lag > 1:  # lag 1 matched: the step fits, the history is too short
        return f"{where}: the table does not reach that far back, use at most lags={lag - 1}"
    if not len(gaps):
        return f"{where}: the table has one time only, so no lag can be filled; use lags=0"
    dated = pd.api.types.is_datetime64_any_dtype(index)
    closest = repr(pd.Timedelta(gaps.min())) if dated else str(gaps.min())
    return (f"{where}: does step fit the times? Consecutive times are {closest} apart at the "
            "closest; pass step= their spacing" + (
                " (for calendar months or other uneven spans, number the times and pass a "
                "numeric step)" if dated else ""))
