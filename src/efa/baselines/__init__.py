"""The peers of EFA, on the same likelihood API (``ConditionalModel``) where they have one.

- :mod:`efa.baselines.fm`: factorisation models, the special cases of EFA in Props 1–3
  (``CategoricalFM``, ``ValueFM``) and the k-nearest-neighbour FM of the temperature
  experiment (``KNNFM``).
- :mod:`efa.baselines.cbow`: CBOW with a window and a full softmax (``CBOW``).
- :mod:`efa.baselines.tabular`: peers of the tabular estimator (reference grids, CatBoost, TabM,
  FT-Transformer).
- :mod:`efa.baselines.glm`: GLMs (``Unigram``, ``ContextLogit``, ``RatingGLM``), fitted to
  convergence by L-BFGS with the L2 penalty picked on validation (``fit_convex``,
  ``select_l2``).
- :mod:`efa.baselines.gaussian`: Gaussian models of a set of sites (``Climatology``,
  ``GaussianConditional`` with validation-picked shrinkage, ``select_shrinkage``).
"""

from efa.baselines.cbow import CBOW
from efa.baselines.fm import KNNFM, CategoricalFM, ValueFM, context_sum, knn_indices
from efa.baselines.gaussian import (
    Climatology,
    GaussianConditional,
    select_shrinkage,
    sequence_matrix,
)
from efa.baselines.glm import ContextLogit, RatingGLM, Unigram, fit_convex, select_l2

__all__ = [
    "CBOW",
    "KNNFM",
    "CategoricalFM",
    "Climatology",
    "ContextLogit",
    "GaussianConditional",
    "RatingGLM",
    "Unigram",
    "ValueFM",
    "context_sum",
    "fit_convex",
    "knn_indices",
    "select_l2",
    "select_shrinkage",
    "sequence_matrix",
]
