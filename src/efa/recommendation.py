"""Recommendations from a fitted model: the k most probable items at a new position after each
sequence (the next item for a unidirectional model; a masked slot at the end for a
bidirectional one), or at positions the caller asks for; and the full-ranking HR@k / NDCG@k
of held-out items (:func:`efa.baselines.recsys.ranking_metrics`, re-exported here)."""

from __future__ import annotations

import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor

from efa.baselines.recsys import check_cut_off, ranking_metrics
from efa.core.checks import refuse_padding
from efa.core.conditional import ConditionalModel
from efa.core.context import context_items
from efa.core.data import Sequences
from efa.core.fields import Category
from efa.training.scoring import check_bool, in_batches, scoring_mode

__all__ = ["ranking_metrics", "recommend"]


def _with_next_slot(model: ConditionalModel, data: Sequences) -> tuple[Sequences, Tensor]:
    """``data`` with one more position after each sequence's end, every field unobserved there,
    and the mask of those positions."""
    if model.max_len is not None and int(data.lengths.max()) >= model.max_len:
        b = int((data.lengths >= model.max_len).nonzero()[0, 0])
        raise ValueError(f"sequence {b} already has the model's max_len of {model.max_len} "
                         "positions: there is no next position to recommend for")
    width = int(data.lengths.max()) + 1
    pad = width - data.max_len
    fields = {k: F.pad(v[:, :width], (0, 0) * (v.dim() - 2) + (0, max(pad, 0)))
              for k, v in data.fields.items()}
    at = torch.zeros(len(data), width, dtype=torch.bool)
    at[torch.arange(len(data)), data.lengths] = True
    observed = {}
    for f in model.fields:
        if f.kind != "attribute":  # every value at the new slot is unknown, context fields too
            own = data.observed.get(f.name, data.valid())[:, :width]
            observed[f.name] = F.pad(own, (0, max(pad, 0))) & ~at
    return Sequences(fields, data.lengths + 1, observed), at


def _top_k(model: ConditionalModel, f: Category, batch: Sequences, here: Tensor, idx: Tensor,
           k: int, exclude_seen: bool) -> pd.DataFrame:
    """One batch's rows of :func:`recommend` (``idx``: the batch's sequence ids)."""
    eta = model.natural_params_at(batch, {f.name: here})[f.name]
    logp = torch.log_softmax(eta.double(), -1)
    if exclude_seen:
        # the model's own context: a unidirectional model's is the items before the position
        seen = context_items(batch, f.name, f.num_categories,
                             getattr(model, "direction", "bidirectional"), here)
        logp = logp.masked_fill(seen, -torch.inf)
    logp = logp.cpu()
    rows, pos = here.cpu().nonzero(as_tuple=True)
    rows = idx.cpu()[rows]
    left = torch.isfinite(logp).sum(-1)
    if (left < k).any():
        r = int((left < k).nonzero()[0, 0])
        raise ValueError(f"sequence {int(rows[r])}, position {int(pos[r])}: only {int(left[r])} "
                         f"items are left to recommend (seen ones excluded), fewer than k={k}")
    # a stable sort of (−log p) breaks ties by the smaller item id
    order = torch.sort(-logp, dim=-1, stable=True).indices[:, :k]
    return pd.DataFrame({
        "sequence": rows.repeat_interleave(k).numpy(),
        "position": pos.repeat_interleave(k).numpy(),
        "rank": torch.arange(1, k + 1).repeat(len(rows)).numpy(),
        "item": order.reshape(-1).numpy(),
        "probability": logp.gather(1, order).exp().reshape(-1).numpy()})


@torch.no_grad()
def recommend(model: ConditionalModel, data: Sequences, k: int = 10, *,
              field: str | None = None, exclude_seen: bool = True,
              at: Tensor | None = None, batch_size: int = 1024) -> pd.DataFrame:
    """The ``k`` most probable items for each sequence.

    Parameters
    ----------
    model : ConditionalModel
        A fitted model with a category target.
    data : Sequences
        The sequences to recommend for.
    k : int
        Items per sequence, at most the catalogue's size.
    field : str, optional
        The category field (default: the first target).
    exclude_seen : bool
        Leave out the items in the position's context (the items before it for a
        unidirectional model, all the sequence's others for a bidirectional one; a
        ``distinct`` field never proposes them anyway). Probabilities are the model's, not
        renormalised over what is left.
    at : Tensor, optional
        A bool mask [N, I] of the positions to recommend at (default: a new position after each
        sequence's end: the next item of a unidirectional model, a masked slot of a
        bidirectional one).
    batch_size : int
        Sequences scored at a time (memory grows with it times the catalogue).

    Returns
    -------
    pandas.DataFrame
        One row per (sequence, rank): sequence, position, rank (1 = best), item, probability,
        and label where the field has labels. Ties are broken by the smaller item id.

    Examples
    --------
    >>> efa.recommend(model, data, k=3)  # doctest: +SKIP
    """
    f = check_cut_off(model.target(field), k)
    check_bool("exclude_seen", exclude_seen)
    model.check(data)
    if at is None:
        attributes = [g.name for g in model.fields if not g.target and g.kind == "attribute"]
        if attributes:
            raise ValueError(f"the model reads attribute field(s) {attributes}, unknown at a new "
                             "position: add the position to data (its items marked missing) "
                             "and pass at=")
        data, at = _with_next_slot(model, data)
    elif not isinstance(at, Tensor) or at.dtype != torch.bool or at.shape != data.valid().shape:
        raise ValueError(f"at must be a bool tensor of shape {list(data.valid().shape)}")
    at = at.cpu()
    if not at.any():
        raise ValueError("at asks for no position: nothing to recommend")
    refuse_padding(data, at)
    frames = []
    with scoring_mode(model, data):
        for idx, batch in in_batches(data, batch_size, model.device):
            here = at[idx][:, : batch.max_len].to(batch.device)
            if here.any():
                frames.append(_top_k(model, f, batch, here, idx, k, exclude_seen))
    frame = pd.concat(frames, ignore_index=True)
    if f.labels is not None:
        frame["label"] = [f.labels[i] for i in frame["item"]]
    return frame
