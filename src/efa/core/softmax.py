"""Categorical read-outs over large vocabularies (catalogues of 10⁴–10⁶ items).

The read-out δ turns a state h into logits over D items. Holding [tokens × D] logits at once
costs tokens·D floats (12,800 tokens × 10⁵ items = 5 GB); here the log-softmax is computed in
chunks of the vocabulary with a running log-sum-exp, and the backward pass recomputes each
chunk instead of storing it — exact, with memory O(tokens × chunk).

For training, :func:`sampled_log_prob` is the cheaper sampled softmax: the target and k
negatives drawn from a proposal Q, each negative's logit minus log(k·Q) and the target's as it
is, so that the sampled normaliser is an unbiased estimate of the full one (Bengio & Senécal,
2008; Blanc & Rendle, 2018). Its log is still biased (Jensen), less so as k grows; it is used
for training only and evaluation stays exact.

The ``distinct`` support restriction works at that size too: the excluded items are given as
(row, item) pairs instead of a [tokens × D] mask.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import torch
from torch import Tensor

if TYPE_CHECKING:  # for annotations only
    from efa.core.conditional import ConditionalModel
    from efa.core.data import Sequences
    from efa.core.fields import Category


@dataclass(frozen=True)
class Sampling:
    """What ``fit(..., sampled_softmax=k)`` hands to the loss: k negatives per position, drawn
    by ``generator`` from the log-proposal ``log_q[name]`` of each category target.

    Parameters
    ----------
    k : int
        Negatives drawn per batch (shared by its positions).
    log_q : dict of str to torch.Tensor
        Per category target, the log-proposal over its D items, shape (D,)
        (:func:`proposals`).
    generator : torch.Generator
        The random stream the negatives are drawn from.
    """

    k: int
    log_q: dict[str, Tensor]
    generator: torch.Generator

EXCLUDED = -1e4  # the same finite "impossible" logit as efa.core.fields.EXCLUDED


def _chunk_logits(h, weight, bias, start, stop, excluded):
    z = h @ weight[start:stop].T
    if bias is not None:
        z = z + bias[start:stop]
    if excluded is not None:
        rows, items = excluded
        inside = (items >= start) & (items < stop)
        z = z.index_put((rows[inside], items[inside] - start),
                        torch.tensor(EXCLUDED, dtype=z.dtype, device=z.device))
    return z


class _ChunkedLogProb(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight, bias, y, chunk, rows, items):
        excluded = None if rows is None else (rows, items)
        lse = h.new_full((h.shape[0],), float("-inf"))
        for start in range(0, weight.shape[0], chunk):
            z = _chunk_logits(h, weight, bias, start, start + chunk, excluded)
            lse = torch.logaddexp(lse, torch.logsumexp(z, dim=1))
        target = (h * weight[y]).sum(1) + (bias[y] if bias is not None else 0)
        if excluded is not None:  # a target among the excluded has the excluded logit
            hit = torch.zeros_like(y, dtype=torch.bool)
            hit[rows[items == y[rows]]] = True
            target = torch.where(hit, torch.full_like(target, EXCLUDED), target)
        ctx.save_for_backward(h, weight, bias, y, lse, rows, items)
        ctx.chunk = chunk
        return target - lse

    @staticmethod
    def backward(ctx, grad):
        h, weight, bias, y, lse, rows, items = ctx.saved_tensors
        excluded = None if rows is None else (rows, items)
        gh = torch.zeros_like(h)
        gw = torch.zeros_like(weight)
        gb = torch.zeros_like(bias) if bias is not None else None
        for start in range(0, weight.shape[0], ctx.chunk):
            stop = min(start + ctx.chunk, weight.shape[0])
            p = torch.exp(_chunk_logits(h, weight, bias, start, stop, excluded) - lse[:, None])
            if excluded is not None:  # excluded logits are constants: no gradient through them
                inside = (items >= start) & (items < stop)
                p = p.index_put((rows[inside], items[inside] - start),
                                torch.zeros((), dtype=p.dtype, device=p.device))
            g = -p * grad[:, None]  # d(−lse)/dz = −softmax
            gh += g @ weight[start:stop]
            gw[start:stop] += g.T @ h
            if gb is not None:
                gb[start:stop] += g.sum(0)
        # The target logit's own gradient (+1 at y), unless the target is excluded.
        keep = grad.clone()
        if excluded is not None:
            keep[rows[items == y[rows]]] = 0
        gh += keep[:, None] * weight[y]
        gw.index_add_(0, y, keep[:, None] * h)
        if gb is not None:
            gb.index_add_(0, y, keep)
        return gh, gw, gb, None, None, None, None


def chunked_log_prob(h: Tensor, weight: Tensor, bias: Tensor | None, y: Tensor, chunk: int,
                     excluded: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """log softmax(h Wᵀ + b)[y] without holding [P × D] logits: D in chunks, exact.

    The backward pass recomputes each chunk's logits instead of storing them.

    Parameters
    ----------
    h : torch.Tensor, shape (P, d)
        States.
    weight : torch.Tensor, shape (D, d)
        The read-out's weights W.
    bias : torch.Tensor, shape (D,), or None
        Its biases b.
    y : torch.Tensor, shape (P,)
        The observed items (int64).
    chunk : int
        Items per chunk.
    excluded : tuple of torch.Tensor, optional
        ``(rows, items)``, each of shape (E,): item ``items[e]`` is impossible at row
        ``rows[e]`` (logit ``EXCLUDED``).

    Returns
    -------
    torch.Tensor, shape (P,)
        log p(y_p) of each row.
    """
    rows, items = excluded if excluded is not None else (None, None)
    return _ChunkedLogProb.apply(h, weight, bias, y, chunk, rows, items)


def sampled_log_prob(h: Tensor, weight: Tensor, bias: Tensor | None, y: Tensor, k: int,
                     log_q: Tensor, generator: torch.Generator | None = None,
                     excluded: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """Sampled-softmax estimate of log p(y) for training: k negatives shared by the batch,
    drawn from Q (``log_q`` [D], log-probabilities) with replacement; the negatives' logits
    corrected by −log(k·Q), the target's not; a negative equal to a row's target (an
    accidental hit) or excluded at that row is removed from that row's normaliser. The
    normaliser exp(z_y) + Σ_negatives exp(z_j)/(k·Q_j) is then unbiased for the full one
    (the negatives estimate the sum over the other items). Correcting the target's logit as
    well, with the hits removed, made it tend to exp(z_y)/(k·Q_y) + Σ_{j≠y} exp(z_j): a fit
    of log p/(1 − p) that got worse as k grew.

    Parameters
    ----------
    h : torch.Tensor, shape (P, d)
        States.
    weight : torch.Tensor, shape (D, d)
        The read-out's weights.
    bias : torch.Tensor, shape (D,), or None
        Its biases.
    y : torch.Tensor, shape (P,)
        The observed items (int64).
    k : int
        Negatives drawn.
    log_q : torch.Tensor, shape (D,)
        The proposal's log-probabilities.
    generator : torch.Generator, optional
        The random stream of the draws (a CPU generator: they are drawn on the CPU).
    excluded : tuple of torch.Tensor, optional
        ``(rows, items)``, each of shape (E,): item ``items[e]`` is impossible at row
        ``rows[e]``.

    Returns
    -------
    torch.Tensor, shape (P,)
        The estimate of log p(y_p) of each row.
    """
    q = log_q.exp()
    neg = torch.multinomial(q.cpu(), k, replacement=True, generator=generator).to(y.device)
    correction = torch.log(torch.tensor(float(k), dtype=h.dtype, device=h.device))
    z_neg = h @ weight[neg].T - (log_q[neg] + correction)  # [P, k]
    z_pos = (h * weight[y]).sum(1)
    if bias is not None:
        z_neg = z_neg + bias[neg]
        z_pos = z_pos + bias[y]
    drop = neg[None, :] == y[:, None]
    if excluded is not None:
        rows, items = excluded
        d = weight.shape[0]
        keys = torch.arange(y.shape[0], device=y.device)[:, None] * d + neg[None, :]
        drop |= torch.isin(keys, rows * d + items)
    z_neg = z_neg.masked_fill(drop, float("-inf"))
    lse = torch.logsumexp(torch.cat([z_pos[:, None], z_neg], dim=1), dim=1)
    return z_pos - lse


def proposals(model: ConditionalModel, train: Sequences, kind: str) -> dict[str, torch.Tensor]:
    """log Q per category target of ``model``: the frequencies in the training sequences
    ``train`` (add-one) or uniform; the sampled softmax draws its negatives from them.

    Parameters
    ----------
    model : ConditionalModel
        The model; its category targets get a proposal, on its device and in its dtype.
    train : Sequences
        The training sequences (their predicted positions are counted).
    kind : {"unigram", "uniform"}
        "uniform", or the training frequencies plus one ("unigram", and any other value).

    Returns
    -------
    dict of str to torch.Tensor
        Per category target, log Q, shape (num_categories,).
    """
    out = {}
    for f in model.target_fields:
        if f.kind != "category":
            continue
        k = cast("Category", f).num_categories
        if kind == "uniform":
            q = torch.full((k,), 1.0 / k, dtype=torch.float64)
        else:
            counts = torch.bincount(train.fields[f.name][train.predicted(f.name)].cpu(),
                                    minlength=k).double() + 1
            q = counts / counts.sum()
        out[f.name] = q.log().to(model.device, next(model.parameters()).dtype)
    return out
