"""An MLP on the flattened sequence: the peer whose input grows with the length.

Token i's target is read from every field of the other L − 1 tokens, in their order, and from
token i's own covariates, all concatenated into one vector of length
(L − 1)·Σ widths + Σ widths of the non-target fields. Unlike attention it is not invariant to
permuting the context and needs one fixed length; it is the "MLP on the flattened sequence" of
Zhang et al.'s generalisation-gap comparison (experiments/cme/exchangeability.py (d)).
"""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor, nn

from efa.core.checks import refuse_unobserved
from efa.core.conditional import ConditionalModel
from efa.core.data import Sequences
from efa.core.fields import Attribute, Field, Value


def _width(field: Field) -> int:
    if isinstance(field, Attribute):
        return field.size
    if isinstance(field, Value):
        return 1
    raise ValueError(f"FlatMLP reads numbers: field {field.name!r} is a {field.kind}; it takes "
                     "Value and Attribute fields")


class FlatMLP(ConditionalModel):
    """Two hidden layers of ``hidden`` ReLU units from the flattened context to the natural
    parameter of the one target field (a ``Value``), for sequences of exactly ``length``.

    Parameters
    ----------
    fields : list of Field
        The fields, ``Value`` and ``Attribute`` only; exactly one of them, a ``Value``, is
        the target (the network gives one natural parameter, through its family's link).
    length : int
        The one sequence length L (at least 2) the network's input is sized for.
    hidden : int, default 64
        Units in each of the two hidden layers.

    Raises
    ------
    ValueError
        If the targets are not exactly one ``Value``, ``length`` is not an integer ≥ 2, or a
        field is not a ``Value`` or an ``Attribute``.
    """

    def __init__(self, fields: list[Field], length: int, hidden: int = 64) -> None:
        super().__init__()
        targets = [f for f in fields if f.target]
        if len(targets) != 1 or not isinstance(targets[0], Value):
            raise ValueError("FlatMLP predicts one target field, a Value; got targets "
                             f"{[f.name for f in targets]}")
        if isinstance(length, bool) or not isinstance(length, int) or length < 2:
            raise ValueError(f"FlatMLP needs a fixed length of at least 2, got {length!r}")
        self.fields, self.length, self.target_name = list(fields), length, targets[0].name
        self.family = targets[0].family
        width = sum(_width(f) for f in fields)
        own = sum(_width(f) for f in fields if not f.target)
        self.net = nn.Sequential(nn.Linear((length - 1) * width + own, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def natural_params_at(self, data: Sequences, at: dict[str, Tensor]) -> dict[str, Tensor]:
        """The target's natural parameter at the asked positions, each from the other L − 1
        tokens' fields in order and its own non-target fields.

        Parameters
        ----------
        data : Sequences
            Sequences all of length exactly ``length``.
        at : dict of str to torch.Tensor
            The target field's name → where to predict, bool of shape (B, I).

        Returns
        -------
        dict of str to torch.Tensor
            The target field's name → η, shape (P, 1), at the P asked positions in the order
            of ``at[name].nonzero()``.

        Raises
        ------
        ValueError
            If a sequence is not of length ``length``, or a value is not observed.
        """
        if data.max_len != self.length or bool((data.lengths != self.length).any()):
            raise ValueError(f"FlatMLP needs sequences of length {self.length}")
        refuse_unobserved(data, "FlatMLP")
        b, i = at[self.target_name].nonzero(as_tuple=True)
        others = torch.stack([torch.cat([torch.arange(p), torch.arange(p + 1, self.length)])
                              for p in range(self.length)])[i]  # [P, L−1]
        dtype = cast(nn.Linear, self.net[0]).weight.dtype
        parts, own = [], []
        for f in self.fields:
            x = data.fields[f.name].to(dtype)
            parts.append(x[b[:, None], others].flatten(1))
            if not f.target:
                own.append(x[b, i].reshape(len(b), -1))
        return {self.target_name: self.family.link(self.net(torch.cat(parts + own, -1)))}
