"""The sequence models recommender-systems users run, as ``ConditionalModel`` s, and the ranking
metrics they report.

- ``SASRec`` (Kang & McAuley, 2018): a causal transformer over the previous items; position i
  is predicted from [BOS, x_0 … x_{i−1}] by the dot product of the last state with the (tied)
  item embeddings. Trained with the full-softmax cross-entropy at every position, which is
  exactly the unidirectional log-likelihood that EFA maximises.
- ``BERT4Rec`` (Sun et al., 2019): a bidirectional transformer trained by the cloze task (each
  item replaced by [MASK] with probability ``mask_ratio``, full-softmax cross-entropy at the
  masked positions). Its exact pseudo-likelihood is one masked copy per position (every other
  item visible); unidirectionally, RecBole's next-item prediction: the history x_<i followed by
  [MASK] at i (nothing after it).

Both follow RecBole's published defaults (``properties/model/SASRec.yaml`` and
``BERT4Rec.yaml``: 2 layers, 2 heads, 64-d, inner 256, GELU, LayerNorm eps 1e-12, normal(0.02)
initialisation, dropout 0.5 / 0.2, mask ratio 0.2; Adam lr 1e-3 in ``overall.yaml``), built
from ``torch.nn.TransformerEncoder`` (post-LN, like RecBole's encoder). They are scored by
``efa.evaluate`` on the same positions with the same metric as EFA, and
``Category(distinct=True)`` restricts their support as it does every model's.

:func:`ranking_metrics` gives HR@k and NDCG@k with a full ranking of the last item of each
sequence, for any categorical ``ConditionalModel``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from efa.core.checks import refuse_generic_options
from efa.core.conditional import ConditionalModel
from efa.core.data import Sequences
from efa.core.fields import Category
from efa.training.scoring import check_int, in_batches, scoring_mode

if TYPE_CHECKING:  # for annotations only
    from efa.core.softmax import Sampling

# RecBole's defaults (properties/model/*.yaml, properties/overall.yaml).
RECBOLE = {
    "SASRec": {"layers": 2, "heads": 2, "dim": 64, "inner": 256, "dropout": 0.5},
    "BERT4Rec": {"layers": 2, "heads": 2, "dim": 64, "inner": 256, "dropout": 0.2,
                 "mask_ratio": 0.2},
    "train": {"lr": 1e-3, "batch_size": 2048, "weight_decay": 0.0, "patience": 10},
}


class _Transformer(nn.Module):
    """Item + position embeddings → LayerNorm → dropout → post-LN transformer encoder; logits
    are the states' dot products with the item embeddings (RecBole's SASRec/BERT4Rec). Rows
    0..K−1 of the table are items, row K is [MASK] (BERT4Rec) / [BOS] (SASRec)."""

    def __init__(self, num_items: int, max_len: int, dim: int, layers: int, heads: int,
                 inner: int, dropout: float):
        super().__init__()
        self.num_items = num_items
        self.items = nn.Embedding(num_items + 1, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.norm = nn.LayerNorm(dim, eps=1e-12)
        self.dropout = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(dim, heads, inner, dropout, activation="gelu",
                                           batch_first=True, layer_norm_eps=1e-12)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.apply(_init)
        for m in self.modules():
            if isinstance(m, nn.MultiheadAttention):
                nn.init.normal_(m.in_proj_weight, std=0.02)
                nn.init.zeros_(m.in_proj_bias)

    def forward(self, tokens: Tensor, pad: Tensor | None, causal: bool) -> Tensor:
        """Logits [B, I, K] of token ids [B, I]; ``pad`` [B, I] True at keys to ignore."""
        n = tokens.shape[1]
        x = self.dropout(self.norm(self.items(tokens) + self.pos.weight[:n]))
        mask = nn.Transformer.generate_square_subsequent_mask(n, dtype=x.dtype) if causal \
            else None
        h = self.encoder(x, mask=mask, src_key_padding_mask=pad, is_causal=causal)
        return h @ self.items.weight[: self.num_items].T


def _init(m: nn.Module) -> None:
    """RecBole's ``_init_weights``: normal(0, 0.02) weights, zero biases, unit LayerNorms."""
    if isinstance(m, nn.Linear | nn.Embedding):
        nn.init.normal_(m.weight, std=0.02)
    if isinstance(m, nn.Linear) and m.bias is not None:
        nn.init.zeros_(m.bias)
    if isinstance(m, nn.LayerNorm):
        nn.init.ones_(m.weight)
        nn.init.zeros_(m.bias)


def _tokens(data: Sequences, name: str, mask_id: int) -> Tensor:
    """Item ids with padding and missing items replaced by ``mask_id``."""
    present = data.predicted(name, scored=False)
    return torch.where(present, data.fields[name], mask_id).long()


class SASRec(ConditionalModel):
    """x_i | x_<i ~ Cat(softmax(E h_i)), h_i the causal transformer's state over
    [BOS, x_0, …, x_{i−1}] (unidirectional only).

    Parameters
    ----------
    field : Category
        The one field, the items (K categories), the target.
    max_len : int
        The longest sequence (the number of position embeddings).
    dim : int, default 64
        Width of the item and position embeddings and of the states.
    layers : int, default 2
        Transformer layers.
    heads : int, default 2
        Attention heads per layer.
    inner : int, default 256
        Width of each layer's feed-forward network.
    dropout : float, default 0.5
        Dropout of the embeddings and in every layer (RecBole's default for SASRec).
    """

    def __init__(self, field: Category, max_len: int, dim: int = 64, layers: int = 2,
                 heads: int = 2, inner: int = 256, dropout: float = 0.5):
        super().__init__()
        self.fields, self.max_len, self.direction = [field], max_len, "unidirectional"
        self.net = _Transformer(field.num_categories, max_len, dim, layers, heads, inner,
                                dropout)

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        """The logits of the item at every position, from the items before it.

        Parameters
        ----------
        data : Sequences
            The sequences (a missing item enters the history as [BOS]'s token).

        Returns
        -------
        dict of str to torch.Tensor
            The field's name → logits E h_i, shape (B, I, K).
        """
        f = cast(Category, self.fields[0])
        k = f.num_categories
        x = _tokens(data, f.name, k)
        shifted = torch.cat([torch.full_like(x[:, :1], k), x[:, :-1]], dim=1)  # [BOS] first
        # Causal: real positions never see the padding at the end, so no key mask is needed.
        return {f.name: self.net(shifted, None, causal=True)}


class BERT4Rec(ConditionalModel):
    """Bidirectional cloze transformer. ``direction`` only says how it is *scored*: one masked
    copy per position (bidirectional, the exact pseudo-likelihood) or the history followed by
    [MASK] (unidirectional, RecBole's next-item prediction). Training is the cloze task.

    Parameters
    ----------
    field : Category
        The one field, the items (K categories), the target.
    max_len : int
        The longest sequence (the number of position embeddings).
    direction : {"bidirectional", "unidirectional"}
        How it is scored (above).
    dim : int, default 64
        Width of the item and position embeddings and of the states.
    layers : int, default 2
        Transformer layers.
    heads : int, default 2
        Attention heads per layer.
    inner : int, default 256
        Width of each layer's feed-forward network.
    dropout : float, default 0.2
        Dropout of the embeddings and in every layer.
    mask_ratio : float, default 0.2
        The probability that the cloze task masks a predicted item, in (0, 1).
    chunk : int, default 2048
        Masked copies per forward pass when scoring.

    Raises
    ------
    ValueError
        If ``mask_ratio`` is not in (0, 1), or ``chunk`` is not a positive integer.
    """

    own_objective = True  # see ConditionalModel.own_objective

    def __init__(self, field: Category, max_len: int, direction: str = "bidirectional",
                 dim: int = 64, layers: int = 2, heads: int = 2, inner: int = 256,
                 dropout: float = 0.2, mask_ratio: float = 0.2, chunk: int = 2048):
        super().__init__()
        if not 0 < mask_ratio < 1:
            raise ValueError(f"mask_ratio must be in (0, 1), got {mask_ratio}")
        check_int("chunk", chunk, 1)
        self.fields, self.max_len, self.direction = [field], max_len, direction
        self.mask_ratio, self.chunk = mask_ratio, chunk
        self.net = _Transformer(field.num_categories, max_len, dim, layers, heads, inner,
                                dropout)

    def natural_params_at(self, data: Sequences, at: dict[str, Tensor]) -> dict[str, Tensor]:
        """The logits at the asked positions, each from its own copy of the sequence with that
        position masked (and, unidirectionally, the positions after it hidden).

        Parameters
        ----------
        data : Sequences
            The sequences.
        at : dict of str to torch.Tensor
            The field's name → where to predict, bool of shape (B, I).

        Returns
        -------
        dict of str to torch.Tensor
            The field's name → logits, shape (P, K), at the P asked positions in the order of
            ``at[name].nonzero()``, support restrictions applied.
        """
        f = cast(Category, self.fields[0])
        k = f.num_categories
        x = _tokens(data, f.name, k)
        pad = ~data.valid()
        out = {}
        for name, m in at.items():
            b_idx, i_idx = m.nonzero(as_tuple=True)
            etas = []
            for start in range(0, len(b_idx), self.chunk):
                b, i = b_idx[start : start + self.chunk], i_idx[start : start + self.chunk]
                rows = torch.arange(len(b))
                tokens, keys = x[b].clone(), pad[b].clone()
                tokens[rows, i] = k  # the copy where position i is masked
                if self.direction == "unidirectional":  # and nothing after it
                    keys |= torch.arange(x.shape[1])[None] > i[:, None]
                etas.append(self.net(tokens, keys, causal=False)[rows, i])
            eta = torch.cat(etas) if etas else self.net.pos.weight.new_zeros(0, k)
            out[name] = self.restrict(name, data, m, eta)
        return out

    def loss(self, data: Sequences, check: bool = False, weights: Tensor | None = None,
             counts: dict[str, int] | None = None,
             sampling: Sampling | None = None) -> Tensor:
        """The cloze task in training mode (each predicted item masked with probability
        ``mask_ratio``; at least one per batch); the exact pseudo-likelihood otherwise.

        Parameters
        ----------
        data : Sequences
            The batch.
        check : bool, default False
            Check ``data`` against the model's fields first.
        weights : torch.Tensor, optional
            Per-sequence weights, as :meth:`efa.ConditionalModel.loss` takes them; refused in
            training mode (the cloze task is an objective of its own).
        counts : dict of str to int, optional
            Data-parallel counts, as for ``weights``.
        sampling : Sampling, optional
            The sampled softmax: refused in training mode.

        Returns
        -------
        torch.Tensor
            A scalar: in training mode the mean cross-entropy at the masked positions (over
            the ``distinct`` support given the unmasked items), otherwise
            :meth:`efa.ConditionalModel.loss`.

        Raises
        ------
        ValueError
            If ``weights``, ``counts`` or ``sampling`` is given in training mode.
        """
        if not self.training:
            return super().loss(data, check, weights, counts, sampling)
        refuse_generic_options(self, weights, counts, sampling)
        if check:
            self.check(data)
        f = cast(Category, self.fields[0])
        k = f.num_categories
        x = _tokens(data, f.name, k)
        pred = data.predicted(f.name)
        masked = pred & (torch.rand(pred.shape) < self.mask_ratio)
        if not masked.any():
            masked.view(-1)[pred.view(-1).nonzero()[torch.randint(int(pred.sum()), (1,))]] = True
        logits = self.net(torch.where(masked, k, x), ~data.valid(), causal=False)[masked]
        if getattr(f, "distinct", False):  # the support given what the input shows
            shown = data.valid() & ~masked & data.observed.get(f.name, data.valid())
            onehot = F.one_hot(torch.where(shown, x, 0), k) * shown[..., None]
            seen = onehot.sum(1, keepdim=True).expand(-1, x.shape[1], -1)[masked] > 0
            logits = f.restrict(logits, seen)
        return F.cross_entropy(logits, data.fields[f.name][masked].long())


# --------------------------------------------------------------------------- ranking


@torch.no_grad()
def check_cut_off(f: object, k: object) -> Category:
    """``f`` as a category whose top ``k`` items can be ranked, or a ValueError saying why.

    Parameters
    ----------
    f : Field
        The ranked field.
    k : int
        The cut-off.

    Returns
    -------
    Category
        ``f``.

    Raises
    ------
    ValueError
        If ``f`` is not a category or ``k`` is not an integer in 1..its number of items.
    """
    if not isinstance(f, Category):
        raise ValueError(f"field {getattr(f, 'name', f)!r} is not a category: only items are "
                         "ranked")
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 1 <= k <= f.num_categories:
        raise ValueError(f"k must be an integer between 1 and the catalogue's "
                         f"{f.num_categories} items, got {k!r}")
    return f


def ranking_metrics(model: ConditionalModel, data: Sequences, name: str | None = None,
                    k: int = 10, batch_size: int = 1024) -> dict[str, float]:
    """HR@k and NDCG@k of the last item of every sequence, ranked against *all* items by the
    model's conditional given the rest of the sequence (every earlier item; a ``distinct``
    field's support excludes them). Ties count against the model (rank = number of other
    items scored at least as high), so a constant score gets no hit.

    Parameters
    ----------
    model : ConditionalModel
        A model of a categorical target, scored in evaluation mode without gradients.
    data : Sequences
        The sequences; those whose last item is not predicted are left out.
    name : str, optional
        The target field (default: the model's first).
    k : int, default 10
        The cut-off of the ranking.
    batch_size : int, default 1024
        Sequences per forward pass.

    Returns
    -------
    dict of str to float
        ``"HR@k"``: the fraction of last items ranked in the top k; ``"NDCG@k"``: the mean of
        1 / log2(rank + 2) over them (0 outside the top k), with k the cut-off's value.

    Raises
    ------
    ValueError
        If the field is not a category, ``k`` is not an integer between 1 and the catalogue's
        size (a cut-off at the whole catalogue would count every item as a hit), or no
        sequence has its last item predicted.
    FloatingPointError
        If the model gives a NaN score (naming the sequence).
    """
    f = check_cut_off(model.target(name), k)
    hits, gains = [], []
    with scoring_mode(model, data):
        for idx, batch in in_batches(data, batch_size, model.device):
            last = torch.zeros_like(batch.valid())
            last[torch.arange(len(batch), device=last.device), batch.lengths - 1] = True
            last &= batch.predicted(f.name)
            eta = model.natural_params_at(batch, {f.name: last})[f.name]
            nan = eta.isnan().any(1)  # a NaN score would rank as a hit, or drop out
            if bool(nan.any()):
                rows = last.any(1).nonzero().flatten().cpu()
                seq = int(idx[rows[int(nan.nonzero()[0, 0])]])
                raise FloatingPointError(f"ranking_metrics: NaN scores for field {f.name!r} "
                                         f"at the last position of sequence {seq}")
            y = batch.fields[f.name][last].long()
            true = eta.gather(1, y[:, None])
            rank = (eta >= true).sum(1) - 1
            hits.append((rank < k).double())
            gains.append(torch.where(rank < k, 1 / torch.log2(rank.double() + 2), 0.0))
    hit, gain = torch.cat(hits), torch.cat(gains)
    if len(hit) == 0:
        raise ValueError(f"no sequence has its last {f.name!r} item predicted: nothing to rank")
    return {f"HR@{k}": float(hit.mean()), f"NDCG@{k}": float(gain.mean())}
