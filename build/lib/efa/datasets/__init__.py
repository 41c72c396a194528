"""Loaders and the EFA paper's preprocessing for MovieLens-100K, Instacart and city temperatures.

Everything returns tidy (long-format) pandas DataFrames or plain dataclasses; turning them into
tensors is left to the modelling code. The real data are read from one configurable data root
(:func:`data_root`, environment variable ``EFA_DATA``) and are never copied into the project.
"""

from efa.datasets import instacart, movielens, temperature
from efa.datasets.root import ENV_VAR, data_root, require_file, resolve_file
from efa.datasets.splits import Splits

__all__ = [
    "ENV_VAR",
    "Splits",
    "data_root",
    "instacart",
    "movielens",
    "require_file",
    "resolve_file",
    "temperature",
]
