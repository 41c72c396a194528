"""Factorisation models (FM / exponential family embeddings): the special cases of EFA in
Props 1–3 of the paper, and the baselines of its experiments.

Each predicts position i from a linear pooling of context embeddings α over the context c(i)
(j ≠ i bidirectionally, j < i unidirectionally), scored against a center embedding ρ:

- ``CategoricalFM`` (Prop 1, CBOW): x_i | x_c(i) ~ Cat(softmax(ρᵀ Σ_j α_{x_j} / n)).
- ``ValueFM`` (Props 2–3 with item identities):
  y_i | ... ~ ExpFam(link(ρ_{x_i}ᵀ Σ_j α_{x_j} y_j / n)),
  Gaussian for the synthetic ratings, shifted Poisson for MovieLens.

``pooling`` sets n: ``mean`` divides by the actual context size (the reference code's FMs),
``sum`` by 1 (the reference's categorical FMs), ``paper`` by I − 1 (the paper's formula, also for
unidirectional sums). ``intercept`` adds a learned embedding to the pooled context, which is what
the reference's unidirectional categorical FM does through its always-present [MASK] token.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from efa.data import Sequences
from efa.fields import Category, Value
from efa.model import ConditionalModel

POOLINGS = ("mean", "sum", "paper")


def context_sum(e: Tensor, valid: Tensor, direction: str) -> tuple[Tensor, Tensor]:
    """Σ_{j in c(i)} e_j and |c(i)| for every i; e [B, I, K], valid [B, I]."""
    e = e * valid[..., None]
    count = valid.to(e.dtype)
    if direction == "bidirectional":
        return e.sum(1, keepdim=True) - e, count.sum(1, keepdim=True) - count
    return e.cumsum(1) - e, count.cumsum(1) - count


def _normalise(s: Tensor, n_ctx: Tensor, lengths: Tensor, pooling: str) -> Tensor:
    if pooling == "sum":
        return s
    if pooling == "mean":
        return s / n_ctx.clamp(min=1)[..., None]
    return s / (lengths[:, None, None] - 1).clamp(min=1).to(s.dtype)


class CategoricalFM(ConditionalModel):
    def __init__(
        self,
        field: Category,
        dim: int = 32,
        direction: str = "bidirectional",
        pooling: str = "sum",
        intercept: bool | None = None,
    ):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}")
        self.fields, self.direction, self.pooling = [field], direction, pooling
        self.alpha = nn.Embedding(field.num_categories, dim)
        self.rho = nn.Linear(dim, field.num_categories, bias=False)
        nn.init.normal_(self.alpha.weight, std=0.1)
        if intercept is None:
            intercept = direction == "unidirectional"
        self.intercept = nn.Parameter(torch.zeros(dim)) if intercept else None

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        f = self.fields[0]
        s, n = context_sum(self.alpha(data.fields[f.name]), data.valid(), self.direction)
        h = _normalise(s, n, data.lengths, self.pooling)
        if self.intercept is not None:
            h = h + self.intercept
        return {f.name: self.rho(h)}


class ValueFM(ConditionalModel):
    """Rating-weighted FM: the value of item x_i given the other items and their values."""

    def __init__(
        self,
        item: Category,
        value: Value,
        dim: int = 32,
        direction: str = "bidirectional",
        pooling: str = "mean",
    ):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}")
        if value.family.num_outputs != 1:
            raise ValueError(f"ValueFM needs a one-parameter family, got {value.family!r}")
        item = Category(item.name, item.num_categories, target=False, dim=item.dim)
        self.fields, self.direction, self.pooling = [item, value], direction, pooling
        self.alpha = nn.Embedding(item.num_categories, dim)
        self.rho = nn.Embedding(item.num_categories, dim)
        nn.init.normal_(self.alpha.weight, std=0.1)
        nn.init.normal_(self.rho.weight, std=0.1)

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        item, value = self.fields
        x = data.fields[item.name]
        y = data.fields[value.name]
        valid = data.valid() & data.observed.get(value.name, data.valid())
        y = torch.where(valid, y, 0).to(self.alpha.weight.dtype)
        s, n = context_sum(self.alpha(x) * y[..., None], valid, self.direction)
        h = _normalise(s, n, data.lengths, self.pooling)
        z = (self.rho(x) * h).sum(-1, keepdim=True)
        return {value.name: value.family.link(z)}
