"""The container every splitting function in ``efa.datasets`` returns."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

__all__ = ["Splits"]


@dataclass(frozen=True)
class Splits:
    """Train / validation / test frames (long format, same columns in all three)."""

    train: pd.DataFrame
    val: pd.DataFrame
    test: pd.DataFrame

    def as_dict(self) -> dict[str, pd.DataFrame]:
        """The splits as a dict of name → data."""
        return {"train": self.train, "val": self.val, "test": self.test}
