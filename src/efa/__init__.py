"""efa: exponential family attention.

Attention as a probabilistic model: each observation given all others (its context), with
self-attention weighing the context and an exponential family turning the attended state into
a likelihood.
"""

from efa import families
from efa.baselines import CategoricalFM, ValueFM
from efa.data import Sequences
from efa.fields import Attribute, Category, Value
from efa.io import load, save
from efa.model import EFA, EFAConfig
from efa.train import TrainConfig, evaluate, fit, mean_squared_error, predictions, seed_everything

__all__ = [
    "EFA",
    "Attribute",
    "Category",
    "CategoricalFM",
    "EFAConfig",
    "Sequences",
    "TrainConfig",
    "Value",
    "ValueFM",
    "evaluate",
    "families",
    "fit",
    "load",
    "mean_squared_error",
    "predictions",
    "save",
    "seed_everything",
]
__version__ = "0.1.0"
