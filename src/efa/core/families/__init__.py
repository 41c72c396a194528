"""Exponential families for the output layer of exponential family attention.

Each family describes how an observation y is modelled given the network's readout. A density
is written in natural form

    log p(y | eta) = <eta, t(y)> - A(eta) + log h(y)

and a family bundles the pieces: ``link`` (raw readout z -> natural parameter eta), the
sufficient statistic ``t``, the log-partition ``A``, the log base measure ``log h``, plus
``mean``, ``sample``, ``validate`` and a JSON ``config``.

Shape conventions, shared by every family:

* ``z`` has shape ``[..., num_outputs]`` and ``eta`` has shape ``[..., num_natural]``, even when
  ``num_natural == 1``; a missing trailing dim would otherwise broadcast silently.
* ``y`` has shape ``[...]`` (the batch shape of ``eta``); ``t(y)`` has shape ``[..., num_natural]``.
* ``log_partition``, ``log_base_measure``, ``log_prob`` and ``mean`` return ``[...]``, except
  ``Categorical.mean`` which returns the class probabilities ``[..., K]``.
* Discrete families (``is_discrete``) take integer-dtype targets and sample ``torch.long``;
  continuous families take and sample floating tensors. Computations follow ``eta``'s dtype.
"""

from __future__ import annotations

from typing import Any

from efa.core.families.base import Family, InvalidValues
from efa.core.families.categorical import Bernoulli, Categorical, Ordinal
from efa.core.families.continuous import Gaussian, HeteroscedasticGaussian, LearnedGaussian
from efa.core.families.counts import Binomial, NegativeBinomial, Poisson, poisson_counts
from efa.core.families.gamma import Gamma
from efa.core.registry import Registry

__all__ = [
    "FAMILIES",
    "Bernoulli",
    "Binomial",
    "Categorical",
    "Family",
    "Gamma",
    "Gaussian",
    "HeteroscedasticGaussian",
    "InvalidValues",
    "LearnedGaussian",
    "NegativeBinomial",
    "Ordinal",
    "Poisson",
    "family_from_config",
    "poisson_counts",
]

FAMILIES: Registry[type[Family]] = Registry("family", key=lambda cls: cls.name)
for _family in (
        Categorical,
        Ordinal,
        Bernoulli,
        Gaussian,
        LearnedGaussian,
        HeteroscedasticGaussian,
        Poisson,
        Binomial,
        NegativeBinomial,
        Gamma,
):
    FAMILIES.register(_family)


def family_from_config(config: dict[str, Any]) -> Family:
    """Rebuild a family from ``Family.config()``; learned parameters come from state_dict.

    Parameters
    ----------
    config : dict
        ``{"family": name, **arguments}``, as
        :meth:`efa.core.families.base.Family.config` writes it.

    Returns
    -------
    Family
        A new family of the registered class ``name``, built with the arguments.

    Raises
    ------
    UnknownName
        If ``name`` is not a registered family (it is a ``KeyError`` and a ``ValueError``).
    """
    args = dict(config)
    return FAMILIES.lookup(args.pop("family", None))(**args)
