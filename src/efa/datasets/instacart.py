"""Instacart market baskets: the EFA paper's preprocessing (Sec 6.3) and readers for its output.

Two entry points:

* :func:`load_instacart` reads the preprocessed files the reference repository ships
  (``data_train_final.csv`` / ``data_test_final.csv``, columns ``order_id,product_id,rank``,
  where ``product_id`` is already the remapped item id 1..63 -- the column name is kept for
  compatibility with those files; ``item_map.csv`` maps it back to Kaggle's ``product_id``).
* :func:`preprocess_kaggle` rebuilds those files from Kaggle's raw ``order_products__prior.csv``
  (-> train) and ``order_products__train.csv`` (-> test), read with
  :func:`read_order_products`.

Decisions, following the reference notebook ``instacart/data_prep.ipynb``:

1. An item's frequency is its number of rows over prior + train together (a product occurs at
   most once per Kaggle basket, so rows = baskets). Items with ``>= min_item_count`` rows are
   kept (50,000 -> 63 items); other items are dropped from the baskets.
2. Baskets with ``>= min_basket`` remaining items are kept (10 -> 24,781 train / 1,433 test).
3. ``rank`` is the dense rank of ``add_to_cart_order`` within the *filtered* basket, so the gaps
   left by dropped items close up and ``rank`` runs 1..n.
4. Row order is the input's order (the Kaggle files are sorted by order id and add-to-cart
   order); nothing is re-sorted, as in the reference.
5. Item ids are ``1..K`` in order of first appearance in
   ``concat(train.product_id, test.product_id).unique()`` after filtering.
6. Validation (:func:`split_validation`): the reference builds its basket list with
   ``groupby("order_id")`` (ascending order ids) and calls ``train_test_split(baskets,
   test_size=0.25, random_state=42)``; we split the ascending unique order ids the same way
   (18,585 train / 6,196 val baskets). For the shipped file, which is sorted by order id, this
   is also first-appearance order.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
from sklearn.model_selection import train_test_split

from efa.datasets.root import read_csv, require_file, resolve_file, warn_row_count
from efa.datasets.splits import check_fraction

__all__ = [
    "BASKET_COLUMNS",
    "RAW_COLUMNS",
    "load_instacart",
    "preprocess_kaggle",
    "read_baskets",
    "read_item_names",
    "read_order_products",
    "split_validation",
]

BASKET_COLUMNS = ("order_id", "product_id", "rank")
RAW_COLUMNS = ("order_id", "product_id", "add_to_cart_order")
_SUBDIR = "instacart"

PathLike = str | os.PathLike[str]


# --------------------------------------------------------------------------- validation helpers


def _require_columns(frame: pd.DataFrame, columns: tuple[str, ...], source: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(
            f"{source}: missing column(s) {missing}; expected {', '.join(columns)} "
            f"(found {', '.join(map(str, frame.columns))})"
        )


def _shown(value: object) -> str:
    # A cell as the file has it: text quoted, numbers bare (not numpy's "np.float64(inf)")
    return repr(value) if isinstance(value, str) else str(value)


def _as_int_column(frame: pd.DataFrame, col: str, source: str, header_lines: int) -> pd.Series:
    """Return ``frame[col]`` as int64, or raise naming the first non-integer or out-of-range
    row."""
    series = frame[col]
    if pd.api.types.is_signed_integer_dtype(series.dtype) and not series.isna().any():
        return series.astype(np.int64)
    numeric = pd.to_numeric(series, errors="coerce")
    # inf equals its own floor, so finiteness is checked apart
    finite = pd.Series(np.isfinite(numeric.to_numpy(dtype=np.float64, na_value=np.nan)),
                       index=numeric.index)
    bad = (numeric.isna() | ~finite | (numeric != np.floor(numeric))).to_numpy(dtype=bool)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{source}, line {i + 1 + header_lines}: column {col!r} is not an integer: "
            f"{_shown(series.iloc[i])}"
        )
    # Beyond int64 the cast wraps round silently (1e30 becomes -2**63)
    huge = ((numeric < -(2**63)) | (numeric >= 2**63)).to_numpy(dtype=bool)
    if huge.any():
        i = int(np.flatnonzero(huge)[0])
        raise ValueError(
            f"{source}, line {i + 1 + header_lines}: column {col!r} value "
            f"{_shown(series.iloc[i])} is out of range (beyond a 64-bit integer)"
        )
    return numeric.astype(np.int64)


def _check_ranks(frame: pd.DataFrame, source: str) -> None:
    stats = frame.groupby("order_id", sort=False)["rank"].agg(["size", "min", "max", "nunique"])
    bad = stats[
        (stats["min"] != 1) | (stats["max"] != stats["size"]) | (stats["nunique"] != stats["size"])
    ]
    if len(bad):
        order = bad.index[0]
        ranks = sorted(frame.loc[frame["order_id"] == order, "rank"].tolist())
        raise ValueError(
            f"{source}: order {order} has ranks {ranks}; expected each of 1..n exactly once "
            f"(n = {int(bad['size'].iloc[0])} items in the order)"
        )


# --------------------------------------------------------------------------- readers


def read_baskets(path: PathLike) -> pd.DataFrame:
    """Read a preprocessed basket file (``order_id,product_id,rank``, int64, file order).

    Parameters
    ----------
    path : str or os.PathLike
        A file in the format of ``data_train_final.csv`` / ``data_test_final.csv``.

    Returns
    -------
    pandas.DataFrame
        Columns ``order_id``, ``product_id`` (the item id, 1..K) and ``rank`` (1..n within each
        order), all int64, one row per item of a basket, in the file's row order.

    Raises
    ------
    FileNotFoundError
        When ``path`` is not a file.
    ValueError
        Naming the file (and line) for missing columns, non-integer values (``inf`` included),
        values beyond a 64-bit integer, item ids below 1, or an order whose ranks are not
        exactly 1..n.
    """
    path = require_file(path, "Instacart baskets with columns order_id,product_id,rank")
    frame = read_csv(path)
    _require_columns(frame, BASKET_COLUMNS, str(path))
    out = pd.DataFrame(
        {col: _as_int_column(frame, col, str(path), header_lines=1) for col in BASKET_COLUMNS}
    )
    if (out["product_id"] < 1).any():
        i = int(np.flatnonzero((out["product_id"] < 1).to_numpy())[0])
        raise ValueError(
            f"{path}, line {i + 2}: item id {out['product_id'].iloc[i]} < 1 (0 is padding)"
        )
    _check_ranks(out, str(path))
    return out


def read_item_names(root: PathLike | None = None) -> pd.DataFrame:
    """Read ``item_map.csv``: ``item`` (1..K), ``product_id`` (Kaggle id), ``product_name``.

    Parameters
    ----------
    root : str or os.PathLike or None, default None
        The file, the instacart directory, the data root, or ``None`` (the data root, see
        :func:`efa.datasets.data_root`).

    Returns
    -------
    pandas.DataFrame
        Columns ``item`` and ``product_id`` (int64) and ``product_name`` (str), one row per
        item, sorted by ``item``.

    Raises
    ------
    ValueError
        For missing columns, non-integer ids, or items that are not exactly 1..K.
    """
    path = resolve_file(
        root, "item_map.csv", _SUBDIR, "Instacart item map (item,product_id,product_name)"
    )
    frame = read_csv(path, keep_default_na=False)
    _require_columns(frame, ("item", "product_id", "product_name"), str(path))
    out = pd.DataFrame(
        {
            "item": _as_int_column(frame, "item", str(path), 1),
            "product_id": _as_int_column(frame, "product_id", str(path), 1),
            "product_name": frame["product_name"].astype(str),
        }
    ).sort_values("item", kind="stable", ignore_index=True)
    if not np.array_equal(out["item"].to_numpy(), np.arange(1, len(out) + 1)):
        raise ValueError(f"{path}: items must be exactly 1..{len(out)}, one row each")
    return out


def read_order_products(path: PathLike) -> pd.DataFrame:
    """Read a raw Kaggle ``order_products__*.csv`` (``order_id, product_id, add_to_cart_order``).

    Not shipped in the shared data: download it from
    https://www.kaggle.com/c/instacart-market-basket-analysis/data.

    Parameters
    ----------
    path : str or os.PathLike
        ``order_products__prior.csv`` or ``order_products__train.csv``.

    Returns
    -------
    pandas.DataFrame
        Columns ``order_id``, ``product_id`` and ``add_to_cart_order`` as int64, in file order;
        other columns (``reordered``) are dropped.

    Raises
    ------
    ValueError
        For missing columns or non-integer values.
    """
    path = require_file(path, "Kaggle Instacart order_products__prior.csv or __train.csv")
    frame = read_csv(path, usecols=lambda c: c in RAW_COLUMNS)
    _require_columns(frame, RAW_COLUMNS, str(path))
    return pd.DataFrame({col: _as_int_column(frame, col, str(path), 1) for col in RAW_COLUMNS})


def load_instacart(root: PathLike | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read the paper's preprocessed train and test baskets.

    Warns when a file does not have the paper's number of rows (275,345 train, 16,066 test).

    Parameters
    ----------
    root : str or os.PathLike or None, default None
        The instacart directory, the data root holding ``instacart/``, or ``None`` (the data
        root, see :func:`efa.datasets.data_root`).

    Returns
    -------
    train : pandas.DataFrame
        ``data_train_final.csv``, as from :func:`read_baskets`.
    test : pandas.DataFrame
        ``data_test_final.csv``, as from :func:`read_baskets`.

    Raises
    ------
    NotADirectoryError
        When ``root`` is a file: one path cannot name both files (:func:`read_baskets` reads
        one).
    FileNotFoundError
        When ``root`` does not exist, or a file is not found.
    ValueError
        For an empty ``root``, or a malformed file (as :func:`read_baskets`).
    """
    what = "Instacart preprocessed baskets (order_id,product_id,rank)"
    if root is not None and os.fspath(root).strip() and not os.path.isdir(root):
        if os.path.exists(root):
            # resolve_file takes a file as the file itself: it would be read as both splits
            raise NotADirectoryError(
                f"{root} is a file; load_instacart reads data_train_final.csv and "
                "data_test_final.csv: pass the instacart folder or the data root (read_baskets "
                "reads a single file)"
            )
        raise FileNotFoundError(f"{root} does not exist: expected the instacart folder or the "
                                "data root")
    train = read_baskets(resolve_file(root, "data_train_final.csv", _SUBDIR, what))
    test = read_baskets(resolve_file(root, "data_test_final.csv", _SUBDIR, what))
    for frame, name, rows in ((train, "data_train_final.csv", 275_345),
                              (test, "data_test_final.csv", 16_066)):
        warn_row_count(name, len(frame), rows, "EFA paper's preprocessed file")
    return train, test


# --------------------------------------------------------------------------- preprocessing


def preprocess_kaggle(
    prior: pd.DataFrame,
    train: pd.DataFrame,
    min_item_count: int = 50_000,
    min_basket: int = 10,
    products: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Rebuild ``(data_train_final, data_test_final, item_map)`` from raw Kaggle frames.

    The decisions (item and basket filters, ranks, item ids) are those listed in the module
    docstring, following the reference notebook.

    Parameters
    ----------
    prior : pandas.DataFrame
        Kaggle's prior orders (``order_id, product_id, add_to_cart_order``, as from
        :func:`read_order_products`); becomes the training set.
    train : pandas.DataFrame
        Kaggle's "train" orders, same columns; becomes the test set.
    min_item_count : int, default 50000
        An item is kept when it has at least this many rows over ``prior`` and ``train``
        together.
    min_basket : int, default 10
        A basket is kept when at least this many of its items remain after the item filter.
    products : pandas.DataFrame or None, default None
        Kaggle's ``products`` table (``product_id, product_name``); when given, ``item_map``
        gets a ``product_name`` column.

    Returns
    -------
    train_final : pandas.DataFrame
        The training baskets, with exactly the columns and row order of
        ``data_train_final.csv``.
    test_final : pandas.DataFrame
        The test baskets, likewise for ``data_test_final.csv``.
    item_map : pandas.DataFrame
        ``item, product_id`` (plus ``product_name`` when ``products`` is given), one row per
        kept item.

    Raises
    ------
    ValueError
        When a frame lacks a required column.
    """
    _require_columns(prior, RAW_COLUMNS, "prior frame")
    _require_columns(train, RAW_COLUMNS, "train frame")
    prior = prior.loc[:, list(RAW_COLUMNS)]
    train = train.loc[:, list(RAW_COLUMNS)]

    counts = pd.concat([prior["product_id"], train["product_id"]]).value_counts()
    items = counts.index[counts >= min_item_count]

    def _filter(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame[frame["product_id"].isin(items)]
        sizes = frame.groupby("order_id")["product_id"].size()
        frame = frame[frame["order_id"].isin(sizes.index[sizes >= min_basket])]
        rank = frame.groupby("order_id")["add_to_cart_order"].rank(method="dense")
        return pd.DataFrame(
            {
                "order_id": frame["order_id"].astype(np.int64).to_numpy(),
                "product_id": frame["product_id"].to_numpy(),
                "rank": rank.astype(np.int64).to_numpy(),
            }
        )

    train_final, test_final = _filter(prior), _filter(train)
    original = pd.concat([train_final["product_id"], test_final["product_id"]]).unique()
    to_item = pd.Series(np.arange(1, len(original) + 1, dtype=np.int64), index=original)
    for frame in (train_final, test_final):
        frame["product_id"] = to_item.loc[frame["product_id"].to_numpy()].to_numpy()

    item_map = pd.DataFrame(
        {"item": to_item.to_numpy(), "product_id": np.asarray(original, dtype=np.int64)}
    )
    if products is not None:
        _require_columns(products, ("product_id", "product_name"), "products frame")
        names = products.drop_duplicates("product_id").set_index("product_id")["product_name"]
        item_map["product_name"] = names.reindex(item_map["product_id"]).to_numpy()
    return train_final, test_final, item_map


# --------------------------------------------------------------------------- splitting


def split_validation(
    train: pd.DataFrame, frac: float = 0.25, seed: int = 42
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split training baskets into ``(train, val)`` by basket, as the reference does.

    The ascending unique order ids are split with scikit-learn's ``train_test_split``. Both
    outputs keep the input's columns and row order, with a fresh index.

    Parameters
    ----------
    train : pandas.DataFrame
        Baskets with an ``order_id`` column, e.g. the training frame of :func:`load_instacart`.
    frac : float, default 0.25
        The fraction of baskets that go to validation (``test_size``), strictly between 0
        and 1.
    seed : int, default 42
        ``random_state`` of the split.

    Returns
    -------
    train : pandas.DataFrame
        The rows of the training baskets.
    val : pandas.DataFrame
        The rows of the validation baskets.

    Raises
    ------
    ValueError
        When ``frac`` is not a number strictly between 0 and 1 (scikit-learn would read an
        integer as a count of baskets).
    """
    frac = check_fraction("frac", frac)
    orders = np.sort(train["order_id"].unique())
    train_orders, val_orders = train_test_split(orders, test_size=frac, random_state=seed)
    is_val = train["order_id"].isin(val_orders)
    return train[~is_val].reset_index(drop=True), train[is_val].reset_index(drop=True)
