"""The peers of EFA, on the same likelihood API (``ConditionalModel``) where they have one.

- :mod:`efa.baselines.fm`: factorisation models, the special cases of EFA in Props 1–3
  (``CategoricalFM``, ``ValueFM``) and the k-nearest-neighbour FM of the temperature
  experiment (``KNNFM``).
- :mod:`efa.baselines.cbow`: CBOW with a window and a full softmax (``CBOW``).
- :mod:`efa.baselines.flat`: an MLP on the flattened fixed-length sequence (``FlatMLP``), the
  peer whose input grows with the length.
- :mod:`efa.baselines.tabular`: peers of the tabular estimator (reference grids, ordered logit),
  and :mod:`efa.baselines.tabular_tuned` (CatBoost, TabM, FT-Transformer).
- :mod:`efa.baselines.glm`: GLMs (``Unigram``, ``ContextLogit``, ``RatingGLM``), fitted to
  convergence by L-BFGS with the L2 penalty picked on validation (:mod:`efa.baselines.convex`:
  ``fit_convex``, ``select_l2``).
- :mod:`efa.baselines.gaussian`: Gaussian models of a set of sites (``Climatology``,
  ``GaussianConditional`` with validation-picked shrinkage, ``select_shrinkage``).
- In-context regression (``efa.regression``): :mod:`efa.baselines.gp` (``GPOracle``, the exact
  GP with the true kernel; ``FittedGP``, hyper-parameters by marginal likelihood per sequence),
  :mod:`efa.baselines.smoother` (``NadarayaWatson``), :mod:`efa.baselines.tnp` (``TNPD``).
"""

from efa.baselines.cbow import CBOW
from efa.baselines.convex import fit_convex, select_l2
from efa.baselines.flat import FlatMLP
from efa.baselines.fm import KNNFM, CategoricalFM, ValueFM, context_sum, knn_indices
from efa.baselines.gaussian import (
    Climatology,
    GaussianConditional,
    select_shrinkage,
    sequence_matrix,
)
from efa.baselines.glm import ContextLogit, RatingGLM, Unigram
from efa.baselines.gp import FittedGP, GPOracle
from efa.baselines.smoother import NadarayaWatson, select_smoother
from efa.baselines.tnp import TNPD

__all__ = [
    "CBOW",
    "KNNFM",
    "FlatMLP",
    "CategoricalFM",
    "Climatology",
    "ContextLogit",
    "FittedGP",
    "GPOracle",
    "NadarayaWatson",
    "GaussianConditional",
    "RatingGLM",
    "TNPD",
    "Unigram",
    "ValueFM",
    "context_sum",
    "fit_convex",
    "knn_indices",
    "select_l2",
    "select_smoother",
    "select_shrinkage",
    "sequence_matrix",
]
