"""MovieLens-100K: the EFA paper's train / validation / test split by user (Sec 6.2).

:func:`split_users` splits a frame of :func:`efa.datasets.movielens.preprocess_sequences` or
:func:`efa.datasets.movielens.preprocess_ratings` (it is importable from
:mod:`efa.datasets.movielens` too). Decisions taken to reproduce the reference notebooks
(yixinw-lab/EFA, movielens/exp-1, exp-2):

1. **User split, protocol "paper".** The reference does ``np.random.seed(42); s =
   np.random.permutation(n_users); mid = 3 * n_users // 4; train = s[s[:mid]]; test =
   s[s[mid:]]`` and matches these *positions* 0..n-1 against ``user_id``. Users with id >= n (and
   the non-existent id 0) land in neither split; they are silently unused, as in the reference
   (Exp 1: 641 train+val users / 9,736 rows, 219 test users / 3,408 rows, 42 users unused;
   Exp 2: 631 / 8,707 and 211 / 3,038). We use ``RandomState(seed).permutation``, which is
   what the legacy global ``np.random.seed`` + ``np.random.permutation`` computes, without
   touching global state.
2. **Validation, protocol "paper".** Experiment 1 splits the train users' sequences with
   ``train_test_split(sequences, test_size=0.25, random_state=42)``, where the sequences come
   from ``groupby("user_id")`` (sorted user ids); ``val_unit="user"`` reproduces this: 7,252
   train / 2,484 val rows. Experiment 2 splits the per-position *samples* instead (train/val
   leakage across positions of the same user); ``val_unit="row"`` reproduces it: 6,530 / 2,177
   target rows. Because every sample still sees its user's whole sequence as context, in that
   mode ``train`` and ``val`` both hold all rows of the train users and the ``target`` column
   says which rows are predicted in that split. In ``val_unit="user"`` mode ``target`` is
   always True.
3. **Protocol "clean".** A proper user split: users shuffled with ``default_rng(seed)``;
   ``round(0.25 n)`` test users, ``round(0.25 * rest)`` validation users, the others train
   (56.25 / 18.75 / 25 %). No user is dropped.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
from sklearn.model_selection import train_test_split

from efa.datasets.splits import Splits, check_fraction

__all__ = ["split_users"]

Protocol = Literal["paper", "clean"]


def _rows_of(frame: pd.DataFrame, users: np.ndarray) -> pd.DataFrame:
    return frame[frame["user_id"].isin(users)].reset_index(drop=True)


def _with_target(frame: pd.DataFrame, target: np.ndarray | None = None) -> pd.DataFrame:
    flags = np.ones(len(frame), dtype=bool) if target is None else np.asarray(target, dtype=bool)
    return frame.assign(target=flags)


def split_users(
    frame: pd.DataFrame,
    protocol: Protocol = "paper",
    seed: int = 42,
    *,
    val_unit: Literal["user", "row"] = "user",
    val_frac: float = 0.25,
    test_frac: float = 0.25,
) -> Splits:
    """Split a preprocessed frame into train / val / test by user (see the module docstring).

    Each frame gets a boolean ``target`` column: the rows whose value is predicted in that
    split. With ``val_unit="row"`` the train and val frames share the train users' rows as
    context and differ only in ``target``.

    Parameters
    ----------
    frame : pandas.DataFrame
        A preprocessed frame, from :func:`preprocess_sequences` or :func:`preprocess_ratings`.
    protocol : {"paper", "clean"}, default "paper"
        ``"paper"`` reproduces the reference's split, quirks included (some users land in no
        split); ``"clean"`` is a proper shuffled user split.
    seed : int, default 42
        Seed of the shuffles.
    val_unit : {"user", "row"}, default "user"
        Whether validation takes whole users or single target rows of the non-test users.
    val_frac : float, default 0.25
        The share of the non-test part (users or rows) that goes to validation, strictly
        between 0 and 1. A share of what the test split leaves, so it is not added to
        ``test_frac``.
    test_frac : float, default 0.25
        The share of users in the test split, strictly between 0 and 1; must be 0.25 for
        protocol ``"paper"``.

    Returns
    -------
    Splits
        The train, validation and test frames, each with the input's columns plus ``target``.

    Raises
    ------
    ValueError
        For an unknown ``protocol`` or ``val_unit``, a ``val_frac`` or ``test_frac`` that is not
        a number strictly between 0 and 1, or ``test_frac != 0.25`` with ``"paper"``.
    """
    if val_unit not in ("user", "row"):
        raise ValueError(f"val_unit must be 'user' or 'row', got {val_unit!r}")
    val_frac = check_fraction("val_frac", val_frac)
    test_frac = check_fraction("test_frac", test_frac)
    users = np.sort(frame["user_id"].unique())
    n = len(users)
    if protocol == "paper":
        if test_frac != 0.25:
            raise ValueError("protocol 'paper' has a fixed 75/25 user split; use 'clean'")
        perm = np.random.RandomState(seed).permutation(n)
        mid = 3 * n // 4
        # The reference's quirk, kept on purpose: the permutation is indexed by itself and its
        # values (positions 0..n-1) are then matched against user ids.
        pool_users = users[np.isin(users, perm[perm[:mid]])]
        test_users = perm[perm[mid:]]
        pool = _rows_of(frame, pool_users)
        if val_unit == "user":
            # Sorted user ids = the order of the reference's groupby("user_id") sequence list.
            train_part, val_part = train_test_split(
                pool_users, test_size=val_frac, random_state=seed
            )
        else:
            train_part, val_part = train_test_split(
                np.arange(len(pool)), test_size=val_frac, random_state=seed
            )
    elif protocol == "clean":
        rng = np.random.default_rng(seed)
        perm = rng.permutation(users)
        n_test = round(test_frac * n)
        test_users, pool_users = perm[:n_test], perm[n_test:]
        pool = _rows_of(frame, pool_users)
        if val_unit == "user":
            n_val = round(val_frac * len(pool_users))
            val_part, train_part = pool_users[:n_val], pool_users[n_val:]
        else:
            rows = rng.permutation(len(pool))
            n_val = round(val_frac * len(pool))
            val_part, train_part = rows[:n_val], rows[n_val:]
    else:
        raise ValueError(f"protocol must be 'paper' or 'clean', got {protocol!r}")

    test = _with_target(_rows_of(frame, test_users))
    if val_unit == "user":
        return Splits(
            train=_with_target(_rows_of(pool, train_part)),
            val=_with_target(_rows_of(pool, val_part)),
            test=test,
        )
    is_val = np.zeros(len(pool), dtype=bool)
    is_val[val_part] = True
    return Splits(train=_with_target(pool, ~is_val), val=_with_target(pool, is_val), test=test)
