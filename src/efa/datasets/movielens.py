"""MovieLens-100K: readers for the original files and the EFA paper's preprocessing (Sec 6.2).

Files are the ones in the official archive: ``u.data`` (tab-separated ``user item rating
timestamp``, no header) and ``u.item`` (``|``-separated, latin-1).

Frames returned by :func:`preprocess_sequences` / :func:`preprocess_ratings` are long format, one
row per kept rating, sorted by ``(user_id, timestamp)``, with columns

* ``user_id``   -- original MovieLens user id;
* ``position``  -- 0-based position in the user's time-ordered sequence;
* ``item``      -- movie id remapped to ``1..50`` (0 stays free for padding);
* ``movie_id``  -- original MovieLens movie id;
* ``rating``    -- 1..5 (Experiment 1) or original rating - 2 in {1, 2, 3} (Experiment 2);
* ``timestamp`` -- Unix seconds.

:func:`~efa.datasets.movielens_split.split_users` (in :mod:`efa.datasets.movielens_split`,
importable from here too) adds a boolean ``target`` column.

Decisions taken to reproduce the reference notebooks (yixinw-lab/EFA, movielens/exp-1, exp-2):

1. **Top-50 movies, ties.** The reference takes ``value_counts().index[:50]``, whose order among
   equal counts depends on the pandas version. We rank by number of ratings (= number of
   distinct raters: u.data has no repeated user-movie pair) and break ties by the *smaller*
   movie id. Experiment 1: movies 28 and 191 tie at the 50th place (276 ratings); keeping 28
   gives the paper's 902 users, keeping 191 gives 901. Experiment 2 (counted after the rating
   filter): movies 276 and 357 tie (251 ratings); keeping 276 gives the paper's 893 users and
   12,465 rows, keeping 357 gives 892 users and 12,439 rows. ``tie_break="larger_id"`` exists
   only to show this.
2. **Timestamp filter** ``count / nunique(timestamp) < 2`` per user is computed *after*
   restricting to the 50 movies, as in the reference.
3. **One movie per (user, timestamp).** The reference runs
   ``groupby(["user_id", "timestamp"], group_keys=False).apply(lambda g: g.sample(n=1,
   random_state=42))``. Each group gets a *fresh* ``RandomState(42)``, and ``DataFrame.sample``
   calls ``RandomState.choice(k, size=1, replace=False)``, so the kept row is the one at
   position ``RandomState(42).choice(k, 1, replace=False)[0]`` among the group's ``k`` rows in
   file order -- a function of the group size only. We tabulate that position for every group
   size and select rows with ``cumcount``. This avoids ``groupby.apply`` (pandas 3 drops the
   grouping columns from ``apply``) and ``DataFrameGroupBy.sample`` (which draws every group from
   one shared RNG stream, a different result). Rows keep u.data file order before grouping, as
   in the reference. ``protocol="clean"`` instead draws one uniform position per group from a
   single ``numpy.random.default_rng(seed)`` stream.
4. **Remapping.** After sorting by ``(user_id, timestamp)``, ``item = pd.factorize(movie_id) + 1``
   (first-appearance order), as in the reference; ``movie_id`` keeps the original id.
5. **Experiment 2.** Ratings < 3 are dropped and 2 is subtracted *before* the top-50 selection;
   users with exactly one remaining rating are removed after the timestamp filter and before the
   per-timestamp dedup (an unreported step of the reference). Dedup can still leave a user with
   a single rating; the reference keeps such users and so do we.

The decisions of the train / validation / test split by user are listed in
:mod:`efa.datasets.movielens_split`.
"""

from __future__ import annotations

import numbers
import os
from typing import Literal

import numpy as np
import pandas as pd

from efa.datasets.movielens_split import Protocol, split_users
from efa.datasets.root import read_csv, resolve_file, warn_row_count

__all__ = [
    "RATING_COLUMNS",
    "preprocess_ratings",
    "preprocess_sequences",
    "read_movies",
    "read_ratings",
    "split_users",  # from efa.datasets.movielens_split
    "summary",
    "top_movies",
]

RATING_COLUMNS = ("user_id", "movie_id", "rating", "timestamp")
OUTPUT_COLUMNS = ("user_id", "position", "item", "movie_id", "rating", "timestamp")
_SUBDIR = "movielens-100k"

TieBreak = Literal["smaller_id", "larger_id"]

PathLike = str | os.PathLike[str]


# --------------------------------------------------------------------------- readers


def _int64(strings: pd.Series, col: str, path: os.PathLike[str]) -> pd.Series:
    """Integer strings as int64; one beyond int64 is an error naming its line, not numpy's
    bare OverflowError."""
    try:
        return strings.astype(np.int64)
    except OverflowError:
        limit = 2**63
        i = next(i for i, text in enumerate(strings) if not -limit <= int(text) < limit)
        raise ValueError(
            f"{path}, line {i + 1}: column {col!r} value {strings.iloc[i].strip()} is out of "
            "range (beyond a 64-bit integer)"
        ) from None


def read_ratings(path_or_dir: PathLike | None = None) -> pd.DataFrame:
    """Read MovieLens-100K ``u.data`` into ``user_id, movie_id, rating, timestamp`` (int64).

    Warns when a file named ``u.data`` does not have the official 100,000 lines.

    Parameters
    ----------
    path_or_dir : str or os.PathLike or None, default None
        The file, its directory, the data root, or ``None`` (the data root, see
        :func:`efa.datasets.data_root`).

    Returns
    -------
    pandas.DataFrame
        One row per line of the file, in file order.

    Raises
    ------
    ValueError
        For a malformed file (empty, wrong number of fields, a non-integer value or one beyond
        a 64-bit integer, a rating outside 1..5), naming the file, the line and the problem.
    """
    path = resolve_file(path_or_dir, "u.data", _SUBDIR, "MovieLens-100K ratings (u.data)")
    # Parsed by hand rather than with read_csv so that errors can name the exact line; the
    # 100,000-line file still takes well under a second.
    lines = path.read_text(encoding="latin-1").splitlines()
    if not lines:
        raise ValueError(f"{path}: file is empty; expected tab-separated {RATING_COLUMNS}")
    if path.name == "u.data":
        warn_row_count(path, len(lines), 100_000, "official MovieLens-100K u.data")
    fields = [line.split("\t") for line in lines]
    n_fields = np.fromiter((len(f) for f in fields), dtype=np.int64, count=len(fields))
    bad = np.flatnonzero(n_fields != len(RATING_COLUMNS))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"{path}, line {i + 1}: expected {len(RATING_COLUMNS)} tab-separated fields "
            f"({', '.join(RATING_COLUMNS)}), found {n_fields[i]}: {lines[i]!r}"
        )
    raw = pd.DataFrame(fields, columns=list(RATING_COLUMNS), dtype=str)
    out = {}
    for col in RATING_COLUMNS:
        ok = raw[col].str.fullmatch(r"\s*[+-]?\d+\s*").to_numpy(dtype=bool)
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            raise ValueError(
                f"{path}, line {i + 1}: column {col!r} is not an integer: {raw[col].iloc[i]!r}"
            )
        out[col] = _int64(raw[col], col, path)
    frame = pd.DataFrame(out)
    bad_rating = ~frame["rating"].between(1, 5)
    if bad_rating.any():
        i = int(np.flatnonzero(bad_rating.to_numpy())[0])
        raise ValueError(f"{path}, line {i + 1}: rating {frame['rating'].iloc[i]} is outside 1..5")
    return frame


def read_movies(path_or_dir: PathLike | None = None) -> pd.DataFrame:
    """Read MovieLens-100K ``u.item`` into ``movie_id`` (int64), ``title`` (str).

    Parameters
    ----------
    path_or_dir : str or os.PathLike or None, default None
        The file, its directory, the data root, or ``None`` (the data root).

    Returns
    -------
    pandas.DataFrame
        One row per movie, in file order; the other columns of ``u.item`` are not read.

    Raises
    ------
    ValueError
        When a movie id is not an integer or is beyond a 64-bit integer, naming the line.
    """
    path = resolve_file(path_or_dir, "u.item", _SUBDIR, "MovieLens-100K movie list (u.item)")
    raw = read_csv(
        path,
        sep="|",
        header=None,
        encoding="latin-1",
        usecols=[0, 1],
        names=["movie_id", "title"],
        dtype=str,
        keep_default_na=False,
    )
    ok = raw["movie_id"].str.fullmatch(r"\d+").to_numpy(dtype=bool)
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise ValueError(
            f"{path}, line {i + 1}: movie id {raw['movie_id'].iloc[i]!r} is not an integer"
        )
    return pd.DataFrame({"movie_id": _int64(raw["movie_id"], "movie_id", path),
                         "title": raw["title"]})


# --------------------------------------------------------------------------- preprocessing


def _check_ratings_frame(ratings: pd.DataFrame) -> None:
    missing = [c for c in RATING_COLUMNS if c not in ratings.columns]
    if missing:
        raise ValueError(f"ratings frame lacks columns {missing}; expected {RATING_COLUMNS}")


def _check_count(name: str, value: object) -> None:
    # A negative n would slice off movies from the end ([:-1] keeps all but one) and 0 keeps
    # none: neither is a number of movies.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1 (a number of movies), got {value!r}")


def top_movies(
    ratings: pd.DataFrame, n: int = 50, tie_break: TieBreak = "smaller_id"
) -> np.ndarray:
    """Return the ``n`` movie ids with the most ratings, most-rated first.

    Ties in the number of ratings are broken by movie id (see the module docstring, item 1).

    Parameters
    ----------
    ratings : pandas.DataFrame
        Ratings with a ``movie_id`` column, as from :func:`read_ratings`.
    n : int, default 50
        How many movies, >= 1.
    tie_break : {"smaller_id", "larger_id"}, default "smaller_id"
        Which movie of a tie ranks first; ``"smaller_id"`` reproduces the paper.

    Returns
    -------
    numpy.ndarray
        The movie ids, shape ``(min(n, number of movies),)``.

    Raises
    ------
    ValueError
        For an unknown ``tie_break``, or an ``n`` that is not an integer >= 1.
    """
    _check_count("n", n)
    counts = ratings.groupby("movie_id").size().rename("n").reset_index()
    if tie_break not in ("smaller_id", "larger_id"):
        raise ValueError(f"tie_break must be 'smaller_id' or 'larger_id', got {tie_break!r}")
    counts = counts.sort_values(
        ["n", "movie_id"], ascending=[False, tie_break == "smaller_id"], kind="stable"
    )
    return counts["movie_id"].to_numpy()[:n]


def _reference_positions(max_size: int, seed: int) -> np.ndarray:
    """``table[k]``: the row ``group.sample(n=1, random_state=seed)`` keeps in a k-row group."""
    table = np.zeros(max_size + 1, dtype=np.int64)
    for k in range(1, max_size + 1):
        # Exactly what DataFrame.sample does with an int random_state (see module doc, item 3).
        table[k] = np.random.RandomState(seed).choice(k, size=1, replace=False)[0]
    return table


def _one_per_timestamp(frame: pd.DataFrame, protocol: Protocol, seed: int) -> pd.DataFrame:
    groups = frame.groupby(["user_id", "timestamp"], sort=False)
    size = groups["movie_id"].transform("size").to_numpy()
    pos = groups.cumcount().to_numpy()
    if protocol == "paper":
        keep = pos == _reference_positions(int(size.max(initial=0)), seed)[size]
    elif protocol == "clean":
        group_id = groups.ngroup().to_numpy()
        sizes = np.bincount(group_id)
        chosen = np.random.default_rng(seed).integers(0, sizes) if sizes.size else sizes
        keep = pos == chosen[group_id]
    else:
        raise ValueError(f"protocol must be 'paper' or 'clean', got {protocol!r}")
    return frame[keep]


def _filter_and_recode(
    ratings: pd.DataFrame,
    *,
    n_movies: int,
    tie_break: TieBreak,
    drop_single: bool,
    protocol: Protocol,
    seed: int,
) -> pd.DataFrame:
    data = ratings[ratings["movie_id"].isin(top_movies(ratings, n_movies, tie_break))]
    per_user = data.groupby("user_id")["timestamp"].agg(["count", "nunique"])
    keep_users = per_user.index[per_user["count"] / per_user["nunique"] < 2]
    data = data[data["user_id"].isin(keep_users)]
    if drop_single:
        counts = data["user_id"].value_counts()
        data = data[~data["user_id"].isin(counts.index[counts == 1])]
    data = _one_per_timestamp(data, protocol, seed)
    data = data.sort_values(["user_id", "timestamp"], kind="stable").reset_index(drop=True)
    data = data.assign(
        item=pd.factorize(data["movie_id"])[0].astype(np.int64) + 1,
        position=data.groupby("user_id").cumcount().astype(np.int64),
    )
    return data.loc[:, list(OUTPUT_COLUMNS)]


def preprocess_sequences(
    ratings: pd.DataFrame,
    protocol: Protocol = "paper",
    seed: int = 42,
    *,
    n_movies: int = 50,
    tie_break: TieBreak = "smaller_id",
) -> pd.DataFrame:
    """Build Experiment 1's data: time-ordered movie sequences (902 users, 50 movies, 13,757 rows).

    Parameters
    ----------
    ratings : pandas.DataFrame
        Raw ratings (``user_id, movie_id, rating, timestamp``), as from :func:`read_ratings`.
    protocol : {"paper", "clean"}, default "paper"
        How the one movie per (user, timestamp) is drawn: ``"paper"`` reproduces the reference
        notebook, ``"clean"`` draws from one ``numpy.random.default_rng(seed)`` stream (see the
        module docstring, item 3).
    seed : int, default 42
        Seed of that draw.
    n_movies : int, default 50
        How many of the most-rated movies are kept (:func:`top_movies`), >= 1.
    tie_break : {"smaller_id", "larger_id"}, default "smaller_id"
        Tie-breaking of the top-movie selection.

    Returns
    -------
    pandas.DataFrame
        Columns ``user_id, position, item, movie_id, rating, timestamp`` (see the module
        docstring), one row per kept rating, sorted by ``(user_id, timestamp)``.

    Raises
    ------
    ValueError
        When ``ratings`` lacks a column, for an unknown ``protocol`` or ``tie_break``, or an
        ``n_movies`` that is not an integer >= 1.
    """
    _check_ratings_frame(ratings)
    _check_count("n_movies", n_movies)
    return _filter_and_recode(
        ratings,
        n_movies=n_movies,
        tie_break=tie_break,
        drop_single=False,
        protocol=protocol,
        seed=seed,
    )


def preprocess_ratings(
    ratings: pd.DataFrame,
    protocol: Protocol = "paper",
    seed: int = 42,
    *,
    n_movies: int = 50,
    min_rating: int = 3,
    tie_break: TieBreak = "smaller_id",
) -> pd.DataFrame:
    """Build Experiment 2's data: ratings ``>= min_rating`` shifted to start at 1 (893 users).

    Ratings below ``min_rating`` are dropped before the top-movie selection, and users left with
    a single rating after the timestamp filter are removed (see the module docstring, item 5).

    Parameters
    ----------
    ratings : pandas.DataFrame
        Raw ratings (``user_id, movie_id, rating, timestamp``), as from :func:`read_ratings`.
    protocol : {"paper", "clean"}, default "paper"
        How the one movie per (user, timestamp) is drawn, as in :func:`preprocess_sequences`.
    seed : int, default 42
        Seed of that draw.
    n_movies : int, default 50
        How many of the most-rated movies are kept, >= 1.
    min_rating : int, default 3
        The smallest rating kept.
    tie_break : {"smaller_id", "larger_id"}, default "smaller_id"
        Tie-breaking of the top-movie selection.

    Returns
    -------
    pandas.DataFrame
        Same columns as :func:`preprocess_sequences`; ``rating`` is
        ``original - (min_rating - 1)``, i.e. {1, 2, 3} by default.

    Raises
    ------
    ValueError
        When ``ratings`` lacks a column, for an unknown ``protocol`` or ``tie_break``, or an
        ``n_movies`` that is not an integer >= 1.
    """
    _check_ratings_frame(ratings)
    _check_count("n_movies", n_movies)
    kept = ratings[ratings["rating"] >= min_rating]
    kept = kept.assign(rating=kept["rating"] - (min_rating - 1))
    return _filter_and_recode(
        kept,
        n_movies=n_movies,
        tie_break=tie_break,
        drop_single=True,
        protocol=protocol,
        seed=seed,
    )


def summary(frame: pd.DataFrame) -> dict[str, int | float]:
    """Count the users, items, rows and sparsity of a preprocessed frame.

    Parameters
    ----------
    frame : pandas.DataFrame
        A frame with ``user_id`` and ``item`` columns, e.g. from :func:`preprocess_sequences`.

    Returns
    -------
    dict
        ``n_users``, ``n_items``, ``n_rows`` (int) and ``sparsity``
        ``1 - rows / (users * items)`` (float; NaN for an empty frame).
    """
    n_users = int(frame["user_id"].nunique())
    n_items = int(frame["item"].nunique())
    n_rows = len(frame)
    sparsity = 1.0 - n_rows / (n_users * n_items) if n_users and n_items else float("nan")
    return {"n_users": n_users, "n_items": n_items, "n_rows": n_rows, "sparsity": sparsity}
