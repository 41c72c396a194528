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
from efa.geo import LATITUDES, LONGITUDES, haversine_km, off_the_globe

POOLINGS = ("mean", "sum", "paper")


def _check_options(direction: str, dim: int) -> None:
    if direction not in ("bidirectional", "unidirectional"):
        raise ValueError(f"direction must be 'bidirectional' or 'unidirectional', got "
                         f"{direction!r}")
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise ValueError(f"dim must be a positive integer, got {dim!r}")


def context_sum(e: Tensor, valid: Tensor, direction: str) -> tuple[Tensor, Tensor]:
    """The sum of the context's vectors and the context's size at every position.

    Parameters
    ----------
    e : torch.Tensor, shape (B, I, K)
        A vector per position (padding is zeroed).
    valid : torch.Tensor, shape (B, I)
        Bool, True at the real positions.
    direction : {"bidirectional", "unidirectional"}
        The context c(i): every other real position j ≠ i, or the earlier ones j < i.

    Returns
    -------
    sums : torch.Tensor, shape (B, I, K)
        Σ_{j ∈ c(i)} e_j.
    counts : torch.Tensor, shape (B, I)
        ``|c(i)|``, the number of real positions in the context, in ``e``'s dtype.
    """
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
    """The categorical FM of Prop 1 (CBOW): x_i | x_c(i) ~ Cat(softmax(ρᵀ Σ_j α_{x_j} / n)).

    Parameters
    ----------
    field : Category
        The one field, a category: the context and the target.
    dim : int, default 32
        Width of the context embeddings α and the center embeddings ρ.
    direction : {"bidirectional", "unidirectional"}
        The context: every other position, or the earlier ones.
    pooling : {"sum", "mean", "paper"}
        n of the pooled context: 1, the context's size, or I − 1 (see the module's docstring).
    intercept : bool, optional
        Add a learned vector to the pooled context; the default (None) adds one for
        ``direction="unidirectional"`` only, as the reference code's [MASK] token does.

    Raises
    ------
    ValueError
        If ``pooling`` or ``direction`` is not one of the above, or ``dim`` is not a positive
        integer.
    TypeError
        If ``field`` is not a ``Category``, or ``intercept`` is not a bool or None.
    """

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
        if intercept is not None and not isinstance(intercept, bool | np.bool_):
            # A truthy string or number would pass as True unnoticed.
            raise TypeError(f"intercept must be True, False or None, got {intercept!r}")
        self.fields, self.direction, self.pooling = [field], direction, pooling
        self.alpha = nn.Embedding(field.num_categories, dim)
        self.rho = nn.Linear(dim, field.num_categories, bias=False)
        nn.init.normal_(self.alpha.weight, std=0.1)
        if intercept is None:
            intercept = direction == "unidirectional"
        self.intercept = nn.Parameter(torch.zeros(dim)) if intercept else None

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        """The logits of the category at every position, from its pooled context.

        Parameters
        ----------
        data : Sequences
            The sequences.

        Returns
        -------
        dict of str to torch.Tensor
            The field's name → logits ρᵀ h_i, shape (B, I, K) with K the number of categories.
        """
        f = self.fields[0]
        # A value that is not observed is in no context (its placeholder may be anything).
        present = data.predicted(f.name, scored=False)
        x = torch.where(present, data.fields[f.name], 0)
        s, n = context_sum(self.alpha(x), present, self.direction)
        h = _normalise(s, n, data.lengths, self.pooling)
        if self.intercept is not None:
            h = h + self.intercept
        return {f.name: self.rho(h)}


class ValueFM(ConditionalModel):
    """Rating-weighted FM: the value of item x_i given the other items and their values.

    y_i | ... ~ ExpFam(link(ρ_{x_i}ᵀ Σ_j α_{x_j} y_j / n)) (Props 2–3 with item identities);
    unobserved values are left out of the context.

    Parameters
    ----------
    item : Category
        The item field; the model keeps a copy with ``target=False`` (items are context only).
    value : Value
        The value field, the target; its family must have one natural parameter.
    dim : int, default 32
        Width of the context embeddings α and the center embeddings ρ.
    direction : {"bidirectional", "unidirectional"}
        The context: every other position, or the earlier ones.
    pooling : {"mean", "sum", "paper"}
        n of the pooled context: the context's size, 1, or I − 1 (see the module's docstring).

    Raises
    ------
    ValueError
        If ``pooling`` or ``direction`` is not one of the above, ``dim`` is not a positive
        integer, or ``value``'s family has more than one natural parameter.
    TypeError
        If ``item`` is not a ``Category`` or ``value`` not a ``Value``.
    """

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
        for arg, f, kind in (("item", item, Category), ("value", value, Value)):
            if not isinstance(f, kind):
                raise TypeError(f"ValueFM's {arg} must be a {kind.__name__} field, got "
                                f"{type(f).__name__} {getattr(f, 'name', f)!r}")
        if value.family.num_outputs != 1:
            raise ValueError(f"ValueFM needs a one-parameter family, got {value.family!r}")
        item = Category(item.name, item.num_categories, target=False, dim=item.dim)
        self.fields, self.direction, self.pooling = [item, value], direction, pooling
        self.alpha = nn.Embedding(item.num_categories, dim)
        self.rho = nn.Embedding(item.num_categories, dim)
        nn.init.normal_(self.alpha.weight, std=0.1)
        nn.init.normal_(self.rho.weight, std=0.1)

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        """The value's natural parameter at every position, from the other items weighted by
        their observed values.

        Parameters
        ----------
        data : Sequences
            The sequences (a value that is not observed weighs nothing).

        Returns
        -------
        dict of str to torch.Tensor
            The value field's name → η = link(ρ_{x_i}ᵀ h_i), shape (B, I, 1).
        """
        item, value = self.fields
        value = cast(Value, value)
        x = data.fields[item.name]
        y = data.fields[value.name]
        valid = data.predicted(value.name, scored=False)
        y = torch.where(valid, y, 0).to(self.alpha.weight.dtype)
        s, n = context_sum(self.alpha(x) * y[..., None], valid, self.direction)
        h = _normalise(s, n, data.lengths, self.pooling)
        z = (self.rho(x) * h).sum(-1, keepdim=True)
        return {value.name: value.family.link(z)}


def knn_indices(coords: Tensor, available: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """For every token i, its k nearest *other available* tokens by Haversine distance.

    Ties go to the smaller index.

    Parameters
    ----------
    coords : torch.Tensor, shape (B, I, 2)
        Each token's (latitude, longitude) in degrees.
    available : torch.Tensor, shape (B, I)
        Bool, True for the tokens that may be neighbours.
    k : int
        The number of neighbours; at most I − 1 are returned (k' = min(k, I − 1) below).

    Returns
    -------
    indices : torch.Tensor, shape (B, I, k')
        The neighbours' positions, nearest first.
    usable : torch.Tensor, shape (B, I, k')
        Bool, False where fewer than k other tokens are available (those indices point at
        unavailable tokens).

    Raises
    ------
    ValueError
        If an available token's coordinates are not finite degrees on the globe (latitude in
        [-90, 90], longitude in [-180, 360]): standardised or swapped coordinates would give
        distances that mean nothing.
    """
    c = coords.double()
    bad_lat, bad_lon = (torch.from_numpy(m) & available.cpu()
                        for m in off_the_globe(c[..., 0].cpu().numpy(), c[..., 1].cpu().numpy()))
    for col, (what, (lo, hi), bad) in enumerate((("latitude", LATITUDES, bad_lat),
                                                 ("longitude", LONGITUDES, bad_lon))):
        if bad.any():
            b, i = (int(x) for x in bad.nonzero()[0])
            raise ValueError(f"coords of sequence {b}, position {i}: {what} "
                             f"{float(c[b, i, col])!r} is not finite degrees in [{lo:g}, {hi:g}] "
                             "(coords must be (latitude, longitude))")
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

    Parameters
    ----------
    coords : Attribute
        The (lat, lon) attribute; its ``loc`` and ``scale`` standardise the coordinates
        before h.
    value : Value
        The value field, the target; its family must be Gaussian, and its ``loc`` and
        ``scale`` standardise the values.
    k : int
        The number of neighbours (≥ 1).
    dim : int, default 32
        Width of h's output.
    hidden : int, default 128
        Width of h's hidden layer.
    pooling : {"sum", "mean"}
        Sum the neighbours' terms, or average them over the usable neighbours.

    Raises
    ------
    ValueError
        If ``pooling`` is not one of the above, ``value``'s family is not Gaussian, or ``k``
        is not an integer ≥ 1.
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
        """The Gaussian's natural parameter at every site, from its k nearest other sites with
        an observed value.

        Parameters
        ----------
        data : Sequences
            The sequences, one set of sites each (when every sequence has the same sites, all
            available, one neighbourhood is computed for all).

        Returns
        -------
        dict of str to torch.Tensor
            The value field's name → η = link(mean), shape (B, I, 1), the mean in the value's
            units.
        """
        coords_f, value = self.fields
        value = cast(Value, value)
        tau = data.fields[coords_f.name]
        available = data.predicted(value.name, scored=False)
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
