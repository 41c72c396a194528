"""Fields: what each token of a sequence is made of, and how each part is embedded, read out
and checked.

A token at position i carries one value per field. Each field kind is one class that builds
its own encoder (value → embedding, with a [MASK] embedding where it can be hidden), its own
read-out (state → natural parameter, for targets) and validates its own values:

- ``Category``: a categorical x_i (a movie, a product). Embedded by a table β with an extra
  [MASK] row; as a target, read out by center embeddings δ into Categorical logits.
  ``distinct=True`` says that items never repeat within a sequence: the support of x_i given
  its context excludes the context's items (for EFA and every baseline alike). ``bag=True``
  adds the bag-of-context term Σ_{j in c(i)} U[x_j] (a learned K × K table U) to EFA's logits,
  so that EFA contains the multinomial logit on context counts (docs/peers.md); ``bag_l2`` is
  its Gaussian prior (an L2 penalty in the training loss) and ``bag_scale`` its step size.
- ``Value``: an exponential-family y_i (a rating, a temperature, a count). Embedded by λ₁, a
  learned map of the standardised value ((y − loc)/scale; never a table of truncated floats
  unless asked); as a target, read out by λ₂ into the family's natural parameter, with the
  family mapping standardised units back to the data's (``Family.link_standardised``).
- ``Attribute``: an always-observed covariate τ_i (latitude/longitude), embedded by g(τ);
  never masked and never predicted.

Every field also says what it ``feeds`` in the first attention layer: by default its embedding
is part of the token that the queries, keys and values are computed from and that the block
carries on ("skip"); ``feeds=("q", "k", "skip")`` makes a field attribute-like (it decides where
to attend, never what is read), ``feeds=("v",)`` makes it a pure value (the UNN note's x and y).

Fields are listed in factorisation order: predicting target field k at position i hides target
fields k, k+1, ... at i, so ``[movie, rating]`` predicts the movie with movie and rating hidden
and the rating with the movie visible (Eq. 2 of the EFA paper). A new kind of token is one new
subclass of :class:`efa.core.fieldbase.Field` registered with
:func:`efa.core.fieldbase.register_field`.

``Category`` and ``Attribute`` are defined here, ``Value`` in :mod:`efa.core.value` and the
base class, the registry ``FIELD_KINDS`` and the names of the choices (``ROLES``,
``ENCODERS``, ...) in :mod:`efa.core.fieldbase`; all are importable from this module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor, nn

from efa.core.checks import check_distinct, validate_values
from efa.core.encoders import LinearReadout, MapEncoder, TableEncoder
from efa.core.families import Categorical
from efa.core.fieldbase import (
    ACTIVATIONS,
    ENCODERS,
    FIELD_KINDS,
    READOUTS,
    ROLES,
    Field,
    FieldT,
    register_field,
)
from efa.core.value import Value
from efa.deprecation import moved_out

__getattr__ = moved_out(__name__)  # names moved out: efa.deprecation.MOVED_NAMES

__all__ = [
    "ACTIVATIONS",
    "ENCODERS",
    "EXCLUDED",
    "FIELD_KINDS",
    "READOUTS",
    "ROLES",
    "Attribute",
    "Category",
    "Field",
    "FieldT",
    "Value",
    "field_from_config",
    "register_field",
]

# Finite, so that exp underflows to exactly 0 in float32 and no inf − inf can occur.
EXCLUDED = -1e4


@register_field
@dataclass
class Category(Field):
    """A categorical field: an item x in 0..K−1, embedded by a table and predicted by softmax.

    Parameters
    ----------
    name : str
        The field's name in the data.
    num_categories : int
        K, the vocabulary's size (≥ 2).
    target : bool
        Whether the field is predicted (False: context only).
    dim : int
        Embedding width.
    readout_bias : bool
        A bias per item in the read-out δ.
    distinct : bool
        Items cannot repeat within a sequence: the support at a position excludes the items of
        its context (exact; the likelihood renormalises over what is left).
    vocab_chunk : int, optional
        Compute the log-softmax over the items in chunks of this size (large catalogues).
    feeds : tuple of str
        What the embedding feeds in the first layer: "q", "k", "v", "skip".
    bag : bool
        Add the multinomial logit's bag-of-context term b + Σ U[x_j] to the logits, so the
        model contains that logit exactly (``efa.fit_glm_first`` fits it first).
    bag_l2, bag_scale : float
        A Gaussian prior (bag_l2/2)·‖U‖² on the bag term, and the factor U is stored divided
        by (it then learns at the pace of the network's weights).
    labels : tuple, optional
        What each id stands for: K distinct strings or numbers (saved with the model; used by
        ``efa.recommend``).

    Raises
    ------
    ValueError
        If an argument is invalid, or ``bag=True`` comes with ``vocab_chunk`` or without
        ``target``.
    """

    name: str
    num_categories: int
    target: bool = True
    dim: int = 32
    readout_bias: bool = False
    distinct: bool = False
    vocab_chunk: int | None = None
    feeds: tuple[str, ...] = ROLES
    bag: bool = False
    bag_l2: float = 0.0
    bag_scale: float = 10.0
    labels: tuple | None = None  # what id k stands for (saved with the model), if known

    kind = "category"

    def __post_init__(self):
        self._check_name(self.name)
        self.feeds = self._check_feeds(self.name, self.feeds)
        self.num_categories = self._as_int(self.num_categories)
        if not isinstance(self.num_categories, int) or self.num_categories < 2:
            raise ValueError(
                f"field {self.name!r}: num_categories must be an integer >= 2, "
                f"got {self.num_categories!r}"
            )
        self.dim = self._as_int(self.dim)
        self._check_positive(self.name, "dim", self.dim)
        self._check_bool(self.name, target=self.target, readout_bias=self.readout_bias,
                    distinct=self.distinct, bag=self.bag)
        if self.vocab_chunk is not None:
            self.vocab_chunk = self._as_int(self.vocab_chunk)
            self._check_positive(self.name, "vocab_chunk", self.vocab_chunk)
        if self.bag and self.vocab_chunk is not None:
            raise ValueError(f"field {self.name!r}: bag=True needs the dense logits (a K × K "
                             "table), which vocab_chunk is there to avoid: use one or the other")
        if self.bag and not self.target:
            raise ValueError(f"field {self.name!r}: bag=True adds a term to the field's own "
                             "logits, so it needs target=True")
        for what in ("bag_l2", "bag_scale"):
            value = getattr(self, what)
            if isinstance(value, bool) or not isinstance(value, int | float | np.integer |
                                                         np.floating):
                raise ValueError(f"field {self.name!r}: {what} must be a number, got {value!r}")
        self.bag_l2, self.bag_scale = float(self.bag_l2), float(self.bag_scale)
        if not (0 <= self.bag_l2 < float("inf")) or not (0 < self.bag_scale < float("inf")):
            raise ValueError(f"field {self.name!r}: bag_l2 must be >= 0 and bag_scale > 0 "
                             f"(finite), got {self.bag_l2} and {self.bag_scale}")
        if self.labels is not None:
            if isinstance(self.labels, str | bytes):
                raise ValueError(f"field {self.name!r}: labels must be a list with one label per "
                                 f"id, got the string {self.labels!r}")
            labels = tuple(v.item() if isinstance(v, np.generic) else v for v in self.labels)
            if len(labels) != self.num_categories or not all(
                    isinstance(v, str | int | float | bool) for v in labels) or len(
                    set(labels)) != len(labels):  # set() last: only scalars reach it
                raise ValueError(f"field {self.name!r}: labels must be {self.num_categories} "
                                 f"distinct strings or numbers, one per id, got {self.labels!r}")
            self.labels = labels
        self.family = Categorical(self.num_categories)

    def config(self) -> dict:
        """The field as a JSON-ready dict; the bag arguments only when ``bag=True`` and the
        labels only when given (so that saved configs of models without them stay as they
        were).

        Returns
        -------
        dict
            ``{"kind": "category", **arguments}``.
        """
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        if not self.bag:  # saved configs of models without it stay as they were
            for k in ("bag", "bag_l2", "bag_scale"):
                del d[k]
        if self.labels is None:
            del d["labels"]
        else:
            d["labels"] = list(self.labels)
        return {"kind": self.kind, **d}

    def bag_table(self, stored: Tensor) -> Tensor:
        """The bag-of-context table U from the stored parameter V: U = bag_scale · V.

        Adam moves every coordinate by about lr per step whatever its gradient, and U's
        entries are effects on the logits summed over the whole context, starting at zero, so
        they are stored ``bag_scale`` times smaller to learn that much faster than the
        network's weights (docs/peers.md).

        Parameters
        ----------
        stored : torch.Tensor, shape (K, K)
            The stored parameter V.

        Returns
        -------
        torch.Tensor, shape (K, K)
            U.
        """
        return stored * self.bag_scale

    def build_encoder(self) -> nn.Module:
        """The table β: an embedding per item and a [MASK] row.

        Returns
        -------
        torch.nn.Module
            ``encoder(x, hidden)`` maps items of shape (B, I) to embeddings (B, I, dim),
            [MASK] where ``hidden`` (a bool tensor, or None: nowhere).
        """
        return TableEncoder(self.num_categories, self.dim)

    def build_readout(self, d_model: int) -> nn.Module:
        """The read-out δ: a linear map of the state to the K logits.

        Parameters
        ----------
        d_model : int
            The width of the state it reads.

        Returns
        -------
        torch.nn.Module
            Maps a state of shape (..., d_model) to logits (..., K).
        """
        return LinearReadout(d_model, self.num_categories, self.readout_bias)

    def validate(self, x: Tensor, mask: Tensor, where: str) -> None:
        """Check that the items at the positions ``mask`` are ids in 0..K−1 (and, if
        ``distinct``, that none repeats within a sequence).

        Parameters
        ----------
        x : torch.Tensor, shape (N, I)
            Item ids, an integer tensor.
        mask : torch.Tensor of bool, shape (N, I)
            The positions to check (real and observed).
        where : str
            Names the data in messages, e.g. ``"field 'movie'"``.

        Raises
        ------
        ValueError
            If a checked item is invalid or repeats; the message gives its sequence and
            position.
        """
        validate_values(self.family, x, mask, where)
        if self.distinct:
            check_distinct(x, mask, self.num_categories, where)

    def restrict(self, eta: Tensor, seen: Tensor) -> Tensor:
        """The ``distinct`` support, p(x_i = k | c) ∝ exp(η_k)·1[k ∉ c].

        The logits of the items in each position's context are set to ``EXCLUDED`` (a base
        measure that depends on the context, so the family stays exponential); without
        ``distinct``, ``eta`` is returned as it is.

        Parameters
        ----------
        eta : torch.Tensor, shape (P, K)
            Logits, one row per position.
        seen : torch.Tensor of bool, shape (P, K)
            The items in each position's context.

        Returns
        -------
        torch.Tensor, shape (P, K)
            The restricted logits.
        """
        return eta.masked_fill(seen, EXCLUDED) if self.distinct else eta


@register_field
@dataclass
class Attribute(Field):
    """An always-observed covariate τ of ``size`` numbers per token (e.g. latitude and
    longitude), embedded by g(τ); never masked and never predicted (``target`` is False).

    Parameters
    ----------
    name : str
        The field's name in the data (a Python identifier).
    size : int
        Numbers per token; the data hold an (N, I, size) floating-point tensor.
    dim : int
        Embedding width.
    hidden : int
        The "mlp" encoder's hidden width.
    encoder : {"mlp", "linear", "identity"}
        g: an MLP, a linear map, or the standardised numbers themselves (``dim == size``).
    loc, scale : list of float
        Per number, what is subtracted and what it is then divided by before g (default:
        0 and 1); ``size`` entries each, ``scale`` positive and finite.
    feeds : tuple of str
        What the embedding feeds in the first layer: "q", "k", "v", "skip" (default: all).

    Raises
    ------
    ValueError
        If an argument is invalid.
    """

    name: str
    size: int = 1
    dim: int = 32
    hidden: int = 128
    encoder: str = "mlp"
    loc: list[float] = field(default_factory=list)
    scale: list[float] = field(default_factory=list)
    feeds: tuple[str, ...] = ROLES

    kind = "attribute"
    target = False

    def __post_init__(self):
        self._check_name(self.name)
        self.feeds = self._check_feeds(self.name, self.feeds)
        self.size, self.dim, self.hidden = (self._as_int(v)
                                            for v in (self.size, self.dim, self.hidden))
        self._check_positive(self.name, "size", self.size)
        self._check_positive(self.name, "dim", self.dim)
        self._check_positive(self.name, "hidden", self.hidden)
        if self.encoder not in ("mlp", "linear", "identity"):
            raise ValueError(f"field {self.name!r}: encoder must be 'mlp', 'linear' or 'identity'")
        if self.encoder == "identity" and self.dim != self.size:
            raise ValueError(f"field {self.name!r}: the identity encoder needs dim == size")
        for what in ("loc", "scale"):
            v = getattr(self, what)
            if isinstance(v, int | float | str | bytes) or not hasattr(v, "__iter__"):
                raise ValueError(f"field {self.name!r}: {what} must be a list of {self.size} "
                                 f"numbers, got {v!r}")
        self.loc = [float(v) for v in self.loc] or [0.0] * self.size
        self.scale = [float(v) for v in self.scale] or [1.0] * self.size
        if not all(math.isfinite(v) for v in self.loc):
            raise ValueError(f"field {self.name!r}: loc must be finite, got {self.loc}")
        if len(self.loc) != self.size or len(self.scale) != self.size:
            raise ValueError(f"field {self.name!r}: loc and scale need {self.size} entries each")
        bad = [j for j, s in enumerate(self.scale) if not (s > 0 and s < float("inf"))]
        if bad:
            raise ValueError(
                f"field {self.name!r}: scale[{bad[0]}] = {self.scale[bad[0]]} must be positive "
                "and finite (a zero scale means that coordinate is constant: drop it)"
            )

    def build_encoder(self) -> nn.Module:
        """g: the map of the standardised numbers (no [MASK]: an attribute is never hidden).

        Returns
        -------
        torch.nn.Module
            ``encoder(x, hidden)`` maps numbers of shape (B, I, size) to embeddings
            (B, I, dim).
        """
        return MapEncoder(self.size, self.dim, self.encoder, self.hidden, self.loc,
                          self.scale, value=False)

    def validate(self, x: Tensor, mask: Tensor, where: str) -> None:
        """Check the shape and dtype of the attribute and that its numbers are finite at the
        positions ``mask``.

        Parameters
        ----------
        x : torch.Tensor, shape (N, I, size)
            The numbers, a floating-point tensor.
        mask : torch.Tensor of bool, shape (N, I)
            The positions to check (real).
        where : str
            Names the data in messages, e.g. ``"field 'coords'"``.

        Raises
        ------
        ValueError
            If the shape is wrong or a checked number is NaN or infinite.
        TypeError
            If ``x`` is not floating point.
        """
        if x.dim() != 3 or x.shape[2] != self.size:
            raise ValueError(f"{where}: expected shape [N, I, {self.size}], got {tuple(x.shape)}")
        if not x.is_floating_point():
            raise TypeError(f"{where}: attributes must be floating point, got {x.dtype}")
        bad = ~torch.isfinite(x).all(-1) & mask
        if bad.any():
            s, i = bad.nonzero()[0].tolist()
            raise ValueError(
                f"{where}: {int(bad.sum())} tokens with NaN/inf attribute values (first at "
                f"sequence {s}, position {i}: {x[s, i].tolist()})"
            )


def field_from_config(d: dict) -> Field:
    """The field a ``Field.config()`` dict describes.

    Parameters
    ----------
    d : dict
        ``{"kind": kind, **arguments}``, as ``Field.config()`` writes it.

    Returns
    -------
    Field
        A new field of the registered kind.

    Raises
    ------
    ValueError
        If ``d`` is not a dict, has no ``kind``, or names an unknown kind
        (:class:`efa.core.registry.UnknownName`, also a ``KeyError``).
    """
    if not isinstance(d, dict):
        raise ValueError(f"a field's config must be a dict with a 'kind', got {d!r}")
    d = dict(d)
    if "kind" not in d:
        raise ValueError(f"field config {d!r} has no 'kind' (one of {sorted(FIELD_KINDS)})")
    cls = FIELD_KINDS.lookup(d.pop("kind"))
    return cls.from_config(d) if hasattr(cls, "from_config") else cls(**d)
