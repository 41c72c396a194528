"""The ``Value`` field kind: an exponential-family y_i (a rating, a temperature, a count),
embedded by a learned map λ₁ of the standardised value and read out by λ₂ into the family's
natural parameter (the overview of field kinds is :mod:`efa.core.fields`)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from efa.core.checks import validate_values
from efa.core.encoders import MapEncoder, TableEncoder, ValueReadout
from efa.core.families import Family, family_from_config
from efa.core.fieldbase import ACTIVATIONS, ENCODERS, READOUTS, ROLES, Field, register_field


@register_field
@dataclass
class Value(Field):
    """An exponential-family field: a value y embedded by a map λ₁ and predicted through a
    read-out λ₂ giving the family's natural parameter.

    Parameters
    ----------
    name : str
        The field's name in the data (a Python identifier).
    family : Family
        An instance from :mod:`efa.core.families` (``Poisson()``, ``Gaussian()``, ...).
    target : bool
        Whether the field is predicted (False: context only).
    dim : int
        Embedding width.
    encoder : {"mlp", "linear", "identity", "table"}
        λ₁: an MLP of ``hidden`` units, a linear map, the value itself (``dim=1``), or a table
        with one embedding per value 0..``num_values``−1 (discrete families).
    hidden : int
        The "mlp" encoder's hidden width.
    num_values : int, optional
        The "table" encoder's number of values (required by it).
    readout : {"mlp", "linear"}
        λ₂: an MLP with ``readout_hidden`` widths and ``readout_activation``, or linear.
    readout_hidden : tuple of int
        The widths of the "mlp" read-out's hidden layers.
    loc, scale : float, optional
        Standardise the value before λ₁ sees it and, for location-scale families (Gaussians),
        map the read-out back (mean = loc + scale · z; Gamma: rate / scale), so the network
        works in standardised units while the likelihood stays in the data's own units. Left
        at None, ``efa.fit`` sets them to the mean and standard deviation of the observed
        training values before it trains (``EFA.standardise``); until then the value is used
        as it is.
    readout_activation : {"relu", "leaky_relu"}
        The "mlp" read-out's activation.
    readout_bias : bool
        Whether the read-out's layers have biases.
    feeds : tuple of str
        What the embedding feeds in the first layer: "q", "k", "v", "skip" (default: all).

    Raises
    ------
    TypeError
        If ``family`` is not a :class:`efa.core.families.base.Family` instance.
    ValueError
        If another argument is invalid (e.g. ``encoder="table"`` without ``num_values`` or
        for a continuous family, a scale that is not positive and finite).
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
        self._check_name(self.name)
        self.feeds = self._check_feeds(self.name, self.feeds)
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
        self.dim, self.hidden = self._as_int(self.dim), self._as_int(self.hidden)
        self._check_positive(self.name, "dim", self.dim)
        self._check_positive(self.name, "hidden", self.hidden)
        self._check_bool(self.name, target=self.target, readout_bias=self.readout_bias)
        if not isinstance(self.readout_hidden, list | tuple):
            raise ValueError(f"field {self.name!r}: readout_hidden must be a tuple of layer "
                             f"widths, e.g. (32,), got {self.readout_hidden!r}")
        self.readout_hidden = tuple(self._as_int(w) for w in self.readout_hidden)
        for w in self.readout_hidden:
            self._check_positive(self.name, "each readout_hidden width", w)
        if self.encoder == "identity" and self.dim != 1:
            raise ValueError(f"field {self.name!r}: the identity encoder needs dim=1")
        if self.encoder == "table":
            self.num_values = self._as_int(self.num_values)
            if self.num_values is not None:
                self._check_positive(self.name, "num_values", self.num_values)
            if not self.family.is_discrete or not self.num_values:
                raise ValueError(
                    f"field {self.name!r}: encoder='table' needs a discrete family and "
                    "num_values (values 0..num_values-1 get an embedding each)"
                )
            support = self.family.enumerable_support()
            if support is not None and int(support.max()) >= self.num_values:
                raise ValueError(f"field {self.name!r}: num_values={self.num_values} leaves out "
                                 f"values its family {self.family!r} can take (up to "
                                 f"{int(support.max())}): give num_values="
                                 f"{int(support.max()) + 1}")
        for what in ("loc", "scale"):
            v = getattr(self, what)
            if isinstance(v, bool | str):  # float(True) is 1.0, float("1") is 1.0
                raise ValueError(f"field {self.name!r}: {what} must be a number or None, got "
                                 f"{v!r}")
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
        self._check_positive(self.name, "dim", self.dim)
        self.readout_hidden = tuple(self.readout_hidden)

    @property
    def moments(self) -> tuple[float, float]:
        """(loc, scale) in use: 0 and 1 where not set (yet)."""
        return (0.0 if self.loc is None else self.loc, 1.0 if self.scale is None else self.scale)

    def standardise_on(self, y: Tensor, dtype: torch.dtype) -> None:
        """Set an unset ``loc`` / ``scale`` to the mean and standard deviation of the observed
        training values ``y`` (scale 1 when they are constant), as ``efa.fit`` does; warn of
        what a model of ``dtype`` or a fixed σ will make of them.

        Parameters
        ----------
        y : torch.Tensor, shape (n,)
            The field's observed training values.
        dtype : torch.dtype
            The model's floating dtype (its predictions and likelihoods are in y's units).
        """
        y = y.double()
        if self.loc is None:
            self.loc = float(y.mean()) if len(y) else 0.0
        if self.scale is None:
            std = float(y.std()) if len(y) > 1 else 0.0
            self.scale = std if std > 0 and std < float("inf") else 1.0
            sigma = getattr(self.family, "sigma", None)
            if isinstance(sigma, float) and std > 0 and not 0.1 <= std / sigma <= 10:
                warnings.warn(f"field {self.name!r}: its training values' standard deviation "
                              f"is {std:.3g}, its family's fixed sigma {sigma:.3g} (in the "
                              "data's units): pass a sigma of the data's scale, or learn it "
                              "(LearnedGaussian, HeteroscedasticGaussian)", stacklevel=5)
        if dtype == torch.float32 and len(y) and not self.family.is_discrete:
            # Far from 0, float32's spacing is a visible part of the spread (values near 1e7
            # with sd 1: predicted means land on whole numbers).
            top = float(y.abs().max())
            spacing = torch.finfo(torch.float32).eps * top
            if spacing > 1e-3 * self.moments[1]:
                warnings.warn(f"field {self.name!r}: its training values reach {top:.6g} with a "
                              f"spread of {self.moments[1]:.3g}; a float32 model's predictions "
                              f"and likelihoods resolve them to about {spacing:.2g}: subtract "
                              "an offset first or use a float64 model (model.double())",
                              stacklevel=5)

    def config(self) -> dict:
        """The field as a JSON-ready dict, its family as the family's own config.

        Returns
        -------
        dict
            ``{"kind": "value", **arguments, "family": family.config()}``.
        """
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "family"}
        return {"kind": self.kind, **d, "family": self.family.config()}

    @classmethod
    def from_config(cls, d: dict) -> Value:
        """The field that :meth:`config` describes (without its ``kind``).

        Parameters
        ----------
        d : dict
            The arguments, the family as its config.

        Returns
        -------
        Value
            A new field, with a new family (its learned parameters come from a state_dict).
        """
        d = dict(d)
        d["family"] = family_from_config(d["family"])
        d["readout_hidden"] = tuple(d["readout_hidden"])
        return cls(**d)

    def _table_size(self) -> int:
        if self.num_values is None:  # __post_init__ refuses it; kept for a changed field
            raise ValueError(f"field {self.name!r}: encoder='table' needs num_values")
        return self.num_values

    def build_encoder(self) -> nn.Module:
        """λ₁: a table of ``num_values`` embeddings, or a map of the standardised value, each
        with a [MASK] embedding.

        Returns
        -------
        torch.nn.Module
            ``encoder(x, hidden)`` maps values of shape (B, I) to embeddings (B, I, dim),
            [MASK] where ``hidden`` (a bool tensor, or None: nowhere).
        """
        if self.encoder == "table":
            return TableEncoder(self._table_size(), self.dim)
        return MapEncoder(1, self.dim, self.encoder, self.hidden, *self.moments, value=True)

    def build_readout(self, d_model: int) -> nn.Module:
        """λ₂: state → the family's natural parameter, through ``Family.link_standardised``.

        Parameters
        ----------
        d_model : int
            The width of the state it reads.

        Returns
        -------
        torch.nn.Module
            Maps a state of shape (..., d_model) to η, shape (..., num_natural).
        """
        return ValueReadout(self, d_model)

    def validate(self, x: Tensor, mask: Tensor, where: str) -> None:
        """Check the values at the positions ``mask`` against the family (and, for a table
        encoder, that each has a row).

        Parameters
        ----------
        x : torch.Tensor, shape (N, I)
            The field's values.
        mask : torch.Tensor of bool, shape (N, I)
            The positions to check (real and observed).
        where : str
            Names the data in messages, e.g. ``"field 'rating'"``.

        Raises
        ------
        ValueError
            If a checked value is invalid; the message gives its sequence and position.
        """
        validate_values(self.family, x, mask, where)
        if self.encoder == "table":
            bad = mask & (x >= self._table_size())
            if bad.any():
                s, i = bad.nonzero()[0].tolist()
                raise ValueError(
                    f"{where}: value {int(x[s, i])} at sequence {s}, position {i} has no row in "
                    f"the embedding table (encoder='table' with num_values={self.num_values})"
                )
