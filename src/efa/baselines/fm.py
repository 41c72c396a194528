"""Factorisation models (FM / exponential family embeddings): the special cases of EFA in
Props 1–3 of the paper, and the baselines of its experiments.

- ``KNNFM`` (Prop 2 with a k-nearest-neighbour context, the temperature experiment's FM).

The first two predict position i from a linear pooling of context embeddings α over the context c(i)
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

from typing import cast

import numpy as np
import torch
from torch import Tensor, nn

from efa.core.conditional import ConditionalModel
from efa.core.data import Sequences
from efa.core.fields import Attribute, Category, Value
from efa.geo import haversine_km

POOLINGS = ("mean", "sum", "paper")


def _check_options(direction: str, dim: int) -> None:
    if direction not in ("bidirectional", "unidirectional"):
        raise ValueError(f"direction must be 'bidirectional' or 'unidirectional', got "
                         f"{direction!r}")
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise ValueError(f"dim must be a positive integer, got {dim!r}")


def context_sum(e: Tensor, valid: Tensor, direction: str) -> tuple[Tensor, Tensor]:
    """Σ_{j in c(i)} e_j and ``|c(i)|`` for every i; e [B, I, K], valid [B, I]."""
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
        if not isinstance(field, Category):
            raise TypeError(f"CategoricalFM models one Category field, got "
                            f"{type(field).__name__} {getattr(field, 'name', field)!r}")
        _check_options(direction, dim)
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
        _check_options(direction, dim)
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
        value = cast(Value, value)
        x = data.fields[item.name]
        y = data.fields[value.name]
        valid = data.valid() & data.observed.get(value.name, data.valid())
        y = torch.where(valid, y, 0).to(self.alpha.weight.dtype)
        s, n = context_sum(self.alpha(x) * y[..., None], valid, self.direction)
        h = _normalise(s, n, data.lengths, self.pooling)
        z = (self.rho(x) * h).sum(-1, keepdim=True)
        return {value.name: value.family.link(z)}


def knn_indices(coords: Tensor, available: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """For every token i, its k nearest *other available* tokens by Haversine distance.

    coords [B, I, 2] (lat, lon), available [B, I] bool. Returns (indices [B, I, k], usable
    [B, I, k] bool: False where fewer than k others are available). Ties go to the smaller index.
    """
    c = coords.double()
    d = torch.from_numpy(haversine_km(*(t.cpu().numpy() for t in (
        c[..., :, None, 0], c[..., :, None, 1], c[..., None, :, 0], c[..., None, :, 1]))))
    n = d.shape[-1]
    blocked = torch.eye(n, dtype=torch.bool) | ~available[:, None, :]
    d = d.masked_fill(blocked, float("inf"))
    d, idx = torch.sort(d, dim=-1, stable=True)
    k = min(k, n - 1)
    return idx[..., :k], torch.isfinite(d[..., :k])


class KNNFM(ConditionalModel):
    """Prop 2 with a k-nearest-neighbour context (the paper's FM baseline, Sec 6.4)::

        y_i | y_-i ~ N(loc + scale · h(τ_i)ᵀ Σ_{j ∈ kNN(i)} h(τ_j) z_j, σ²),
        z_j = (y_j − loc) / scale,  h = MLP(2 → 128 → 32) of the standardised (lat, lon),

    kNN(i) = the k nearest other sites *with an observed value* by Haversine distance. The
    paper's formula is on raw values with no intercept; standardising z (the same loc/scale as
    the EFA) is the same model plus an intercept ``loc`` and a unit change, and ``pooling="mean"``
    divides the sum by the number of neighbours. The reference code is lost; the experiment
    uses the defaults (standardised, sum) and says so.
    """

    c_loc: Tensor  # buffers, declared for the type checker
    c_scale: Tensor

    def __init__(
        self,
        coords: Attribute,
        value: Value,
        k: int,
        dim: int = 32,
        hidden: int = 128,
        pooling: str = "sum",
    ):
        super().__init__()
        if pooling not in ("sum", "mean"):
            raise ValueError(f"pooling must be 'sum' or 'mean', got {pooling!r}")
        if value.family.name != "gaussian":
            raise ValueError("KNNFM models a Gaussian value")
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
            raise ValueError(f"k must be an integer >= 1, got {k!r}")
        self.fields = [coords, value]
        self.k, self.pooling = k, pooling
        self.h = nn.Sequential(nn.Linear(coords.size, hidden), nn.ReLU(), nn.Linear(hidden, dim))
        self.register_buffer("c_loc", torch.tensor(coords.loc, dtype=torch.float32))
        self.register_buffer("c_scale", torch.tensor(coords.scale, dtype=torch.float32))

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        coords_f, value = self.fields
        value = cast(Value, value)
        tau = data.fields[coords_f.name]
        available = data.valid() & data.observed.get(value.name, data.valid())
        y = data.fields[value.name]
        loc, scale = value.moments
        z = torch.where(available, (y.to(self.c_loc.dtype) - loc) / scale, 0.0)
        if bool((tau == tau[:1]).all() and (available == available[:1]).all()):
            # Every sequence has the same sites, all available (one table of days): one kernel.
            tau, available = tau[:1], available[:1]
        idx, usable = knn_indices(tau, available, self.k)  # [B or 1, I, k]
        e = self.h((tau.to(self.c_loc.dtype) - self.c_loc) / self.c_scale)  # [B or 1, I, K]
        z = z.to(e.dtype)
        # The FM is linear in z: pred_i = Σ_j A_ij h(τ_i)ᵀh(τ_j) z_j with A the kNN adjacency,
        # which is one batched matrix product (no [B, I, k, K] gather).
        adj = torch.zeros(idx.shape[0], idx.shape[1], idx.shape[1], dtype=e.dtype)
        adj.scatter_(2, idx, usable.to(e.dtype))
        if self.pooling == "mean":
            adj = adj / usable.sum(-1, keepdim=True).clamp(min=1)
        weights = adj * (e @ e.transpose(1, 2))
        mean = loc + scale * (weights @ z[..., None])
        return {value.name: value.family.link(mean)}
