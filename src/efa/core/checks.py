"""Checks on what a user passes in: data against a model's fields, with errors that name the
field, the sequence and the position; asked positions; options a model's loss cannot take."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from efa.core.data import Sequences
from efa.core.families import Family, InvalidValues

if TYPE_CHECKING:  # fields import their value checks from here
    from torch import nn

    from efa.core import softmax
    from efa.core.fields import Field


def check_sequences(data: Sequences, fields: Sequence[Field], max_len: int | None,
                    dtype: torch.dtype | None = None) -> None:
    """Raise a clear error if ``data`` does not fit the model's ``fields`` (and the model's
    floating-point ``dtype``).

    Each field's values are checked by its own ``validate`` at the real, observed positions;
    padding of floating-point fields must be finite (a NaN there would leak through the
    attention's zero weights); values that the model's ``dtype`` cannot hold are refused.

    Parameters
    ----------
    data : Sequences
        The data, as passed in by the user.
    fields : sequence of Field
        The model's fields; the data must have exactly these.
    max_len : int or None
        The length of the model's positional table (None: no limit).
    dtype : torch.dtype, optional
        The model's floating-point dtype; values too large for it are refused.

    Raises
    ------
    TypeError
        If ``data`` is not a :class:`efa.Sequences` (or an attribute's values are not
        floating point).
    KeyError
        If a field of the model is missing from the data, or the data have a field the model
        does not know.
    ValueError
        If the sequences are longer than ``max_len`` or a value is invalid; the message names
        the field, the sequence and the position.
    """
    if not isinstance(data, Sequences):
        raise TypeError(
            f"expected efa.Sequences, got {type(data).__name__}; build one with "
            "Sequences.from_lists or Sequences.from_frame"
        )
    if max_len is not None and data.max_len > max_len:
        longest = int(data.lengths.max())
        if longest <= max_len:  # only the padding is too wide
            raise ValueError(
                f"the tensors are padded to width {data.max_len}, wider than the positional "
                f"table ({max_len}), though the longest sequence has length {longest}: trim "
                "the padding with data[:]")
        raise ValueError(
            f"sequences of length {longest} are longer than the positional table "
            f"({max_len}); build the model with max_len >= {longest}"
        )
    valid = data.valid()
    for f in fields:
        if f.name not in data.fields:
            raise KeyError(f"field {f.name!r} is missing from the data (has {list(data.fields)})")
        m = valid & data.observed.get(f.name, valid)
        if f.kind == "attribute" and (valid & ~m).any():  # no [MASK] stands in for one
            s, i = (valid & ~m).nonzero()[0].tolist()
            raise ValueError(f"field {f.name!r} is an attribute, always observed, but its "
                             f"observed mask is False at sequence {s}, position {i}: fill the "
                             "value, or make it a Value field that can be missing")
        x = data.fields[f.name]
        f.validate(x, m, f"field {f.name!r}")
        if x.is_floating_point():
            # Padding is never used, but a NaN there becomes NaN through the attention's zero
            # weights (0 · NaN = NaN). (Missing values may hold anything: they are replaced.)
            bad = ~torch.isfinite(x.reshape(*x.shape[:2], -1)).all(-1) & ~valid
            if bad.any():
                s, i = bad.nonzero()[0].tolist()
                raise ValueError(
                    f"field {f.name!r}: NaN/inf at sequence {s}, position {i}, which is padding "
                    f"(the sequence has length {int(data.lengths[s])}): padding must hold finite "
                    "numbers (efa pads with 0)"
                )
        size = getattr(f, "num_categories", None) or getattr(f, "num_values", None)
        if size is not None and not x.is_floating_point():  # codes looked up in a table
            bad = ((x < 0) | (x >= size)) & ~valid
            if bad.any():
                s, i = bad.nonzero()[0].tolist()
                raise ValueError(
                    f"field {f.name!r}: code {int(x[s, i])} at sequence {s}, position {i}, which "
                    f"is padding (the sequence has length {int(data.lengths[s])}): padding is "
                    f"looked up too, so it must hold codes 0..{size - 1} (efa pads with 0)")
        if dtype is not None and x.is_floating_point() and dtype.itemsize < x.dtype.itemsize:
            big = (x.abs() > torch.finfo(dtype).max) & torch.isfinite(x)
            if big.any():
                at = big.reshape(*x.shape[:2], -1).any(-1).nonzero()[0].tolist()
                raise ValueError(
                    f"field {f.name!r}: value {x[tuple(at)].tolist()} at sequence {at[0]}, "
                    f"position {at[1]} does not fit the model's {dtype} (largest "
                    f"{torch.finfo(dtype).max:.3g}); rescale it or use model.double()"
                )
            # A value inside the support can leave it once rounded (a gamma draw of 1e-48 is 0
            # in float32, and its log-density there is infinite).
            try:
                f.validate(x.to(dtype), m, f"field {f.name!r}")
            except ValueError as e:
                raise ValueError(f"{e}, once rounded to the model's {dtype} (the data are "
                                 f"{x.dtype}): rescale the field or use model.double()"
                                 ) from None
    extra = set(data.fields) - {f.name for f in fields}
    if extra:
        raise KeyError(f"data has fields the model does not know: {sorted(extra)}")


def validate_values(family: Family, x: Tensor, mask: Tensor, where: str) -> None:
    """Check the values at the real, observed positions ``mask``; every error names the
    (sequence, position) of the first bad value.

    Parameters
    ----------
    family : Family
        The family whose ``validate`` the values must pass.
    x : torch.Tensor, shape (N, I)
        The field's values.
    mask : torch.Tensor of bool, shape (N, I)
        The positions to check (real and observed).
    where : str
        Names the data in messages, e.g. ``"field 'rating'"``.

    Raises
    ------
    ValueError
        If ``x`` is not two-dimensional or a checked value is invalid for the family.
    """
    if x.dim() != 2:
        raise ValueError(f"{where}: expected shape [N, I], got {tuple(x.shape)}")
    if family.is_discrete and x.is_floating_point():
        refuse_float_integers(family, x, mask, where)
    try:
        family.validate(x[mask], where)
    except InvalidValues as err:
        if err.index is None:
            raise ValueError(f"{where}: {err}") from None
        s, i = mask.nonzero()[err.index[0]].tolist()
        message = str(err).split(" (first: ")[0]
        raise ValueError(
            f"{message} (first: {x[s, i].item()!r} at sequence {s}, position {i}); "
            f"{family!r} expects {str(err).split(' expects ', 1)[-1]}"
        ) from None


def refuse_float_integers(family: Family, x: Tensor, mask: Tensor, where: str) -> None:
    """Refuse counts and categories held as floats (pandas' int column with a NaN becomes
    float), with the way to hold them.

    It always raises: the message names the first value that is NaN/inf or not a whole
    number, or, when all are whole, says to convert the tensor.

    Parameters
    ----------
    family : Family
        The (discrete) family the values are for.
    x : torch.Tensor, shape (N, I)
        The field's values, a floating-point tensor.
    mask : torch.Tensor of bool, shape (N, I)
        The positions to check (real and observed).
    where : str
        Names the data in messages, e.g. ``"field 'rating'"``.

    Raises
    ------
    ValueError
        Always.
    """
    v = x[mask]
    at = mask.nonzero()
    hint = ("from pandas, an integer column with missing values becomes float: use the nullable "
            "'Int64' dtype and mark the gaps with observed= (Sequences.from_frame(..., "
            "missing=True) does both)")
    for bad, problem in ((~torch.isfinite(v), "is NaN/inf"), (v != torch.round(v),
                                                               "is not a whole number")):
        if bad.any():
            s, i = at[bad.nonzero()[0, 0]].tolist()
            raise ValueError(f"{where}: value {x[s, i].item()!r} at sequence {s}, position {i} "
                             f"{problem}; {family!r} expects integers; {hint}")
    raise ValueError(f"{where}: {family!r} expects an integer tensor, got dtype {x.dtype} "
                     f"(the values are whole numbers: convert with .long()); {hint}")


def check_distinct(x: Tensor, mask: Tensor, k: int, where: str) -> None:
    """Refuse a repeated item within a sequence of a ``distinct`` category, naming where.

    Parameters
    ----------
    x : torch.Tensor, shape (N, I)
        Item ids in ``0..k-1``.
    mask : torch.Tensor of bool, shape (N, I)
        The positions to check (real and observed); the others may hold anything.
    k : int
        The number of categories.
    where : str
        Names the data in messages, e.g. ``"field 'movie'"``.

    Raises
    ------
    ValueError
        If an item occurs twice in a sequence; the message gives the sequence, the item and
        its positions.
    """
    counts = torch.zeros(x.shape[0], k, dtype=torch.long, device=x.device)
    counts.scatter_add_(1, torch.where(mask, x, 0).long(), mask.long())
    if (counts > 1).any():
        s, item = (counts > 1).nonzero()[0].tolist()
        at = (mask[s] & (x[s] == item)).nonzero().flatten().tolist()
        raise ValueError(
            f"{where} is distinct (items never repeat in a sequence), but sequence {s} has "
            f"item {item} at positions {at}; use distinct=False for data with repeats"
        )


def refuse_padding(data: Sequences, at: Tensor | None) -> None:
    """Refuse asked positions (``at``, bool (B, I)) that are padding, naming the first.

    Parameters
    ----------
    data : Sequences
        The sequences.
    at : torch.Tensor or None
        The asked positions (None: nothing to check).

    Raises
    ------
    ValueError
        If ``at`` holds a position past its sequence's end.
    """
    if at is None:
        return
    beyond = at & ~data.valid()
    if beyond.any():
        b, i = (int(v) for v in beyond.nonzero()[0])
        raise ValueError(f"at asks for sequence {b}, position {i}, which is padding (the "
                         f"sequence has length {int(data.lengths[b])})")


def refuse_sampling(model: nn.Module, sampling: softmax.Sampling | None) -> None:
    """Refuse the sampled softmax for a model whose loss cannot take it (only efa.EFA's
    category targets can).

    Parameters
    ----------
    model : torch.nn.Module
        The model (its class name goes into the error).
    sampling : Sampling or None
        What the loss was handed.

    Raises
    ------
    ValueError
        If ``sampling`` is not None.
    """
    if sampling is not None:
        raise ValueError(f"{type(model).__name__} cannot train by the sampled softmax (efa.EFA's "
                         "category targets can): train it without sampled_softmax")


def refuse_generic_options(model: nn.Module, weights: Tensor | None,
                           counts: dict[str, int] | None,
                           sampling: softmax.Sampling | None) -> None:
    """For a model with an objective of its own: sampled positions (``weights``), data-parallel
    ``counts`` and the sampled softmax are refused by name.

    Parameters
    ----------
    model : torch.nn.Module
        The model (its class name goes into the error).
    weights, counts, sampling : object or None
        What the loss was handed: weights per sequence (``fit(..., positions=m)``),
        denominators across data-parallel ranks, the sampled softmax.

    Raises
    ------
    ValueError
        If any of them is not None, naming each.
    """
    given = [n for n, v in (("weights (positions=m)", weights), ("counts (data-parallel)", counts),
                            ("sampling (sampled_softmax)", sampling)) if v is not None]
    if given:
        raise ValueError(f"{type(model).__name__}.loss computes its own objective: it takes no "
                         f"{', '.join(given)}; train it without them")


def refuse_unobserved(data: Sequences, who: str) -> None:
    """Refuse data with an unobserved value, for a model whose input has a slot for every
    position (it has no way to leave a value out of a context).

    Parameters
    ----------
    data : Sequences
        The data.
    who : str
        The model's name, for the message.

    Raises
    ------
    ValueError
        Naming the first field, sequence and position whose value is not observed.
    """
    valid = data.valid()
    for name, seen in data.observed.items():
        hole = valid & ~seen
        if bool(hole.any()):
            s, i = (int(v) for v in hole.nonzero()[0])
            raise ValueError(f"{who} takes complete sequences: field {name!r} is not observed "
                             f"at sequence {s}, position {i}; drop that point or use a model "
                             "that leaves unobserved values out of its contexts (efa.EFA)")
