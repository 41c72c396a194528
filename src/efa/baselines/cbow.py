"""Continuous bag of words with a window and a full softmax (no negative sampling), the model
that Wibisono & Wang (UAI 2023) compare bidirectional attention with::

    p(x_m = k | context) = softmax_k( w_kᵀ Σ_j ω(j, m) c_{x_j} / Σ_j ω(j, m) ),
    ω(j, m) = 1(1 ≤ |j − m| ≤ w)

(center embeddings w = ``center``, context embeddings c = ``context``; positions j must be real
tokens of the sentence). The context excludes the center, so masking changes nothing. With
w ≥ the sentence length it is the whole-sentence CBOW, ``CategoricalFM(pooling="mean")``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from efa.core.conditional import ConditionalModel
from efa.core.data import Sequences
from efa.core.fields import Category


class CBOW(ConditionalModel):
    def __init__(self, field: Category, dim: int = 32, window: int = 2):
        super().__init__()
        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            raise ValueError(f"window must be a positive integer, got {window!r}")
        self.fields, self.window, self.direction = [field], window, "bidirectional"
        self.context = nn.Embedding(field.num_categories, dim)
        self.center = nn.Linear(dim, field.num_categories, bias=False)
        nn.init.normal_(self.context.weight, std=0.1)

    def weights(self, data: Sequences) -> Tensor:
        """ω [B, M, J]: 1 on the real positions j with 1 ≤ ``|j − m|`` ≤ w."""
        n = data.max_len
        pos = torch.arange(n)
        gap = (pos[:, None] - pos[None, :]).abs()
        near = (gap >= 1) & (gap <= self.window)
        return (near[None] & data.valid()[:, None, :]).to(self.context.weight.dtype)

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        f = self.fields[0]
        w = self.weights(data)
        h = w @ self.context(data.fields[f.name]) / w.sum(-1, keepdim=True).clamp(min=1)
        return {f.name: self.center(h)}
