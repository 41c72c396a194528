"""Field specifications: what each token of a sequence is made of.

A token at position i carries one value per field. Three kinds of field:

- ``Category``: a categorical variable x_i (a movie, a product). Embedded by a table β with an
  extra [MASK] row; as a target it is read out by center embeddings δ into Categorical logits.
- ``Value``: an exponential-family variable y_i (a rating, a temperature, a count). Embedded by
  λ₁, a learned map of the value (never a table of truncated floats); as a target it is read out
  by λ₂ into the family's natural parameter.
- ``Attribute``: an always-observed covariate τ_i (latitude/longitude, a lag indicator), embedded
  by a learned map g(τ). Attributes are never masked and never predicted.

Fields are listed in factorisation order. Predicting target field k at position i hides target
fields k, k+1, ... at position i, so with fields ``[movie, rating]`` the movie is predicted with
movie and rating hidden and the rating with the movie visible: the two terms of Eq. 2 of the EFA
paper.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from efa.families import Categorical, Family, family_from_config

ENCODERS = ("mlp", "linear", "identity", "table")
READOUTS = ("mlp", "linear")


@dataclass
class Category:
    name: str
    num_categories: int
    target: bool = True
    dim: int = 32
    readout_bias: bool = False

    kind = "category"

    def __post_init__(self):
        _check_name(self.name)
        if not isinstance(self.num_categories, int) or self.num_categories < 2:
            raise ValueError(
                f"field {self.name!r}: num_categories must be an integer >= 2, "
                f"got {self.num_categories!r}"
            )
        _check_positive(self.name, "dim", self.dim)
        self.family = Categorical(self.num_categories)

    def config(self) -> dict:
        return {"kind": self.kind, **{k: v for k, v in asdict(self).items()}}


@dataclass
class Value:
    """An exponential-family field.

    ``loc``/``scale`` standardise the value before λ₁ sees it and, for Gaussian families, map the
    readout back (mean = loc + scale · z), so the network works in standardised units while the
    likelihood stays in the data's own units.
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
    loc: float = 0.0
    scale: float = 1.0

    kind = "value"

    def __post_init__(self):
        _check_name(self.name)
        if not isinstance(self.family, Family):
            raise TypeError(
                f"field {self.name!r}: family must be an efa.families.Family instance, "
                f"got {type(self.family).__name__}"
            )
        if self.encoder not in ENCODERS:
            raise ValueError(f"field {self.name!r}: encoder must be one of {ENCODERS}")
        if self.readout not in READOUTS:
            raise ValueError(f"field {self.name!r}: readout must be one of {READOUTS}")
        if self.encoder == "identity" and self.dim != 1:
            raise ValueError(f"field {self.name!r}: the identity encoder needs dim=1")
        if self.encoder == "table":
            if not self.family.is_discrete or not self.num_values:
                raise ValueError(
                    f"field {self.name!r}: encoder='table' needs a discrete family and "
                    "num_values (values 0..num_values-1 get an embedding each)"
                )
        if not self.scale > 0:
            raise ValueError(f"field {self.name!r}: scale must be > 0, got {self.scale}")
        _check_positive(self.name, "dim", self.dim)
        self.readout_hidden = tuple(self.readout_hidden)

    def config(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "family"}
        return {"kind": self.kind, **d, "family": self.family.config()}


@dataclass
class Attribute:
    """An always-observed covariate of ``size`` numbers per token, embedded by g(τ)."""

    name: str
    size: int = 1
    dim: int = 32
    hidden: int = 128
    encoder: str = "mlp"
    loc: list[float] = field(default_factory=list)
    scale: list[float] = field(default_factory=list)

    kind = "attribute"
    target = False

    def __post_init__(self):
        _check_name(self.name)
        _check_positive(self.name, "size", self.size)
        _check_positive(self.name, "dim", self.dim)
        if self.encoder not in ("mlp", "linear", "identity"):
            raise ValueError(f"field {self.name!r}: encoder must be 'mlp', 'linear' or 'identity'")
        if self.encoder == "identity" and self.dim != self.size:
            raise ValueError(f"field {self.name!r}: the identity encoder needs dim == size")
        self.loc = list(self.loc) or [0.0] * self.size
        self.scale = list(self.scale) or [1.0] * self.size
        if len(self.loc) != self.size or len(self.scale) != self.size:
            raise ValueError(f"field {self.name!r}: loc and scale need {self.size} entries each")

    def config(self) -> dict:
        return {"kind": self.kind, **asdict(self)}


Field = Category | Value | Attribute


def field_from_config(d: dict) -> Field:
    d = dict(d)
    kind = d.pop("kind")
    if kind == "category":
        return Category(**d)
    if kind == "value":
        d["family"] = family_from_config(d["family"])
        d["readout_hidden"] = tuple(d["readout_hidden"])
        return Value(**d)
    if kind == "attribute":
        return Attribute(**d)
    raise ValueError(f"unknown field kind {kind!r}")


def _check_name(name):
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"field names must be Python identifiers, got {name!r}")


def _check_positive(name, what, value):
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"field {name!r}: {what} must be a positive integer, got {value!r}")
