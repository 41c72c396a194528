"""Data generators with known parameters: sequences drawn from a model whose exact conditional
likelihoods are known, to check how close fitted models get to the Bayes limit."""

from efa.generators.teacher import attention_teacher, bayes_nll, sample, student_fields

__all__ = ["attention_teacher", "bayes_nll", "sample", "student_fields"]
