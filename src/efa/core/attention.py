"""Attention: multi-head attention around a kernel, and the blocks built from it.

A *kernel* (:mod:`efa.core.kernels`) maps queries q [B, H, Iq, d], keys k [B, H, Ik, d], values v
[B, H, Ik, dv] and an ``allowed`` mask [B, 1|H, Iq, Ik] to an output [B, H, Iq, dv] and the
weights [B, H, Iq, Ik]; ``EFAConfig(attention="name")`` (or ``{"kernel": "name", **options}``)
selects a registered one. This module puts the projections W^Q, W^K, W^V, W^O around it
(:class:`MultiHeadAttention`) and stacks those into blocks (:class:`Block`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from efa.core.kernels import KERNELS, head_width, kernel_spec

if TYPE_CHECKING:  # for annotations only
    from efa.core.config import EFAConfig

SCALES = {"sqrt": lambda d: 1 / math.sqrt(d), "linear": lambda d: 1 / d, "none": lambda d: 1.0}


class MultiHeadAttention(nn.Module):
    """Projections W^Q, W^K, W^V, W^O around a kernel.

    Queries come from ``x``; keys and values from ``memory`` when given (the content stream of
    two-stream attention, or a whole sequence that one query row per copy attends to), else
    from ``x``.

    Parameters
    ----------
    d_model : int
        Width of the tokens.
    num_heads : int
        Number of heads H.
    head_dim : int
        Width d of each head's queries, keys and values.
    attention : str or dict
        The kernel, as ``EFAConfig.attention`` (a registered name or ``{"kernel": name,
        **options}``).
    scale : {"sqrt", "linear", "none"}
        Score scaling handed to the kernel: 1/√d, 1/d or 1.
    bias : bool
        Biases in the projections.
    out_proj : bool
        An output projection W^O after the heads (False: the heads' concatenation, whose
        width num_heads·(head_dim + the kernel's extra outputs) must then equal ``d_out``).
    causal : bool
        Whether the model is unidirectional (handed to the kernel).
    inputs : dict, optional
        Restricts what each projection reads: ``{"q": cols, "k": cols, "v": cols}`` with
        ``cols`` the token's columns (the fields that feed it, ``Field.feeds``) or None for all
        of them.
    d_out : int, optional
        Width of the output (default ``d_model``).

    Raises
    ------
    ValueError
        If ``out_proj`` is False and the heads' width is not ``d_out``, or the kernel refuses
        its options.
    """

    def __init__(self, d_model: int, num_heads: int, head_dim: int, attention: str | dict,
                 scale: str, bias: bool, out_proj: bool, causal: bool,
                 inputs: dict | None = None, d_out: int | None = None):
        super().__init__()
        inner = num_heads * head_dim
        d_out = d_model if d_out is None else d_out
        self.num_heads, self.head_dim = num_heads, head_dim
        factor = SCALES[scale](head_dim)
        width = {}
        for role in ("q", "k", "v"):
            cols = (inputs or {}).get(role)
            width[role] = d_model if cols is None else len(cols)
            # Not persistent: the columns follow from the fields, not from the weights.
            self.register_buffer(f"cols_{role}", None if cols is None else
                                 torch.as_tensor(cols, dtype=torch.long), persistent=False)
        spec = kernel_spec(attention)
        options = {k: v for k, v in spec.items() if k != "kernel"}
        out_inner = num_heads * head_width(spec, head_dim)
        self.q = nn.Linear(width["q"], inner, bias=bias)
        self.k = nn.Linear(width["k"], inner, bias=bias)
        self.v = nn.Linear(width["v"], inner, bias=bias)
        self.o: nn.Module
        if out_proj:
            self.o = nn.Linear(out_inner, d_out, bias=bias)
        elif out_inner == d_out:
            self.o = nn.Identity()
        else:
            raise ValueError(f"out_proj=False needs num_heads × (head_dim + the kernel's extra "
                             f"outputs) == d_model ({d_out})")
        self.kernel = KERNELS[spec["kernel"]](num_heads, head_dim, factor, causal, **options)

    def split(self, x: Tensor) -> Tensor:
        """Split the projections into heads: one slice per head.

        Parameters
        ----------
        x : torch.Tensor, shape (B, I, H·d)
            Projected tokens.

        Returns
        -------
        torch.Tensor, shape (B, H, I, d)
            A view of ``x``, heads second.
        """
        b, i, _ = x.shape
        return x.view(b, i, self.num_heads, self.head_dim).transpose(1, 2)

    def _read(self, x: Tensor, role: str) -> Tensor:
        cols = getattr(self, f"cols_{role}")
        return x if cols is None else x.index_select(-1, cols)

    def forward(self, x: Tensor, allowed: Tensor, memory: Tensor | None = None, own: bool = False,
                q_pos: Tensor | None = None,
                need_weights: bool = True) -> tuple[Tensor, Tensor | None]:
        """Multi-head attention of the tokens ``x`` over ``memory`` (or ``x`` itself).

        Parameters
        ----------
        x : torch.Tensor, shape (B, Iq, d_model)
            The tokens that make the queries.
        allowed : torch.Tensor, shape (B, 1 or H, Iq, Ik)
            Which key each query may see (bool).
        memory : torch.Tensor, shape (B, Ik, d_model), optional
            The tokens that make the keys and values (default: ``x``).
        own : bool, default False
            Two-stream: query i also holds its own token x_i at position i, whose key and
            value replace memory's there (Iq == Ik).
        q_pos : torch.Tensor, shape (B or 1, Iq), optional
            Positions of the queries in the sequence (default 0, 1, ...).
        need_weights : bool, default True
            False lets the kernel skip the weights (and use a fused implementation).

        Returns
        -------
        out : torch.Tensor, shape (B, Iq, d_out)
            The attended tokens.
        weights : torch.Tensor, shape (B, H, Iq, Ik), or None
            The attention weights, None where the kernel skipped them.
        """
        q = self.split(self.q(self._read(x, "q")))
        # Two-stream (``own``): query i holds its own token x_i at position i, the context
        # tokens (``memory``) everywhere else. (Own keys first: the order in which gradients
        # accumulate is part of "same seed, same numbers".)
        mine = (self.split(self.k(self._read(x, "k"))),
                self.split(self.v(self._read(x, "v")))) if own else None
        src = x if memory is None else memory
        k = self.split(self.k(self._read(src, "k")))
        v = self.split(self.v(self._read(src, "v")))
        out, w = self.kernel(q, k, v, allowed, own=mine, q_pos=q_pos, need_weights=need_weights)
        b, _, i, _ = out.shape
        return self.o(out.transpose(1, 2).reshape(b, i, -1)), w


BLOCKS = ("bare", "residual", "post_ln", "pre_ln", "residual_linear", "concat")


class Block(nn.Module):
    """One layer of attention, of the kind ``cfg.block`` names.

    - ``bare``: attention alone (Eq. 1);
    - ``residual``: x + MHA(x);
    - ``post_ln`` / ``pre_ln``: transformer blocks with LayerNorm and a feed-forward layer;
    - ``residual_linear``: z' = x + MHA(x), then z' + W' z': the linear, LayerNorm-free block
      of Appendix B of Wibisono & Wang's "Bidirectional attention as a mixture of continuous
      word experts", whose masked logits are a CBOW mixture of experts (:mod:`efa.moe`);
    - ``concat``: [x, MHA(x)]: the token is kept beside the attended value rather than added
      to it, so a read-out is a separate linear map of each, as in Eq. 16 of the UNN note; the
      width grows by the attention's output width (``d_out``, the block's output width).

    ``cfg.dropout`` > 0 drops units of the attention output and of the feed-forward output
    before they are added to the residual stream (Keras/BERT placement); at 0 no dropout
    module exists, so the computation (and the random stream) is unchanged.

    Parameters
    ----------
    d_model : int
        Width of the tokens coming in.
    head_dim : int
        Width of each head.
    cfg : EFAConfig
        The model's configuration: ``block``, ``num_heads``, ``attention``, ``scale``,
        ``bias``, ``out_proj``, ``direction``, ``ffn_hidden`` and ``dropout`` are read.
    inputs : dict, optional
        The columns each of "q", "k", "v", "skip" reads (None: all), from the fields'
        ``feeds`` (first layer only). "skip" is the token carried past the attention, which
        only the ``concat`` (and ``bare``, which carries nothing) blocks can restrict.

    Raises
    ------
    ValueError
        If ``inputs`` restricts "skip" for a block that adds the attention to the token.
    """

    cols_skip: Tensor | None  # a buffer, declared for the type checker

    def __init__(self, d_model: int, head_dim: int, cfg: EFAConfig, inputs: dict | None = None):
        super().__init__()
        self.kind = cfg.block
        inputs = inputs or {}
        skip = inputs.get("skip")
        if skip is not None and self.kind not in ("bare", "concat"):
            raise ValueError(
                f"block={self.kind!r} adds the attention to the whole token, so every field "
                "must feed 'skip'; use block='concat' (or 'bare') to leave fields out of it"
            )
        attn_out: int | None = None
        if self.kind == "concat":
            attn_out = (d_model if cfg.out_proj
                        else cfg.num_heads * head_width(cfg.attention, head_dim))
        self.attn = MultiHeadAttention(
            d_model, cfg.num_heads, head_dim, cfg.attention, cfg.scale, cfg.bias,
            cfg.out_proj, causal=cfg.direction == "unidirectional", inputs=inputs, d_out=attn_out,
        )
        self.register_buffer("cols_skip", None if skip is None else
                             torch.as_tensor(skip, dtype=torch.long), persistent=False)
        self.d_out = d_model
        if attn_out is not None:  # block="concat"
            self.d_out = (d_model if skip is None else len(skip)) + attn_out
        if self.kind in ("post_ln", "pre_ln"):
            self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            self.ffn = nn.Sequential(
                nn.Linear(d_model, cfg.ffn_hidden), nn.ReLU(), nn.Linear(cfg.ffn_hidden, d_model)
            )
        if self.kind == "residual_linear":
            self.lin = nn.Linear(d_model, d_model, bias=cfg.bias)  # W'
        rate = getattr(cfg, "dropout", 0.0)
        self.drop = nn.Dropout(rate) if rate > 0 else nn.Identity()

    def forward(self, x: Tensor, allowed: Tensor, memory: Tensor | None = None, own: bool = False,
                q_pos: Tensor | None = None,
                need_weights: bool = True) -> tuple[Tensor, Tensor | None]:
        """The layer's output for the tokens ``x``.

        Parameters
        ----------
        x : torch.Tensor, shape (B, Iq, d_model)
            The tokens (the queries, and the keys and values unless ``memory`` is given).
        allowed : torch.Tensor, shape (B, 1 or H, Iq, Ik)
            Which key each query may see (bool).
        memory : torch.Tensor, shape (B, Ik, d_model), optional
            The context tokens (keys and values).
        own : bool, default False
            Query i also holds its own token ``x_i`` at position i (two-stream).
        q_pos : torch.Tensor, shape (B or 1, Iq), optional
            Positions of the queries in the sequence (default 0, 1, ...).
        need_weights : bool, default True
            False lets the kernel skip the weights.

        Returns
        -------
        out : torch.Tensor, shape (B, Iq, d_out)
            The layer's output (``d_out`` = ``d_model`` except for ``concat``).
        weights : torch.Tensor, shape (B, H, Iq, Ik), or None
            The attention weights, None where the kernel skipped them.
        """
        if self.kind == "pre_ln":
            m = None if memory is None else self.ln1(memory)
            a, w = self.attn(self.ln1(x), allowed, memory=m, own=own, q_pos=q_pos,
                             need_weights=need_weights)
            x = x + self.drop(a)
            return x + self.drop(self.ffn(self.ln2(x))), w
        a, w = self.attn(x, allowed, memory=memory, own=own, q_pos=q_pos,
                         need_weights=need_weights)
        if self.kind == "bare":
            return self.drop(a), w
        if self.kind == "concat":
            kept = x if self.cols_skip is None else x.index_select(-1, self.cols_skip)
            return torch.cat([kept, self.drop(a)], dim=-1), w
        if self.kind == "residual":
            return x + self.drop(a), w
        if self.kind == "residual_linear":
            z = x + self.drop(a)
            return z + self.lin(z), w
        x = self.ln1(x + self.drop(a))
        return self.ln2(x + self.drop(self.ffn(x))), w
