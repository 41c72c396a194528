"""Long tables of events (user, timestamp, item, rating, …) made ready for
:meth:`efa.Sequences.from_events`: category columns coded 0..K−1 with their vocabularies, and
sequences longer than ``max_len`` handled by a stated policy. Pure pandas: the caller builds the
``Sequences`` (this module imports nothing of efa, so ``core/data.py`` can call it)."""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

POLICIES = ("last", "first", "windows", "error")


class Events(NamedTuple):
    """What :meth:`efa.Sequences.from_events` returns (a named tuple).

    Parameters
    ----------
    data : Sequences
        The sequences, one per key (or per window of a key).
    vocabularies : dict of str to list
        Each category field's vocabulary: ``vocabularies[name][k]`` is the value coded k.
    keys : list
        Each sequence's key, in the order of ``data``; under ``long="windows"`` a tuple
        ``(key, window index)``.
    dropped : int
        The number of events left out (``long="last"`` or ``"first"``; 0 otherwise).
    """

    data: Any  # efa.Sequences
    vocabularies: dict[str, list]
    keys: list
    dropped: int


def prepare(frame: pd.DataFrame, sequence: str, order: str, fields: Mapping[str, Any],
            max_len: int | None, long: str,
            categories: Sequence[str] | Mapping[str, Sequence]
            ) -> tuple[pd.DataFrame, str, dict[str, Any], dict[str, list], list, int]:
    """Code the category columns and apply the ``long`` policy: the table that
    :meth:`efa.Sequences.from_events` reads one sequence per key from.

    Parameters
    ----------
    frame : pandas.DataFrame
        The events, one per row.
    sequence : str
        The column of the sequence key (e.g. the user).
    order : str
        The column that orders the events within a sequence (e.g. the timestamp).
    fields : mapping of str to str or list of str
        Field name → its column, or its list of columns for an attribute.
    max_len : int or None
        The longest sequence kept as one (None: no limit).
    long : {"last", "first", "windows", "error"}
        A sequence longer than ``max_len`` keeps its latest or its earliest ``max_len``
        events, is cut into consecutive windows of ``max_len``, or is refused.
    categories : sequence of str, or mapping of str to sequence
        Fields coded 0..K−1 even if their column is numeric (a column that is not numeric is
        coded anyway); a mapping gives a field's vocabulary (its values' order), and a value
        outside it is refused.

    Returns
    -------
    frame : pandas.DataFrame
        A sorted copy of ``frame`` (by key, then order) with the policy applied and each
        coded field in a new column of its own (the user's columns keep their values).
    key : str
        Its column of sequence keys: ``sequence``, or a new column of ``(key, window)`` pairs
        under ``long="windows"``.
    fields : dict of str to str or list of str
        ``fields`` with each coded field mapped to its new column.
    vocabularies : dict of str to list
        Each coded field's values, the one coded k at index k.
    keys : list
        The sequence keys in sorted order, as plain Python values.
    dropped : int
        The number of events left out.

    Raises
    ------
    ValueError
        If the table is empty, ``long`` or ``max_len`` is invalid, a key, order or category
        value is missing, or (``long="error"``) a sequence is longer than ``max_len``.
    KeyError
        If a column is not in the table or ``categories`` names no field.
    TypeError
        If ``categories`` is a string or names an attribute field.

    Warns
    -----
    UserWarning
        If two events of one sequence share their ``order`` value: they keep the table's row
        order, which then decides their order in the sequence (and what ``long`` cuts).
    """
    import pandas as pd

    if not isinstance(frame, pd.DataFrame) or frame.empty:
        raise ValueError("from_events needs a non-empty pandas DataFrame")
    if long not in POLICIES:
        raise ValueError(f"long must be one of {POLICIES}, got {long!r}")
    if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, int)
                                or max_len < 1):
        raise ValueError(f"max_len must be None or a positive integer, got {max_len!r}")
    columns = [c for cs in fields.values() for c in (cs if isinstance(cs, list | tuple) else [cs])]
    absent = [c for c in [sequence, order, *columns] if c not in frame]
    if absent:
        raise KeyError(f"columns {absent} are not in the table (it has {list(frame)})")
    if isinstance(categories, str):
        raise TypeError(f"categories must be a list of field names, got the string "
                        f"{categories!r}; write categories=[{categories!r}]")
    unknown = [c for c in categories if c not in fields]
    if unknown:
        raise KeyError(f"categories {unknown} name no field (fields: {list(fields)})")
    attributes = [c for c in categories if isinstance(fields[c], list | tuple)]
    if attributes:
        raise TypeError(f"categories {attributes} are attribute fields (lists of columns), "
                        "which are not coded: give them numeric columns")
    for what, col in (("sequence key", sequence), ("order", order)):
        if frame[col].isna().any():
            row = _plain(frame.index[frame[col].isna().to_numpy()][0])
            raise ValueError(f"column {col!r} (the {what}) is missing at row {row!r}: that "
                             "event belongs nowhere; drop or fill it")
    out = frame.sort_values([sequence, order], kind="stable").copy()
    tied = out.duplicated([sequence, order])
    if tied.any():
        first = out[tied].iloc[0]
        warnings.warn(f"{int(tied.sum())} event(s) share their sequence's {order!r} value with "
                      f"an earlier one (first: {sequence}={_plain(first[sequence])!r}, "
                      f"{order}={_plain(first[order])!r}): such events keep the table's row "
                      "order, which then decides their order in the sequence; add a column "
                      "that breaks the ties to make it explicit", stacklevel=3)
    vocabularies: dict[str, list] = {}
    columns_of: dict[str, Any] = dict(fields)
    for name, col in fields.items():
        if isinstance(col, list | tuple):
            continue
        values = out[col]
        coded = name in categories or not (pd.api.types.is_numeric_dtype(values)
                                            or pd.api.types.is_bool_dtype(values))
        if coded:
            if values.isna().any():
                row = _plain(out.index[values.isna().to_numpy()][0])
                raise ValueError(f"field {name!r}: column {col!r} is missing at row {row!r}; a "
                                 "category needs a value (or leave it out of the events)")
            if isinstance(categories, Mapping) and name in categories:
                levels = list(categories[name])  # e.g. the training events' vocabulary
                unseen = ~values.isin(levels)
                if unseen.any():
                    row = _plain(out.index[unseen.to_numpy()][0])
                    raise ValueError(f"field {name!r}: {_plain(values[unseen].iloc[0])!r} at row "
                                     f"{row!r} is not in the vocabulary given in categories "
                                     f"({len(levels)} values); it has no code there")
            else:
                levels = (list(values.cat.categories)
                          if isinstance(values.dtype, pd.CategoricalDtype)
                          else sorted(values.unique(), key=_sort_key))
            vocabularies[name] = [_plain(v) for v in levels]
            # A new column: the user's column may also be the key, the order or another
            # field's, which must keep its values.
            columns_of[name] = _fresh(out, f"{name} (coded)")
            out[columns_of[name]] = pd.Categorical(values, categories=levels).codes.astype(
                np.int64)
    position = out.groupby(sequence, sort=True).cumcount()
    size = out.groupby(sequence, sort=True)[sequence].transform("size")
    dropped, key = 0, sequence
    if max_len is not None and int(size.max()) > max_len:
        if long == "error":
            k = out.loc[size > max_len, sequence].iloc[0]
            raise ValueError(f"sequence {sequence}={k!r} has {int(size[size > max_len].iloc[0])} "
                             f"events, more than max_len={max_len}; choose long='last', "
                             "'first' or 'windows'")
        if long == "windows":
            key = _fresh(out, f"{sequence} (window)")
            out[key] = list(zip(out[sequence], position // max_len, strict=True))
        else:
            keep = position >= size - max_len if long == "last" else position < max_len
            dropped = int((~keep).sum())
            out = out[keep.to_numpy()]
    keys = [tuple(_plain(v) for v in k) if isinstance(k, tuple) else _plain(k)
            for k in dict.fromkeys(out[key])]
    return out, key, columns_of, vocabularies, keys, dropped


def _plain(v: Any) -> Any:
    """A numpy scalar as the Python value it holds (for messages and returned labels)."""
    return v.item() if isinstance(v, np.generic) else v


def _fresh(frame: pd.DataFrame, name: str) -> str:
    """``name``, or ``name`` with a number appended, whichever the table does not hold."""
    k, out = 1, name
    while out in frame:
        k, out = k + 1, f"{name} {k}"
    return out


def _sort_key(v: Hashable) -> tuple[int, float, str]:
    """Numbers in order (NumPy's too), then anything else by its text (a column may mix
    them)."""
    return (0, float(v), "") if isinstance(v, numbers.Real) else (1, 0.0, str(v))


def split_by_sequence(data: Any, fractions: Sequence[float] = (0.8, 0.1, 0.1),
                      seed: int = 0) -> list:
    """Whole sequences into parts of the given ``fractions``, by a seeded permutation: no
    sequence is in two parts.

    Parameters
    ----------
    data : Sequences
        What to split (anything with ``len`` that a tensor of indices selects from).
    fractions : sequence of float
        Two or more positive fractions summing to 1 (default: 80 / 10 / 10 %).
    seed : int
        Seed of the permutation.

    Returns
    -------
    list of Sequences
        One part per fraction, each keeping its sequences in their original order.

    Raises
    ------
    ValueError
        If the fractions are invalid or a part would be empty.
    """
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer (the split is repeated from "
                         f"it), got {seed!r}")
    f = np.asarray(fractions, dtype=float)
    if (f.ndim != 1 or len(f) < 2 or not np.isfinite(f).all() or (f <= 0).any()
            or abs(f.sum() - 1) > 1e-9):
        raise ValueError(f"fractions must be two or more positive numbers summing to 1, got "
                         f"{fractions!r}")
    n = len(data)
    bounds = np.round(np.cumsum(f) * n).astype(int)
    if (np.diff(np.concatenate([[0], bounds])) < 1).any():
        raise ValueError(f"{n} sequences cannot give every part of {list(fractions)} at least one")
    order = np.random.default_rng(seed).permutation(n)
    import torch

    return [data[torch.as_tensor(np.sort(part))] for part in np.split(order, bounds[:-1])]
