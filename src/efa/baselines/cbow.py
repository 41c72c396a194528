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
    """CBOW over a window of ``window`` positions either side, with a full softmax over the
    categories (the model of this module's docstring).

    Parameters
    ----------
    field : Category
        The one field, a category (the words): the context and the target.
    dim : int, default 32
        Width of the context embeddings c and the center embeddings w.
    window : int, default 2
        The window w: position m's context is the real tokens j with
        1 ≤ ``|j − m|`` ≤ w.

    Raises
    ------
    ValueError
        If ``window`` is not a positive integer.
    """

    def __init__(self, field: Category, dim: int = 32, window: int = 2):
        super().__init__()
        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            raise ValueError(f"window must be a positive integer, got {window!r}")
        self.fields, self.window, self.direction = [field], window, "bidirectional"
        self.context = nn.Embedding(field.num_categories, dim)
        self.center = nn.Linear(dim, field.num_categories, bias=False)
        nn.init.normal_(self.context.weight, std=0.1)

    def weights(self, data: Sequences) -> Tensor:
        """The window weights ω(j, m) of every sequence.

        Parameters
        ----------
        data : Sequences
            The sequences; their padding and unobserved values are never in a window.

        Returns
        -------
        torch.Tensor, shape (B, M, J)
            1 where the real position j is in position m's window
            (1 ≤ ``|j − m|`` ≤ w), 0 elsewhere, in the embeddings' dtype.
        """
        n = data.max_len
        pos = torch.arange(n)
        gap = (pos[:, None] - pos[None, :]).abs()
        near = (gap >= 1) & (gap <= self.window)
        f = self.fields[0]
        present = data.predicted(f.name, scored=False)
        return (near[None] & present[:, None, :]).to(self.context.weight.dtype)

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        """The logits of the category at every position, from the mean of its window's context
        embeddings.

        Parameters
        ----------
        data : Sequences
            The sequences.

        Returns
        -------
        dict of str to torch.Tensor
            The field's name → logits ``w_kᵀ h_m``, shape (B, I, K) with K the number of
            categories (a position with an empty window has h_m = 0).
        """
        f = self.fields[0]
        w = self.weights(data)
        x = torch.where(w.any(1), data.fields[f.name], 0)  # placeholders are never looked up
        h = w @ self.context(x) / w.sum(-1, keepdim=True).clamp(min=1)
        return {f.name: self.center(h)}
