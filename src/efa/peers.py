"""The models a statistician fits first to sequences of items, as ``ConditionalModel`` s.

They share EFA's likelihood API, so ``efa.fit`` trains them and ``efa.evaluate`` scores them on
exactly the same masked positions with the same metric:

- ``Unigram``: p(x_i) = training frequency (add-``smoothing`` counts); ignores the context.
- ``ContextLogit``: a multinomial logit (a GLM) on the counts of the context items, plus
  one-hot masked position and, bidirectionally, one-hot sequence length. Unidirectionally the
  context is the previous items and the length is not used (it is not known yet).
- ``RatingGLM``: a Poisson GLM for a value given its item: an effect per item (alone: the
  per-item mean), plus the bag of context (item, value) pairs as fractions of the context and
  one-hot position (+ length bidirectionally).

Regularisation is the optimiser's weight decay, chosen on validation by the experiments.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from efa.baselines import context_sum
from efa.data import Sequences
from efa.fields import Category, Value
from efa.model import ConditionalModel


class Unigram(ConditionalModel):
    """Context-free frequencies; ``Unigram.from_data`` is the (smoothed) maximum likelihood."""

    def __init__(self, field: Category, counts: Tensor, smoothing: float = 1.0):
        super().__init__()
        self.fields = [field]
        probs = (counts.double() + smoothing) / (counts.double().sum() + smoothing * len(counts))
        self.register_buffer("log_probs", probs.log().float())

    @classmethod
    def from_data(cls, field: Category, data: Sequences, smoothing: float = 1.0) -> Unigram:
        x = data.fields[field.name][data.predicted(field.name)]
        return cls(field, torch.bincount(x, minlength=field.num_categories), smoothing)

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        f = self.fields[0]
        shape = (*data.fields[f.name].shape, f.num_categories)
        return {f.name: self.log_probs.expand(shape)}


class _Design(nn.Module):
    """The additive design shared by the GLMs: a weight vector per masked position and per
    sequence length (one-hot features), each mapping to ``out`` natural-parameter columns."""

    def __init__(self, out: int, max_len: int, direction: str):
        super().__init__()
        self.direction = direction
        self.intercept = nn.Parameter(torch.zeros(out))
        self.pos = nn.Embedding(max_len, out)
        nn.init.zeros_(self.pos.weight)
        # Unidirectionally the length of the sequence is in the future: leave it out.
        self.length = nn.Embedding(max_len + 1, out) if direction == "bidirectional" else None
        if self.length is not None:
            nn.init.zeros_(self.length.weight)

    def forward(self, data: Sequences) -> Tensor:
        width = data.max_len
        out = self.intercept + self.pos.weight[:width]
        if self.length is not None:
            out = out + self.length(data.lengths)[:, None]
        return out


class ContextLogit(ConditionalModel):
    """x_i | context ~ Cat(softmax(W n_c(i) + b_pos(i) [+ b_len(I)])), n = item counts."""

    def __init__(self, field: Category, direction: str, max_len: int):
        super().__init__()
        self.fields, self.max_len, self.direction = [field], max_len, direction
        k = field.num_categories
        self.weight = nn.Linear(k, k, bias=False)
        nn.init.zeros_(self.weight.weight)  # starts at the uniform model
        self.design = _Design(k, max_len, direction)

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        f = self.fields[0]
        onehot = F.one_hot(data.fields[f.name], f.num_categories).float()
        counts, _ = context_sum(onehot, data.valid(), self.direction)
        return {f.name: self.weight(counts) + self.design(data)}


class RatingGLM(ConditionalModel):
    """Poisson GLM for ``value`` at i: link(b[x_i] + W·bag_c(i) + b_pos(i) [+ b_len(I)]).

    ``bag`` holds the fraction of the context made of each (item, value) pair, so a user's
    rating habits and tastes enter linearly. ``context=False`` keeps only the item effect
    (the per-item mean rating: the GLM on the item one-hot).
    """

    def __init__(
        self,
        item: Category,
        value: Value,
        num_values: int,
        direction: str,
        max_len: int,
        context: bool = True,
    ):
        super().__init__()
        item = Category(item.name, item.num_categories, target=False, dim=item.dim)
        self.fields, self.max_len, self.direction = [item, value], max_len, direction
        self.num_values, self.context = num_values, context
        self.item_effect = nn.Embedding(item.num_categories, 1)
        nn.init.zeros_(self.item_effect.weight)
        if context:
            self.weight = nn.Linear(item.num_categories * num_values, 1, bias=False)
            nn.init.zeros_(self.weight.weight)
            self.design = _Design(1, max_len, direction)

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        item, value = self.fields
        x = data.fields[item.name]
        z = self.item_effect(x)
        if self.context:
            valid = data.valid() & data.observed.get(value.name, data.valid())
            y = torch.where(valid, data.fields[value.name], 0).long()
            pair = F.one_hot(x * self.num_values + y, item.num_categories * self.num_values)
            bag, n = context_sum(pair.float(), valid, self.direction)
            z = z + self.weight(bag / n.clamp(min=1)[..., None]) + self.design(data)
        return {value.name: value.family.link(z)}


class Distinct(ConditionalModel):
    """Any model of a categorical sequence whose items are *distinct* within a sequence (a
    user rates a movie once; a product occurs once per basket): the support of x_i given its
    context excludes the context items, p(x_i = k | c) ∝ exp(η_k) 1[k ∉ c]. This is a base
    measure that depends on the context, so the family stays exponential; the wrapped model's
    natural parameters are kept and only the impossible items are removed."""

    NEG = -1e4  # finite: exp underflows to exactly 0 in float32, and no inf - inf can occur

    def __init__(self, inner: ConditionalModel, direction: str):
        super().__init__()
        self.inner, self.direction = inner, direction
        self.fields, self.max_len = inner.fields, inner.max_len

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        etas = dict(self.inner.natural_params(data))
        for f in self.targets:
            if f.kind != "category":
                continue
            onehot = F.one_hot(data.fields[f.name], f.num_categories).float()
            seen, _ = context_sum(onehot, data.valid(), self.direction)
            etas[f.name] = etas[f.name].masked_fill(seen > 0, self.NEG)
        return etas
