"""Sequences from a known unidirectional attention teacher, with their exact conditional NLLs.

The teacher is an :class:`efa.EFA` (causal attention, any mix of ``Category`` / ``Value`` /
``Attribute`` fields) with known, seeded weights. Sequences are drawn position by position and,
within a position, field by field in factorisation order, each value from the teacher's own
conditional given everything drawn before it; ``Attribute`` fields (always-observed covariates)
are standard normal. The teacher's conditional log-likelihoods of the data are then the exact
log p(y_i | context) of the generating process, so its mean NLL per field on test data is the
Bayes limit that a model fitted to the training data can approach (the excess of a student is
an estimate of its KL divergence from the truth).

>>> from efa.generators import attention_teacher, sample, bayes_nll
>>> fields = [Category("item", 40), Value("count", Poisson())]
>>> teacher = attention_teacher(fields, max_len=12, seed=0)
>>> train = sample(teacher, 20_000, seed=1)
>>> bayes_nll(teacher, sample(teacher, 5_000, seed=3))   # {"item": ..., "count": ...}
"""

from __future__ import annotations

import copy
import math
from typing import cast

import torch
from torch import nn

from efa.core.config import EFAConfig
from efa.core.data import Sequences
from efa.core.families import Bernoulli, Binomial, Ordinal
from efa.core.fields import ROLES, Attribute, Category, Field, Value
from efa.core.model import EFA
from efa.generators.draws import positive_int
from efa.training.scoring import check_int, evaluate

__all__ = ["attention_teacher", "bayes_nll", "sample"]


def attention_teacher(fields: list[Field], max_len: int, *, num_layers: int = 1,
                      num_heads: int = 2, dim: int = 16, strength: float = 2.0,
                      value_scale: float = 3.0, unbounded_feeds: tuple[str, ...] = ROLES,
                      seed: int = 0) -> EFA:
    """Build a unidirectional EFA teacher with known weights drawn from ``seed``.

    Each field is re-declared at width ``dim`` (Value fields keep their family, use a linear
    read-out and a linear λ₁ of y / ``value_scale``); ``num_layers`` residual softmax attention
    layers of ``num_heads`` heads, learned positions. Every weight is drawn from ``seed``
    alone, so the same arguments give the same teacher.

    Parameters
    ----------
    fields : list of Field
        The data's fields (``Category``, ``Value``, ``Attribute``); their names, vocabularies,
        families and target flags are kept, everything else is the teacher's own.
    max_len : int
        The longest sequence the teacher knows (its learned positions).
    num_layers : int, default 1
        Attention layers.
    num_heads : int, default 2
        Heads per layer.
    dim : int, default 16
        The width of every field.
    strength : float, default 2.0
        Scales the embeddings and the attention scores: larger makes the conditionals depend
        more sharply on the context (lower Bayes NLL).
    value_scale : float, default 3.0
        Value fields enter as y / ``value_scale``.
    unbounded_feeds : tuple of str, default ROLES
        What the Value fields of families unbounded above (Poisson, negative binomial,
        Gaussian, gamma) feed. ``("q", "k")`` lets them steer where the teacher attends but
        keeps them out of what it attends to and out of the state carried past the attention
        (the blocks are then ``concat`` blocks, which can leave a field out), so that a large
        draw cannot feed larger ones through the exponential link (long sequences of counts,
        or two layers, can otherwise explode).
    seed : int, default 0
        Seed of the weights.

    Returns
    -------
    EFA
        The teacher, in float64 and in eval mode.

    Raises
    ------
    TypeError
        When ``fields`` is not a list of efa fields.
    ValueError
        For a non-positive size, ``strength`` or ``value_scale``, or no fields.
    """
    for name, v in (("max_len", max_len), ("num_layers", num_layers),
                    ("num_heads", num_heads), ("dim", dim)):
        positive_int(name, v)
    if not isinstance(fields, list | tuple) or not all(isinstance(f, Field) for f in fields):
        raise TypeError(f"fields must be a list of efa fields (Category, Value, ...), "
                        f"got {fields!r}")
    for name, x in (("strength", strength), ("value_scale", value_scale)):
        if not (isinstance(x, int | float) and math.isfinite(x) and x > 0):
            raise ValueError(f"{name} must be a positive finite number, got {x!r}")
    if not fields:
        raise ValueError("the teacher needs at least one field")
    own: list[Field] = []
    for f in fields:
        if isinstance(f, Category):
            own.append(Category(f.name, f.num_categories, target=f.target, dim=dim))
        elif isinstance(f, Value):
            bounded = isinstance(f.family, Bernoulli | Binomial | Ordinal)
            own.append(Value(f.name, f.family, target=f.target, dim=dim, encoder="linear",
                             readout="linear", loc=0.0, scale=value_scale,
                             feeds=ROLES if bounded else unbounded_feeds))
        elif isinstance(f, Attribute):
            own.append(Attribute(f.name, size=f.size, dim=dim, encoder="linear"))
        else:
            raise TypeError(f"the teacher does not know the field kind of {f.name!r}")
    kept_out = any("skip" not in f.feeds for f in own if isinstance(f, Value))
    config = EFAConfig(own, max_len=max_len, num_layers=num_layers, num_heads=num_heads,
                       direction="unidirectional", block="concat" if kept_out else "residual")
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        teacher = EFA(config).double()
        with torch.no_grad():
            for name, p in teacher.named_parameters():
                _draw(name, p, strength, dim)
    return teacher.eval()


def _draw(name: str, p: torch.Tensor, strength: float, dim: int) -> None:
    """The teacher's weights: tokens and positions of norm ≈ ``strength``, queries and keys
    scaled by ``strength`` (sharper attention), norm-preserving values, category logits of
    spread ≈ ``strength``, and value read-outs kept moderate (a count's log-rate near 1 ± 0.5
    over typical states, so that rates stay in a range that the data can identify)."""
    fan_in = p.shape[-1] if p.dim() == 2 else dim
    if name.startswith("readouts"):
        value = p.shape[0] == 1 if p.dim() == 2 else p.numel() == 1
        if name.endswith("bias"):
            nn.init.constant_(p, 1.0) if value else nn.init.normal_(p, std=0.5)
        else:
            nn.init.normal_(p, std=(0.5 / strength if value else 1.0) / fan_in ** 0.5)
    elif name.endswith("bias"):
        nn.init.zeros_(p)
    elif ".attn.q." in name or ".attn.k." in name:
        nn.init.normal_(p, std=strength ** 0.5 / fan_in ** 0.5)
    elif ".attn." in name:
        nn.init.normal_(p, std=1 / fan_in ** 0.5)
    elif name.startswith("encoders") and p.dim() == 2 and "table" not in name:
        nn.init.normal_(p, std=strength / fan_in ** 0.5)  # λ₁ / g maps of numbers
    else:  # category tables, positions, [MASK] vectors
        nn.init.normal_(p, std=strength / dim ** 0.5)


@torch.no_grad()
def sample(teacher: EFA, n: int, length: int | None = None, seed: int = 0,
           batch_size: int = 4096) -> Sequences:
    """Draw ``n`` sequences from the teacher, position by position and field by field.

    Within a position the target fields are drawn in factorisation order, each from the
    teacher's conditional given everything drawn before it; attributes are standard normal.

    Parameters
    ----------
    teacher : EFA
        A unidirectional teacher, e.g. from :func:`attention_teacher`.
    n : int
        The number of sequences.
    length : int or None, default None
        Positions per sequence, at most the teacher's ``max_len`` (its default).
    seed : int, default 0
        Seed of the draws.
    batch_size : int, default 4096
        Sequences drawn at once. The draws depend on it as well as on ``seed`` (each batch
        draws its placeholders before its positions, from the one seeded stream): the same
        data need the same ``seed``, ``n`` and ``batch_size``.

    Returns
    -------
    Sequences
        ``n`` sequences of ``length`` positions, one field per teacher field (values in the
        teacher's dtype, float64 for :func:`attention_teacher`).

    Raises
    ------
    ValueError
        For a bidirectional teacher, a non-positive size, a ``seed`` that is not an integer,
        or a ``length`` the teacher cannot take.
    """
    if teacher.direction != "unidirectional":
        raise ValueError("sampling needs a unidirectional teacher (each position given the "
                         "previous ones); bidirectional conditionals do not define a joint")
    positive_int("n", n)
    positive_int("batch_size", batch_size)
    check_int("seed", seed, None)
    if length is None and teacher.max_len is None:
        raise ValueError("the teacher has no max_len (no positions): pass length=")
    length = cast(int, teacher.max_len) if length is None else positive_int("length", length)
    if teacher.max_len is not None and length > teacher.max_len:
        raise ValueError(f"length {length} exceeds the teacher's max_len {teacher.max_len}")
    g = torch.Generator().manual_seed(int(seed))  # a numpy integer too
    parts = [_sample_batch(teacher, min(batch_size, n - start), length, g)
             for start in range(0, n, batch_size)]
    fields = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    return Sequences(fields, torch.full((n,), length))


def _sample_batch(teacher: EFA, n: int, length: int, g: torch.Generator) -> dict:
    dtype = next(teacher.parameters()).dtype
    fields = {}
    for f in teacher.fields:  # placeholders in the support; replaced before they are seen
        if isinstance(f, Attribute):
            fields[f.name] = torch.randn(n, length, f.size, generator=g, dtype=dtype)
        elif isinstance(f, Category):
            fields[f.name] = torch.zeros(n, length, dtype=torch.long)
        else:
            f = cast(Value, f)
            eta = f.family.link(torch.zeros(n, length, f.family.num_outputs, dtype=dtype))
            fields[f.name] = f.family.sample(eta, generator=g)
    for i in range(length):
        # Causal: position i depends on positions ≤ i only, so the prefix suffices.
        prefix = Sequences({k: v[:, : i + 1] for k, v in fields.items()},
                           torch.full((n,), i + 1))
        at = torch.zeros(n, i + 1, dtype=torch.bool)
        at[:, i] = True
        # factorisation order: later fields see this one
        for f in cast("list[Category | Value]", teacher.target_fields):
            eta = teacher.natural_params_at(prefix, {f.name: at})[f.name]
            fields[f.name][:, i] = f.family.sample(eta, generator=g).to(fields[f.name].dtype)
    return fields


def bayes_nll(teacher: EFA, data: Sequences) -> dict[str, float]:
    """Compute the exact mean conditional NLL per target field of ``data``: the Bayes limit.

    Parameters
    ----------
    teacher : EFA
        The teacher that drew ``data``.
    data : Sequences
        Its sequences, e.g. from :func:`sample`.

    Returns
    -------
    dict of str to float
        Per target field, −log p(y_i | context) under the teacher (full log-likelihoods), in
        nats per predicted position.
    """
    return {name: -v for name, v in evaluate(teacher, data).items()}


def student_fields(teacher: EFA) -> list[Field]:
    """Declare fresh fields for a student of the teacher's data, at efa's defaults.

    Parameters
    ----------
    teacher : EFA
        The teacher.

    Returns
    -------
    list of Field
        Fields of the same names, kinds, vocabularies, families and target flags (what a user
        would declare for these data).
    """
    out: list[Field] = []
    for f in teacher.fields:
        if isinstance(f, Category):
            out.append(Category(f.name, f.num_categories, target=f.target))
        elif isinstance(f, Value):
            out.append(Value(f.name, copy.deepcopy(f.family), target=f.target))
        else:
            out.append(Attribute(f.name, size=cast(Attribute, f).size))
    return out
