"""Warm starts: an EFA model started exactly at a smaller one (:meth:`efa.EFA.warm_start`),
its shared modules copied and the token mixer's columns of the new fields zeroed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import torch
from torch import Tensor, nn

if TYPE_CHECKING:  # for annotations only
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
    mine = {f.name: f for f in model.fields}
    for f in base.fields:
        if f.name not in mine:
            raise ValueError(f"base has field {f.name!r}, this model does not")
        if mine[f.name].dim != f.dim:
            raise ValueError(
                f"field {f.name!r} has dim {mine[f.name].dim} here, {f.dim} in base"
            )
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
    return model


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
