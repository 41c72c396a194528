"""Drawing sequences from a fitted model.

- **Unidirectional** models define a joint distribution: ancestral sampling draws each
  position's fields, in factorisation order, from their conditionals given everything before,
  so the draws are exact samples of the model's joint.
- **Bidirectional** models give each value's conditional given all the others. A set of such
  conditionals need not be the conditionals of any joint distribution (they are fitted one by
  one, by the pseudo-likelihood), so there is no exact sampler: Gibbs sampling redraws each
  value from its conditional in sweeps over the positions, and its chain converges to a
  stationary distribution whose conditionals are close to the model's when the model is
  close to a joint. Check that the chain has mixed (``tests/test_sampling.py`` runs two
  chains from different starts to the same item frequencies).

``context`` conditions the draws: its observed values are kept, and the values it marks
missing (``observed``) and the positions past each sequence's end, up to ``length``, are drawn
(continuing a sequence, filling its gaps). Attributes (always-observed covariates) are never
drawn: a model with attribute fields samples only with a ``context`` that holds them.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor

from efa.core.conditional import ConditionalModel
from efa.core.data import Sequences
from efa.core.fields import Attribute, Category, Value

__all__ = ["sample"]


def _start(model: ConditionalModel, n: int | None, length: int | None,
           context: Sequences | None) -> tuple[dict[str, Tensor], dict[str, Tensor], Tensor]:
    """(values, which values to draw, lengths) of the sequences to complete."""
    targets = [f.name for f in model.target_fields]
    if context is None:
        if n is None or isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a positive integer without a context, got {n!r}")
        attributes = [f.name for f in model.fields if isinstance(f, Attribute)]
        if attributes:
            raise ValueError(f"the model reads attribute field(s) {attributes}: they are "
                             "covariates, not drawn; pass them in context= (with the values to "
                             "draw marked missing in its observed masks)")
        length = length or model.max_len
        if length is None:
            raise ValueError("the model has no max_len: pass length=")
        dtype = next(model.parameters()).dtype
        values = {f.name: torch.zeros(n, length, dtype=torch.long if isinstance(f, Category)
                                      or cast(Value, f).family.is_discrete else dtype)
                  for f in model.fields}
        return values, {k: torch.ones(n, length, dtype=torch.bool) for k in targets}, \
            torch.full((n,), length)
    if n is not None:
        raise ValueError("give n (sequences from scratch) or context (sequences to complete), "
                         "not both")
    model.check(context)
    width = context.max_len
    length = width if length is None else length
    if length < width or (model.max_len is not None and length > model.max_len):
        raise ValueError(f"length must be between the context's width {width} and the model's "
                         f"max_len {model.max_len}, got {length}")
    if length > width and any(isinstance(f, Attribute) for f in model.fields):
        raise ValueError("a model with attribute fields continues a sequence only where the "
                         "context holds its attributes: pad the context to the length wanted, "
                         "mark the values to draw missing and leave length=None")
    pad = length - width
    values = {k: torch.nn.functional.pad(v, (0, 0) * (v.dim() - 2) + (0, pad))
              for k, v in context.fields.items()}
    valid = context.valid()
    todo = {}
    for k in targets:
        own = context.observed.get(k, torch.ones_like(valid)) & valid
        todo[k] = torch.nn.functional.pad(~own, (0, pad), value=True)
    return values, todo, torch.full((len(context),), length)


def _draw(model: ConditionalModel, values: dict[str, Tensor], known: dict[str, Tensor],
          lengths: Tensor, name: str, i: int, rows: Tensor, g: torch.Generator,
          width: int) -> None:
    """Redraw ``name`` at position ``i`` of ``rows`` from its conditional given the known
    values of the first ``width`` positions."""
    data = Sequences({k: v[rows, :width] for k, v in values.items()},
                     lengths[rows].clamp(max=width),
                     {k: m[rows, :width] for k, m in known.items()})
    at = torch.zeros(len(rows), width, dtype=torch.bool)
    at[:, i] = True
    with torch.no_grad():
        eta = model.natural_params_at(data.to(model.device), {name: at.to(model.device)})[name]
    family = cast("Category | Value", model.field(name)).family
    values[name][rows, i] = family.sample(eta.cpu(), generator=g).to(values[name].dtype)
    known[name][rows, i] = True


def sample(model: ConditionalModel, n: int | None = None, length: int | None = None, *,
           context: Sequences | None = None, sweeps: int = 20, seed: int = 0) -> Sequences:
    """Draw sequences from a fitted model, or complete given ones.

    Unidirectional models are sampled ancestrally (exact draws of their joint). Bidirectional
    ones get one pass drawing each value given those drawn or observed so far, then ``sweeps``
    Gibbs sweeps; their conditionals, fitted one by one, need not be those of any joint (see
    the module's docstring).

    Parameters
    ----------
    model : ConditionalModel
        A fitted model.
    n : int, optional
        Number of new sequences (with ``context=None``).
    length : int, optional
        Positions per sequence (default: the model's ``max_len``); with ``context``, the
        sequences are continued to this length.
    context : Sequences, optional
        Sequences to complete: observed values are kept, missing ones and the positions up to
        ``length`` are drawn.
    sweeps : int
        Gibbs sweeps of a bidirectional model after the first pass.
    seed : int
        The same seed gives the same draws.

    Returns
    -------
    Sequences
        The drawn (or completed) sequences.

    Examples
    --------
    >>> draws = efa.sample(model, 100, length=8, seed=0)  # doctest: +SKIP
    """
    if isinstance(sweeps, bool) or not isinstance(sweeps, int) or sweeps < 0:
        raise ValueError(f"sweeps must be an integer >= 0, got {sweeps!r}")
    values, todo, lengths = _start(model, n, length, context)
    width = values[next(iter(values))].shape[1]
    known = {k: ~m for k, m in todo.items()}
    g = torch.Generator().manual_seed(seed)
    causal = getattr(model, "direction", "bidirectional") == "unidirectional"
    was_training = model.training
    model.eval()
    try:
        for i in range(width):  # the first pass: ancestral for a causal model
            for f in model.target_fields:
                rows = todo[f.name][:, i].nonzero()[:, 0]
                if len(rows):
                    _draw(model, values, known, lengths, f.name, i, rows, g,
                          i + 1 if causal else width)
        for _ in range(0 if causal else sweeps):
            for i in range(width):
                for f in model.target_fields:
                    rows = todo[f.name][:, i].nonzero()[:, 0]
                    if len(rows):
                        _draw(model, values, known, lengths, f.name, i, rows, g, width)
    finally:
        model.train(was_training)
    return Sequences(values, lengths)
