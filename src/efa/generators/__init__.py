"""Synthetic data with known structure and its Bayes-optimal predictors, as ``Sequences``
ready for ``efa.fit``.

- :mod:`efa.generators.latent`: exchangeable latent-variable generators (linear-Gaussian,
  GP-latent) with their Bayes predictors; :mod:`efa.generators.emissions`: the same for
  Bernoulli/Poisson emissions; :mod:`efa.generators.draws`: the draws and checks they share.
- :mod:`efa.generators.gp`: random functions from Gaussian processes (the UNN note's in-context
  regression data, the TNP benchmark's prior).
- :mod:`efa.generators.teacher`: sequences from an attention teacher with known parameters and
  its exact conditional NLLs (the Bayes limit of a fitted model).
- :mod:`efa.generators.suite`: teachers of varied structure with fixed development and
  evaluation seeds, and the exact masked (bidirectional) conditional NLL of a causal teacher's
  data: what efa's defaults are chosen on and judged on.
"""

from efa.generators.emissions import ExpFamilyLatent
from efa.generators.gp import (
    LITERAL,
    NOISY,
    TNPGP,
    NoteGP,
    TNPData,
    covariance,
    cross_covariance,
    rbf,
    sample_note,
    sample_tnp,
)
from efa.generators.latent import (
    BayesPrediction,
    GPLatent,
    LatentSample,
    LinearGaussian,
)
from efa.generators.teacher import attention_teacher, bayes_nll, sample, student_fields

__all__ = ["LITERAL", "NOISY", "NoteGP", "TNPData", "TNPGP", "covariance", "cross_covariance",
           "rbf", "sample_note", "sample_tnp",
           "BayesPrediction", "ExpFamilyLatent", "GPLatent", "LatentSample", "LinearGaussian",
           "attention_teacher", "bayes_nll", "sample", "student_fields"]
