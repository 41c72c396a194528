"""Attention: kernels (how a query weighs its context), multi-head attention and blocks.

A *kernel* maps queries q [B, H, Iq, d], keys k [B, H, Ik, d], values v [B, H, Ik, dv] and an
``allowed`` mask [B, 1|H, Iq, Ik] to an output [B, H, Iq, dv] and the weights [B, H, Iq, Ik].
Kernels are plug-ins: subclass :class:`Kernel`, decorate with :func:`register_kernel`, and
``EFAConfig(attention="name")`` (or ``{"kernel": "name", **options}``) selects it.

A kernel declares ``row_local``: True when query i's weights depend on the context only through
the keys i may see, one query at a time (softmax, linear, generalized), so a query may bring its
own key and value for position i (the two-stream algorithm, :mod:`efa.strategies`); False when
they depend on the whole context jointly (kernel ridge), and only the masked copies are exact.

Score-based kernels implement ``scores`` and ``weights``; the base class does the rest,
including the two-stream "own key at the diagonal" form.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

KERNELS: dict[str, type[Kernel]] = {}


def register_kernel(cls: type[Kernel]) -> type[Kernel]:
    """Class decorator: make ``cls`` selectable as ``EFAConfig(attention=cls.name)``.

    A name already taken by another kernel is refused: replacing it would switch every model
    of the process that uses the name. Running the same definition again (a notebook cell, a
    reloaded module: same module and class name) replaces it."""
    if not getattr(cls, "name", None):
        raise TypeError(f"{cls.__name__} needs a class attribute `name`")
    old = KERNELS.get(cls.name)
    if old is not None and (old.__module__, old.__qualname__) != (cls.__module__,
                                                                  cls.__qualname__):
        raise ValueError(
            f"attention kernel name {cls.name!r} is already registered by "
            f"{old.__module__}.{old.__qualname__}; give {cls.__qualname__} another `name`")
    KERNELS[cls.name] = cls
    return cls


def kernel_spec(attention: str | dict) -> dict:
    """Normalise ``EFAConfig.attention`` to ``{"kernel": name, **options}`` and check it."""
    import efa.kernels  # noqa: F401  (registers the plug-in kernels)

    if not isinstance(attention, str | dict):
        raise TypeError(f"attention must be a kernel name or a dict, got {attention!r}")
    spec = {"kernel": attention} if isinstance(attention, str) else dict(attention)
    name = spec.get("kernel")
    if name not in KERNELS:
        raise ValueError(f"attention kernel must be one of {sorted(KERNELS)}, got {name!r}")
    KERNELS[name].check_options({k: v for k, v in spec.items() if k != "kernel"})
    return spec


class Kernel(nn.Module):
    """Base class of attention kernels. Options are keyword arguments of ``__init__`` beyond
    the standard ones (``num_heads``, ``head_dim``, ``scale``, ``causal``) and must be
    JSON-serialisable: they are saved with the model's config."""

    name: ClassVar[str] = ""
    row_local: ClassVar[bool] = True

    def __init__(self, num_heads: int, head_dim: int, scale: float, causal: bool, **options):
        super().__init__()
        self.check_options(options)
        self.num_heads, self.head_dim, self.scale, self.causal = num_heads, head_dim, scale, causal

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> None:
        if options:
            raise ValueError(f"attention kernel {cls.name!r} takes no options, got {options}")

    # -- score-based kernels implement these --------------------------------------------------
    def scores(self, q: Tensor, k: Tensor) -> Tensor:
        """Pairwise scores [B, H, Iq, Ik]."""
        raise NotImplementedError

    def own_scores(self, q: Tensor, k: Tensor) -> Tensor:
        """Score of query i against key i alone, [B, H, I, 1] (q, k of equal shape)."""
        return self.scores(q[..., None, :], k[..., None, :])[..., 0, :]

    def weights(self, s: Tensor, allowed: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Weights [B, H, Iq, Ik] from scores; exactly 0 where ``allowed`` is False."""
        raise NotImplementedError

    # -- the kernel -----------------------------------------------------------------------
    def forward(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        allowed: Tensor,
        own: tuple[Tensor, Tensor] | None = None,
        q_pos: Tensor | None = None,
        k_pos: Tensor | None = None,
        need_weights: bool = True,
    ) -> tuple[Tensor, Tensor | None]:
        """``own = (k_own, v_own)`` [B, H, I, d]: query i sees its own key and value at
        position i instead of k_i, v_i (needs Iq == Ik). ``q_pos`` [B|1, Iq] / ``k_pos``
        [B|1, Ik]: positions of the queries and keys in the sequence (default 0, 1, ...).
        ``need_weights=False`` lets a kernel skip returning the weights (and use a fused
        implementation); it then returns None for them."""
        if q_pos is None:
            q_pos = torch.arange(q.shape[-2], device=q.device)[None]
        if k_pos is None:
            k_pos = torch.arange(k.shape[-2], device=k.device)[None]
        s = self.scores(q, k)
        if own is not None:
            eye = torch.eye(s.shape[-1], dtype=torch.bool, device=s.device)
            s = torch.where(eye, self.own_scores(q, own[0]), s)
        w = self.weights(s, allowed, q_pos, k_pos)
        out = w @ v
        if own is not None:
            # The diagonal weight multiplies the query's own value, the others the context's.
            out = out + torch.diagonal(w, dim1=-2, dim2=-1)[..., None] * (own[1] - v)
        return out, w

    def options(self) -> dict[str, Any]:
        return {}

    @classmethod
    def extra_outputs(cls, options: dict[str, Any]) -> int:
        """Columns the kernel appends to each head's output after the values' (e.g. CME
        attention's posterior variance), for these options."""
        return 0


def head_width(attention: str | dict, head_dim: int) -> int:
    """Width of one head's output: the values' ``head_dim`` plus the kernel's extra columns."""
    spec = kernel_spec(attention)
    return head_dim + KERNELS[spec["kernel"]].extra_outputs(
        {k: v for k, v in spec.items() if k != "kernel"})


class DotProduct(Kernel):
    def scores(self, q: Tensor, k: Tensor) -> Tensor:
        return (q @ k.transpose(-1, -2)) * self.scale

    def own_scores(self, q: Tensor, k: Tensor) -> Tensor:
        return (q * k).sum(-1, keepdim=True) * self.scale


@register_kernel
class Softmax(DotProduct):
    """w_ij ∝ exp(q_i·k_j · scale) over the allowed j (Vaswani et al.). Without the weights
    and without the two-stream ``own`` form, PyTorch's fused
    ``scaled_dot_product_attention`` computes the same output faster."""

    name = "softmax"

    def weights(self, s, allowed, q_pos, k_pos):
        return torch.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1)

    def forward(self, q, k, v, allowed, own=None, q_pos=None, k_pos=None, need_weights=True):
        if need_weights:
            return super().forward(q, k, v, allowed, own, q_pos, k_pos)
        if own is not None:
            # Two-stream as one fused call: the keys are the context's and, in extra columns,
            # each query's own; query i sees context j ≠ i and its own column i where allowed.
            eye = torch.eye(q.shape[-2], dtype=torch.bool, device=q.device)
            allowed = torch.cat([allowed & ~eye, allowed & eye], dim=-1)
            k, v = torch.cat([k, own[0]], dim=-2), torch.cat([v, own[1]], dim=-2)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=self.scale), None


@register_kernel
class Linear(DotProduct):
    """w_ij = q_i·k_j · scale on the allowed j, unnormalised (the softmax-free form of the EFA
    paper's Props 2–3)."""

    name = "linear"

    def weights(self, s, allowed, q_pos, k_pos):
        return s * allowed


SCALES = {"sqrt": lambda d: 1 / math.sqrt(d), "linear": lambda d: 1 / d, "none": lambda d: 1.0}


class MultiHeadAttention(nn.Module):
    """Projections W^Q, W^K, W^V, W^O around a kernel. Queries come from ``x``; keys and values
    from ``memory`` when given (the content stream of two-stream attention, or a whole sequence
    that one query row per copy attends to), else from ``x``.

    ``inputs`` (optional) restricts what each projection reads: ``{"q": cols, "k": cols, "v":
    cols}`` with ``cols`` the token's columns (the fields that feed it, ``Field.feeds``) or None
    for all of them. ``d_out``: width of the output (default ``d_model``; without ``out_proj``
    it must equal num_heads·head_dim)."""

    def __init__(self, d_model, num_heads, head_dim, attention, scale, bias, out_proj, causal,
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
        if out_proj:
            self.o = nn.Linear(out_inner, d_out, bias=bias)
        elif out_inner == d_out:
            self.o = nn.Identity()
        else:
            raise ValueError(f"out_proj=False needs num_heads × (head_dim + the kernel's extra "
                             f"outputs) == d_model ({d_out})")
        self.kernel = KERNELS[spec["kernel"]](num_heads, head_dim, factor, causal, **options)

    def split(self, x: Tensor) -> Tensor:
        b, i, _ = x.shape
        return x.view(b, i, self.num_heads, self.head_dim).transpose(1, 2)

    def _read(self, x: Tensor, role: str) -> Tensor:
        cols = getattr(self, f"cols_{role}")
        return x if cols is None else x.index_select(-1, cols)

    def forward(self, x, allowed, memory=None, own=False, q_pos=None, need_weights=True):
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


ACTIVATIONS = {"relu": nn.ReLU, "leaky_relu": nn.LeakyReLU}  # LeakyReLU: slope 0.01


def mlp(sizes: list[int], activation: str = "relu", bias: bool = True) -> nn.Module:
    """Linear layers with an activation between them (none after the last)."""
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [nn.Linear(a, b, bias=bias), ACTIVATIONS[activation]()]
    return nn.Sequential(*layers[:-1])


BLOCKS = ("bare", "residual", "post_ln", "pre_ln", "residual_linear", "concat")


class Block(nn.Module):
    """One layer: ``bare`` (attention alone, Eq. 1), ``residual`` (x + MHA(x)), ``post_ln`` /
    ``pre_ln`` (transformer blocks with LayerNorm and a feed-forward layer),
    ``residual_linear`` (z' = x + MHA(x), then z' + W' z': the linear, LayerNorm-free block of
    Appendix B of Wibisono & Wang's "Bidirectional attention as a mixture of continuous word
    experts", whose masked logits are a CBOW mixture of experts, :mod:`efa.moe`), ``concat``
    ([x, MHA(x)]: the token is kept beside the attended value rather than added to it, so a
    read-out is a separate linear map of each, as in Eq. 16 of the UNN note; the width grows by
    the attention's output width, ``d_out``).

    ``cfg.dropout`` > 0 drops units of the attention output and of the feed-forward output
    before they are added to the residual stream (Keras/BERT placement); at 0 no dropout
    module exists, so the computation (and the random stream) is unchanged.

    ``inputs``: the columns each of "q", "k", "v", "skip" reads (None: all), from the fields'
    ``feeds`` (first layer only). "skip" is the token carried past the attention, which only
    the ``concat`` (and ``bare``, which carries nothing) blocks can restrict."""

    def __init__(self, d_model: int, head_dim: int, cfg, inputs: dict | None = None):
        super().__init__()
        self.kind = cfg.block
        inputs = inputs or {}
        skip = inputs.get("skip")
        if skip is not None and self.kind not in ("bare", "concat"):
            raise ValueError(
                f"block={self.kind!r} adds the attention to the whole token, so every field "
                "must feed 'skip'; use block='concat' (or 'bare') to leave fields out of it"
            )
        attn_out = None
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
        if self.kind == "concat":
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

    def forward(self, x, allowed, memory=None, own=False, q_pos=None, need_weights=True):
        """``memory``: the context tokens (keys and values); with ``own=True`` query i also
        holds its own token ``x_i`` at position i (two-stream)."""
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
