"""Masked conditionals p(x_i | everything else) of a unidirectional (causal) model.

A causal model defines a joint, p(x) = ∏_j p(x_j | x_<j), and every joint has compatible
masked conditionals: at position i, p(x_i = v | x_−i) ∝ p(x with v at i). Only the factors at
positions ≥ i depend on v, so they are all that is summed. This is exact, needs no second model
and, unlike a bidirectional model's conditionals (which need not be those of any joint), always
describes one distribution. The price is one forward pass per candidate value: S · I passes per
sequence and field for a support of S values and I positions, so it suits small supports
(categories of tens to hundreds; ordinal, Bernoulli and binomial values).
"""

from __future__ import annotations

import dataclasses

import torch

from efa.core.conditional import ConditionalModel
from efa.core.data import Sequences
from efa.core.fields import Field
from efa.training.scoring import (
    check_int,
    check_targets,
    in_batches,
    scoring_mode,
    warn_nothing_predicted,
)


def finite_support(f: Field) -> torch.Tensor | None:
    """The values a target field can take, when there are finitely many: what the
    ``torch.distributions`` object of its family enumerates.

    Parameters
    ----------
    f : Field
        A target field (a Category or a Value).

    Returns
    -------
    torch.Tensor or None
        The support in order (category codes, ordinal classes, 0/1, 0..n), or None where the
        family's distribution has no enumerable support (counts without bound, continuous
        values).
    """
    family = getattr(f, "family", None)  # an Attribute has none: it is never predicted
    return None if family is None else family.enumerable_support()


@torch.no_grad()
def masked_log_likelihoods(model: ConditionalModel, data: Sequences,
                           fields: tuple[str, ...] | None = None,
                           batch_size: int = 4096) -> dict[str, torch.Tensor]:
    """log p(x_i | every other position and field) of a causal model, by renormalising its
    joint over the field's support at each predicted position.

    Parameters
    ----------
    model : ConditionalModel
        A fitted unidirectional model (``efa.EFA`` with ``direction="unidirectional"``).
    data : Sequences
        The data to score; checked against the model's fields.
    fields : tuple of str, optional
        Score these target fields (default: every target field; each needs a finite support).
    batch_size : int, default 4096
        Candidate sequences per forward pass (a batch holds ``batch_size // S`` sequences,
        at least one).

    Returns
    -------
    dict of str to Tensor
        Per scored field, an [N, I] float64 tensor, NaN where the field is not predicted.

    Raises
    ------
    ValueError
        If the model is not unidirectional, a field is not one of its targets, or a field's
        support is not finite (a Gaussian, Poisson, … value): the message names the field.
    FloatingPointError
        If the joint is not finite at an observed sequence (the field, sequence and position
        are named).

    Examples
    --------
    >>> lp = efa.masked_log_likelihoods(causal_model, test)  # doctest: +SKIP
    >>> float(lp["item"].nanmean())  # doctest: +SKIP
    -3.02
    """
    if getattr(model, "direction", None) != "unidirectional":
        raise ValueError("masked conditionals by renormalisation need a unidirectional "
                         f"(causal) model, whose conditionals define a joint; this one is "
                         f"{getattr(model, 'direction', type(model).__name__)!r}: score a "
                         "bidirectional model's own conditionals with efa.evaluate")
    check_int("batch_size", batch_size, 1)
    if fields is not None:
        check_targets(model, fields)
    chosen = [f for f in model.target_fields if fields is None or f.name in fields]
    supports = {}
    for f in chosen:
        s = finite_support(f)
        if s is None:
            family = type(getattr(f, "family", f)).__name__
            raise ValueError(f"field {f.name!r} ({family}) has no finite "
                             "support to sum over: masked conditionals by renormalisation need "
                             "a family whose values can be enumerated (a Category, ordinal, "
                             "Bernoulli or binomial value); pass fields=(...) to score others")
        supports[f.name] = s.to(model.device)
    out = {f.name: torch.full(data.valid().shape, float("nan"), dtype=torch.float64)
           for f in chosen}
    with scoring_mode(model, data):
        for name, support in supports.items():
            size = len(support)
            for idx, batch in in_batches(data, max(1, batch_size // size), model.device):
                out[name][idx, : batch.max_len] = _renormalised(model, batch, name, support, idx)
    return out


@torch.no_grad()
def support_log_joint(model: ConditionalModel, batch: Sequences, name: str, i: int,
                      support: torch.Tensor, allowed: torch.Tensor | None = None
                      ) -> torch.Tensor:
    """log of a causal model's joint with field ``name`` at position ``i`` set to each value of
    ``support``, up to a constant per sequence: the factors at positions ≥ i of the values
    ``batch`` predicts (real, observed and scored), the only ones that depend on x_i.

    Parameters
    ----------
    model : ConditionalModel
        A unidirectional model.
    batch : Sequences
        n sequences, on the model's device.
    name : str
        A target field of the model.
    i : int
        The position set to each value.
    support : torch.Tensor
        The S values, on the model's device.
    allowed : torch.Tensor of bool, optional
        [n, S]: the values to evaluate per sequence (default: all); the others get -inf
        without a model pass (values known to have probability 0).

    Returns
    -------
    torch.Tensor
        [n, S] float64: softmax over the values gives p(x_i = v | the predicted values).
    """
    n, size = len(batch), len(support)
    if allowed is None:
        allowed = torch.ones(n, size, dtype=torch.bool, device=batch.lengths.device)
    row, col = allowed.nonzero(as_tuple=True)  # a copy of the sequence per value, in order
    many = batch[row]
    x = many.fields[name].clone()
    x[:, i] = support[col].to(x.dtype)
    lls = model.position_log_likelihoods(dataclasses.replace(many, fields={**many.fields, name: x}))
    later = torch.zeros((len(row),), dtype=torch.float64, device=x.device)
    for g, lp in lls.items():
        later += torch.where(many.predicted(g)[:, i:], lp[:, i:].double(), 0.0).sum(1)
    out = torch.full((n, size), -torch.inf, dtype=torch.float64, device=x.device)
    out[row, col] = later
    return out


def _renormalised(model: ConditionalModel, batch: Sequences, name: str, support: torch.Tensor,
                  idx: torch.Tensor) -> torch.Tensor:
    """One batch's [n, I] masked log-probabilities of field ``name`` (NaN where not
    predicted)."""
    n, length, size = len(batch), batch.max_len, len(support)
    predicted = batch.predicted(name)
    # The joint's factors are every observed value, scored or not: ``scored`` only chooses
    # which positions are reported, and dropping a factor would change the conditional.
    every = dataclasses.replace(batch, scored=None)
    out = torch.full((n, length), float("nan"), dtype=torch.float64)
    for i in range(length):
        rows = predicted[:, i]
        if not rows.any():
            continue
        joint = support_log_joint(model, every, name, i, support)
        observed = batch.fields[name][:, i].long()
        own = joint.gather(1, observed.clamp(0, size - 1)[:, None])[:, 0]
        bad = rows & ~torch.isfinite(own) | rows & torch.isnan(joint).any(1)
        if bad.any():
            k = int(bad.nonzero()[0, 0])
            raise FloatingPointError(
                f"masked_log_likelihoods: the joint of field {name!r} is not finite at "
                f"sequence {int(idx[k])}, position {i}")
        out[:, i] = torch.where(rows, own - torch.logsumexp(joint, 1), float("nan")).cpu()
    return out


def masked_evaluate(model: ConditionalModel, data: Sequences,
                    fields: tuple[str, ...] | None = None,
                    batch_size: int = 4096) -> dict[str, float]:
    """Mean masked log-likelihood per field of a causal model: :func:`masked_log_likelihoods`
    averaged over the predicted positions, the bidirectional counterpart of
    :func:`efa.evaluate`.

    Parameters
    ----------
    model : ConditionalModel
        A fitted unidirectional model.
    data : Sequences
        The data to score.
    fields : tuple of str, optional
        Score these target fields (default: every target field).
    batch_size : int, default 4096
        Candidate sequences per forward pass.

    Returns
    -------
    dict of str to float
        Nats per predicted position, per field. A field with no predicted position gets NaN
        and a warning, never a perfect score.

    Raises
    ------
    ValueError, FloatingPointError
        As :func:`masked_log_likelihoods`.
    """
    out = {}
    for name, lp in masked_log_likelihoods(model, data, fields, batch_size).items():
        if torch.isnan(lp).all():
            warn_nothing_predicted(name)
        out[name] = float(lp.nanmean())
    return out
