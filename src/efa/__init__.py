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

from efa.deprecation import MOVED, install_moved_modules

__version__ = "0.2.0"

install_moved_modules()

_EXPORTS = {
    "EFA": "efa.core.model",
    "EFAConfig": "efa.core.config",
    "AttentionTableClassifier": "efa.tabular",
    "ConditionalModel": "efa.core.conditional",
    "Attribute": "efa.core.fields",
    "Category": "efa.core.fields",
    "Value": "efa.core.fields",
    "Sequences": "efa.core.data",
    "KERNELS": "efa.core.kernels",
    "Kernel": "efa.core.kernels",
    "register_kernel": "efa.core.kernels",
    "CategoricalFM": "efa.baselines",
    "ValueFM": "efa.baselines",
    "load": "efa.training.storage",
    "save": "efa.training.storage",
    "TrainConfig": "efa.training.train",
    "History": "efa.training.train",
    "evaluate": "efa.training.scoring",
    "fit": "efa.training.train",
    "fit_glm_first": "efa.training.train",
    "fit_restarts": "efa.training.restarts",
    "log_likelihoods": "efa.training.scoring",
    "masked_evaluate": "efa.training.masked",
    "masked_log_likelihoods": "efa.training.masked",
    "mean_squared_error": "efa.training.scoring",
    "predictions": "efa.training.scoring",
    "predictive_frame": "efa.training.predictive",
    "calibration": "efa.training.calibration",
    "conformal_level": "efa.training.calibration",
    "seed_everything": "efa.training.train",
    "sample": "efa.sampling",
    "recommend": "efa.recommendation",
    "ranking_metrics": "efa.recommendation",
}
# Folders are layers (docs/design.md): core/ is the model, training/ fits, scores and stores
# it, everything else in efa/ is built on those two.
_MODULES = ("core", "training", "baselines", "datasets", "generators", "spatial")

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time names load on first use
    from efa import baselines, core, datasets, generators, spatial, training
    from efa.baselines import CategoricalFM, ValueFM
    from efa.core.conditional import ConditionalModel
    from efa.core.config import EFAConfig
    from efa.core.data import Sequences
    from efa.core.fields import Attribute, Category, Value
    from efa.core.kernels import KERNELS, Kernel, register_kernel
    from efa.core.model import EFA
    from efa.recommendation import ranking_metrics, recommend
    from efa.sampling import sample
    from efa.tabular import AttentionTableClassifier
    from efa.training.calibration import calibration, conformal_level
    from efa.training.masked import masked_evaluate, masked_log_likelihoods
    from efa.training.predictive import predictive_frame
    from efa.training.restarts import fit_restarts
    from efa.training.scoring import evaluate, log_likelihoods, mean_squared_error, predictions
    from efa.training.storage import load, save
    from efa.training.train import History, TrainConfig, fit, fit_glm_first, seed_everything

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
    "baselines",
    "calibration",
    "conformal_level",
    "core",
    "datasets",
    "evaluate",
    "fit",
    "fit_glm_first",
    "fit_restarts",
    "generators",
    "load",
    "log_likelihoods",
    "masked_evaluate",
    "masked_log_likelihoods",
    "mean_squared_error",
    "predictions",
    "predictive_frame",
    "ranking_metrics",
    "recommend",
    "register_kernel",
    "sample",
    "save",
    "seed_everything",
    "spatial",
    "training",
]


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif name in _MODULES:
        value = importlib.import_module(f"efa.{name}")
    elif f"efa.{name}" in MOVED:  # an old module path: warns with the new one
        return importlib.import_module(f"efa.{name}")
    else:
        raise AttributeError(f"module 'efa' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return __all__
