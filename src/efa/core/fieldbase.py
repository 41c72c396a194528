"""The contract every field kind follows (:class:`Field`), the registry of kinds
(``FIELD_KINDS``, :func:`register_field`) and the checks of the arguments that the kinds share.

The kinds themselves, and the overview of what a field is, are in :mod:`efa.core.fields`.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, ClassVar, TypeVar

import numpy as np
from torch import Tensor, nn

from efa.core.registry import Registry

# Attribute names of torch's module dicts, which cannot also be keys of one.
_TAKEN = frozenset(n for n in dir(nn.ModuleDict()) if not n.startswith("_"))

ENCODERS = ("mlp", "linear", "identity", "table")
READOUTS = ("mlp", "linear")
ACTIVATIONS = ("relu", "leaky_relu")
# What a field's embedding feeds in the first attention layer: the queries, keys, values, and
# the token carried past the attention (the residual / concatenation path).
ROLES = ("q", "k", "v", "skip")
FieldT = TypeVar("FieldT", bound="Field")
FIELD_KINDS: Registry[type[Field]] = Registry("field kind", key=lambda cls: cls.kind)


def register_field(cls: type[FieldT]) -> type[FieldT]:
    """Class decorator: make a field kind rebuildable from its config's ``kind``.

    ``cls`` is a subclass of :class:`Field`; its class attribute ``kind`` is its name in
    configs, which :func:`efa.core.fields.field_from_config` looks up.

    Returns
    -------
    type
        ``cls`` itself, registered in ``FIELD_KINDS``.

    Raises
    ------
    ValueError
        If another field kind has taken the name.
    """
    return FIELD_KINDS.register(cls)


class Field:
    """Base class of field kinds: a dataclass with ``name``, ``target`` and ``dim``.

    A kind sets the class attribute ``kind`` (its name in configs), is a dataclass whose
    fields are its arguments, and implements :meth:`build_encoder`, :meth:`build_readout` (if
    it can be a target) and :meth:`validate`; ``feeds`` says what its embedding feeds in the
    first attention layer (a subset of ``ROLES``: "q", "k", "v", "skip").
    """

    kind: ClassVar[str]
    name: str
    target: bool
    dim: int
    feeds: tuple[str, ...] = ROLES
    # Every field kind is a dataclass; declared so that asdict accepts the base's self.
    __dataclass_fields__: ClassVar[dict[str, Any]]

    def build_encoder(self) -> nn.Module:
        """The field's encoder: value → embedding, with a [MASK] embedding where it can be
        hidden.

        Returns
        -------
        torch.nn.Module
            Called as ``encoder(x, hidden)`` with ``hidden`` a bool tensor of shape (B, I)
            marking the tokens replaced by [MASK] (None: nothing hidden); it returns
            embeddings of shape (B, I, dim).
        """
        raise NotImplementedError

    def build_readout(self, d_model: int) -> nn.Module:
        """The field's read-out: state → natural parameter (targets only).

        Parameters
        ----------
        d_model : int
            The width of the state it reads.

        Returns
        -------
        torch.nn.Module
            Maps a state of shape (..., d_model) to the natural parameter, shape
            (..., num_natural).
        """
        raise NotImplementedError

    def validate(self, x: Tensor, mask: Tensor, where: str) -> None:
        """Raise an error with the (sequence, position) of the first bad value among the
        positions ``mask``.

        Parameters
        ----------
        x : torch.Tensor, shape (N, I) or (N, I, size)
            The field's values.
        mask : torch.Tensor of bool, shape (N, I)
            The positions to check (real and observed).
        where : str
            Names the data in messages, e.g. ``"field 'rating'"``.

        Raises
        ------
        ValueError
            If a checked value is invalid for the field.
        """
        raise NotImplementedError

    def config(self) -> dict:
        """The field as a JSON-ready dict (what ``efa.save`` writes, ``field_from_config``
        reads).

        Returns
        -------
        dict
            ``{"kind": kind, **arguments}``.
        """
        return {"kind": self.kind, **asdict(self)}

    # -- the checks of the arguments that every kind shares -----------------------------------

    @staticmethod
    def _as_int(v: Any) -> Any:
        """Accept NumPy / torch integers where a size is expected (np.int64 from a DataFrame)."""
        if hasattr(v, "item") and not isinstance(v, bool) and getattr(v, "ndim", 0) == 0:
            v = v.item()
        return v

    @staticmethod
    def _check_feeds(name: str, feeds: Any) -> tuple[str, ...]:
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

    @staticmethod
    def _check_name(name: Any) -> None:
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"field names must be Python identifiers, got {name!r}")
        if name in _TAKEN:  # a field's encoder and read-out are kept under its name
            raise ValueError(f"field name {name!r} is taken by torch's module containers "
                             f"(nn.ModuleDict.{name}): choose another, e.g. {name + '_'!r}")

    @staticmethod
    def _check_bool(name: str, **values: Any) -> None:
        """A string such as 'False' is truthy: options that are switches must be booleans."""
        for what, v in values.items():
            if not isinstance(v, bool | np.bool_):
                raise ValueError(f"field {name!r}: {what} must be True or False, got {v!r}")

    @staticmethod
    def _check_positive(name: str, what: str, value: Any) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"field {name!r}: {what} must be a positive integer, got {value!r}")
