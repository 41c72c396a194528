"""What EFA shares with its special cases and peers (efa.baselines): natural parameters at
asked positions, the (pseudo) log-likelihood they define, predicted means, and the training
loss every model takes the same arguments of; plus the context counts that support
restrictions and the bag term read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from efa.core import softmax
from efa.core.checks import check_sequences
from efa.core.data import Sequences
from efa.core.families.base import Shifted
from efa.core.fields import Field

if TYPE_CHECKING:  # for annotations only
    from efa.core.fields import Category, Value


def refuse_sampling(model: nn.Module, sampling: softmax.Sampling | None) -> None:
    """Refuse the sampled softmax for a model whose loss cannot take it (only efa.EFA's
    category targets can)."""
    if sampling is not None:
        raise ValueError(f"{type(model).__name__} cannot train by the sampled softmax (efa.EFA's "
                         "category targets can): train it without sampled_softmax")


def refuse_generic_options(model: nn.Module, weights: Tensor | None,
                           counts: dict[str, int] | None,
                           sampling: softmax.Sampling | None) -> None:
    """For a model with an objective of its own: sampled positions (``weights``), data-parallel
    ``counts`` and the sampled softmax are refused by name."""
    given = [n for n, v in (("weights (positions=m)", weights), ("counts (data-parallel)", counts),
                            ("sampling (sampled_softmax)", sampling)) if v is not None]
    if given:
        raise ValueError(f"{type(model).__name__}.loss computes its own objective: it takes no "
                         f"{', '.join(given)}; train it without them")


class ConditionalModel(nn.Module):
    """What EFA and its special cases and peers share: natural parameters of every target
    field at asked positions, and the (pseudo) log-likelihood they define.

    Subclasses set ``fields`` (and ``max_len``, ``direction``) and implement either
    ``natural_params`` (dense, [B, I, n] at every position) or ``natural_params_at`` (only at
    the asked positions, for models that pay per position)."""

    fields: list[Field]
    max_len: int | None = None
    # True for a model whose loss is an objective of its own (a cloze task, cell dropout, a
    # context split): sampled positions, data-parallel normalisation and the sampled softmax,
    # which reweight the generic pseudo-likelihood, do not apply to it.
    own_objective: ClassVar[bool] = False
    direction: str = "bidirectional"

    @property
    def device(self) -> torch.device:
        """Where the model's parameters (or buffers) live; data are moved there."""
        for t in (*self.parameters(), *self.buffers()):
            return t.device
        return torch.device("cpu")

    @property
    def target_fields(self) -> list[Field]:
        return [f for f in self.fields if f.target]

    def field(self, name: str) -> Field:
        """The field called ``name`` (an error naming the model's fields otherwise)."""
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"the model has no field {name!r} (fields: {[f.name for f in self.fields]})")

    def target(self, name: str | None) -> Field:
        """The target field ``name`` (None: the first), with a clear error otherwise."""
        if name is None:
            return self.target_fields[0]
        f = self.field(name)
        if not f.target:
            raise ValueError(
                f"field {name!r} is not predicted by this model (targets: "
                f"{[t.name for t in self.target_fields]})"
            )
        return f

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        """η [B, I, num_natural] of every target field at every position (or NaN where the
        model did not compute it)."""
        at = {f.name: data.valid() for f in self.target_fields}
        out = {}
        for name, eta in self.natural_params_at(data, at).items():
            full = eta.new_full((*at[name].shape, eta.shape[-1]), float("nan"))
            full[at[name]] = eta
            out[name] = full
        return out

    def natural_params_at(self, data: Sequences, at: dict[str, Tensor]) -> dict[str, Tensor]:
        """η [P, num_natural] of each field in ``at`` at its asked positions ``at[name]``
        [B, I] bool (in the order of ``at[name].nonzero()``), support restrictions applied."""
        dense = self.natural_params(data)
        return {name: self.restrict(name, data, m, dense[name][m]) for name, m in at.items()}

    def predictive(self, data: Sequences, field: str,
                   at: Tensor | None = None) -> torch.distributions.Distribution:
        """p(y_i | context) of the target ``field`` at the positions ``at`` [B, I] bool
        (default: where it is predicted, ``data.predicted(field)``) as a
        ``torch.distributions`` object whose batch runs over those positions in the order of
        ``at.nonzero()``: mean, variance, ``sample``, and ``log_prob`` equal to efa's
        log-likelihood (a category's or ordinal class's index 0..K−1). One pass, unbatched:
        :func:`efa.predictive_frame` scores data sets in batches, with intervals."""
        f = _family_field(self.target(field))
        data, at = self._here(data, at)
        at = data.predicted(field) if at is None else at
        dist = f.family.distribution(self.natural_params_at(data, {field: at})[field])
        shift = getattr(f.family, "shift", 0)  # the family's distribution is of y − shift
        return Shifted(dist, shift) if shift else dist

    def restrict(self, name: str, data: Sequences, at: Tensor, eta: Tensor) -> Tensor:
        """Apply a field's support restriction (``Category(distinct=True)``) at ``at``."""
        f = self.field(name)
        if not getattr(f, "distinct", False):
            return eta
        f = cast("Category", f)  # distinct: a Category
        return f.restrict(eta, context_items(data, name, f.num_categories, self.direction, at))

    def forward(self, data: Sequences) -> dict[str, Tensor]:
        return self.natural_params(data)

    def _here(self, data: Sequences, at: Tensor | None = None):
        """``data`` (and a position mask) on the model's device."""
        device = self.device
        if data.device != device:
            data = data.to(device)
        if at is not None and (not isinstance(at, Tensor) or at.dtype != torch.bool
                               or at.shape != data.valid().shape):
            raise ValueError(
                f"at must be a bool tensor of shape {list(data.valid().shape)} (sequences × "
                f"positions) saying where to predict, got "
                + (f"{at.dtype} of shape {list(at.shape)}" if isinstance(at, Tensor)
                   else type(at).__name__))
        return data, (None if at is None else at.to(device))

    def check(self, data: Sequences) -> None:
        """Check that ``data`` fits the model's fields (names, kinds, values, lengths); raises
        naming the first problem."""
        dtype = next((p.dtype for p in self.parameters() if p.is_floating_point()), None)
        check_sequences(data, self.fields, self.max_len, dtype)

    def log_likelihood_sums(
        self, data: Sequences, base_measure: bool = True, check: bool = True,
        weights: Tensor | None = None, sampling: softmax.Sampling | None = None,
    ) -> dict[str, tuple[Tensor, int]]:
        """Per target field: (sum of log p(y_i | context) over predicted positions, count).
        ``weights`` [B]: a weight per sequence on its terms (sampled positions, see fit);
        ``sampling``: train category targets by the sampled softmax (see fit)."""
        if check:
            self.check(data)
        at = {f.name: data.predicted(f.name) for f in self.target_fields}
        lps = self.log_probs_at(data, at, base_measure, sampling)
        out = {}
        for f in self.target_fields:
            m = at[f.name]
            lp = lps[f.name]
            if weights is not None:
                lp = lp * weights[m.nonzero()[:, 0]].to(lp.dtype)
            out[f.name] = (lp.sum(), int(m.sum()))
        return out

    def log_probs_at(self, data: Sequences, at: dict[str, Tensor], base_measure: bool = True,
                     sampling: softmax.Sampling | None = None) -> dict[str, Tensor]:
        """log p(y_i | context) [P] of each field in ``at`` at its asked positions."""
        refuse_sampling(self, sampling)
        etas = self.natural_params_at(data, at)
        return {name: _family_field(self.field(name)).family.log_prob(
                    data.fields[name][m], etas[name], base_measure)
                for name, m in at.items()}

    def position_log_likelihoods(self, data: Sequences,
                                 base_measure: bool = True) -> dict[str, Tensor]:
        """log p(y_i | context) [B, I] per target field; NaN where not predicted."""
        at = {f.name: data.predicted(f.name) for f in self.target_fields}
        lps = self.log_probs_at(data, at, base_measure)
        out = {}
        for f in self.target_fields:
            m = at[f.name]
            full = lps[f.name].new_full(m.shape, float("nan"))
            full[m] = lps[f.name]
            out[f.name] = full
        return out

    def loss(self, data: Sequences, check: bool = False, weights: Tensor | None = None,
             counts: dict[str, int] | None = None,
             sampling: softmax.Sampling | None = None) -> Tensor:
        """Training objective: the sum over target fields of the mean negative log-likelihood
        (+ the model's ``penalty()``, if it has one). ``counts`` replaces each field's number of
        predicted positions as the denominator (the global count across data-parallel ranks, or
        of the full batch when positions are sampled); ``weights`` and ``sampling`` as in
        :meth:`log_likelihood_sums`. Every model takes these arguments; one whose objective is its
        own (``own_objective``) refuses the last three (:func:`refuse_generic_options`)."""
        ll = self.log_likelihood_sums(data, check=check, weights=weights, sampling=sampling)
        loss = -cast(Tensor, sum(s / max(n if counts is None else counts[name], 1)
                                 for name, (s, n) in ll.items()))
        penalty = self.penalty()
        return loss if penalty is None else loss + penalty

    def penalty(self) -> Tensor | None:
        """A prior's negative log-density added to the training loss (None: no prior)."""
        return None

    def standardise(self, data: Sequences) -> ConditionalModel:
        """Called by ``efa.fit`` with the training data before it trains (nothing here)."""
        return self

    @torch.no_grad()
    def predict_mean(self, data: Sequences, at: Tensor | None = None) -> dict[str, Tensor]:
        """E[y_i | context] [B, I] (class probabilities [B, I, K] for categories) of every target
        field at the positions ``at`` [B, I] (default: every real position, missing values
        included: an imputation); NaN elsewhere. A non-finite mean at an asked position is a
        FloatingPointError naming the field, sequence and position."""
        out, at = self._means_at(data, at)
        for name, full in out.items():
            bad = at & ~torch.isfinite(full.reshape(*at.shape, -1)).all(-1)
            if bad.any():
                b, i = bad.nonzero()[0].tolist()
                raise FloatingPointError(
                    f"predict_mean: non-finite predicted mean of field {name!r} at sequence {b}, "
                    f"position {i}: the parameters diverged (a NaN/inf weight) or a context "
                    "value is extreme for the model")
        return out

    def _means_at(self, data: Sequences, at: Tensor | None) -> tuple[dict[str, Tensor], Tensor]:
        """predict_mean's numbers, unchecked, and the positions they are at."""
        self.check(data)
        data, at = self._here(data, at)
        at = data.valid() if at is None else at & data.valid()
        etas = self.natural_params_at(data, {f.name: at for f in self.target_fields})
        out = {}
        for f in self.target_fields:
            mean = _family_field(f).family.mean(etas[f.name])
            full = mean.new_full((*at.shape, *mean.shape[1:]), float("nan"))
            full[at] = mean
            out[f.name] = full
        return out, at


def _family_field(f: Field) -> Category | Value:
    """``f`` as a field with a ``family``: every target field has one (``Field`` declares none)."""
    return cast("Category | Value", f)


def context_items(data: Sequences, name: str, k: int, direction: str, at: Tensor) -> Tensor:
    """[P, K] bool: which items of category ``name`` are in the context of each asked
    position (observed, real positions j ≠ i; j < i unidirectionally)."""
    x = data.fields[name]
    present = data.valid() & data.observed.get(name, data.valid())
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
    counts (``Category(bag=True)``). By a gather and a (cumulative) sum, O(B·I·n)."""
    x = data.fields[name]
    present = data.valid() & data.observed.get(name, data.valid())
    rows = F.embedding(torch.where(present, x, 0).long(), table) * present[..., None]
    if direction == "bidirectional":
        return (rows.sum(1, keepdim=True) - rows)[at]
    return (rows.cumsum(1) - rows)[at]


def context_pairs(data: Sequences, name: str, direction: str, at: Tensor) -> tuple[Tensor, Tensor]:
    """The items of category ``name`` in the context of each asked position, as (row, item)
    pairs (row = index among ``at.nonzero()``): the sparse form of :func:`context_items` for
    large vocabularies."""
    b_idx, i_idx = at.nonzero(as_tuple=True)
    x = data.fields[name]
    present = data.valid() & data.observed.get(name, data.valid())
    j = torch.arange(x.shape[1], device=x.device)
    ctx = present[b_idx] & (j[None, :] != i_idx[:, None])  # [P, I]
    if direction != "bidirectional":
        ctx &= j[None, :] < i_idx[:, None]
    rows, cols = ctx.nonzero(as_tuple=True)
    return rows, x[b_idx[rows], cols]
