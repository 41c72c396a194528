"""The container every splitting function in ``efa.datasets`` returns."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import pandas as pd

__all__ = ["Splits", "check_fraction"]


@dataclass(frozen=True)
class Splits:
    """Train / validation / test frames (long format, same columns in all three).

    Parameters
    ----------
    train : pandas.DataFrame
        The training rows.
    val : pandas.DataFrame
        The validation rows.
    test : pandas.DataFrame
        The test rows.
    """

    train: pd.DataFrame
    val: pd.DataFrame
    test: pd.DataFrame

    def as_dict(self) -> dict[str, pd.DataFrame]:
        """Return the splits as a dict of name → data.

        Returns
        -------
        dict of str to pandas.DataFrame
            ``{"train": train, "val": val, "test": test}``.
        """
        return {"train": self.train, "val": self.val, "test": self.test}


def check_fraction(name: str, value: object) -> float:
    """Return ``value`` as a float if it lies strictly between 0 and 1, else raise.

    A share of 0 or 1 would leave a split empty, and scikit-learn reads an integer
    ``test_size`` as a count rather than a share, so both are refused rather than passed on.

    Parameters
    ----------
    name : str
        The argument's name, for the error message (e.g. ``"val_frac"``).
    value : object
        The fraction given.

    Returns
    -------
    float
        ``value`` as a float.

    Raises
    ------
    ValueError
        When ``value`` is not a real number (a bool is not), or not in the open interval (0, 1).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number strictly between 0 and 1, got {value!r}")
    share = float(value)
    if math.isnan(share) or not 0.0 < share < 1.0:
        raise ValueError(f"{name} must lie strictly between 0 and 1, got {value!r}")
    return share
