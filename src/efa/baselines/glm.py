"""The models a statistician fits first to sequences of items: GLMs, as ``ConditionalModel`` s
scored by ``efa.evaluate`` on EFA's masked positions, ``Category(distinct=True)`` restricting
their support as it does EFA's:

- ``Unigram``: p(x_i) = training frequency (add-``smoothing`` counts); ignores the context.
- ``ContextLogit``: a multinomial logit on the counts of the context items, plus one-hot
  masked position and (bidirectionally, optionally) one-hot length; unidirectionally the
  context is the previous items and the length is unknown.
- ``RatingGLM``: a Poisson GLM for a value given its item: an effect per item (alone: the
  per-item mean), the bag of context (item, value) pairs as fractions of the context, and
  one-hot position (+ length bidirectionally).

Both GLMs are convex: :func:`~efa.baselines.convex.fit_convex` fits them by float64 L-BFGS with
an L2 penalty :func:`~efa.baselines.convex.select_l2` picks on validation data.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from efa.baselines.fm import context_sum
from efa.core.checks import refuse_sampling
from efa.core.conditional import ConditionalModel
from efa.core.context import context_pairs
from efa.core.data import Sequences
from efa.core.fields import Category, Value
from efa.deprecation import moved_out

if TYPE_CHECKING:  # for annotations only
    from efa.core.softmax import Sampling

__getattr__ = moved_out(__name__)  # names moved out: efa.deprecation.MOVED_NAMES


class Unigram(ConditionalModel):
    """Context-free frequencies; ``Unigram.from_data`` is the (smoothed) maximum likelihood.

    p(x_i = k) = (n_k + s) / (Σ_k n_k + s·K), whatever the context (with
    ``Category(distinct=True)``, renormalised over the items not in the context).

    Parameters
    ----------
    field : Category
        The one field, a category, the target.
    counts : torch.Tensor, shape (K,)
        The count n_k of each category.
    smoothing : float, default 1.0
        The count s added to every category.
    direction : {"bidirectional", "unidirectional"}
        The context a ``distinct`` field's support excludes: every other position, or the
        earlier ones.

    Raises
    ------
    ValueError
        If ``counts`` is not one count >= 0 per category (``from_data``: a value is not one).
    """

    log_probs: Tensor  # a buffer, declared for the type checker

    def __init__(self, field: Category, counts: Tensor, smoothing: float = 1.0,
                 direction: str = "bidirectional"):
        super().__init__()
        counts = torch.as_tensor(counts)
        if counts.shape != (field.num_categories,) or not bool((counts >= 0).all()):
            raise ValueError(f"Unigram: counts must be one number >= 0 per category of "
                             f"{field.name!r} ({field.num_categories}), got {counts}")
        self.fields, self.direction = [field], direction
        probs = (counts.double() + smoothing) / (counts.double().sum() + smoothing * len(counts))
        self.register_buffer("log_probs", probs.log().float())

    @classmethod
    def from_data(cls, field: Category, data: Sequences, smoothing: float = 1.0,
                  direction: str = "bidirectional") -> Unigram:
        """The unigram of the categories at the predicted positions of ``data``.

        Parameters
        ----------
        field : Category
            The one field, a category.
        data : Sequences
            The training sequences, whose predicted values of ``field`` are counted.
        smoothing : float, default 1.0
            The count added to every category.
        direction : {"bidirectional", "unidirectional"}
            As for :class:`Unigram`.

        Returns
        -------
        Unigram
            The model with the counts of ``data``.
        """
        x = data.fields[field.name][data.predicted(field.name)]
        if bool((out := (x < 0) | (x >= field.num_categories)).any()):
            raise ValueError(f"Unigram.from_data: {field.name!r} holds {int(x[out][0])}, not one "
                             f"of its {field.num_categories} categories")
        counts = torch.bincount(x, minlength=field.num_categories)
        return cls(field, counts, smoothing, direction)

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        """The log-frequencies as the logits at every position.

        Parameters
        ----------
        data : Sequences
            The sequences (only their shape is read).

        Returns
        -------
        dict of str to torch.Tensor
            The field's name → the log-frequencies, shape (B, I, K) (a broadcast view).
        """
        f = cast(Category, self.fields[0])
        shape = (*data.fields[f.name].shape, f.num_categories)
        return {f.name: self.log_probs.expand(shape)}

    def log_probs_at(self, data: Sequences, at: dict[str, Tensor], base_measure: bool = True,
                     sampling: Sampling | None = None) -> dict[str, Tensor]:
        """log p(y) without [positions × D] logits (any vocabulary size): the frequency, and
        with ``distinct`` the renormalisation over the items not in the context.

        Parameters
        ----------
        data : Sequences
            The sequences.
        at : dict of str to torch.Tensor
            The field's name → where to score, bool of shape (B, I).
        base_measure : bool, default True
            Unused: a category has no base measure (kept for the common signature).
        sampling : Sampling, optional
            Must be None: the unigram does not train by the sampled softmax.

        Returns
        -------
        dict of str to torch.Tensor
            The field's name → log p(y_i), shape (P,), at the P asked positions in the order
            of ``at[name].nonzero()``.

        Raises
        ------
        ValueError
            If ``sampling`` is given.
        """
        refuse_sampling(self, sampling)
        f = cast(Category, self.fields[0])
        m = at[f.name]
        lp = self.log_probs[data.fields[f.name][m]]
        if f.distinct:
            rows, items = context_pairs(data, f.name, self.direction, m)
            seen = torch.zeros_like(lp).index_add_(0, rows, self.log_probs[items].exp())
            lp = lp - torch.log1p(-seen.clamp(max=1 - 1e-12))
        return {f.name: lp}


class _Design(nn.Module):
    """The additive design shared by the GLMs: a weight vector per masked position and
    (optionally) per sequence length (one-hot features), each mapping to ``out`` columns."""

    def __init__(self, out: int, max_len: int, length: bool):
        super().__init__()
        self.intercept = nn.Parameter(torch.zeros(out))
        self.pos = nn.Embedding(max_len, out)
        nn.init.zeros_(self.pos.weight)
        self.length = nn.Embedding(max_len + 1, out) if length else None
        if self.length is not None:  # every effect starts at 0
            nn.init.zeros_(self.length.weight)

    def forward(self, data: Sequences) -> Tensor:
        out = self.intercept + self.pos.weight[: data.max_len]
        if self.length is not None:
            out = out + self.length(data.lengths)[:, None]
        return out

    def penalised(self) -> list[Tensor]:
        return [self.pos.weight] + ([self.length.weight] if self.length is not None else [])


class ContextLogit(ConditionalModel):
    """x_i | context ~ Cat(softmax(W n_c(i) + b + b_pos(i) [+ b_len(I)])), n = item counts.

    ``length`` adds the one-hot sequence length (bidirectional only: unidirectionally the
    length is in the future). Every weight starts at zero (the uniform model); fit it with
    :func:`efa.baselines.convex.fit_convex` or :func:`efa.baselines.convex.select_l2`.

    Parameters
    ----------
    field : Category
        The one field, a category, the target; its K categories are both the counted context
        items and the predicted classes.
    direction : {"bidirectional", "unidirectional"}
        The context: every other position, or the earlier ones.
    max_len : int
        The longest sequence (the number of position effects).
    length : bool, default False
        Add a one-hot effect of the sequence length (bidirectional only).

    Raises
    ------
    ValueError
        If ``length`` is asked for unidirectionally.
    """

    def __init__(self, field: Category, direction: str, max_len: int, length: bool = False):
        super().__init__()
        if length and direction != "bidirectional":
            raise ValueError("the sequence length is unknown unidirectionally: length=False")
        self.fields, self.max_len, self.direction = [field], max_len, direction
        k = field.num_categories
        self.weight = nn.Linear(k, k, bias=False)
        nn.init.zeros_(self.weight.weight)  # starts at the uniform model
        self.design = _Design(k, max_len, length)

    def context_term(self, data: Sequences) -> Tensor:
        """W n_c(i): the sum of W's columns of the context items, by a gather and a
        (cumulative) sum rather than a product with one-hot counts (K times fewer operations).

        Parameters
        ----------
        data : Sequences
            The sequences; items that are not observed are not in any context.

        Returns
        -------
        torch.Tensor, shape (B, I, K)
            The context's contribution to the logits at every position.
        """
        f = self.fields[0]
        present = data.predicted(f.name, scored=False)
        x = torch.where(present, data.fields[f.name], 0)
        cols = F.embedding(x, self.weight.weight.T) * present[..., None]  # [B, I, K]: W[:, x_j]
        if self.direction == "bidirectional":
            return cols.sum(1, keepdim=True) - cols
        return cols.cumsum(1) - cols

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        """The logits at every position: the context term plus the intercept, position and
        (optionally) length effects.

        Parameters
        ----------
        data : Sequences
            The sequences.

        Returns
        -------
        dict of str to torch.Tensor
            The field's name → logits, shape (B, I, K).
        """
        return {self.fields[0].name: self.context_term(data) + self.design(data)}

    def penalised(self) -> dict[str, list[Tensor]]:
        """The penalised parameters by group: the weights, and the position / length effects
        (penalised at a smaller ratio, see ``select_l2``).

        Returns
        -------
        dict of str to list of torch.Tensor
            ``"weights"`` → [W], ``"design"`` → the position (and length) effects; the
            intercept is not penalised.
        """
        return {"weights": [self.weight.weight], "design": self.design.penalised()}

    def objective(self, data: Sequences) -> Callable[[], Tensor]:
        """``loss(data)`` as a function of the current weights, with the design (context counts
        at the scored positions, their position / length group, the distinct support) built
        once: what the full-batch solver evaluates thousands of times. The loss and its
        gradient come from ``_ChunkedSoftmaxNLL``.

        Parameters
        ----------
        data : Sequences
            The training sequences; the loss is the mean over their predicted positions.

        Returns
        -------
        callable
            A function of no arguments that gives the mean negative log-likelihood (a scalar
            tensor, with the gradient in closed form) at the current weights.
        """
        f = cast(Category, self.fields[0])
        at = data.predicted(f.name)
        present = data.predicted(f.name, scored=False)
        x = torch.where(present, data.fields[f.name], 0)
        onehot = F.one_hot(x, f.num_categories).to(self.weight.weight.dtype) * present[..., None]
        counts = (onehot.sum(1, keepdim=True) - onehot if self.direction == "bidirectional"
                  else onehot.cumsum(1) - onehot)[at]  # [P, K]: fixed during the fit
        pos = at.nonzero()[:, 1]
        length = data.lengths[:, None].expand_as(at)[at]
        y = data.fields[f.name][at]
        seen = counts > 0 if getattr(f, "distinct", False) else None
        # The design's effects add one row per (position, length) pair: index those pairs.
        pairs, group = torch.unique(torch.stack([pos, length], 1), dim=0, return_inverse=True)
        blocks = _sparse_blocks(counts, _ChunkedSoftmaxNLL.BLOCK)

        def loss() -> Tensor:
            d = self.design.intercept + self.design.pos.weight[pairs[:, 0]]
            if self.design.length is not None:
                d = d + self.design.length.weight[pairs[:, 1]]
            return _ChunkedSoftmaxNLL.apply(self.weight.weight, d, blocks, group, y, seen, f)

        return loss


def _sparse_blocks(counts: Tensor, size: int) -> list[tuple]:
    """``counts`` [P, K] in blocks of ``size`` rows, each as the (items, counts, offsets) of
    ``F.embedding_bag`` and its transpose in CSR: a context holds a few of the K items."""
    out = []
    for s in range(0, len(counts), size):
        c = counts[s:s + size]
        rows, items = c.nonzero(as_tuple=True)
        offsets = torch.searchsorted(rows, torch.arange(len(c)))
        with warnings.catch_warnings():  # "sparse CSR support is in beta": used read-only here
            warnings.simplefilter("ignore", UserWarning)
            transposed = c.T.contiguous().to_sparse_csr()
        out.append((items, c[rows, items], offsets, transposed))
    return out


class _ChunkedSoftmaxNLL(torch.autograd.Function):
    """mean_i −log softmax(W c_i + D[g_i])[y_i] (over the ``distinct`` support when ``seen``
    is given) and its closed-form gradient, (softmax − onehot(y)) ⊗ c_i, accumulated over
    blocks of rows (:func:`_sparse_blocks`): the [P, K] logits never exist at once, and the
    sparse counts enter by an embedding bag and a sparse product. On Instacart (206k positions
    × 63 items) a full-batch evaluation is 3–4× faster than whole-array autograd, whose large
    temporaries are mostly allocation and memory traffic (benchmarks/logit_objective.py)."""

    BLOCK = 4096

    @staticmethod
    def forward(ctx, weight, design, blocks, group, y, seen, field):
        total = weight.new_zeros(())
        table = weight.T.contiguous()  # row j: W's column for context item j
        g_table, g_design = torch.zeros_like(table), torch.zeros_like(design)
        start = 0
        for items, counts, offsets, counts_t in blocks:
            rows, start = slice(start, start + len(offsets)), start + len(offsets)
            g, t = group[rows], y[rows]
            eta = F.embedding_bag(items, table, offsets, mode="sum",
                                  per_sample_weights=counts) + design[g]
            if seen is not None:
                eta = field.restrict(eta, seen[rows])
            log_p = torch.log_softmax(eta, 1)
            total -= log_p.gather(1, t[:, None]).sum()
            residual = log_p.exp_()
            residual[torch.arange(len(t)), t] -= 1.0
            if seen is not None:  # (as masked_fill's gradient: none through excluded logits)
                residual.masked_fill_(seen[rows], 0.0)
            g_table += torch.sparse.mm(counts_t, residual)
            g_design.index_add_(0, g, residual)
        n = max(len(y), 1)
        ctx.save_for_backward(g_table.T / n, g_design / n)
        return total / n

    @staticmethod
    def backward(ctx, grad):
        g_weight, g_design = ctx.saved_tensors
        return grad * g_weight, grad * g_design, None, None, None, None, None


class RatingGLM(ConditionalModel):
    """Poisson GLM for ``value`` at i: link(b[x_i] + W·bag_c(i) + b_pos(i) [+ b_len(I)]).

    ``bag`` holds the fraction of the context made of each (item, value) pair, so a user's
    rating habits and tastes enter linearly. ``context=False`` keeps only the item effect
    (the per-item mean rating: the GLM on the item one-hot). Every weight starts at zero; fit
    it with :func:`efa.baselines.convex.fit_convex` or :func:`efa.baselines.convex.select_l2`.

    Parameters
    ----------
    item : Category
        The item field; the model keeps a copy with ``target=False`` (items are context only).
    value : Value
        The value field, the target (the experiments' shifted Poisson), with integer values
        0, …, ``num_values`` − 1 where observed.
    num_values : int
        The number of distinct values, for the (item, value) pairs of the bag.
    direction : {"bidirectional", "unidirectional"}
        The context: every other position, or the earlier ones; bidirectionally the one-hot
        sequence length is added.
    max_len : int
        The longest sequence (the number of position effects).
    context : bool, default True
        Add the bag of context pairs and the position (and length) effects; False keeps only
        the item effect.
    """

    def __init__(self, item: Category, value: Value, num_values: int, direction: str,
                 max_len: int, context: bool = True):
        super().__init__()
        item = Category(item.name, item.num_categories, target=False, dim=item.dim)
        self.fields, self.max_len, self.direction = [item, value], max_len, direction
        self.num_values, self.context = num_values, context
        self.item_effect = nn.Embedding(item.num_categories, 1)
        nn.init.zeros_(self.item_effect.weight)
        if context:
            self.weight = nn.Linear(item.num_categories * num_values, 1, bias=False)
            nn.init.zeros_(self.weight.weight)
            self.design = _Design(1, max_len, direction == "bidirectional")

    def bag(self, data: Sequences) -> Tensor:
        """The context's (item, value) pairs as fractions of the context.

        Parameters
        ----------
        data : Sequences
            The sequences; positions whose value is not observed are not in any context.

        Returns
        -------
        torch.Tensor, shape (B, I, items × values)
            At every position, the fraction of its context made of each (item, value) pair
            (zeros for an empty context).

        Raises
        ------
        ValueError
            If an observed value lies outside 0, …, ``num_values`` − 1.
        """
        item, value = cast(Category, self.fields[0]), self.fields[1]
        x = data.fields[item.name]
        valid = data.predicted(value.name, scored=False)
        y = torch.where(valid, data.fields[value.name], 0).long()
        if bool((out := valid & ((y < 0) | (y >= self.num_values))).any()):  # another pair
            s, i = (int(v) for v in out.nonzero()[0])
            raise ValueError(f"RatingGLM: {value.name!r} is {int(y[s, i])} at sequence {s}, "
                             f"position {i}, outside 0..{self.num_values - 1}")
        pair = F.one_hot(x * self.num_values + y, item.num_categories * self.num_values)
        bag, n = context_sum(pair.to(self.item_effect.weight.dtype), valid, self.direction)
        return bag / n.clamp(min=1)[..., None]

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        """The value's natural parameter at every position.

        Parameters
        ----------
        data : Sequences
            The sequences.

        Returns
        -------
        dict of str to torch.Tensor
            The value field's name → η = link(b[x_i] + W·bag_c(i) + …), shape (B, I, 1).
        """
        item, value = self.fields[0], cast(Value, self.fields[1])
        z = self.item_effect(data.fields[item.name])
        if self.context:
            z = z + self.weight(self.bag(data)) + self.design(data)
        return {value.name: value.family.link(z)}

    def objective(self, data: Sequences) -> Callable[[], Tensor]:
        """``loss(data)`` as a function of the weights, the design built once (see
        ``ContextLogit.objective``).

        Parameters
        ----------
        data : Sequences
            The training sequences; the loss is the mean over their predicted positions.

        Returns
        -------
        callable
            A function of no arguments that gives the mean negative log-likelihood (a scalar
            tensor) at the current weights.
        """
        item, value = self.fields[0], cast(Value, self.fields[1])
        at = data.predicted(value.name)
        x, y = data.fields[item.name][at], data.fields[value.name][at]
        bag = self.bag(data)[at] if self.context else None
        pos = at.nonzero()[:, 1]
        length = data.lengths[:, None].expand_as(at)[at]

        def loss() -> Tensor:
            z = self.item_effect(x)
            if self.context:
                z = z + self.weight(bag) + self.design.intercept + self.design.pos.weight[pos]
                if self.design.length is not None:
                    z = z + self.design.length.weight[length]
            return -value.family.log_prob(y, value.family.link(z)).mean()

        return loss

    def penalised(self) -> dict[str, list[Tensor]]:
        """The penalised parameters by group: the context weights, and the position / length
        effects (penalised at a smaller ratio, see ``select_l2``); none without context.

        Returns
        -------
        dict of str to list of torch.Tensor
            ``"weights"`` → [W], ``"design"`` → the position (and length) effects; empty with
            ``context=False`` (the item effects play the intercept's part and are free).
        """
        return ({"weights": [self.weight.weight], "design": self.design.penalised()}
                if self.context else {})
