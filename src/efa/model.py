"""Exponential family attention (EFA), Wibisono & Wang, Section 2.

    encode   each token's fields, attributes and position   -> tokens  [B, I, d]
    attend   L blocks of (masked) self-attention             -> states  [B, I, d]
    read out the state at the masked target position i      -> η_i
    family   log p(y_i | context) = η_i·t(y_i) − A(η_i) + log h(y_i)

The likelihood of position i is defined on a *copy* of the sequence in which position i is
masked. Materialising the copies costs I forward passes per sequence; instead:

- ``stream`` (exact for one layer, and for causal attention at any depth): two-stream
  attention. A content stream runs on the unmasked tokens; a query stream holds, at every i,
  the masked token i, which attends to the content of the other positions and to itself. In
  copy i every position j ≠ i is unmasked at layer 0, and under a causal mask position j < i
  never sees i, so the content stream *is* copy i's state at j. One pass per sequence.
- ``copies`` (exact for everything, bidirectional multi-layer included): the masked copies are
  generated inside the model, only for the positions that are predicted, in chunks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from efa.data import Sequences, check_sequences
from efa.fields import Field, field_from_config

BLOCKS = ("bare", "residual", "post_ln", "pre_ln")
GAUSSIAN_MEAN_FAMILIES = ("gaussian", "learned_gaussian", "heteroscedastic_gaussian")


@dataclass
class EFAConfig:
    """Sizes and switches of an EFA network (the fields say what a token is).

    direction: ``bidirectional`` (pseudo-likelihood, Remark 4/5) or ``unidirectional`` (causal
      mask, full likelihood). attention: ``softmax`` or ``linear`` (the paper's softmax-free
      form used by Props 2–3). scale: ``sqrt`` (1/√d_head, Vaswani) or ``linear`` (1/d_head,
      the paper's 1/K). block: ``bare`` (Eq. 1 alone), ``residual`` (x + MHA(x), the paper's
      experiments), ``post_ln`` / ``pre_ln`` (transformer blocks with LayerNorm and a
      feed-forward layer). d_model: token width after the optional mixing MLP (None keeps the
      concatenation of the field embeddings). max_len: size of the learned positional table
      (None: no positions, for sets).
    """

    fields: list[Field]
    num_layers: int = 2
    num_heads: int = 2
    head_dim: int | None = None
    d_model: int | None = None
    mix: str = "none"
    mix_hidden: int = 64
    max_len: int | None = None
    direction: str = "bidirectional"
    attention: str = "softmax"
    scale: str = "sqrt"
    block: str = "residual"
    ffn_hidden: int = 64
    bias: bool = True
    out_proj: bool = True
    mode: str = "auto"
    chunk: int = 4096

    def __post_init__(self):
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise ValueError(f"field names must be unique, got {names}")
        if not any(f.target for f in self.fields):
            raise ValueError("at least one field must be a target (target=True)")
        choices = {
            "direction": ("bidirectional", "unidirectional"),
            "attention": ("softmax", "linear"),
            "scale": ("sqrt", "linear"),
            "block": BLOCKS,
            "mix": ("none", "linear", "mlp"),
            "mode": ("auto", "stream", "copies"),
        }
        for key, allowed in choices.items():
            if getattr(self, key) not in allowed:
                raise ValueError(f"{key} must be one of {allowed}, got {getattr(self, key)!r}")
        if self.num_layers < 1 or self.num_heads < 1:
            raise ValueError("num_layers and num_heads must be >= 1")
        if self.mode == "stream" and not self.stream_exact:
            raise ValueError(
                "mode='stream' is exact only for one layer or unidirectional attention; "
                "use mode='copies' (or 'auto') for a bidirectional multi-layer model"
            )

    @property
    def stream_exact(self) -> bool:
        return self.num_layers == 1 or self.direction == "unidirectional"

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "fields"}
        return {"fields": [f.config() for f in self.fields], **d}

    @classmethod
    def from_dict(cls, d: dict) -> EFAConfig:
        d = dict(d)
        d["fields"] = [field_from_config(f) for f in d["fields"]]
        return cls(**d)


class ConditionalModel(nn.Module):
    """What EFA and its factorisation-model special cases share: natural parameters per target
    field and position, and the (pseudo) log-likelihood they define."""

    fields: list[Field]
    max_len: int | None = None

    @property
    def targets(self) -> list[Field]:
        return [f for f in self.fields if f.target]

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        """η [B, I, num_natural] of every target field at every position."""
        raise NotImplementedError

    def forward(self, data: Sequences) -> dict[str, Tensor]:
        return self.natural_params(data)

    def check(self, data: Sequences) -> None:
        check_sequences(data, self.fields, self.max_len)

    def log_likelihood(
        self, data: Sequences, base_measure: bool = True, check: bool = True
    ) -> dict[str, tuple[Tensor, int]]:
        """Per target field: (sum of log p(y_i | context) over predicted positions, count)."""
        if check:
            self.check(data)
        etas = self.natural_params(data)
        out = {}
        for f in self.targets:
            m = data.predicted(f.name)
            y = data.fields[f.name][m]
            out[f.name] = (f.family.log_prob(y, etas[f.name][m], base_measure).sum(), int(m.sum()))
        return out

    def loss(self, data: Sequences, check: bool = False) -> Tensor:
        """Training objective: the sum over target fields of the mean negative log-likelihood."""
        ll = self.log_likelihood(data, check=check)
        return -sum(s / max(n, 1) for s, n in ll.values())

    @torch.no_grad()
    def predict_mean(self, data: Sequences) -> dict[str, Tensor]:
        """E[y_i | context] at every position (probabilities for categories)."""
        self.check(data)
        etas = self.natural_params(data)
        return {f.name: f.family.mean(etas[f.name]) for f in self.targets}


class Attention(nn.Module):
    """Multi-head attention; with ``content`` given, the query-stream form of two-stream
    attention: position i attends to content[j] for j ≠ i and to x[i] itself."""

    def __init__(self, d_model, num_heads, head_dim, kind, scale, bias, out_proj):
        super().__init__()
        inner = num_heads * head_dim
        self.num_heads, self.head_dim, self.kind = num_heads, head_dim, kind
        self.scale = 1 / math.sqrt(head_dim) if scale == "sqrt" else 1 / head_dim
        self.q = nn.Linear(d_model, inner, bias=bias)
        self.k = nn.Linear(d_model, inner, bias=bias)
        self.v = nn.Linear(d_model, inner, bias=bias)
        if out_proj:
            self.o = nn.Linear(inner, d_model, bias=bias)
        elif inner == d_model:
            self.o = nn.Identity()
        else:
            raise ValueError(f"out_proj=False needs num_heads*head_dim == d_model ({d_model})")

    def split(self, x: Tensor) -> Tensor:
        b, i, _ = x.shape
        return x.view(b, i, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(
        self,
        x: Tensor,
        allowed: Tensor,
        content: Tensor | None = None,
        memory: Tensor | None = None,
    ):
        """``x`` attends to itself; with ``memory`` [B, I, d], the queries ``x`` [B, 1, d]
        attend to ``memory`` instead (the masked position's row in the last layer)."""
        q = self.split(self.q(x))
        src = x if memory is None else memory
        k, v = self.split(self.k(src)), self.split(self.v(src))
        if content is None:
            s = q @ k.transpose(-1, -2)
        else:
            eye = torch.eye(x.shape[1], dtype=torch.bool, device=x.device)
            kc, vc = self.split(self.k(content)), self.split(self.v(content))
            s = torch.where(eye, (q * k).sum(-1, keepdim=True), q @ kc.transpose(-1, -2))
        s = s * self.scale
        if self.kind == "softmax":
            w = torch.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1)
        else:
            w = s * allowed
        if content is None:
            out = w @ v
        else:
            # Off-diagonal weights multiply content values, the diagonal the token's own value.
            out = w @ vc + torch.diagonal(w, dim1=-2, dim2=-1)[..., None] * (v - vc)
        b, _, i, _ = out.shape
        return self.o(out.transpose(1, 2).reshape(b, i, -1)), w


class Block(nn.Module):
    def __init__(self, cfg: EFAConfig, d_model: int, head_dim: int):
        super().__init__()
        self.kind = cfg.block
        self.attn = Attention(
            d_model, cfg.num_heads, head_dim, cfg.attention, cfg.scale, cfg.bias, cfg.out_proj
        )
        if self.kind in ("post_ln", "pre_ln"):
            self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            self.ffn = nn.Sequential(
                nn.Linear(d_model, cfg.ffn_hidden), nn.ReLU(), nn.Linear(cfg.ffn_hidden, d_model)
            )

    def forward(
        self,
        x: Tensor,
        allowed: Tensor,
        content: Tensor | None = None,
        memory: Tensor | None = None,
    ):
        if self.kind == "pre_ln":
            c = None if content is None else self.ln1(content)
            m = None if memory is None else self.ln1(memory)
            a, w = self.attn(self.ln1(x), allowed, c, m)
            x = x + a
            return x + self.ffn(self.ln2(x)), w
        a, w = self.attn(x, allowed, content, memory)
        if self.kind == "bare":
            return a, w
        if self.kind == "residual":
            return x + a, w
        x = self.ln1(x + a)
        return self.ln2(x + self.ffn(x)), w


def _mlp(sizes: list[int]) -> nn.Module:
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


class FieldEncoder(nn.Module):
    """β (categories), λ₁ (values) or g (attributes) for one field, with its [MASK] embedding."""

    def __init__(self, f: Field):
        super().__init__()
        self.f = f
        if f.kind == "category":
            self.table = nn.Embedding(f.num_categories + 1, f.dim)  # last row: [MASK]
            nn.init.normal_(self.table.weight, std=0.1)
            return
        if f.kind == "value" and f.encoder == "table":
            self.table = nn.Embedding(f.num_values + 1, f.dim)
            nn.init.normal_(self.table.weight, std=0.1)
            return
        size = f.size if f.kind == "attribute" else 1
        if f.encoder == "mlp":
            self.net = _mlp([size, f.hidden, f.dim])
        elif f.encoder == "linear":
            self.net = nn.Linear(size, f.dim)
        else:
            self.net = nn.Identity()
        if f.kind == "value":
            if f.encoder == "identity":  # λ₁([MASK]) = 0, as in Props 2–3
                self.register_buffer("mask", torch.zeros(f.dim))
            else:
                self.mask = nn.Parameter(torch.randn(f.dim) * 0.1)
        self.register_buffer("loc", torch.tensor(f.loc, dtype=torch.float32).reshape(-1))
        self.register_buffer("scale", torch.tensor(f.scale, dtype=torch.float32).reshape(-1))

    def forward(self, x: Tensor, hidden: Tensor | None) -> Tensor:
        f = self.f
        if hasattr(self, "table"):
            ids = x.long()
            if hidden is not None:
                ids = torch.where(hidden, self.table.num_embeddings - 1, ids)
            return self.table(ids)
        if f.kind == "value":
            # Hidden values may be anything (missing ones too): zero them before the encoder so
            # no NaN can reach a gradient.
            x = torch.where(hidden, 0, x) if hidden is not None else x
            x = x[..., None]
        z = (x.to(self.loc.dtype) - self.loc) / self.scale
        e = self.net(z)
        if hidden is not None:
            e = torch.where(hidden[..., None], self.mask, e)
        return e


class Readout(nn.Module):
    """δ (categories: logits) or λ₂ followed by the family's link (values)."""

    def __init__(self, f: Field, d_model: int):
        super().__init__()
        self.f = f
        if f.kind == "category":
            self.net = nn.Linear(d_model, f.num_categories, bias=f.readout_bias)
        elif f.readout == "linear":
            self.net = nn.Linear(d_model, f.family.num_outputs)
        else:
            self.net = _mlp([d_model, *f.readout_hidden, f.family.num_outputs])

    def forward(self, h: Tensor) -> Tensor:
        z = self.net(h)
        f = self.f
        if f.kind == "value" and f.family.name in GAUSSIAN_MEAN_FAMILIES:
            z = torch.cat([f.loc + f.scale * z[..., :1], z[..., 1:]], dim=-1)
        return f.family.link(z)


class EFA(ConditionalModel):
    """An exponential family attention model over any mix of fields.

    >>> model = EFA(EFAConfig([Category("movie", 50, target=False),
    ...                        Value("rating", Poisson(shift=1))], max_len=44))
    """

    def __init__(self, config: EFAConfig | None = None, **kwargs):
        super().__init__()
        cfg = config or EFAConfig(**kwargs)
        self.config = cfg
        self.fields = cfg.fields
        self.max_len = cfg.max_len
        width = sum(f.dim for f in cfg.fields)
        d = cfg.d_model or width
        self.d_model = d
        self.encoders = nn.ModuleDict({f.name: FieldEncoder(f) for f in cfg.fields})
        if cfg.mix == "none":
            if cfg.d_model not in (None, width):
                raise ValueError(
                    f"d_model={cfg.d_model} needs mix='linear' or 'mlp' (width {width})"
                )
            self.mix = nn.Identity()
        elif cfg.mix == "linear":
            self.mix = nn.Linear(width, d)
        else:
            self.mix = _mlp([width, cfg.mix_hidden, d])
        if cfg.max_len is not None:
            self.pos = nn.Embedding(cfg.max_len, d)
            nn.init.normal_(self.pos.weight, std=0.1)
        head_dim = cfg.head_dim or d // cfg.num_heads
        self.blocks = nn.ModuleList(Block(cfg, d, head_dim) for _ in range(cfg.num_layers))
        self.readouts = nn.ModuleDict({f.name: Readout(f, d) for f in self.targets})

    # -- encode ---------------------------------------------------------------------------
    def encode(self, data: Sequences, hidden: dict[str, Tensor]) -> Tensor:
        """Token embeddings [B, I, d]; ``hidden[name]`` [B, I] marks values replaced by [MASK]."""
        parts = [
            self.encoders[f.name](data.fields[f.name], hidden.get(f.name)) for f in self.fields
        ]
        x = self.mix(torch.cat(parts, dim=-1))
        if self.max_len is not None:
            x = x + self.pos.weight[: x.shape[1]].to(x.dtype)
        return x

    def hidden_for(self, data: Sequences, target: str | None) -> dict[str, Tensor]:
        """Masks of the tokens that predict ``target`` (None: the unmasked content tokens).
        Missing values are always hidden; predicting target field k hides fields k, k+1, ...."""
        hidden = {name: ~m for name, m in data.observed.items()}
        if target is None:
            return hidden
        names = [f.name for f in self.targets]
        ones = torch.ones_like(data.valid())
        for name in names[names.index(target) :]:
            hidden[name] = ones
        return hidden

    def allowed(self, data: Sequences) -> Tensor:
        """[B, 1, I, I] which key j each query i may see. Each position always sees itself."""
        valid = data.valid()
        n = valid.shape[1]
        eye = torch.eye(n, dtype=torch.bool)
        a = valid[:, None, :].expand(-1, n, -1)
        if self.config.direction == "unidirectional":
            a = a & torch.ones(n, n, dtype=torch.bool).tril()
        return (a | eye)[:, None]

    # -- attend + read out ------------------------------------------------------------------
    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        return self._forward(data, want_attention=False)[0]

    def attention(self, data: Sequences, target: str | None = None) -> Tensor:
        """Attention weights [L, B, H, I, I]: row i of layer l is what the masked query i pays
        to each position in the copy where i is masked (Figure 3 of the paper)."""
        self.check(data)
        target = target or self.targets[0].name
        with torch.no_grad():
            return self._forward(data, want_attention=True, only=target)[1]

    def _forward(self, data: Sequences, want_attention: bool, only: str | None = None):
        mode = self.config.mode
        if mode == "auto":
            mode = "stream" if self.config.stream_exact else "copies"
        targets = [f for f in self.targets if only is None or f.name == only]
        content = self.encode(data, self.hidden_for(data, None))
        allowed = self.allowed(data)
        etas, attn = {}, None
        for f in targets:
            query = self.encode(data, self.hidden_for(data, f.name))
            if mode == "stream":
                h, attn = self._stream(content, query, allowed, want_attention)
                etas[f.name] = self.readouts[f.name](h)
            else:
                etas[f.name], attn = self._copies(
                    f, content, query, allowed, data.predicted(f.name), want_attention
                )
        return etas, attn

    def _stream(self, content, query, allowed, want_attention):
        weights = []
        for layer, block in enumerate(self.blocks):
            g, w = block(query, allowed, content=content)
            if layer + 1 < len(self.blocks):
                content, _ = block(content, allowed)
            query = g
            if want_attention:
                weights.append(w)
        return query, (torch.stack(weights) if want_attention else None)

    def _copies(self, f, content, query, allowed, predicted, want_attention):
        b_idx, i_idx = predicted.nonzero(as_tuple=True)
        n_out = f.family.num_natural
        eta = content.new_zeros(*predicted.shape, n_out)
        weights = []
        for start in range(0, len(b_idx), self.config.chunk):
            b = b_idx[start : start + self.config.chunk]
            i = i_idx[start : start + self.config.chunk]
            rows = torch.arange(len(b))
            x = content[b].clone()
            x[rows, i] = query[b, i]
            ws = []
            for block in self.blocks[:-1]:
                x, w = block(x, allowed[b])
                if want_attention:
                    ws.append(w[rows, :, i])  # [P, H, I]: the masked query's row
            # Only position i of the last layer is read out: compute that row alone.
            last = allowed[b][rows, :, i][:, :, None]
            h, w = self.blocks[-1](x[rows, i][:, None], last, memory=x)
            if want_attention:
                ws.append(w[:, :, 0])
            eta[b, i] = self.readouts[f.name](h[:, 0])
            if want_attention:
                weights.append(torch.stack(ws))
        if not want_attention:
            return eta, None
        # Scatter the rows back to [L, B, H, I, I] (zeros for rows that are not predicted).
        rows = torch.cat(weights, dim=1)
        num_layers, _, heads, n = rows.shape
        full = rows.new_zeros(num_layers, predicted.shape[0], heads, n, n)
        full[:, b_idx, :, i_idx] = rows.permute(1, 0, 2, 3)
        return eta, full
