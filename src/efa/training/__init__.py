"""Fitting, scoring and storing a model of :mod:`efa.core`: ``train`` (``fit``, ``TrainConfig``),
``steps`` (one optimisation step and the schedules), ``restarts`` (several initial draws, the
one best on validation kept), ``scoring`` (log-likelihoods, ``evaluate``, predictions),
``masked`` (a causal model's masked conditionals), ``checkpoint`` (resumable state),
``distributed`` (data-parallel fits), ``storage`` (``save`` / ``load``). Imports only the core.
"""
