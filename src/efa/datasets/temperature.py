"""Daily temperatures of U.S. cities: the EFA paper's set-up (Sec 6.4) and neighbour lists.

Input formats:

* the Kaggle "Daily Temperature of Major Cities" file ``city_temperature.csv`` (columns
  ``Region,Country,State,City,Month,Day,Year,AvgTemperature``, degrees F, ``-99`` = missing),
  gzipped or not -- the shared ``city_temperature_us47.csv.gz`` or a user's full Kaggle file;
* a coordinates table ``State,City,Latitude,Longitude`` (the reference's
  ``all_cities_lat_lon.csv``; shared copy ``cities.csv``).

Decisions (reference: ``temperature/efa/efa.ipynb`` of yixinw-lab/EFA):

1. ``-99`` is turned into NaN so that missing values are explicit. Rows whose date does not
   exist (the full Kaggle file has rows with ``Day`` 0 and ``Year`` 200 / 201) are dropped:
   a date is valid if it is a real calendar date with a year in 1800..2100.
2. :func:`paper_frame` keeps Country ``US``, drops Alaska, Hawaii, "Additional Territories" and
   "District of Columbia", drops exact duplicate rows (the Kaggle file repeats some), and
   inner-joins the coordinates on ``(State, City)`` -- one city per state, 47 cities. A city
   with two *different* values on the same day is an error, not a silent choice.
3. Missing data. The calendar (every day of the requested months and years, plus lag days) is
   built from the dates, not from the file, so an absent row counts as missing just like a
   ``-99``. ``missing="drop_cities"`` (the paper's choice) drops every city with any missing
   value in that window; for October 2007-2019 these are exactly Arizona, Connecticut and
   South Dakota (11 missing values), leaving 44 cities. ``missing="keep"`` keeps all cities on
   the complete (city x day) grid with NaN values, for models that mask them.
4. City order. The reference relied on file order within each day; we sort cities by
   ``(state, city)`` and number them ``city_idx`` 0..n-1, and sort rows by ``(date, city_idx)``
   so that each day is one block of cities in that fixed order.
5. Lags. ``lags=L`` also keeps the ``L`` days before each modelled day (29-30 September for 1
   October with ``L=2``); those extra rows have ``target=False``. The reference's lag-1/lag-2
   notebooks did the same with September 29-30.
6. Distances are great-circle (Haversine) on a sphere of radius 6371 km; neighbour lists exclude
   the city itself and break distance ties by the smaller city index.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Literal

import numpy as np
import pandas as pd

from efa.datasets.root import read_csv, resolve_file
from efa.datasets.splits import Splits
from efa.geo import EARTH_RADIUS_KM, haversine_km, nearest_neighbours

__all__ = [
    "EARTH_RADIUS_KM",
    "PAPER_EXCLUDED_STATES",
    "PAPER_YEARS",
    "TEMPERATURE_COLUMNS",
    "city_table",
    "haversine_km",
    "nearest_neighbours",
    "paper_frame",
    "read_cities",
    "read_city_temperatures",
    "split_years",
]

TEMPERATURE_COLUMNS = ("Country", "State", "City", "Month", "Day", "Year", "AvgTemperature")
CITY_COLUMNS = ("State", "City", "Latitude", "Longitude")
PAPER_EXCLUDED_STATES = ("Alaska", "Hawaii", "Additional Territories", "District of Columbia")
MISSING_SENTINEL = -99.0
# The paper's split of the October days by year (inclusive ranges).
PAPER_YEARS = {"train": (2007, 2012), "val": (2013, 2016), "test": (2017, 2019)}
_VALID_YEARS = (1800, 2100)
_SUBDIR = "temperature"

PathLike = str | os.PathLike[str]


def _require_columns(frame: pd.DataFrame, columns: Sequence[str], source: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(
            f"{source}: missing column(s) {missing}; expected {', '.join(columns)} "
            f"(found {', '.join(map(str, frame.columns))})"
        )


def _numeric(frame: pd.DataFrame, col: str, source: str) -> pd.Series:
    """``frame[col]`` as float; raise naming the first non-numeric, non-empty cell."""
    values = pd.to_numeric(frame[col], errors="coerce")
    bad = (values.isna() & frame[col].notna()).to_numpy(dtype=bool)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{source}, line {i + 2}: column {col!r} is not a number: {frame[col].iloc[i]!r}"
        )
    return values.astype(np.float64)


# --------------------------------------------------------------------------- readers


def read_city_temperatures(path: PathLike | None = None) -> pd.DataFrame:
    """Read a Kaggle-format daily temperature file (plain or ``.gz``).

    Parameters
    ----------
    path : str or os.PathLike or None, default None
        The file (e.g. a full Kaggle ``city_temperature.csv``), a directory holding
        ``city_temperature_us47.csv.gz``, or ``None`` for the shared copy under the data root.

    Returns
    -------
    pandas.DataFrame
        Columns ``region`` (if present in the file), ``country, state, city`` (str), ``date``
        (datetime64), ``year, month, day`` (int64) and ``value`` (float64 degrees F, NaN where
        the file has ``-99`` or nothing), in file order. Rows with impossible dates (not a
        calendar date, or a year outside 1800..2100) are dropped.

    Raises
    ------
    ValueError
        For a missing column or a non-numeric date part or temperature, naming the line.
    """
    path = resolve_file(
        path,
        "city_temperature_us47.csv.gz",
        _SUBDIR,
        "Kaggle 'Daily Temperature of Major Cities' format (city_temperature.csv)",
    )
    source = str(path)
    # low_memory=False: the Kaggle file mixes types in State, which otherwise triggers chunked
    # dtype guessing and a DtypeWarning.
    raw = read_csv(path, low_memory=False)
    _require_columns(raw, TEMPERATURE_COLUMNS, source)
    month, day, year = (_numeric(raw, c, source) for c in ("Month", "Day", "Year"))
    value = _numeric(raw, "AvgTemperature", source)
    parts = pd.DataFrame({"year": year, "month": month, "day": day})
    whole = parts.notna().all(axis=1) & (parts == np.floor(parts)).all(axis=1)
    whole &= year.between(*_VALID_YEARS)
    date = pd.Series(pd.NaT, index=raw.index, dtype="datetime64[ns]")
    date[whole] = pd.to_datetime(parts[whole].astype(np.int64), errors="coerce")
    valid = date.notna().to_numpy()
    out = pd.DataFrame(
        {
            "country": raw["Country"].astype(str),
            "state": raw["State"].astype(str),
            "city": raw["City"].astype(str),
            "date": date,
            "year": year.fillna(0).astype(np.int64),
            "month": month.fillna(0).astype(np.int64),
            "day": day.fillna(0).astype(np.int64),
            "value": value.mask(value == MISSING_SENTINEL),
        }
    )
    if "Region" in raw.columns:
        out.insert(0, "region", raw["Region"].astype(str))
    return out[valid].reset_index(drop=True)


def read_cities(path: PathLike | None = None) -> pd.DataFrame:
    """Read a ``State,City,Latitude,Longitude`` table into ``state, city, lat, lon``.

    Parameters
    ----------
    path : str or os.PathLike or None, default None
        The file, a directory holding ``cities.csv``, or ``None`` (the data root).

    Returns
    -------
    pandas.DataFrame
        ``state`` and ``city`` (str), ``lat`` and ``lon`` (float64 degrees), one row per city.

    Raises
    ------
    ValueError
        For a missing column, a coordinate that is missing, not a number or out of range, or a
        city listed twice.
    """
    path = resolve_file(
        path, "cities.csv", _SUBDIR, "city coordinates with columns State,City,Latitude,Longitude"
    )
    source = str(path)
    raw = read_csv(path)
    _require_columns(raw, CITY_COLUMNS, source)
    lat, lon = _numeric(raw, "Latitude", source), _numeric(raw, "Longitude", source)
    bad = ~(lat.between(-90, 90) & lon.between(-180, 180))
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise ValueError(f"{source}, line {i + 2}: latitude/longitude out of range or missing")
    out = pd.DataFrame(
        {"state": raw["State"].astype(str), "city": raw["City"].astype(str), "lat": lat, "lon": lon}
    )
    dup = out.duplicated(["state", "city"])
    if dup.any():
        row = out[dup].iloc[0]
        raise ValueError(f"{source}: city {row['state']}/{row['city']} is listed twice")
    return out


# --------------------------------------------------------------------------- the paper's frame


def _calendar(months: Sequence[int], years: tuple[int, int], lags: int) -> pd.DataFrame:
    """All modelled dates plus their ``lags`` predecessors, with a ``target`` flag."""
    months_ = [
        pd.date_range(start, start + pd.offsets.MonthEnd(0), freq="D")
        for year in range(years[0], years[1] + 1)
        for month in sorted(set(months))
        for start in [pd.Timestamp(year=year, month=month, day=1)]
    ]
    targets = months_[0].append(months_[1:]).as_unit("ns")
    needed = targets
    for lag in range(1, lags + 1):
        needed = needed.union(targets - pd.Timedelta(days=lag))
    needed = needed.sort_values()
    return pd.DataFrame({"date": needed, "target": needed.isin(targets)})


def paper_frame(
    temps: pd.DataFrame,
    cities: pd.DataFrame,
    months: Sequence[int] = (10,),
    years: tuple[int, int] = (2007, 2019),
    lags: int = 0,
    missing: Literal["drop_cities", "keep"] = "drop_cities",
    *,
    country: str = "US",
    exclude_states: Sequence[str] = PAPER_EXCLUDED_STATES,
) -> pd.DataFrame:
    """Build the paper's long frame: one row per (day, city).

    The filters, the calendar, the missing-value options and the city order are those of the
    module docstring, items 2-5.

    Parameters
    ----------
    temps : pandas.DataFrame
        Daily temperatures, from :func:`read_city_temperatures`.
    cities : pandas.DataFrame
        City coordinates, from :func:`read_cities`.
    months : sequence of int, default (10,)
        The modelled months, each in 1..12 (October in the paper).
    years : tuple of (int, int), default (2007, 2019)
        The first and last modelled year, inclusive.
    lags : int, default 0
        How many days before each modelled day are kept as context (``target=False``), >= 0.
    missing : {"drop_cities", "keep"}, default "drop_cities"
        ``"drop_cities"`` (the paper's choice) drops every city with any missing value in the
        window; ``"keep"`` keeps the complete (city x day) grid with NaN values.
    country : str, default "US"
        The country kept.
    exclude_states : sequence of str, default PAPER_EXCLUDED_STATES
        States dropped (Alaska, Hawaii, "Additional Territories", "District of Columbia").

    Returns
    -------
    pandas.DataFrame
        Columns ``state, city, city_idx, lat, lon, date, year, month, day, value, target``
        (``target`` is False for rows kept only as lag context), sorted by
        ``(date, city_idx)``.

    Raises
    ------
    ValueError
        For an unknown ``missing``, negative ``lags``, months outside 1..12, ``years`` in the
        wrong order, a missing column, a year of ``years`` without any data in ``months``
        (the message names the years that have some), no city in both tables, or a city with
        two different values on the same day.

    Warns
    -----
    UserWarning
        When ``missing="drop_cities"`` drops every city (each has a gap in the window).
    """
    if missing not in ("drop_cities", "keep"):
        raise ValueError(f"missing must be 'drop_cities' or 'keep', got {missing!r}")
    if lags < 0:
        raise ValueError(f"lags must be >= 0, got {lags}")
    if not months or any(not 1 <= m <= 12 for m in months):
        raise ValueError(f"months must be a non-empty sequence of 1..12, got {months!r}")
    if years[0] > years[1]:
        raise ValueError(f"years must be (first, last) with first <= last, got {years!r}")
    _require_columns(temps, ("country", "state", "city", "date", "value"), "temperature frame")
    _require_columns(cities, ("state", "city", "lat", "lon"), "cities frame")

    calendar = _calendar(months, years, lags)
    temps = temps.assign(date=temps["date"].astype("datetime64[ns]"))
    ours = (temps["country"] == country) & ~temps["state"].isin(exclude_states)
    _check_years(temps.loc[ours, "date"], months, years, country)
    data = temps.loc[
        ours & temps["date"].isin(calendar["date"]), ["state", "city", "date", "value"]
    ].drop_duplicates()
    conflicts = data.duplicated(["state", "city", "date"], keep=False)
    if conflicts.any():
        row = data[conflicts].iloc[0]
        raise ValueError(
            f"conflicting values for {row['state']}/{row['city']} on {row['date']:%Y-%m-%d}: "
            f"{sorted(data.loc[conflicts & (data['date'] == row['date']), 'value'].tolist())}"
        )

    places = cities.loc[~cities["state"].isin(exclude_states), ["state", "city", "lat", "lon"]]
    places = places.merge(data[["state", "city"]].drop_duplicates(), on=["state", "city"])
    places = places.sort_values(["state", "city"], ignore_index=True)
    if places.empty:
        raise ValueError(
            f"no city of country {country!r} is in both the temperature and the cities table "
            "(matched on state and city)"
        )

    # Complete (day x city) grid, so that absent rows become NaN like -99 values.
    grid = calendar.merge(places, how="cross").merge(data, on=["state", "city", "date"], how="left")
    if missing == "drop_cities":
        incomplete = grid.loc[grid["value"].isna(), ["state", "city"]].drop_duplicates()
        keep = ~places.set_index(["state", "city"]).index.isin(
            incomplete.set_index(["state", "city"]).index
        )
        places = places[keep].reset_index(drop=True)
        grid = grid.merge(places[["state", "city"]], on=["state", "city"])
        if places.empty:
            # A warning, not an error: an empty frame is the honest answer to this request.
            warnings.warn(
                f"every city has a missing value in months {sorted(set(months))} of "
                f"{years[0]}-{years[1]}, so missing='drop_cities' leaves an empty frame; "
                "missing='keep' keeps them with NaN",
                stacklevel=2,
            )
    places = places.assign(city_idx=np.arange(len(places), dtype=np.int64))
    grid = grid.merge(places[["state", "city", "city_idx"]], on=["state", "city"])
    grid = grid.sort_values(["date", "city_idx"], ignore_index=True)
    grid["year"] = grid["date"].dt.year.astype(np.int64)
    grid["month"] = grid["date"].dt.month.astype(np.int64)
    grid["day"] = grid["date"].dt.day.astype(np.int64)
    columns = ["state", "city", "city_idx", "lat", "lon", "date", "year", "month", "day"]
    return grid.loc[:, [*columns, "value", "target"]]


def _year_spans(years: Sequence[int]) -> str:
    """``[1995, 1996, 1997, 2001]`` -> ``"1995-1997, 2001"``."""
    spans: list[list[int]] = []
    for year in sorted(years):
        if spans and year == spans[-1][1] + 1:
            spans[-1][1] = year
        else:
            spans.append([year, year])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans) or "none"


def _check_years(dates: pd.Series, months: Sequence[int], years: tuple[int, int],
                 country: str) -> None:
    """Refuse requested years with no data at all in ``months``: the frame would hold only
    gaps for them (or nothing, once ``drop_cities`` drops every city)."""
    dates = dates[dates.dt.month.isin(list(months))]
    have = set(dates.dt.year.dropna().astype(int).tolist())
    absent = [y for y in range(years[0], years[1] + 1) if y not in have]
    if absent:
        raise ValueError(
            f"years {tuple(years)!r}: the data hold no day of months {sorted(set(months))} in "
            f"{_year_spans(absent)} (country {country!r}); years with data in these months: "
            f"{_year_spans(sorted(have))}"
        )


def city_table(frame: pd.DataFrame) -> pd.DataFrame:
    """List the cities of a :func:`paper_frame` result, one row each, in ``city_idx`` order.

    Parameters
    ----------
    frame : pandas.DataFrame
        A :func:`paper_frame` result (or a split of one).

    Returns
    -------
    pandas.DataFrame
        Columns ``city_idx, state, city, lat, lon``.
    """
    cols = ["city_idx", "state", "city", "lat", "lon"]
    return frame[cols].drop_duplicates("city_idx").sort_values("city_idx", ignore_index=True)


def split_years(
    frame: pd.DataFrame,
    train: tuple[int, int] = PAPER_YEARS["train"],
    val: tuple[int, int] = PAPER_YEARS["val"],
    test: tuple[int, int] = PAPER_YEARS["test"],
) -> Splits:
    """Split by the (inclusive) year ranges of the paper: 2007-12 / 2013-16 / 2017-19.

    Lag-context rows go with the year of their date, which for October is the year of the day
    they precede.

    Parameters
    ----------
    frame : pandas.DataFrame
        A :func:`paper_frame` result (any frame with a ``year`` column).
    train : tuple of (int, int), default (2007, 2012)
        The first and last training year, inclusive.
    val : tuple of (int, int), default (2013, 2016)
        The validation years.
    test : tuple of (int, int), default (2017, 2019)
        The test years.

    Returns
    -------
    Splits
        The rows of each year range, with a fresh index.

    Raises
    ------
    ValueError
        When a range is not ``(first, last)`` with ``first <= last``, or two ranges overlap
        (their rows would be in two splits).
    """
    ranges = {"train": train, "val": val, "test": test}
    for name, (first, last) in ranges.items():
        if first > last:
            raise ValueError(f"{name} years must be (first, last) with first <= last, "
                             f"got {(first, last)!r}")
    names = list(ranges)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if ranges[a][0] <= ranges[b][1] and ranges[b][0] <= ranges[a][1]:
                raise ValueError(f"the {a} years {tuple(ranges[a])!r} and the {b} years "
                                 f"{tuple(ranges[b])!r} overlap: each year belongs to one split")

    def part(years: tuple[int, int]) -> pd.DataFrame:
        return frame[frame["year"].between(*years)].reset_index(drop=True)

    return Splits(train=part(train), val=part(val), test=part(test))
