"""The exact masked pseudo-likelihood: two algorithms for the same numbers.

The state that predicts position i is defined on a *copy* of the sequence in which position i
is masked. Both strategies return, for every asked position (``at`` [B, I] bool, in the order
of ``at.nonzero()``), the last layer's state of that copy at i, without materialising the copies
in the data:

- :func:`two_stream` (exact for one layer, and for causal attention at any depth, with a
  row-local kernel): a content stream runs on the unmasked tokens; a query stream holds, at
  every i, the masked token i, which attends to the content at j ≠ i and to itself. In copy i
  every j ≠ i is unmasked at layer 0, and under a causal mask j < i never sees i, so the content
  stream *is* copy i's state at j. One pass per sequence.
- :func:`copies` (exact for everything): the copies are built inside the model, only for the
  asked positions, in chunks; the last layer computes the read-out row alone.

Both take the blocks, the content tokens [B, I, d], the masked tokens [B, I, d] and the
``allowed`` mask [B, 1, I, I], and return (head(states) [P, ...], weights [L, P, H, I] or None):
``head`` is the read-out (identity by default) and row p of the weights is what the masked query
pays to every position in its copy.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn


def _identity(h: Tensor) -> Tensor:
    return h


def two_stream(blocks: nn.ModuleList, content: Tensor, query: Tensor, allowed: Tensor,
               at: Tensor, want_weights: bool = False, chunk: int | None = None,
               head: Callable[[Tensor], Tensor] = _identity,
               stream: list[Tensor] | None = None) -> tuple[Tensor, Tensor | None]:
    """Read-outs at the asked positions by two-stream attention: one pass per sequence.

    Exact for one layer, and for causal attention at any depth, with a row-local kernel
    (:func:`choose` refuses it elsewhere).

    Parameters
    ----------
    blocks : torch.nn.ModuleList
        The model's attention layers (:class:`efa.core.attention.Block`).
    content : torch.Tensor, shape (B, I, d)
        The unmasked tokens.
    query : torch.Tensor, shape (B, I, d)
        The masked tokens (the fields predicted hidden).
    allowed : torch.Tensor, shape (B, 1, I, I)
        Which key each query may see (bool).
    at : torch.Tensor, shape (B, I)
        The asked positions (bool).
    want_weights : bool, default False
        Also return the masked queries' attention rows.
    chunk : int, optional
        Unused (the strategies share a signature).
    head : callable, optional
        The read-out applied to the states (default: the identity).
    stream : list of torch.Tensor, optional
        A list shared by the calls for several target fields of one batch. The content
        stream does not depend on the target, so each layer's content states are computed by
        the first call and reused by the others (the list holds the input of every layer).

    Returns
    -------
    states : torch.Tensor, shape (P, ...)
        ``head`` of the last layer's state at each of the P asked positions, in the order of
        ``at.nonzero()``.
    weights : torch.Tensor, shape (L, P, H, I), or None
        Row p: what the masked query pays to every position in its copy, per layer (None
        unless ``want_weights``).
    """
    b_idx, i_idx = at.nonzero(as_tuple=True)
    weights = []
    stream = [] if stream is None else stream
    if not stream:
        stream.append(content)
    for layer, block in enumerate(blocks):
        query, w = block(query, allowed, memory=stream[layer], own=True,
                         need_weights=want_weights)
        if layer + 1 == len(stream) < len(blocks):
            stream.append(block(stream[layer], allowed, need_weights=False)[0])
        if want_weights:
            weights.append(w[b_idx, :, i_idx])
    # Every position is computed anyway; reading out before selecting keeps efa 0.1's float
    # summation order in the read-out's gradient (same seed, same numbers across versions).
    out = head(query)
    if at.all():  # every position asked: a view, not a copy
        out = out.reshape(-1, *out.shape[2:])
    else:
        out = out[b_idx, i_idx]
    return out, (torch.stack(weights) if want_weights else None)


def copies(blocks: nn.ModuleList, content: Tensor, query: Tensor, allowed: Tensor, at: Tensor,
           want_weights: bool = False, chunk: int = 4096,
           head: Callable[[Tensor], Tensor] = _identity) -> tuple[Tensor, Tensor | None]:
    """Read-outs at the asked positions by in-model masked copies: exact for any depth,
    direction and kernel.

    A one-layer model whose kernel's own form is the copy (:func:`own_is_copy`, CME
    attention) computes them by one two-stream pass per sequence where enough positions per
    sequence are asked.

    Parameters
    ----------
    blocks : torch.nn.ModuleList
        The model's attention layers (:class:`efa.core.attention.Block`).
    content : torch.Tensor, shape (B, I, d)
        The unmasked tokens.
    query : torch.Tensor, shape (B, I, d)
        The masked tokens (the fields predicted hidden).
    allowed : torch.Tensor, shape (B, 1, I, I)
        Which key each query may see (bool).
    at : torch.Tensor, shape (B, I)
        The asked positions (bool).
    want_weights : bool, default False
        Also return the masked queries' attention rows.
    chunk : int, default 4096
        Copies built at a time (memory against speed; the result is the same).
    head : callable, optional
        The read-out applied to the states (default: the identity).

    Returns
    -------
    states : torch.Tensor, shape (P, ...)
        ``head`` of the last layer's state at each of the P asked positions, in the order of
        ``at.nonzero()``.
    weights : torch.Tensor, shape (L, P, H, I), or None
        Row p: what the masked query pays to every position in its copy, per layer (None
        unless ``want_weights``).
    """
    if len(blocks) == 1 and own_is_copy(blocks[0]) and _dense(at):
        return _own_form_copies(blocks[0], content, query, allowed, at, want_weights, chunk, head)
    b_idx, i_idx = at.nonzero(as_tuple=True)
    states, weights = [], []
    for start in range(0, len(b_idx), chunk):
        b, i = b_idx[start : start + chunk], i_idx[start : start + chunk]
        rows = torch.arange(len(b), device=b.device)
        x = content[b].clone()
        x[rows, i] = query[b, i]
        mask = allowed[b]
        ws = []
        for block in blocks[:-1]:
            x, w = block(x, mask, need_weights=want_weights)
            if want_weights:
                ws.append(w[rows, :, i])
        # Only position i of the last layer is read out: compute that row alone.
        h, w = blocks[-1](x[rows, i][:, None], mask[rows, :, i][:, :, None], memory=x,
                          q_pos=i[:, None], need_weights=want_weights)
        states.append(head(h[:, 0]))
        if want_weights:
            weights.append(torch.stack([*ws, w[:, :, 0]]))
    if not states:  # nothing asked
        return head(content.new_zeros(0, content.shape[-1])), None
    out = torch.cat(states)
    return out, (torch.cat(weights, dim=1) if want_weights else None)


def own_is_copy(block: nn.Module) -> bool:
    """Whether ``block``'s kernel declares that its two-stream ("own") form computes the masked
    copy exactly although it is not row-local: kernel ridge (CME) attention, whose copy i has
    the content's key set with key i replaced, a block update of one factorisation per
    sequence. (Softmax and linear do not declare it: their copies are untouched.)

    Parameters
    ----------
    block : torch.nn.Module
        An attention layer (its ``attn.kernel`` is read).

    Returns
    -------
    bool
        The kernel's ``own_is_copy`` (False where the block has none).
    """
    kernel = getattr(getattr(block, "attn", None), "kernel", None)
    return bool(getattr(kernel, "own_is_copy", False))


# The own form computes every position of a sequence: it pays against one fresh solve per copy
# from about 4 asked positions per sequence on, whatever the length (benchmarks/cme_copies.py:
# fresh / update = 1.7, 1.1, 1.2 at 4 asked of I = 20, 44, 100; 5.9, 11, 67 at all asked).
OWN_FORM_MIN_ASKED = 4


def _dense(at: Tensor) -> bool:
    """Whether the sequences with asked positions have OWN_FORM_MIN_ASKED of them on average."""
    rows = int(at.any(-1).sum())
    return rows > 0 and int(at.sum()) >= OWN_FORM_MIN_ASKED * rows


def _own_form_copies(block, content, query, allowed, at, want_weights, chunk, head):
    """The copies of a one-layer model whose kernel's own form is the copy (``own_is_copy``):
    one two-stream pass per sequence that has asked positions, read out at those positions
    (same order as ``at.nonzero()``)."""
    seqs = at.any(-1).nonzero().flatten()
    per = max(1, chunk // max(1, at.shape[-1]))  # sequences per chunk: ~chunk query rows
    states, weights = [], []
    for start in range(0, len(seqs), per):
        s = seqs[start : start + per]
        h, w = block(query[s], allowed[s], memory=content[s], own=True)
        b, i = at[s].nonzero(as_tuple=True)
        states.append(head(h[b, i]))
        if want_weights:
            weights.append(w[b, :, i][None])
    return torch.cat(states), (torch.cat(weights, dim=1) if want_weights else None)


STRATEGIES = {"two_stream": two_stream, "copies": copies}
MODES = ("auto", *STRATEGIES)
ALIASES = {"stream": "two_stream"}  # the name used by saved configs of efa 0.1


def sparse(at: Tensor) -> bool:
    """Whether at most one position per sequence is asked on average (next-item prediction,
    ancestral sampling): then ``copies`` (the asked rows only) costs less than two full streams
    and a read-out of every position. ``mode='auto'`` then uses it, in eval mode, wherever it
    would use ``two_stream``.

    Parameters
    ----------
    at : torch.Tensor, shape (B, I)
        The asked positions (bool).

    Returns
    -------
    bool
        Whether at most B positions are asked.
    """
    return int(at.sum()) <= at.shape[0]


def choose(mode: str, num_layers: int, causal: bool, row_local: bool) -> str:
    """The strategy for ``mode`` ('auto' picks two-stream wherever it is exact); refuses
    two-stream where it would not be exact.

    Parameters
    ----------
    mode : {"auto", "two_stream", "copies"}
        What the configuration asks for.
    num_layers : int
        Attention layers.
    causal : bool
        Whether attention is unidirectional.
    row_local : bool
        The kernel's ``row_local``.

    Returns
    -------
    str
        "two_stream" or "copies".

    Raises
    ------
    ValueError
        If ``mode`` is "two_stream" where it would not be exact.
    """
    exact = row_local and (num_layers == 1 or causal)
    if mode == "auto":
        return "two_stream" if exact else "copies"
    if mode == "two_stream" and not exact:
        raise ValueError(
            "mode='two_stream' is exact only for one layer or unidirectional attention with a "
            "row-local attention kernel; use mode='copies' (or 'auto')"
        )
    return mode
