"""The checking room of the table estimator: what fit's labels and its validation split must
hold, beyond each parameter's own validation (:func:`efa.tabular.fitting.check_rules` joins
parameters)."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from efa.tabular.encoding import split_rows

if TYPE_CHECKING:  # for annotations only
    from efa.tabular.estimator import AttentionTableClassifier


def typed_labels(labels: np.ndarray) -> np.ndarray:
    """Labels of one kind in an object array (as ``y`` with None for unlabelled rows holds
    them) in the array of that kind: integers as int64, booleans as bool, floats as float64;
    any other array as it is.

    Parameters
    ----------
    labels : numpy.ndarray, shape (n,)
        The labels, none missing.

    Returns
    -------
    numpy.ndarray, shape (n,)
        The labels, typed.

    Raises
    ------
    ValueError
        If the labels mix numbers (or booleans) with other kinds, naming the kinds.
    """
    if labels.dtype != object:
        return labels
    kind = pd.api.types.infer_dtype(labels, skipna=False)
    kinds = sorted({type(v).__name__ for v in labels})
    if kind in ("integer", "boolean", "floating", "mixed-integer-float"):
        try:
            return np.asarray(labels.tolist())
        except OverflowError:  # integers beyond int64 stay Python ints
            return labels
    if kind in ("mixed", "mixed-integer") and len(kinds) > 1:
        raise ValueError(f"y mixes labels of the types {kinds}: give labels of one kind (all "
                         "strings, all integers, all booleans or all floats)")
    return labels


def validation_rows(est: AttentionTableClassifier, y_codes: np.ndarray,
                    seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Fit's (train, validation) rows (:func:`~efa.tabular.encoding.split_rows`; every row
    trains without early stopping), refused or warned of where the split cannot serve.

    Parameters
    ----------
    est : AttentionTableClassifier
        The estimator being fitted.
    y_codes : numpy.ndarray, shape (n,)
        The labels' codes (−1: unlabelled).
    seed : int
        Seeds the split.

    Returns
    -------
    tuple of numpy.ndarray
        The training and the validation rows' indices.

    Raises
    ------
    ValueError
        If ``calibration`` asks for a temperature and the split has no labelled row.

    Warns
    -----
    UserWarning
        If the split is empty (no early stopping) or, with ``calibration="auto"``, has no
        labelled row (no temperature).
    """
    n = len(y_codes)
    if not est.early_stopping:
        return np.arange(n), np.arange(0)
    train, val = split_rows(y_codes, est.validation_fraction, seed)
    skipped = ([] if len(val) else [f"early stopping (all max_epochs={est.max_epochs} "
                                    "epochs are trained)"])
    if (y_codes[val] >= 0).any() or not skipped and est.calibration is None:
        return train, val
    why = (f"the validation split of these {n} rows (validation_fraction="
           f"{est.validation_fraction}) has no {'labelled ' if len(val) else ''}row: it takes "
           "round(fraction · rows) of each class with 2+ rows, from tables of 4+ rows")
    if est.calibration in ("temperature", "soften"):
        raise ValueError(f"calibration={est.calibration!r} chooses the temperature on the "
                         f"validation split, but {why}; raise validation_fraction or pass "
                         "calibration=None")
    skipped += ["calibration='auto' (temperature 1)"] if est.calibration == "auto" else []
    verb = "are" if len(skipped) > 1 else "is"
    warnings.warn(f"{why}, so {' and '.join(skipped)} {verb} skipped; raise "
                  "validation_fraction, or pass early_stopping=False to train on every row",
                  UserWarning, stacklevel=3)
    return train, val
