"""efa: exponential family attention.

Attention as a probabilistic model: each observation given all others (its context), with
self-attention weighing the context and an exponential family turning the attended state into
a likelihood.

Names are imported on first use (``efa.EFA``, ``from efa import fit``), so that the command
line answers ``--help`` and ``list`` without loading torch.
"""

from __future__ import annotations

import importlib

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

__all__ = sorted([*_EXPORTS, *_MODULES])


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
