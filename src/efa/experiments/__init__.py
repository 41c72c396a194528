"""Experiments of ``efa reproduce NAME``: each a module with a spec, jobs, a task and its tables
and plots, run by :mod:`efa.experiments.runner`. Registered here by name with a one-line
summary, so that listing them imports nothing heavy."""

from __future__ import annotations

import importlib

EXPERIMENTS: dict[str, tuple[str, str]] = {
    "synthetic": ("efa.experiments.synthetic",
                  "EFA paper Sec 6.1: synthetic ratings whose mean depends on the order"),
    "movielens-sequence": ("efa.experiments.movielens",
                           "EFA paper Sec 6.2.1: the masked movie of a user's sequence"),
    "movielens-ratings": ("efa.experiments.movielens_ratings",
                          "EFA paper Sec 6.2.2: a user's rating given the movies (Poisson)"),
    "instacart": ("efa.experiments.instacart",
                  "EFA paper Sec 6.3: the masked product of an Instacart basket"),
    "temperature": ("efa.experiments.temperature",
                    "EFA paper Sec 6.4: U.S. city temperatures as a set (Gaussian)"),
    "teacher": ("efa.experiments.teacher",
                "efa's defaults on data from a known attention teacher: gap to the Bayes NLL"),
}


def get(name: str):
    """The experiment module registered as ``name``."""
    if name not in EXPERIMENTS:
        raise KeyError(f"unknown experiment {name!r}; choose one of {sorted(EXPERIMENTS)}")
    return importlib.import_module(EXPERIMENTS[name][0])
