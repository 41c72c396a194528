"""A suite of attention teachers of varied structure, each with the exact conditional NLLs of
its data: what efa's defaults are chosen on (development seeds) and judged on (evaluation
seeds, never used to choose anything).

Each seed draws one :class:`TeacherSpec`: the direction the student is fitted in, 1–2 layers,
1–4 heads, a field mix, a length and a number of training sequences. The data always come from
a causal teacher (:func:`efa.generators.attention_teacher`, sampled ancestrally; values
unbounded above feed its queries and keys only, so that no chain of draws explodes), so their
joint distribution is known exactly:

- a unidirectional student's Bayes limit is the teacher's own conditional NLL of each field
  given the previous positions (:func:`efa.generators.bayes_nll`);
- a bidirectional student's is the NLL of each field given everything else,
  p(v | rest) = p(x with v) / Σ_v' p(x with v'), summed over the field's support
  (:func:`masked_bayes_nll`); so bidirectional specs hold finite discrete fields only
  (``Category`` with D ≤ 50, Bernoulli values) besides attributes.

>>> from efa.generators.suite import suite
>>> spec = suite("development")[0]
>>> teacher = spec.teacher()
>>> train, val, test = spec.data(teacher)
>>> spec.bayes_nll(teacher, test)      # {field: nats}, the limit a student can approach
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from efa.core.data import Sequences
from efa.core.families import Bernoulli, Family, Gamma, Gaussian, NegativeBinomial, Poisson
from efa.core.fields import Attribute, Category, Field, Value
from efa.core.model import EFA
from efa.generators.teacher import attention_teacher, bayes_nll, sample
from efa.training.scoring import log_likelihoods

__all__ = ["DEVELOPMENT_SEEDS", "EVALUATION_SEEDS", "TeacherSpec", "draw", "masked_bayes_nll",
           "suite"]

DEVELOPMENT_SEEDS = tuple(range(100, 110))  # defaults are chosen on these alone
EVALUATION_SEEDS = tuple(range(900, 920))  # and judged on these

FAMILIES = ("poisson", "gaussian", "bernoulli", "negative_binomial", "gamma")


def family(name: str) -> Family:
    """The efa family called ``name`` in the suite's specs."""
    makers: dict[str, Callable[[], Family]] = {
        "poisson": Poisson, "gaussian": Gaussian, "bernoulli": Bernoulli,
        "negative_binomial": lambda: NegativeBinomial(5.0), "gamma": Gamma}
    return makers[name]()


@dataclass(frozen=True)
class TeacherSpec:
    """One teacher and its data sizes; everything random in it follows from ``seed``."""

    seed: int
    direction: str
    num_layers: int
    num_heads: int
    categories: tuple[int, ...]  # the vocabulary size D of each Category field
    values: tuple[str, ...]  # the family of each Value field (names in FAMILIES)
    attributes: int  # Attribute fields (2 standard normal covariates each)
    length: int
    n_train: int

    @property
    def role(self) -> str:
        return "evaluation" if self.seed in EVALUATION_SEEDS else "development"

    @property
    def n_val(self) -> int:
        return max(1000, self.n_train // 5)

    @property
    def n_test(self) -> int:
        return 500 if self.direction == "bidirectional" else 2000

    def fields(self) -> list[Field]:
        """The teacher's fields, as its spec declares them."""
        out: list[Field] = [Category(f"item{k}", d) for k, d in enumerate(self.categories)]
        out += [Value(f"{name}{k}", family(name)) for k, name in enumerate(self.values)]
        out += [Attribute(f"covariate{k}", size=2) for k in range(self.attributes)]
        return out

    def teacher(self) -> EFA:
        """The teacher this spec describes (weights drawn from its seed)."""
        return attention_teacher(self.fields(), self.length, num_layers=self.num_layers,
                                 num_heads=self.num_heads, unbounded_feeds=("q", "k"),
                                 seed=self.seed)

    def data(self, teacher: EFA) -> tuple[Sequences, Sequences, Sequences]:
        """(train, validation, test), drawn from seeds of their own."""
        base = 1000 * self.seed
        return (sample(teacher, self.n_train, seed=base + 1),
                sample(teacher, self.n_val, seed=base + 2),
                sample(teacher, self.n_test, seed=base + 3))

    def bayes_nll(self, teacher: EFA, data: Sequences) -> dict[str, float]:
        """The exact mean conditional NLL per field that a student in ``direction`` can reach."""
        if self.direction == "unidirectional":
            return bayes_nll(teacher, data)
        return masked_bayes_nll(teacher, data)


def draw(seed: int) -> TeacherSpec:
    """The spec of ``seed`` (a fixed function of it: even seeds unidirectional, odd ones
    bidirectional, the rest from numpy's PCG64 stream of the seed)."""
    rng = np.random.default_rng(seed)
    direction = "unidirectional" if seed % 2 == 0 else "bidirectional"  # half and half
    layers, heads = int(rng.integers(1, 3)), int(rng.choice([1, 2, 4]))
    if direction == "bidirectional":
        categories = (int(rng.integers(10, 51)),)
        values = ("bernoulli",) * int(rng.integers(0, 2))
        length = int(rng.choice([8, 12, 16]))
        n_train = int(np.exp(rng.uniform(np.log(5000), np.log(20000))))
    else:
        categories = (int(np.exp(rng.uniform(np.log(10), np.log(2000)))),)
        values = tuple(str(v) for v in rng.choice(FAMILIES, int(rng.integers(1, 3)),
                                                  replace=False))  # 1 or 2 value fields
        length = int(rng.choice([8, 16, 32, 64]))
        n_train = int(np.exp(rng.uniform(np.log(5000), np.log(50000))))
    return TeacherSpec(seed, direction, layers, heads, categories, values,
                       int(rng.integers(0, 2)), length, n_train)


def suite(role: str) -> list[TeacherSpec]:
    """The development or evaluation teachers."""
    seeds = {"development": DEVELOPMENT_SEEDS, "evaluation": EVALUATION_SEEDS}.get(role)
    if seeds is None:
        raise ValueError(f"role must be 'development' or 'evaluation', got {role!r}")
    return [draw(s) for s in seeds]


def _support(f: Field) -> torch.Tensor:
    if isinstance(f, Category):
        return torch.arange(f.num_categories)
    if isinstance(f, Value) and isinstance(f.family, Bernoulli):
        return torch.arange(2)
    raise ValueError(f"field {f.name!r}: the masked conditional is summed over a finite "
                     "support (Category, or a Bernoulli value)")


@torch.no_grad()
def _log_joint(teacher: EFA, data: Sequences, batch_size: int) -> torch.Tensor:
    """log p(sequence) under the causal teacher: the sum of its conditionals over every field
    and position (attributes given)."""
    lls = log_likelihoods(teacher, data, batch_size)
    return sum(torch.nan_to_num(v, nan=0.0).sum(1) for v in lls.values())  # type: ignore[return-value]


@torch.no_grad()
def masked_bayes_nll(teacher: EFA, data: Sequences, batch_size: int = 8192) -> dict[str, float]:
    """Mean −log p(x_i | everything else) per target field under the causal ``teacher`` that
    drew ``data``, exactly: the joint renormalised over the field's support at position i."""
    if teacher.direction != "unidirectional":
        raise ValueError("the joint is defined by a unidirectional (causal) teacher")
    out = {}
    n, length = data.valid().shape
    for f in teacher.target_fields:
        support = _support(f)
        total = 0.0
        for i in range(length):
            x = data.fields[f.name]
            many = x.repeat_interleave(len(support), 0).clone()
            many[:, i] = support.repeat(n).to(many.dtype)
            fields = {k: (many if k == f.name else v.repeat_interleave(len(support), 0))
                      for k, v in data.fields.items()}
            joint = _log_joint(teacher, Sequences(fields, data.lengths.repeat_interleave(
                len(support))), batch_size).view(n, len(support))
            observed = joint.gather(1, x[:, i].long()[:, None])[:, 0]
            total += float((torch.logsumexp(joint, 1) - observed).sum())
        out[f.name] = total / (n * length)
    return out
