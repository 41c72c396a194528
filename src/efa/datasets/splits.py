"""The container every splitting function in ``efa.datasets`` returns."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

__all__ = ["Splits"]


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
