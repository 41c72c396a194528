"""Synthetic data with known structure and its Bayes-optimal predictors, as ``Sequences``
ready for ``efa.fit``.

- :mod:`efa.generators.latent`: exchangeable latent-variable generators (linear-Gaussian,
  GP-latent, Bernoulli/Poisson emissions) with their Bayes predictors.
"""

from efa.generators.latent import (
    BayesPrediction,
    ExpFamilyLatent,
    GPLatent,
    LatentSample,
    LinearGaussian,
)

__all__ = ["BayesPrediction", "ExpFamilyLatent", "GPLatent", "LatentSample", "LinearGaussian"]
