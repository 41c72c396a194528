"""The models a statistician fits first to sequences of items: GLMs, as ``ConditionalModel`` s.

They share EFA's likelihood API, so ``efa.evaluate`` scores them on exactly the same masked
positions with the same metric, and ``Category(distinct=True)`` restricts their support as it
does EFA's:

- ``Unigram``: p(x_i) = training frequency (add-``smoothing`` counts); ignores the context.
- ``ContextLogit``: a multinomial logit on the counts of the context items, plus one-hot
  masked position and, optionally (bidirectional only), one-hot sequence length.
  Unidirectionally the context is the previous items and the length is unknown.
- ``RatingGLM``: a Poisson GLM for a value given its item: an effect per item (alone: the
  per-item mean), plus the bag of context (item, value) pairs as fractions of the context and
  one-hot position (+ length bidirectionally).

The logit and the Poisson GLM are convex: :func:`fit_convex` fits them to convergence by
full-batch L-BFGS in float64 with an L2 penalty, and :func:`select_l2` picks the penalty on
validation data (a peer stopped early by a stochastic optimiser is a weaker peer).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from efa.baselines.fm import context_sum
from efa.core.conditional import ConditionalModel, context_pairs, refuse_sampling
from efa.core.data import Sequences
from efa.core.fields import Category, Value

if TYPE_CHECKING:  # for annotations only
    from efa.core.softmax import Sampling

    class _Convex(Protocol):
        """What the convex fitting reads of a GLM (``ContextLogit``, ``RatingGLM``)."""

        def penalised(self) -> dict[str, list[Tensor]]: ...

        def objective(self, data: Sequences) -> Callable[[], Tensor]: ...


class Unigram(ConditionalModel):
    """Context-free frequencies; ``Unigram.from_data`` is the (smoothed) maximum likelihood."""

    log_probs: Tensor  # a buffer, declared for the type checker

    def __init__(self, field: Category, counts: Tensor, smoothing: float = 1.0,
                 direction: str = "bidirectional"):
        super().__init__()
        self.fields, self.direction = [field], direction
        probs = (counts.double() + smoothing) / (counts.double().sum() + smoothing * len(counts))
        self.register_buffer("log_probs", probs.log().float())

    @classmethod
    def from_data(cls, field: Category, data: Sequences, smoothing: float = 1.0,
                  direction: str = "bidirectional") -> Unigram:
        x = data.fields[field.name][data.predicted(field.name)]
        counts = torch.bincount(x, minlength=field.num_categories)
        return cls(field, counts, smoothing, direction)

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        f = cast(Category, self.fields[0])
        shape = (*data.fields[f.name].shape, f.num_categories)
        return {f.name: self.log_probs.expand(shape)}

    def log_probs_at(self, data: Sequences, at: dict[str, Tensor], base_measure: bool = True,
                     sampling: Sampling | None = None) -> dict[str, Tensor]:
        """log p(y) without [positions × D] logits (any vocabulary size): the frequency, and
        with ``distinct`` the renormalisation over the items not in the context."""
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
        if self.length is not None:
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
    length is in the future)."""

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
        """W n_c(i) [B, I, K]: the sum of W's columns of the context items, by a gather and a
        (cumulative) sum rather than a product with one-hot counts (K times fewer operations)."""
        f = self.fields[0]
        present = data.valid() & data.observed.get(f.name, data.valid())
        x = torch.where(present, data.fields[f.name], 0)
        cols = F.embedding(x, self.weight.weight.T) * present[..., None]  # [B, I, K]: W[:, x_j]
        if self.direction == "bidirectional":
            return cols.sum(1, keepdim=True) - cols
        return cols.cumsum(1) - cols

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        return {self.fields[0].name: self.context_term(data) + self.design(data)}

    def penalised(self) -> dict[str, list[Tensor]]:
        """The penalised parameters by group: the weights, and the position / length effects
        (penalised at a smaller ratio, see ``select_l2``)."""
        return {"weights": [self.weight.weight], "design": self.design.penalised()}

    def objective(self, data: Sequences) -> Callable[[], Tensor]:
        """``loss(data)`` as a function of the current weights, with the design (context counts
        at the scored positions, their position / length group, the distinct support) built
        once: what the full-batch solver evaluates thousands of times. The loss and its
        gradient come from :class:`_ChunkedSoftmaxNLL`."""
        f = cast(Category, self.fields[0])
        at = data.predicted(f.name)
        present = data.valid() & data.observed.get(f.name, data.valid())
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
    (the per-item mean rating: the GLM on the item one-hot).
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
        """[B, I, items × values]: the context's (item, value) pairs as fractions."""
        item, value = self.fields
        item = cast(Category, item)
        x = data.fields[item.name]
        valid = data.valid() & data.observed.get(value.name, data.valid())
        y = torch.where(valid, data.fields[value.name], 0).long()
        pair = F.one_hot(x * self.num_values + y, item.num_categories * self.num_values)
        bag, n = context_sum(pair.to(self.item_effect.weight.dtype), valid, self.direction)
        return bag / n.clamp(min=1)[..., None]

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        item, value = self.fields
        value = cast(Value, value)
        z = self.item_effect(data.fields[item.name])
        if self.context:
            z = z + self.weight(self.bag(data)) + self.design(data)
        return {value.name: value.family.link(z)}

    def objective(self, data: Sequences) -> Callable[[], Tensor]:
        """``loss(data)`` as a function of the weights, the design built once (see
        ``ContextLogit.objective``)."""
        item, value = self.fields
        value = cast(Value, value)
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
        effects (penalised at a smaller ratio, see ``select_l2``); none without context."""
        # The item effects play the intercept's part (one per item, many ratings each): free.
        if not self.context:
            return {}
        return {"weights": [self.weight.weight], "design": self.design.penalised()}


# --------------------------------------------------------------------------- convex fitting


@dataclass
class ConvexFit:
    """What :func:`fit_convex` reached: the penalty it used, the L-BFGS iterations, the
    gradient's max-norm and the objective at the end, and whether it met the tolerance."""

    l2: float
    design_ratio: float
    iterations: int
    grad_norm: float
    objective: float
    converged: bool


def penalty(model: ConditionalModel, l2: float, design_ratio: float = 1.0) -> Tensor | float:
    """(l2 / 2)·(‖weights‖² + design_ratio·‖design effects‖²) of ``model.penalised()`` (the
    number 0.0 when nothing is penalised)."""
    groups = cast("_Convex", model).penalised()
    total: Tensor | float
    total = sum(p.pow(2).sum() for p in groups.get("weights", []))
    total = total + design_ratio * sum(p.pow(2).sum() for p in groups.get("design", []))
    return 0.5 * l2 * total


def fit_convex(model: ConditionalModel, train: Sequences, l2: float, design_ratio: float = 1.0,
               max_iter: int = 3000, tol: float = 1e-7) -> ConvexFit:
    """Minimise mean NLL + :func:`penalty` by full-batch L-BFGS (strong Wolfe line search) in
    float64, from the model's current weights, until the gradient's max-norm is below
    ``tol``. The model is left in float64."""
    model.double()
    model.check(train)
    nll = (cast("_Convex", model).objective(train) if hasattr(model, "objective")
           else lambda: model.loss(train))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.LBFGS(params, lr=1.0, max_iter=max_iter, history_size=50,
                            tolerance_grad=tol, tolerance_change=1e-14,
                            line_search_fn="strong_wolfe")

    def objective():
        opt.zero_grad()
        loss = nll() + penalty(model, l2, design_ratio)
        loss.backward()
        return loss

    opt.step(objective)
    loss = float(objective().detach())
    grad = max(float(cast(Tensor, p.grad).abs().max()) for p in params)
    iterations = opt.state[opt._params[0]].get("n_iter", 0)
    return ConvexFit(l2, design_ratio, iterations, grad, loss, grad <= tol * 10)


L2_GRID = (1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5, 1e-6)
DESIGN_RATIOS = (1.0, 0.1, 0.01)


def select_l2(model: ConditionalModel, train: Sequences, val: Sequences,
              grid: Sequence[float] = L2_GRID,
              design_ratios: Sequence[float] = DESIGN_RATIOS) -> tuple[ConditionalModel, dict]:
    """Pick the L2 penalty on validation: for each ratio of the design effects' penalty to the
    weights' (position and length effects may need less shrinkage than the weights), walk the
    penalty path from strong to weak, each fit warm-started from the previous one, until the
    validation NLL has worsened twice in a row; keep the best fit over all. Returns (the model
    at the chosen penalty, {"l2", "design_ratio", "val_nll": {"l2/ratio": nll}, "fits"})."""
    from efa.training.scoring import evaluate

    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    fits: list[dict[str, Any]]
    best, curve, fits = None, {}, []
    groups = cast("_Convex", model).penalised()
    if not groups:
        grid, design_ratios = (0.0,), (1.0,)
    elif not groups.get("design"):
        design_ratios = (1.0,)
    for ratio in design_ratios:
        model.load_state_dict(start)
        worse, last = 0, float("inf")
        for l2 in sorted(grid, reverse=True):
            fit = fit_convex(model, train, l2, ratio)
            nll = -sum(evaluate(model, val).values())
            curve[f"{l2:g}/{ratio:g}"], fits = nll, [*fits, fit.__dict__]
            if best is None or nll < best[0]:
                state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                best = (nll, l2, ratio, state)
            worse = worse + 1 if nll > last else 0
            last = nll
            if worse >= 2:
                break
    if best is None or not math.isfinite(best[0]):
        raise FloatingPointError("no L2 penalty gave a finite validation NLL")
    model.load_state_dict(best[3])
    return model, {"l2": best[1], "design_ratio": best[2], "val_nll": curve, "fits": fits}
