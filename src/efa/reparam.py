"""Lemma 1 and Theorem 2 of Wibisono & Wang (UAI 2023) on one attention layer: the
reparameterisation of a bias-free ``residual_linear`` block as a mixture of CBOW experts, and
the gates and expert logits it gives on the masked copies of a sentence.

With the masked token at m and x'_j the token at j of the masked copy m, the layer's logits at
m are F_m = Σ_h Σ_j π^h_j f^h_j, π^h = softmax_j(x'_jᵀ W^KQ_h x'_m / √d_w), f^h_j = W^LOV_h x'_j
+ W^ℓ x'_m / H, with W^ℓ = W''(I + W'), W^KQ_h = W^K_hᵀ W^Q_h, W^LOV_h = W^ℓ W^O_h W^V_h
(:func:`reparameterise`, :func:`gates_and_experts`, :func:`moe_logits`). :mod:`efa.moe` builds
on these (the Appendix-B model, any model's mixture, two layers, :class:`~efa.moe.CBOWMoE`) and
re-exports them under its own name (``efa.moe.reparameterise`` ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import torch
from torch import Tensor, nn

from efa.core.fields import ROLES, Category

if TYPE_CHECKING:  # for annotations only
    from efa.core.attention import Block
    from efa.core.encoders import LinearReadout, TableEncoder
    from efa.core.model import EFA


@dataclass
class Reparam:
    """Lemma 1's parameters of one layer, as :func:`reparameterise` returns them.

    Parameters
    ----------
    W_KQ : torch.Tensor, shape (H, p, p)
        W^KQ_h = W^K_hᵀ W^Q_h of each head.
    W_LOV : torch.Tensor, shape (H, V, p)
        W^LOV_h = W^ℓ W^O_h W^V_h of each head.
    W_l : torch.Tensor, shape (V, p)
        W^ℓ = W''(I + W').
    scale : float
        The score scale (1/√d_w).
    C : torch.Tensor, shape (V + 1, p), optional
        The token table, row V for [MASK] (for a single Category field, else None).
    P : torch.Tensor, shape (S, p), optional
        The positional table (for a single Category field with positions, else None).
    b : torch.Tensor, shape (V,), optional
        The read-out's bias (``Category(readout_bias=True)``), else None.
    """

    W_KQ: Tensor
    W_LOV: Tensor
    W_l: Tensor
    scale: float
    C: Tensor | None = None
    P: Tensor | None = None
    b: Tensor | None = None

    def offset(self, query: Tensor) -> Tensor:
        """The experts' common offset W^ℓ x'_m (+ b): g + D e_m for the Appendix-B tokens.

        Parameters
        ----------
        query : torch.Tensor, shape (..., p)
            The masked token x'_m.

        Returns
        -------
        torch.Tensor, shape (..., V)
            W^ℓ x'_m, plus the read-out bias if any.
        """
        out = query @ self.W_l.T
        return out if self.b is None else out + self.b

    @property
    def g(self) -> Tensor:
        """g = W^ℓ c_[MASK] [V] (plus the read-out bias, if any)."""
        g = self.W_l @ cast(Tensor, self.C)[-1]
        return g if self.b is None else g + self.b

    @property
    def D(self) -> Tensor:
        """D = W^ℓ Pᵀ [V, S]."""
        return self.W_l @ cast(Tensor, self.P).T


def check_linear(model: EFA, layers: int | None = 1) -> None:
    """Check that ``model`` is of the form the map needs.

    Lemma 1 holds for the bias-free ``residual_linear`` block with softmax attention and an
    output projection W^O (``EFAConfig(block="residual_linear", bias=False, out_proj=True)``).

    Parameters
    ----------
    model : EFA
        The attention model.
    layers : int or None, default 1
        The number of layers it must have (None: any).

    Raises
    ------
    ValueError
        Naming what does not fit.
    """
    cfg = model.config
    if layers is not None and cfg.num_layers != layers:
        raise ValueError(f"the map needs {layers} layer(s), the model has {cfg.num_layers}")
    if cfg.block != "residual_linear" or cfg.bias or cfg.attention != "softmax":
        raise ValueError(
            "Lemma 1 holds for the bias-free residual_linear block with softmax attention "
            f"(EFAConfig(block='residual_linear', bias=False)); got block={cfg.block!r}, "
            f"bias={cfg.bias}, attention={cfg.attention!r}"
        )
    if not isinstance(cast("Block", model.blocks[0]).attn.o, nn.Linear):
        raise ValueError("the map needs out_proj=True (W^O)")
    if cfg.mix != "none":
        raise ValueError(f"the map reads the fields' embeddings as the tokens, so it needs "
                         f"mix='none'; got mix={cfg.mix!r}")
    # A bag's token is a mean of embeddings, and distinct puts -1e4 on used items: neither is
    # the lemma's linear read-out of one embedding.
    special = [f"{f.name!r} ({'bag' if f.bag else 'distinct'})" for f in cfg.fields
               if isinstance(f, Category) and (f.bag or f.distinct)]
    if special:
        raise ValueError(f"the map needs plain Category fields, without bag or distinct; got "
                         f"{', '.join(special)}")
    # One token x'_j is the query, key, value and skip input of Lemma 1.
    partial = {f.name: f.feeds for f in cfg.fields if set(f.feeds) != set(ROLES)}
    if partial:
        raise ValueError(f"the map needs every field to feed {ROLES} (Field.feeds); these "
                         f"feed less: {partial}")
    # The mixture sums over every token of the context, the target's own slot included.
    if cfg.direction != "bidirectional" or not cfg.attend_self:
        raise ValueError("the map needs direction='bidirectional' and attend_self=True (the "
                         f"experts read every context slot); got direction={cfg.direction!r}, "
                         f"attend_self={cfg.attend_self!r}")


def check_category_target(model: EFA, target: str | None) -> Category:
    """The target field, which must be a Category: the mixture's experts are logits over its
    items (a Value's read-out goes through its link and standardisation).

    Parameters
    ----------
    model : EFA
        The attention model.
    target : str or None
        The target field's name (None: the first target).

    Returns
    -------
    Category
        The target field.

    Raises
    ------
    ValueError
        If the target is not a Category field.
    """
    f = model.target(target)
    if not isinstance(f, Category):
        raise ValueError(f"the mixture's experts are logits over a Category field's items; "
                         f"{f.name!r} is a {type(f).__name__}")
    return f


def _layer(block: Block, W_read: Tensor) -> tuple[Tensor, Tensor, Tensor, float]:
    """(W^KQ [H, p, p], W^LOV [H, V, p], W^ℓ [V, p], scale) of one residual_linear block read out
    by ``W_read`` [V, p]."""
    attn = block.attn
    h, d = attn.num_heads, attn.head_dim
    p = attn.q.weight.shape[1]
    Wq = attn.q.weight.view(h, d, p)
    Wk = attn.k.weight.view(h, d, p)
    Wv = attn.v.weight.view(h, d, p)
    o = cast(nn.Linear, attn.o)  # out_proj=True (check_linear)
    Wo = o.weight.view(p, h, d).transpose(0, 1)  # [H, p, d]: W^O_hᵀ in the paper's terms
    W_l = W_read + W_read @ block.lin.weight  # W'' (I + W')
    W_KQ = Wk.transpose(1, 2) @ Wq
    W_LOV = W_l @ (Wo @ Wv)  # [H, V, p]
    return W_KQ, W_LOV, W_l, attn.kernel.scale


def reparameterise(model: EFA, target: str | None = None) -> Reparam:
    """Lemma 1's map (W^Q, W^K, W^V, W^O, W', W'', C, P) → (W^KQ, W^LOV, g, D).

    Differentiable: the result is a function of the model's parameters.

    Parameters
    ----------
    model : EFA
        A one-layer, bias-free ``residual_linear`` model with softmax attention and
        ``out_proj=True``.
    target : str, optional
        The target field whose read-out W'' is used (default: the first target).

    Returns
    -------
    Reparam
        W^KQ, W^LOV, W^ℓ and the scale; C and P when the model has a single Category field
        (P None without positions); the read-out's bias.

    Raises
    ------
    ValueError
        If the model is not of that form.
    """
    check_linear(model)
    f = check_category_target(model, target)
    read = cast("LinearReadout", model.readouts[f.name]).net
    W_KQ, W_LOV, W_l, scale = _layer(cast("Block", model.blocks[0]), read.weight)
    C = P = None
    if len(model.fields) == 1 and isinstance(model.fields[0], Category):
        C = cast("TableEncoder", model.encoders[model.fields[0].name]).table.weight
        P = model.pos.weight if model.max_len is not None else None
    return Reparam(W_KQ, W_LOV, W_l, scale, C, P, read.bias)


def copy_tokens(content: Tensor, query: Tensor) -> Tensor:
    """The tokens of every masked copy: copy m has the content tokens, the query token at m.

    Parameters
    ----------
    content : torch.Tensor, shape (B, J, p)
        The unmasked tokens.
    query : torch.Tensor, shape (B, M, p)
        The masked token of each position (M = J).

    Returns
    -------
    torch.Tensor, shape (B, M, J, p)
        Copy m's tokens x'_j.
    """
    n = content.shape[1]
    eye = torch.eye(n, dtype=torch.bool, device=content.device)[None, :, :, None]
    return torch.where(eye, query[:, :, None, :], content[:, None, :, :])


def gates_and_experts(rep: Reparam, tokens: Tensor, query: Tensor, allowed: Tensor,
                      experts: bool = True) -> tuple[Tensor, Tensor | None]:
    """Theorem 2 on the masked copies: the gates π and the expert logits f.

    π^h = softmax_j(x'_jᵀ W^KQ_h x'_m · scale) over the allowed j, and f^h_j = W^LOV_h x'_j +
    W^ℓ x'_m / H (:meth:`Reparam.offset`).

    Parameters
    ----------
    rep : Reparam
        The layer's parameters (:func:`reparameterise`).
    tokens : torch.Tensor, shape (B, M, J, p)
        Copy m's tokens (:func:`copy_tokens`).
    query : torch.Tensor, shape (B, M, p)
        The masked token of copy m.
    allowed : torch.Tensor of bool, shape (B, 1 or M, J)
        The keys that may be attended (the real positions).
    experts : bool, default True
        Compute the expert logits (False: only the gates).

    Returns
    -------
    pi : torch.Tensor, shape (B, M, H, J)
        The gates.
    f : torch.Tensor, shape (B, M, H, J, V), or None
        The expert logits; None unless ``experts``.
    """
    H = rep.W_KQ.shape[0]
    h = torch.einsum("bmjp,hpq,bmq->bmhj", tokens, rep.W_KQ, query) * rep.scale
    h = h.masked_fill(~allowed[:, :, None, :], float("-inf"))
    pi = torch.softmax(h, dim=-1)
    if not experts:
        return pi, None
    bias = rep.offset(query) / H  # (g + D e_m) / H = W^ℓ x'_m / H, [B, M, V]
    f = torch.einsum("hvp,bmjp->bmhjv", rep.W_LOV, tokens) + bias[:, :, None, None, :]
    return pi, f


def moe_logits(pi: Tensor, f: Tensor) -> Tensor:
    """The mixture's logits F = Σ_h Σ_j π^h_j f^h_j.

    Parameters
    ----------
    pi : torch.Tensor, shape (B, M, H, J)
        The gates.
    f : torch.Tensor, shape (B, M, H, J, V)
        The expert logits.

    Returns
    -------
    torch.Tensor, shape (B, M, V)
        F at every masked position m.
    """
    return torch.einsum("bmhj,bmhjv->bmv", pi, f)
