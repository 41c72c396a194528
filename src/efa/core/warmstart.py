"""Warm starts: an EFA model started exactly at a smaller one (:meth:`efa.EFA.warm_start`),
its shared modules copied and the token mixer's columns of the new fields zeroed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import torch
from torch import Tensor, nn

from efa.core.value import Value

if TYPE_CHECKING:  # for annotations only
    from efa.core.encoders import ValueReadout
    from efa.core.model import EFA


def warm_start(model: EFA, base: EFA) -> EFA:
    """Start ``model`` exactly at ``base``, whose fields are a subset of the model's (a
    same-day model for a model with lagged inputs): shared modules are copied, and the token
    mixer's input columns of the fields ``base`` lacks are zeroed (their encoders keep their
    initialisation and get gradients at once).

    Parameters
    ----------
    model : EFA
        The model to start (changed in place).
    base : EFA
        The model to start from; its fields must be among the model's, with the same widths,
        and both must mix tokens with the same "linear" or "mlp".

    Returns
    -------
    EFA
        ``model``.

    Raises
    ------
    ValueError
        If the two models do not fit together so.
    """
    if model.config.mix == "none" or base.config.mix != model.config.mix:
        raise ValueError(
            "warm_start needs both models to mix tokens with the same 'linear'/'mlp'"
        )
    differ = [f"{k}={getattr(model.config, k)!r} here, {getattr(base.config, k)!r} in base"
              for k in SHARED if getattr(model.config, k) != getattr(base.config, k)]
    if differ:
        raise ValueError(f"warm_start starts a model exactly at base only when they share "
                         f"these settings: {'; '.join(differ)}")
    mine = {f.name: f for f in model.fields}
    for f in base.fields:
        if f.name not in mine:
            raise ValueError(f"base has field {f.name!r}, this model does not")
        if mine[f.name].dim != f.dim:
            raise ValueError(
                f"field {f.name!r} has dim {mine[f.name].dim} here, {f.dim} in base"
            )
        here, there = _comparable(mine[f.name]), _comparable(f)
        if here != there:
            keys = sorted(k for k in here.keys() | there.keys() if here.get(k) != there.get(k))
            raise ValueError(f"field {f.name!r} differs from base's in {keys}: "
                             f"{[here.get(k) for k in keys]} here, "
                             f"{[there.get(k) for k in keys]} in base")
        for k in ("loc", "scale"):
            own, theirs = getattr(mine[f.name], k, None), getattr(f, k, None)
            if own is not None and own != theirs:
                raise ValueError(f"field {f.name!r} has {k}={own} here, {theirs} in base: "
                                 f"leave it unset to take base's standardisation")
    first = lambda m: m if isinstance(m, nn.Linear) else m[0]  # noqa: E731
    with torch.no_grad():
        for name, module in base.named_children():
            if name == "mix":
                continue
            copy_module(getattr(model, name), module, name)
        copy_module(model.mix, base.mix, "mix", skip=first(model.mix))
        w, base_w = first(model.mix).weight, first(base.mix).weight
        w.zero_()
        first(model.mix).bias.copy_(first(base.mix).bias)
        offsets, start = {}, 0
        for f in model.fields:
            offsets[f.name], start = start, start + f.dim
        start = 0
        for f in base.fields:
            w[:, offsets[f.name] : offsets[f.name] + f.dim] = base_w[:, start : start + f.dim]
            start += f.dim
    # Base's standardisation (its encoders' buffers are copied above): fit then keeps it
    # instead of standardising on its own data, and the read-outs map back as base's do.
    for f in base.fields:
        for k in ("loc", "scale"):
            if hasattr(f, k):
                setattr(mine[f.name], k, getattr(f, k))
        if isinstance(f, Value) and hasattr(f.family, "init_sigma"):
            # σ itself was copied with the weights; its start is base's
            cast(Value, mine[f.name]).family.init_sigma = f.family.init_sigma
        if f.name in model.readouts and hasattr(model.readouts[f.name], "loc"):
            # (also where base does not predict the field)
            readout = cast("ValueReadout", model.readouts[f.name])
            readout.loc, readout.scale = cast(Value, mine[f.name]).moments
    return model


# The settings of the blocks and attention that base's weights are weights of.
SHARED = ("num_layers", "num_heads", "head_dim", "direction", "attention", "scale", "block",
          "bias", "out_proj", "attend_self", "mix_hidden", "ffn_hidden")


def _comparable(field) -> dict:
    """A field's configuration less what warm_start may differ in or carries over: its
    standardisation, whether it is a target, and a learned σ's starting value."""
    d = {k: v for k, v in field.config().items() if k not in ("loc", "scale", "target")}
    if isinstance(d.get("family"), dict):
        d["family"] = {k: v for k, v in d["family"].items() if k != "init_sigma"}
    return d


def copy_module(dst: nn.Module, src: nn.Module, where: str,
                skip: nn.Module | None = None) -> None:
    """Copy ``src``'s parameters and buffers into ``dst`` (same structure), except ``skip``;
    a ModuleDict copies only the keys ``src`` has.

    Parameters
    ----------
    dst : torch.nn.Module
        The module copied into, in place (parameters: call it under ``torch.no_grad()``).
    src : torch.nn.Module
        The module copied from.
    where : str
        The modules' path, for the errors (e.g. "blocks").
    skip : torch.nn.Module, optional
        A submodule of either left alone.

    Raises
    ------
    ValueError
        If a parameter, buffer or submodule of ``src`` has no counterpart of the same shape.
    """
    if isinstance(src, nn.ModuleDict):
        peer = cast(nn.ModuleDict, dst)  # the same structure
        for key, m in src.items():
            if key not in peer:
                raise ValueError(f"{where}.{key} has no counterpart in this model")
            copy_module(peer[key], m, f"{where}.{key}", skip)
        return
    if src is skip or dst is skip:
        return
    ps: dict[str, Tensor]
    pd: dict[str, Tensor]
    ps, pd = dict(src.named_parameters(recurse=False)), dict(dst.named_parameters(recurse=False))
    ps.update(src.named_buffers(recurse=False))
    pd.update(dst.named_buffers(recurse=False))
    for key, t in ps.items():
        if key not in pd or pd[key].shape != t.shape:
            raise ValueError(f"{where}.{key} does not match between the two models")
        pd[key].copy_(t)
    for key, child in src.named_children():
        if not hasattr(dst, key):
            raise ValueError(f"{where}.{key} has no counterpart in this model")
        copy_module(getattr(dst, key), child, f"{where}.{key}", skip)
