"""Experiments: each a small module with ``run(seeds, quick, progress, command) -> Report`` and
``write_plots(report, out_dir)``, registered here by name for ``efa reproduce NAME``."""

from __future__ import annotations

import importlib

EXPERIMENTS = {
    "synthetic": "efa.experiments.synthetic",
    "temperature": "efa.experiments.temperature",
    "movielens-sequence": "efa.experiments.movielens",
    "movielens-ratings": "efa.experiments.movielens_ratings",
    "instacart": "efa.experiments.instacart",
}


def get(name: str):
    if name not in EXPERIMENTS:
        raise KeyError(f"unknown experiment {name!r}; choose one of {sorted(EXPERIMENTS)}")
    return importlib.import_module(EXPERIMENTS[name])
