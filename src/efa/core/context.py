"""The context of each asked position as what a category field holds there: which items
(:func:`context_items`, what the ``distinct`` support restriction excludes), the sum of a
table's rows over them (:func:`context_bag`, the linear term of ``Category(bag=True)``), and
the (row, item) pairs (:func:`context_pairs`, the sparse form for large vocabularies).

The context of position i is every other observed, real position j ≠ i (bidirectional), or
the earlier ones j < i (unidirectional).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from efa.core.data import Sequences


def context_items(data: Sequences, name: str, k: int, direction: str, at: Tensor) -> Tensor:
    """Which items of category ``name`` are in the context of each asked position (observed,
    real positions j ≠ i; j < i unidirectionally).

    Parameters
    ----------
    data : Sequences
        The sequences.
    name : str
        A category field.
    k : int
        Its number of categories K.
    direction : {"bidirectional", "unidirectional"}
        Whether the context is every other position or the earlier ones.
    at : torch.Tensor, shape (B, I)
        The asked positions (bool).

    Returns
    -------
    torch.Tensor, shape (P, K)
        Bool, one row per asked position in the order of ``at.nonzero()``.
    """
    x = data.fields[name]
    present = data.predicted(name, scored=False)
    onehot = F.one_hot(torch.where(present, x, 0).long(), k) * present[..., None]
    if direction == "bidirectional":
        counts = onehot.sum(1, keepdim=True) - onehot
    else:
        counts = onehot.cumsum(1) - onehot
    return counts[at] > 0


def context_bag(data: Sequences, name: str, table: Tensor, direction: str, at: Tensor) -> Tensor:
    """[P, n]: Σ_{j in c(i)} table[x_j] over the context items of category ``name`` of each
    asked position (observed, real positions j ≠ i; j < i unidirectionally), i.e. tableᵀ n_c(i)
    with n_c(i) the context's item counts: the linear term of the multinomial logit on context
    counts (``Category(bag=True)``). By a gather and a (cumulative) sum, O(B·I·n).

    Parameters
    ----------
    data : Sequences
        The sequences.
    name : str
        A category field.
    table : torch.Tensor, shape (K, n)
        A row per category.
    direction : {"bidirectional", "unidirectional"}
        Whether the context is every other position or the earlier ones.
    at : torch.Tensor, shape (B, I)
        The asked positions (bool).

    Returns
    -------
    torch.Tensor, shape (P, n)
        One row per asked position in the order of ``at.nonzero()``.
    """
    x = data.fields[name]
    present = data.predicted(name, scored=False)
    rows = F.embedding(torch.where(present, x, 0).long(), table) * present[..., None]
    if direction == "bidirectional":
        return (rows.sum(1, keepdim=True) - rows)[at]
    return (rows.cumsum(1) - rows)[at]


def context_pairs(data: Sequences, name: str, direction: str, at: Tensor) -> tuple[Tensor, Tensor]:
    """The items of category ``name`` in the context of each asked position, as (row, item)
    pairs (row = index among ``at.nonzero()``): the sparse form of :func:`context_items` for
    large vocabularies.

    Parameters
    ----------
    data : Sequences
        The sequences.
    name : str
        A category field.
    direction : {"bidirectional", "unidirectional"}
        Whether the context is every other position or the earlier ones.
    at : torch.Tensor, shape (B, I)
        The asked positions (bool).

    Returns
    -------
    rows : torch.Tensor, shape (E,)
        The asked position's index among ``at.nonzero()``, once per context item.
    items : torch.Tensor, shape (E,)
        The item (repeated items appear once per occurrence).
    """
    b_idx, i_idx = at.nonzero(as_tuple=True)
    x = data.fields[name]
    present = data.predicted(name, scored=False)
    j = torch.arange(x.shape[1], device=x.device)
    ctx = present[b_idx] & (j[None, :] != i_idx[:, None])  # [P, I]
    if direction != "bidirectional":
        ctx &= j[None, :] < i_idx[:, None]
    rows, cols = ctx.nonzero(as_tuple=True)
    return rows, x[b_idx[rows], cols]
