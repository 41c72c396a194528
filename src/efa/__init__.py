"""efa: exponential family attention.

Attention as a probabilistic model: each observation given all others (its context), with
self-attention weighing the context and an exponential family turning the attended state into
a likelihood.

Names are imported on first use (``efa.EFA``, ``from efa import fit``), so that the command
line answers ``--help`` and ``list`` without loading torch; type checkers and IDEs see them
through the ``TYPE_CHECKING`` imports below.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.2.0"

_EXPORTS = {
    "EFA": "efa.model",
    "EFAConfig": "efa.model",
    "AttentionTableClassifier": "efa.tabular",
    "ConditionalModel": "efa.conditional",
    "Attribute": "efa.fields",
    "Category": "efa.fields",
    "Value": "efa.fields",
    "Sequences": "efa.data",
    "KERNELS": "efa.kernels",
    "Kernel": "efa.kernels",
    "register_kernel": "efa.kernels",
    "CategoricalFM": "efa.baselines",
    "ValueFM": "efa.baselines",
    "load": "efa.storage",
    "save": "efa.storage",
    "TrainConfig": "efa.train",
    "History": "efa.train",
    "evaluate": "efa.scoring",
    "fit": "efa.train",
    "log_likelihoods": "efa.scoring",
    "mean_squared_error": "efa.scoring",
    "predictions": "efa.scoring",
    "seed_everything": "efa.train",
}
_MODULES = ("families", "baselines", "spatial", "attention", "kernels", "strategies", "datasets",
            "storage")

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time names load on first use
    from efa import attention, baselines, datasets, families, kernels, spatial, storage, strategies
    from efa.baselines import CategoricalFM, ValueFM
    from efa.conditional import ConditionalModel
    from efa.data import Sequences
    from efa.fields import Attribute, Category, Value
    from efa.kernels import KERNELS, Kernel, register_kernel
    from efa.model import EFA, EFAConfig
    from efa.scoring import evaluate, log_likelihoods, mean_squared_error, predictions
    from efa.storage import load, save
    from efa.tabular import AttentionTableClassifier
    from efa.train import History, TrainConfig, fit, seed_everything

__all__ = [
    "AttentionTableClassifier",
    "Attribute",
    "CategoricalFM",
    "Category",
    "ConditionalModel",
    "EFA",
    "EFAConfig",
    "History",
    "KERNELS",
    "Kernel",
    "Sequences",
    "TrainConfig",
    "Value",
    "ValueFM",
    "attention",
    "baselines",
    "datasets",
    "evaluate",
    "families",
    "fit",
    "kernels",
    "load",
    "log_likelihoods",
    "mean_squared_error",
    "predictions",
    "register_kernel",
    "save",
    "seed_everything",
    "spatial",
    "storage",
    "strategies",
]


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif name in _MODULES:
        value = importlib.import_module(f"efa.{name}")
    else:
        raise AttributeError(f"module 'efa' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return __all__
