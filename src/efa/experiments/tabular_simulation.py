"""Table 1 of Wibisono & Wang (UAI 2023): categorical tables under covariate shift."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

REFERENCE = Path(__file__).parent / "reference" / "attention_uai_simulation.csv"


@lru_cache(maxsize=1)
def authors_values() -> dict:
    """{((n_c, noise, corr), seed): {column: value}} from the authors' 12 per-seed CSVs
    (repository yixinw-lab/attention-uai, tabular-experiment/tabular-simulation/*.csv)."""
    import pandas as pd

    ref = pd.read_csv(REFERENCE)
    out = {}
    for row in ref.to_dict("records"):
        key = ((int(row.pop("n_c")), float(row.pop("noise")), float(row.pop("corr"))),
               int(row.pop("seed")))
        out[key] = row
    return out
