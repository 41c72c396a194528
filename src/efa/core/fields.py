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
subclass of :class:`Field` registered with :func:`register_field`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from torch import Tensor, nn

from efa.core.checks import check_distinct, validate_values
from efa.core.encoders import LinearReadout, MapEncoder, TableEncoder, ValueReadout
from efa.core.families import Categorical, Family, family_from_config
from efa.core.registry import Registry

ENCODERS = ("mlp", "linear", "identity", "table")
READOUTS = ("mlp", "linear")
ACTIVATIONS = ("relu", "leaky_relu")
# What a field's embedding feeds in the first attention layer: the queries, keys, values, and
# the token carried past the attention (the residual / concatenation path).
ROLES = ("q", "k", "v", "skip")
FieldT = TypeVar("FieldT", bound="Field")
FIELD_KINDS: Registry[type[Field]] = Registry("field kind", key=lambda cls: cls.kind)
# Finite, so that exp underflows to exactly 0 in float32 and no inf − inf can occur.
EXCLUDED = -1e4


def register_field(cls: type[FieldT]) -> type[FieldT]:
    """Class decorator: make a field kind rebuildable from its config's ``kind``."""
    return FIELD_KINDS.register(cls)


class Field:
    """Base class of field kinds: a dataclass with ``name``, ``target`` and ``dim``."""

    kind: ClassVar[str]
    name: str
    target: bool
    dim: int
    feeds: tuple[str, ...] = ROLES
    # Every field kind is a dataclass; declared so that asdict accepts the base's self.
    __dataclass_fields__: ClassVar[dict[str, Any]]

    def build_encoder(self) -> nn.Module:
        """Value → embedding [..., dim]; called as ``encoder(x, hidden)`` with ``hidden``
        [B, I] bool marking tokens replaced by [MASK] (None: nothing hidden)."""
        raise NotImplementedError

    def build_readout(self, d_model: int) -> nn.Module:
        """State [..., d_model] → natural parameter [..., num_natural] (targets only)."""
        raise NotImplementedError

    def validate(self, x: Tensor, mask: Tensor, where: str) -> None:
        """Raise ValueError with the (sequence, position) of the first bad value among the
        positions ``mask`` [N, I] (real, observed)."""
        raise NotImplementedError

    def config(self) -> dict:
        """The field as a JSON-ready dict (what ``efa.save`` writes, ``field_from_config``
        reads)."""
        return {"kind": self.kind, **asdict(self)}


# --------------------------------------------------------------------------- field kinds


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
        What each id stands for (saved with the model; used by ``efa.recommend``).
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
        _check_name(self.name)
        self.feeds = _check_feeds(self.name, self.feeds)
        self.num_categories = _as_int(self.num_categories)
        if not isinstance(self.num_categories, int) or self.num_categories < 2:
            raise ValueError(
                f"field {self.name!r}: num_categories must be an integer >= 2, "
                f"got {self.num_categories!r}"
            )
        self.dim = _as_int(self.dim)
        _check_positive(self.name, "dim", self.dim)
        _check_bool(self.name, target=self.target, readout_bias=self.readout_bias,
                    distinct=self.distinct, bag=self.bag)
        if self.vocab_chunk is not None:
            self.vocab_chunk = _as_int(self.vocab_chunk)
            _check_positive(self.name, "vocab_chunk", self.vocab_chunk)
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
        """U from the stored parameter. U = bag_scale · V: Adam moves every coordinate by
        about lr per step whatever its gradient, and U's entries are effects on the logits
        summed over the whole context, starting at zero, so they are stored ``bag_scale``
        times smaller to learn that much faster than the network's weights (docs/peers.md)."""
        return stored * self.bag_scale

    def build_encoder(self) -> nn.Module:
        return TableEncoder(self.num_categories, self.dim)

    def build_readout(self, d_model: int) -> nn.Module:
        return LinearReadout(d_model, self.num_categories, self.readout_bias)

    def validate(self, x: Tensor, mask: Tensor, where: str) -> None:
        validate_values(self.family, x, mask, where)
        if self.distinct:
            check_distinct(x, mask, self.num_categories, where)

    def restrict(self, eta: Tensor, seen: Tensor) -> Tensor:
        """The ``distinct`` support, p(x_i = k | c) ∝ exp(η_k)·1[k ∉ c]: ``eta`` [P, K] with
        the items ``seen`` [P, K] in each position's context set to ``EXCLUDED`` (a base measure
        that depends on the context, so the family stays exponential)."""
        return eta.masked_fill(seen, EXCLUDED) if self.distinct else eta


@register_field
@dataclass
class Value(Field):
    """An exponential-family field: a value y embedded by a map λ₁ and predicted through a
    read-out λ₂ giving the family's natural parameter.

    Parameters
    ----------
    name : str
        The field's name in the data.
    family : Family
        An instance from :mod:`efa.core.families` (``Poisson()``, ``Gaussian()``, ...).
    target : bool
        Whether the field is predicted (False: context only).
    dim : int
        Embedding width.
    encoder : {"mlp", "linear", "identity", "table"}
        λ₁: an MLP of ``hidden`` units, a linear map, the value itself (``dim=1``), or a table
        with one embedding per value 0..``num_values``−1 (discrete families).
    hidden, num_values : int
        The encoder's hidden width; the table encoder's number of values.
    readout : {"mlp", "linear"}
        λ₂: an MLP with ``readout_hidden`` widths and ``readout_activation``, or linear;
        ``readout_bias`` adds biases.
    loc, scale : float, optional
        Standardise the value before λ₁ sees it and, for location-scale families (Gaussians),
        map the read-out back (mean = loc + scale · z), so the network works in standardised
        units while the likelihood stays in the data's own units. Left at None, ``efa.fit``
        sets them to the mean and standard deviation of the observed training values before
        it trains (``EFA.standardise``); until then the value is used as it is.
    feeds : tuple of str
        What the embedding feeds in the first layer: "q", "k", "v", "skip".
    """

    name: str
    family: Family
    target: bool = True
    dim: int = 32
    encoder: str = "mlp"
    hidden: int = 128
    num_values: int | None = None
    readout: str = "mlp"
    readout_hidden: tuple[int, ...] = (32,)
    loc: float | None = None
    scale: float | None = None
    readout_activation: str = "relu"
    readout_bias: bool = True
    feeds: tuple[str, ...] = ROLES

    kind = "value"

    def __post_init__(self):
        _check_name(self.name)
        self.feeds = _check_feeds(self.name, self.feeds)
        if self.readout_activation not in ACTIVATIONS:
            raise ValueError(
                f"field {self.name!r}: readout_activation must be one of {ACTIVATIONS}"
            )
        if not isinstance(self.family, Family):
            raise TypeError(
                f"field {self.name!r}: family must be an efa.core.families.Family instance, "
                f"got {type(self.family).__name__}"
            )
        if self.encoder not in ENCODERS:
            raise ValueError(f"field {self.name!r}: encoder must be one of {ENCODERS}")
        if self.readout not in READOUTS:
            raise ValueError(f"field {self.name!r}: readout must be one of {READOUTS}")
        self.dim, self.hidden = _as_int(self.dim), _as_int(self.hidden)
        _check_positive(self.name, "dim", self.dim)
        _check_positive(self.name, "hidden", self.hidden)
        _check_bool(self.name, target=self.target, readout_bias=self.readout_bias)
        if isinstance(self.readout_hidden, int | np.integer):
            raise ValueError(f"field {self.name!r}: readout_hidden must be a tuple of layer "
                             f"widths, e.g. ({int(self.readout_hidden)},)")
        self.readout_hidden = tuple(_as_int(w) for w in self.readout_hidden)
        for w in self.readout_hidden:
            _check_positive(self.name, "each readout_hidden width", w)
        if self.encoder == "identity" and self.dim != 1:
            raise ValueError(f"field {self.name!r}: the identity encoder needs dim=1")
        if self.encoder == "table":
            self.num_values = _as_int(self.num_values)
            if self.num_values is not None:
                _check_positive(self.name, "num_values", self.num_values)
            if not self.family.is_discrete or not self.num_values:
                raise ValueError(
                    f"field {self.name!r}: encoder='table' needs a discrete family and "
                    "num_values (values 0..num_values-1 get an embedding each)"
                )
        for what in ("loc", "scale"):
            v = getattr(self, what)
            if v is not None:
                try:
                    setattr(self, what, float(v))
                except (TypeError, ValueError):
                    raise ValueError(f"field {self.name!r}: {what} must be a number or None, "
                                     f"got {v!r}") from None
        loc, scale = self.moments
        if not (scale > 0 and scale < float("inf")) or not abs(loc) < float("inf"):
            raise ValueError(
                f"field {self.name!r}: scale must be a positive finite number and loc finite, "
                f"got loc={self.loc}, scale={self.scale} (a zero scale means constant values)"
            )
        _check_positive(self.name, "dim", self.dim)
        self.readout_hidden = tuple(self.readout_hidden)

    @property
    def moments(self) -> tuple[float, float]:
        """(loc, scale) in use: 0 and 1 where not set (yet)."""
        return (0.0 if self.loc is None else self.loc, 1.0 if self.scale is None else self.scale)

    def config(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "family"}
        return {"kind": self.kind, **d, "family": self.family.config()}

    @classmethod
    def from_config(cls, d: dict) -> Value:
        d = dict(d)
        d["family"] = family_from_config(d["family"])
        d["readout_hidden"] = tuple(d["readout_hidden"])
        return cls(**d)

    def _table_size(self) -> int:
        if self.num_values is None:  # __post_init__ refuses it; kept for a changed field
            raise ValueError(f"field {self.name!r}: encoder='table' needs num_values")
        return self.num_values

    def build_encoder(self) -> nn.Module:
        if self.encoder == "table":
            return TableEncoder(self._table_size(), self.dim)
        return MapEncoder(1, self.dim, self.encoder, self.hidden, *self.moments, value=True)

    def build_readout(self, d_model: int) -> nn.Module:
        return ValueReadout(self, d_model)

    def validate(self, x: Tensor, mask: Tensor, where: str) -> None:
        validate_values(self.family, x, mask, where)
        if self.encoder == "table":
            bad = mask & (x >= self._table_size())
            if bad.any():
                s, i = bad.nonzero()[0].tolist()
                raise ValueError(
                    f"{where}: value {int(x[s, i])} at sequence {s}, position {i} has no row in "
                    f"the embedding table (encoder='table' with num_values={self.num_values})"
                )


@register_field
@dataclass
class Attribute(Field):
    """An always-observed covariate of ``size`` numbers per token, embedded by g(τ)."""

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
        _check_name(self.name)
        self.feeds = _check_feeds(self.name, self.feeds)
        self.size, self.dim, self.hidden = (_as_int(v) for v in (self.size, self.dim, self.hidden))
        _check_positive(self.name, "size", self.size)
        _check_positive(self.name, "dim", self.dim)
        _check_positive(self.name, "hidden", self.hidden)
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
        return MapEncoder(self.size, self.dim, self.encoder, self.hidden, self.loc,
                          self.scale, value=False)

    def validate(self, x: Tensor, mask: Tensor, where: str) -> None:
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
    """The field a ``Field.config()`` dict describes."""
    if not isinstance(d, dict):
        raise ValueError(f"a field's config must be a dict with a 'kind', got {d!r}")
    d = dict(d)
    if "kind" not in d:
        raise ValueError(f"field config {d!r} has no 'kind' (one of {sorted(FIELD_KINDS)})")
    cls = FIELD_KINDS.lookup(d.pop("kind"))
    return cls.from_config(d) if hasattr(cls, "from_config") else cls(**d)


# --------------------------------------------------------------------------- checks


def _as_int(v):
    """Accept NumPy / torch integers where a size is expected (np.int64 from a DataFrame)."""
    if hasattr(v, "item") and not isinstance(v, bool) and getattr(v, "ndim", 0) == 0:
        v = v.item()
    return v


def _check_feeds(name, feeds) -> tuple[str, ...]:
    if isinstance(feeds, str):
        feeds = (feeds,)
    if not isinstance(feeds, list | tuple | set | frozenset):
        raise ValueError(f"field {name!r}: feeds must be a non-empty subset of {ROLES}, got "
                         f"{feeds!r}")
    feeds = tuple(feeds)
    bad = [r for r in feeds if r not in ROLES]
    if bad or not feeds or len(set(feeds)) != len(feeds):
        raise ValueError(
            f"field {name!r}: feeds must be a non-empty subset of {ROLES} (what the field's "
            f"embedding feeds in the first attention layer), got {feeds!r}"
        )
    return tuple(r for r in ROLES if r in feeds)


def _check_name(name):
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"field names must be Python identifiers, got {name!r}")


def _check_bool(name, **values):
    """A string such as 'False' is truthy: options that are switches must be booleans."""
    for what, v in values.items():
        if not isinstance(v, bool | np.bool_):
            raise ValueError(f"field {name!r}: {what} must be True or False, got {v!r}")


def _check_positive(name, what, value):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"field {name!r}: {what} must be a positive integer, got {value!r}")
