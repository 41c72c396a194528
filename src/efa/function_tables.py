"""In-context regression's data: a user's long table of (function, x, y, channel) rows as one
sequence per function (``docs/in-context-regression.md``).

:mod:`efa.regression` builds and applies its models on these sequences and re-exports
:func:`functions_to_sequences` under its own name (``efa.regression.functions_to_sequences``).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np

from efa.core.data import Sequences

if TYPE_CHECKING:  # for annotations only
    import pandas as pd


def functions_to_sequences(frame: pd.DataFrame, function: str, x: str, y: str,
                           channel: str | None = None,
                           channels: list | None = None) -> tuple[Sequences, list]:
    """One sequence per function id from a long table, its rows in table order.

    Parameters
    ----------
    frame : pandas.DataFrame
        One row per observed point (shuffle the rows first for the note's random order). NaN
        in x or y is an error naming the function: a missing point is simply absent.
    function, x, y : str
        The columns of the function id, the input and the output.
    channel : str, optional
        A column of channel labels.
    channels : list, optional
        The labels, in the order they are coded 0..K−1 (default: the sorted labels of the
        table); a label outside them is an error naming its function and row.

    Returns
    -------
    (Sequences, list)
        The sequences (the first point of each function is not scored: it has no context)
        and the channel labels (empty without ``channel``). x and y are float64, as given:
        large values with small differences (e.g. Unix seconds) stay distinct.

    Raises
    ------
    ValueError
        If ``frame`` is not a non-empty DataFrame, x or y holds NaN or inf, the channel labels
        repeat, or a row's channel is not among them.
    KeyError
        If a column is not in ``frame``.
    TypeError
        If x or y is not numeric.
    """
    import pandas as pd

    if not isinstance(frame, pd.DataFrame) or frame.empty:
        raise ValueError("functions_to_sequences needs a non-empty pandas DataFrame")
    cols = [function, x, y] + ([channel] if channel else [])
    absent = [c for c in cols if c not in frame]
    if absent:
        raise KeyError(f"columns {absent} are not in the frame (it has {list(frame)})")
    frame = frame[cols].copy()
    fields = {"x": [x], "y": y}
    if channel:
        labels = sorted(frame[channel].dropna().unique().tolist()) if channels is None \
            else list(channels)
        labels = [v.item() if hasattr(v, "item") else v for v in labels]
        if len(set(labels)) != len(labels):
            raise ValueError(f"channels must be distinct labels, got {labels}")
        index = {label: i for i, label in enumerate(labels)}
        unknown = ~frame[channel].isin(list(index))
        if unknown.any():
            row = frame.index[unknown.to_numpy().nonzero()[0][0]]
            raise ValueError(
                f"unknown channel {frame.loc[row, channel]!r} in row {row} (function "
                f"{frame.loc[row, function]!r}); expected one of {labels}"
            )
        frame["_channel"] = frame[channel].map(index).astype(np.int64)
        fields["channel"] = "_channel"
    else:
        labels = []
    for col in (x, y):
        if not pd.api.types.is_numeric_dtype(frame[col]) or pd.api.types.is_bool_dtype(
                frame[col]):
            raise TypeError(f"column {col!r} must be numeric, got {frame[col].dtype}")
        bad = ~np.isfinite(frame[col].to_numpy(dtype=float))
        if bad.any():
            row = frame.index[bad.nonzero()[0][0]]
            raise ValueError(
                f"{int(bad.sum())} NaN/inf value(s) in column {col!r}, first in row {row} "
                f"(function {frame.loc[row, function]!r}); drop such rows (a point that was "
                "not observed is simply absent from its function's context)"
            )
        # The table keeps float64 (float32 numbers near 1.7e9, Unix seconds, are 128 apart);
        # the encoders standardise it in float64, but a float32 model's predictions and
        # likelihoods of y are in y's own units.
        v = frame[col].to_numpy(dtype=np.float64)
        n64, n32 = np.unique(v).size, np.unique(v.astype(np.float32)).size
        if col == y and n32 < n64:
            warnings.warn(f"column {col!r}: its {n64} distinct values are {n32} in float32, the "
                          "precision of a float32 model's predictions and likelihoods: subtract "
                          "an offset first or use a float64 model (model.double())",
                          stacklevel=2)
        frame[col] = v
    data = Sequences.from_frame(frame, by=function, fields=fields)
    data.fields["x"] = data.fields["x"].reshape(*data.fields["x"].shape[:2], 1)  # an attribute
    scored = data.valid().clone()
    scored[:, 0] = False
    return data.with_scored(scored), labels
