"""The networks of the field kinds: encoders (a category's table with its [MASK] row, a value's
map λ₁ with its [MASK] vector) and read-outs (δ for categories, λ₂ for values)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from efa.core.mlp import mlp

if TYPE_CHECKING:  # the field kinds build these networks; the type only names them
    from efa.core.fields import Value


class TableEncoder(nn.Module):
    """An embedding per value 0..n−1 and a [MASK] row (the last).

    Parameters
    ----------
    n : int
        Number of values (categories).
    dim : int
        Width of the embeddings (initialised N(0, 0.1²)).
    """

    def __init__(self, n: int, dim: int):
        super().__init__()
        self.table = nn.Embedding(n + 1, dim)
        nn.init.normal_(self.table.weight, std=0.1)

    def forward(self, x: Tensor, hidden: Tensor | None) -> Tensor:
        """The embeddings of the values, [MASK] where hidden.

        Parameters
        ----------
        x : torch.Tensor, shape (B, I)
            Values 0..n−1.
        hidden : torch.Tensor, shape (B, I), or None
            Where the value is replaced by [MASK] (bool; None: nowhere).

        Returns
        -------
        torch.Tensor, shape (B, I, dim)
            The embeddings.
        """
        ids = x.long()
        if hidden is not None:
            ids = torch.where(hidden, self.table.num_embeddings - 1, ids)
        return self.table(ids)

    def masked(self, shape: tuple[int, ...]) -> Tensor:
        """The [MASK] embedding at every position (looked up, so that its gradient is summed as
        when some values are hidden: the same numbers).

        Parameters
        ----------
        shape : tuple of int
            The positions' shape, e.g. (B, I).

        Returns
        -------
        torch.Tensor, shape (``*shape``, dim)
            The [MASK] row, repeated.
        """
        return self.table(torch.full(shape, self.table.num_embeddings - 1,
                                     device=self.table.weight.device))


class MapEncoder(nn.Module):
    """A learned map (MLP, linear or identity) of standardised numbers, (x − loc) / scale, with
    a [MASK] vector when the field can be hidden (zero for the identity map: λ₁([MASK]) = 0 as
    in the EFA paper's Props 2–3).

    Parameters
    ----------
    size : int
        Numbers per token (1 for a value field).
    dim : int
        Width of the output.
    kind : {"mlp", "linear", "identity"}
        The map (the fields check that the identity has dim == size).
    hidden : int
        Hidden units of the "mlp" map.
    loc : float or sequence of float
        What is subtracted from the numbers (one, or one per number); a buffer.
    scale : float or sequence of float
        What they are then divided by; a buffer.
    value : bool
        Whether this encodes a scalar value field that can be hidden (then it has a [MASK]
        vector: learned, or a zero buffer for the identity map); False for an always-observed
        attribute.
    """

    loc: Tensor  # buffers, declared for the type checker
    scale: Tensor

    def __init__(self, size: int, dim: int, kind: str, hidden: int,
                 loc: float | Sequence[float], scale: float | Sequence[float], value: bool):
        super().__init__()
        self.value = value  # a scalar value field [B, I] that can be hidden
        if kind == "mlp":
            self.net = mlp([size, hidden, dim])
        elif kind == "linear":
            self.net = nn.Linear(size, dim)
        else:
            self.net = nn.Identity()
        if value:
            if kind == "identity":
                self.register_buffer("mask", torch.zeros(dim))
            else:
                self.mask = nn.Parameter(torch.randn(dim) * 0.1)
        dtype = torch.get_default_dtype()
        self.register_buffer("loc", torch.tensor(loc, dtype=dtype).reshape(-1))
        self.register_buffer("scale", torch.tensor(scale, dtype=dtype).reshape(-1))

    def forward(self, x: Tensor, hidden: Tensor | None) -> Tensor:
        """The map of the standardised numbers, the [MASK] vector where hidden.

        Parameters
        ----------
        x : torch.Tensor, shape (B, I) or (B, I, size)
            The numbers: (B, I) for a value field, (B, I, size) for an attribute.
        hidden : torch.Tensor, shape (B, I), or None
            Where the value is replaced by [MASK] (bool; None: nowhere). Hidden values may be
            anything, NaN included.

        Returns
        -------
        torch.Tensor, shape (B, I, dim)
            The embeddings.
        """
        if self.value:
            # Hidden values may be anything (missing ones too): zero them before the map so
            # that no NaN can reach a gradient.
            x = torch.where(hidden, 0, x) if hidden is not None else x
            x = x[..., None]
        # Standardised in the wider dtype, then cast: float64 data cast to float32 first would
        # merge close values far from 0 (Unix seconds are 128 apart in float32).
        wide = torch.promote_types(x.dtype, self.loc.dtype) if x.is_floating_point() \
            else self.loc.dtype
        z = (x.to(wide) - self.loc.to(wide)) / self.scale.to(wide)
        e = self.net(z.to(self.loc.dtype))
        if hidden is not None:
            e = torch.where(hidden[..., None], self.mask, e)
        return e

    def masked(self, shape: tuple[int, ...]) -> Tensor:
        """A value field's [MASK] vector at every position (the map is not run).

        Parameters
        ----------
        shape : tuple of int
            The positions' shape, e.g. (B, I).

        Returns
        -------
        torch.Tensor, shape (``*shape``, dim)
            The [MASK] vector, expanded (a view).
        """
        return self.mask.expand(*shape, -1)


class LinearReadout(nn.Module):
    """δ: logits of a category, a linear map of the state.

    Parameters
    ----------
    d_model : int
        Width of the state.
    n : int
        Number of categories.
    bias : bool
        Whether the logits have a bias.
    """

    def __init__(self, d_model: int, n: int, bias: bool):
        super().__init__()
        self.net = nn.Linear(d_model, n, bias=bias)

    def forward(self, h: Tensor) -> Tensor:
        """The logits of the states.

        Parameters
        ----------
        h : torch.Tensor, shape (..., d_model)
            States.

        Returns
        -------
        torch.Tensor, shape (..., n)
            Logits (the categorical family's natural parameters).
        """
        return self.net(h)


class ValueReadout(nn.Module):
    """λ₂ (linear or MLP) and the family's link from standardised units.

    Parameters
    ----------
    f : Value
        The field: its ``family``, ``moments`` (loc, scale), ``readout`` ("linear" or an MLP
        with ``readout_hidden`` units and ``readout_activation``) and ``readout_bias``.
    d_model : int
        Width of the state.
    """

    def __init__(self, f: Value, d_model: int):
        super().__init__()
        self.family, (self.loc, self.scale) = f.family, f.moments
        self.net: nn.Module
        if f.readout == "linear":
            self.net = nn.Linear(d_model, f.family.num_outputs, bias=f.readout_bias)
        else:
            self.net = mlp([d_model, *f.readout_hidden, f.family.num_outputs],
                           f.readout_activation, f.readout_bias)

    def forward(self, h: Tensor) -> Tensor:
        """The natural parameters of the states.

        Parameters
        ----------
        h : torch.Tensor, shape (..., d_model)
            States.

        Returns
        -------
        torch.Tensor, shape (..., num_natural)
            η, by the family's ``link_standardised`` of the read-out.
        """
        return self.family.link_standardised(self.net(h), self.loc, self.scale)
