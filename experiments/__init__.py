"""Experiments of ``efa reproduce NAME``: each a module with a spec, jobs, a task and its tables
and plots, run by :mod:`experiments.harness.runner`. Registered here by name with a one-line
summary, so that listing them imports nothing heavy."""

from __future__ import annotations

import importlib

from efa.core.registry import Registry

EXPERIMENTS: Registry[tuple[str, str]] = Registry("experiment")

for _name, _module, _summary in [
    ("synthetic", "experiments.efa_paper.synthetic",
     "EFA paper Sec 6.1: synthetic ratings whose mean depends on the order"),
    ("movielens-sequence", "experiments.efa_paper.movielens",
     "EFA paper Sec 6.2.1: the masked movie of a user's sequence"),
    ("movielens-ratings", "experiments.efa_paper.movielens_ratings",
     "EFA paper Sec 6.2.2: a user's rating given the movies (Poisson)"),
    ("instacart", "experiments.efa_paper.instacart",
     "EFA paper Sec 6.3: the masked product of an Instacart basket"),
    ("bag-grid", "experiments.efa_paper.bag_grid",
     "EFA + bag's prior and step scale on MovieLens and Instacart, on validation"),
    ("dropout-grid", "experiments.efa_paper.dropout_grid",
     "EFA's dropout per direction on MovieLens and Instacart, on validation"),
    ("temperature", "experiments.efa_paper.temperature",
     "EFA paper Sec 6.4: U.S. city temperatures as a set (Gaussian)"),
    ("analogy-toy", "experiments.moe.analogy_toy",
     "MoE paper App. G/I: what CBOW and attention factorise (Props 9, 14)"),
    ("analogy-lee", "experiments.moe.analogy_lee",
     "MoE paper Sec 4: word analogies of CBOW, attention, word2vec on Lee"),
    ("fenchel-toy", "experiments.fenchel.fenchel_toy",
     "Attention as inference, Fig 3: exact vs closed-form attention, d = 2"),
    ("dual-gap", "experiments.fenchel.dual_gap",
     "Attention as inference, Fig 4: is trained attention where λ* ≈ αz holds?"),
    ("attention-kernels", "experiments.fenchel.attention_kernels",
     "Attention as inference: each kernel in place of softmax, 3 experiments"),
    ("temperature-cme", "experiments.cme.temperature_cme",
     "Temperatures with CME attention (attention = GP posterior mean)"),
    ("exchangeability", "experiments.cme.exchangeability",
     "Zhang et al.: CME attention, rates in L, heads, gap, excess, transfer"),
    ("tabular-simulation", "experiments.moe.tabular_simulation",
     "MoE paper Table 1: categorical tables under covariate shift"),
    ("tabular-simulation-grids", "experiments.moe.tabular_grids",
     "MoE paper Table 1: the reference RF/GB/MLP grids (cached)"),
    ("tabular-simulation-defaults", "experiments.moe.tabular_defaults",
     "MoE paper Table 1's data: the estimator's defaults against logistic regression"),
    ("auto-mpg", "experiments.moe.auto_mpg",
     "MoE paper Table 2: auto-mpg, trained on US cars, tested on the others"),
    ("car", "experiments.moe.car",
     "UCI Car Evaluation, trained on cheap cars, tested on expensive ones"),
    ("in-context-regression", "experiments.regression.in_context_regression",
     "UNN note: y of a random function from the points before it, vs the GP oracle"),
    ("teacher", "experiments.efa_paper.teacher",
     "efa's defaults on data from a known attention teacher: gap to the Bayes NLL"),
]:
    EXPERIMENTS.register((_module, _summary), name=_name)


def get(name: str):
    """The experiment module registered as ``name``."""
    return importlib.import_module(EXPERIMENTS.lookup(name)[0])
