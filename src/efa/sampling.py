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
missing (``observed``) and, with ``length``, the positions past each sequence's end are drawn
(continuing a sequence, filling its gaps). Attributes (always-observed covariates) and other
fields a model reads but does not predict are never drawn: such a model samples only with a
``context`` that holds them.

A unidirectional model's gap that comes before an observed value is not drawn by ancestral
sampling alone, which would ignore that later value: after the ancestral pass, ``sweeps``
sweeps redraw each such gap with, as target, the joint of the positions up to the last
observed one (the values after it sum out of a causal joint). A gap in a field of at most
``EXACT_SUPPORT`` possible values (a category's classes, a Bernoulli's 0/1, a binomial's
0..n) is drawn from that target exactly (Gibbs: the joint at each value, normalised); any
other gap (counts without bound, continuous values, large vocabularies) takes a Metropolis
move with the ancestral conditional p(x_i | x_<i) as proposal, accepted with probability
min(1, p(later values up to the last observed | x_i') / p(... | x_i)). That proposal does not
see the later values, so where the exact conditional is sharp the Metropolis chain mixes
slowly. A distinct field's candidates
leave out the items observed elsewhere in the row (the joint gives them probability 0); its
Metropolis proposal may be an item another gap holds, and is then swapped with it, so a row
that holds every item still moves (the swap changes nothing before i: the causal support
already leaves out the items before i, so the ratio stays as it is); a distinct field takes
both moves. Each sweep then draws the values after the last observed one again, ancestrally
(exactly, given everything before them): the chain's stationary law is the exact conditional
of every drawn value given the observed ones.

A bidirectional model's distinct field whose sequence holds every one of its items has point
masses as conditionals (the other positions fix each item): no Gibbs sweep can move such a
row, so ``sample`` refuses sweeps there.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import torch
from torch import Tensor

from efa.core.conditional import ConditionalModel, evaluating
from efa.core.data import Sequences
from efa.core.fields import Category, Value
from efa.training.masked import finite_support, support_log_joint
from efa.training.scoring import check_int

__all__ = ["sample"]

#: A causal model's gap in a field of at most this many possible values (the classes of a
#: category, 0/1 of a Bernoulli value, 0..n of a binomial one) is redrawn from its exact
#: conditional (one joint evaluation per value); other fields take a Metropolis move, whose
#: proposal does not see the values observed after the gap.
EXACT_SUPPORT = 32
EXACT_BATCH = 4096  # sequence copies (one per value) per model pass of an exact move


def _check_length(model: ConditionalModel, length: object, low: int, lowest: str) -> None:
    """Refuse a length outside low..max_len, or one a distinct field cannot fill."""
    high = model.max_len
    if (isinstance(length, bool) or not isinstance(length, int | np.integer) or length < low
            or (high is not None and length > high)):
        raise ValueError(f"length must be an integer between {lowest}{low} and the model's "
                         f"max_len {high}, got {length!r}")
    for f in model.target_fields:
        if isinstance(f, Category) and f.distinct and length > f.num_categories:
            raise ValueError(f"field {f.name!r} is distinct: a sequence holds at most its "
                             f"{f.num_categories} items, so no sequence of length {length} "
                             "can be drawn")


def _start(model: ConditionalModel, n: int | None, length: int | None,
           context: Sequences | None) -> tuple[dict[str, Tensor], dict[str, Tensor], Tensor]:
    """(values, which values to draw, lengths) of the sequences to complete."""
    targets = [f.name for f in model.target_fields]
    if context is None:
        if n is None or isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
            raise ValueError(f"n must be a positive integer without a context, got {n!r}")
        given = [f.name for f in model.fields if not f.target]
        if given:
            raise ValueError(f"the model reads field(s) {given} without predicting them "
                             "(attributes, covariates): they are not drawn; pass them in "
                             "context= (with the values to draw marked missing in its observed "
                             "masks)")
        if length is None:
            length = model.max_len
            if length is None:
                raise ValueError("the model has no max_len: pass length=")
        _check_length(model, length, 1, "")
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
    valid = context.valid()
    for f in model.fields:
        if not f.target and f.name in context.observed and (
                ~context.observed[f.name] & valid).any():
            s, i = (int(v) for v in (~context.observed[f.name] & valid).nonzero()[0])
            raise ValueError(f"field {f.name!r} is read, not predicted, so it is not drawn: it "
                             f"must be observed, and is missing at sequence {s}, position {i}")
    if length is None:  # each sequence keeps its length: only its gaps are drawn
        _check_length(model, width, width, "the context's width ")
        return ({k: v.clone() for k, v in context.fields.items()},
                {k: ~context.observed.get(k, torch.ones_like(valid)) & valid for k in targets},
                context.lengths.clone())
    _check_length(model, length, width, "the context's width ")
    if length > width and any(not f.target for f in model.fields):
        raise ValueError("a model with fields it reads but does not predict (attributes, "
                         "covariates) continues a sequence only where the context holds them: "
                         "pad the context to the length wanted, mark the values to draw "
                         "missing and leave length=None")
    pad = length - width
    values = {k: torch.nn.functional.pad(v, (0, 0) * (v.dim() - 2) + (0, pad))
              for k, v in context.fields.items()}
    todo = {}
    for k in targets:
        own = context.observed.get(k, torch.ones_like(valid)) & valid
        todo[k] = torch.nn.functional.pad(~own, (0, pad), value=True)
    return values, todo, torch.full((len(context),), length)


def _check_movable(model: ConditionalModel, todo: dict[str, Tensor], lengths: Tensor) -> None:
    """Refuse Gibbs sweeps over a distinct field's row that holds every item with two or more
    of them to draw: each conditional is then a point mass, and no sweep can move."""
    for f in model.target_fields:
        if isinstance(f, Category) and f.distinct:
            stuck = (lengths == f.num_categories) & (todo[f.name].sum(1) >= 2)
            if stuck.any():
                raise ValueError(
                    f"field {f.name!r} is distinct and sequence {int(stuck.nonzero()[0, 0])} "
                    f"holds all its {f.num_categories} items: a bidirectional model's "
                    "conditional of each drawn item is then a point mass (the other positions "
                    "fix it), so Gibbs sweeps cannot move; draw shorter sequences, use a "
                    "unidirectional model, or pass sweeps=0 to keep the first pass's draws")


def _draw(model: ConditionalModel, values: dict[str, Tensor], known: dict[str, Tensor],
          lengths: Tensor, name: str, i: int, rows: Tensor, g: torch.Generator,
          width: int, held: dict[str, Tensor] | None = None) -> None:
    """Redraw ``name`` at position ``i`` of ``rows`` from its conditional given the known
    values of the first ``width`` positions; a distinct field's draw leaves out the items
    ``held`` (default: ``known``) elsewhere in the row."""
    data = Sequences({k: v[rows, :width] for k, v in values.items()},
                     lengths[rows].clamp(max=width),
                     {k: m[rows, :width] for k, m in known.items()})
    at = torch.zeros(len(rows), width, dtype=torch.bool)
    at[:, i] = True
    with torch.no_grad():
        eta = model.natural_params_at(data.to(model.device), {name: at.to(model.device)})[name]
    eta = eta.cpu()
    field = cast("Category | Value", model.field(name))
    if isinstance(field, Category) and field.distinct:
        # Never an item held elsewhere in the row: a causal conditional excludes those before
        # i, not those after it (a repeat has probability 0 under the joint).
        elsewhere = (known if held is None else held)[name][rows] & (
            torch.arange(known[name].shape[1]) < lengths[rows, None])
        elsewhere[:, i] = False
        r, j = elsewhere.nonzero(as_tuple=True)
        eta = eta.clone()
        eta[r, values[name][rows][r, j]] = -torch.inf
    values[name][rows, i] = field.family.sample(eta, generator=g).to(values[name].dtype)
    known[name][rows, i] = True


def _log_joint(model: ConditionalModel, values: dict[str, Tensor], lengths: Tensor,
               rows: Tensor, upto: Tensor, name: str, i: int) -> Tensor:
    """log of the joint of ``rows``' positions up to ``upto`` (float64; every value known),
    without the factor of ``name`` at position ``i``."""
    width = int(upto[rows].max()) + 1  # a causal joint's later positions do not enter
    data = Sequences({k: v[rows, :width] for k, v in values.items()},
                     lengths[rows].clamp(max=width))
    with torch.no_grad():
        lls = model.position_log_likelihoods(data.to(model.device))
    beyond = torch.arange(width) > upto[rows, None]
    total = sum(torch.nansum(v.double().cpu().masked_fill(beyond, 0.0), 1) for v in lls.values())
    return cast(Tensor, total - lls[name][:, i].double().cpu())


def _exact(model: ConditionalModel, values: dict[str, Tensor], lengths: Tensor, name: str,
           i: int, rows: Tensor, g: torch.Generator, upto: Tensor, support: Tensor) -> None:
    """Redraw a causal model's ``name`` at position ``i`` of ``rows`` from its exact
    conditional given every other value up to ``upto`` (the last observed position): the
    joint at each value of its finite ``support``, normalised. A distinct field's items held
    elsewhere up to ``upto`` have probability 0 and are not evaluated."""
    width = int(upto[rows].max()) + 1  # a causal joint's later positions do not enter
    scored = torch.arange(width) <= upto[rows, None]  # real positions: upto < length
    data = Sequences({k: v[rows, :width] for k, v in values.items()},
                     lengths[rows].clamp(max=width), scored=scored)
    allowed = torch.ones(len(rows), len(support), dtype=torch.bool)
    field = model.field(name)
    if isinstance(field, Category) and field.distinct:  # its support is 0..K-1
        others = scored.clone()
        others[:, i] = False
        r, j = others.nonzero(as_tuple=True)
        allowed[r, data.fields[name][r, j]] = False
    device = model.device
    logits = torch.cat([support_log_joint(model, data[part].to(device), name, i,
                                          support.to(device), allowed[part].to(device)).cpu()
                        for part in torch.arange(len(rows)).split(
                            max(1, EXACT_BATCH // len(support)))])
    logits = logits.nan_to_num(nan=-torch.inf)
    stuck = torch.isneginf(logits).all(1)  # no value of positive probability: keep it
    logits[stuck, 0] = 0.0
    draw = support[torch.multinomial(logits.softmax(1), 1, generator=g)[:, 0]]
    values[name][rows, i] = torch.where(stuck, values[name][rows, i], draw.to(values[name].dtype))


def _metropolis(model: ConditionalModel, values: dict[str, Tensor], known: dict[str, Tensor],
                observed: dict[str, Tensor], gaps: Tensor, lengths: Tensor, name: str, i: int,
                rows: Tensor, g: torch.Generator, upto: Tensor) -> None:
    """One Metropolis-within-Gibbs move of a causal model's ``name`` at position ``i``:
    proposed from p(x_i | x_<i), accepted by the factors it changes after it up to ``upto``
    (the last observed position). For a distinct field the proposal leaves out the items
    ``observed`` elsewhere (probability 0 under the joint: the ratio is as it is), and an
    item another of the row's ``gaps`` holds (necessarily after i) is swapped with it."""
    old = values[name][rows, i].clone()
    before = _log_joint(model, values, lengths, rows, upto, name, i)
    _draw(model, values, known, lengths, name, i, rows, g, i + 1, held=observed)
    new = values[name][rows, i]
    field = model.field(name)
    swap = torch.zeros(len(rows), values[name].shape[1], dtype=torch.bool)
    if isinstance(field, Category) and field.distinct:  # the other gap that holds the new item
        swap = gaps[rows] & (values[name][rows] == new[:, None])
        swap[:, i] = False
        r, j = swap.nonzero(as_tuple=True)
        values[name][rows[r], j] = old[r]
    after = _log_joint(model, values, lengths, rows, upto, name, i)
    u = torch.rand(len(rows), generator=g, dtype=torch.float64)
    # A state of probability 0 (a repeated distinct item) is always left; NaN never kept.
    accept = torch.where(torch.isneginf(before), True, u.log() < after - before)
    r, j = (swap & ~accept[:, None]).nonzero(as_tuple=True)
    values[name][rows[r], j] = new[r]
    values[name][rows[~accept], i] = old[~accept]


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
        Positions per sequence (default: the model's ``max_len``); with ``context``, every
        sequence is continued to this length (default: each keeps its own).
    context : Sequences, optional
        Sequences to complete: observed values are kept, missing ones and the positions up to
        ``length`` are drawn.
    sweeps : int
        Gibbs sweeps of a bidirectional model after the first pass; for a unidirectional
        model, sweeps over the gaps of ``context`` that come before an observed value, each
        followed by a fresh ancestral draw of the values after the last observed one (see the
        module's docstring; none without such gaps). A gap in a field of at most
        ``EXACT_SUPPORT`` possible values is drawn from its exact conditional; any other
        takes a Metropolis move whose proposal does not see the values observed after it:
        where its exact conditional is sharp, that chain needs many more sweeps (compare the
        draws at two counts). An exact move costs one model pass per possible value; gaps
        that depend on each other still need several sweeps, and a joint with separated
        modes, or a distinct row that holds every item (it moves only by trading items
        between gaps), many more. Refused for a bidirectional
        model's distinct field in a sequence that holds all its items (no sweep can move it).
    seed : int
        The same seed gives the same draws.

    Returns
    -------
    Sequences
        The drawn (or completed) sequences.

    Raises
    ------
    ValueError
        For a bad ``n``, ``length``, ``context``, ``sweeps`` or ``seed``, a model that reads
        fields it does not predict without a ``context`` holding them, or sweeps that cannot
        move (above).

    Examples
    --------
    >>> draws = efa.sample(model, 100, length=8, seed=0)  # doctest: +SKIP
    """
    check_int("sweeps", sweeps, 0)
    check_int("seed", seed, 0)
    # NumPy integers (from np.arange, a config array) are integers too
    sweeps, seed = int(sweeps), int(seed)
    values, todo, lengths = _start(model, n, length, context)
    width = values[next(iter(values))].shape[1]
    known = {k: ~m for k, m in todo.items()}
    observed = {k: ~m for k, m in todo.items()}  # known grows as values are drawn; not this
    # A causal gap needs the joint's correction where a value observed after it exists.
    position = torch.arange(width)
    seen = torch.stack([m & (position < lengths[:, None]) for m in known.values()]).any(0)
    last_observed = torch.where(seen, position, -1).amax(1)
    before_observed = {k: m & (position <= last_observed[:, None]) for k, m in todo.items()}
    after_observed = {k: m & ~before_observed[k] for k, m in todo.items()}
    g = torch.Generator().manual_seed(seed)
    causal = getattr(model, "direction", "bidirectional") == "unidirectional"
    if causal and not any(m.any() for m in before_observed.values()):
        sweeps = 0  # no gap before an observed value: the ancestral pass is exact
    if not causal and sweeps:
        _check_movable(model, todo, lengths)
    supports = {}  # the values of each field a gap's exact move sums over (None: Metropolis)
    for f in model.target_fields:
        support = finite_support(f)
        supports[f.name] = (support.cpu() if support is not None
                            and len(support) <= EXACT_SUPPORT else None)
    with evaluating(model):
        for i in range(width):  # the first pass: ancestral for a causal model
            for f in model.target_fields:
                rows = todo[f.name][:, i].nonzero()[:, 0]
                if len(rows):
                    _draw(model, values, known, lengths, f.name, i, rows, g,
                          i + 1 if causal else width)
        for _ in range(sweeps):
            if causal:  # the values after the last observed one: drawn again, as a block
                for k, m in after_observed.items():
                    known[k] &= ~m
            for i in range(width):
                for f in model.target_fields:
                    gaps = (before_observed if causal else todo)[f.name][:, i].nonzero()[:, 0]
                    if len(gaps) and not causal:
                        _draw(model, values, known, lengths, f.name, i, gaps, g, width)
                    elif len(gaps):
                        support = supports[f.name]
                        if support is not None:
                            _exact(model, values, lengths, f.name, i, gaps, g, last_observed,
                                   support)
                        if support is None or isinstance(f, Category) and f.distinct:
                            # a distinct field's swap with another gap: the move that lets a
                            # row whose items are all held change their order
                            _metropolis(model, values, known, observed, before_observed[f.name],
                                        lengths, f.name, i, gaps, g, last_observed)
                    # Exactly from p(later | everything before), ancestrally: with the gaps'
                    # moves, a blocked Metropolis-within-Gibbs chain on gaps and later values.
                    later = after_observed[f.name][:, i].nonzero()[:, 0]
                    if causal and len(later):
                        _draw(model, values, known, lengths, f.name, i, later, g, i + 1)
    return Sequences(values, lengths)
