"""Exponential family attention (EFA), Wibisono & Wang, Section 2.

    encode   each token's fields and position (efa.core.fields)      -> tokens  [B, I, d]
    attend   L blocks of masked self-attention (efa.core.attention)  -> states  [B, I, d]
    read out the state of the copy where position i is masked   -> η_i     (efa.core.strategies)
    family   log p(y_i | context) = η_i·t(y_i) − A(η_i) + log h(y_i)   (efa.core.families)

:class:`ConditionalModel` (:mod:`efa.core.conditional`) is what EFA shares with its special cases
and peers (efa.baselines): natural parameters at asked positions, and the (pseudo)
log-likelihood they define.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import Tensor, nn

from efa.core import softmax, strategies
from efa.core.attention import BLOCKS, Block
from efa.core.conditional import ConditionalModel, context_bag, context_pairs
from efa.core.data import Sequences
from efa.core.encoders import LinearReadout, MapEncoder, TableEncoder, ValueReadout
from efa.core.fields import ROLES, Category, Field, Value, field_from_config
from efa.core.kernels import KERNELS, kernel_spec
from efa.core.mlp import mlp

DIRECTIONS = ("bidirectional", "unidirectional")


@dataclass
class EFAConfig:
    """Sizes and switches of an EFA network (the fields say what a token is).

    Parameters
    ----------
    fields : list of Field
        What a token is made of (``Category``, ``Value``, ``Attribute``), in factorisation
        order.
    num_layers, num_heads : int
        Attention layers, and heads per layer.
    head_dim : int, optional
        Width of each head (default: the token width divided by ``num_heads``).
    d_model : int, optional
        Token width after the mixing network (None keeps the concatenation of the field
        embeddings; another width needs ``mix``).
    mix : {"none", "linear", "mlp"}
        The network from the concatenated field embeddings to the token (``mix_hidden`` units
        for "mlp").
    max_len : int, optional
        Size of the learned positional table (None: no positions, for sets).
    direction : {"bidirectional", "unidirectional"}
        Bidirectional: every other position is context (the masked pseudo-likelihood, Remarks
        4–5). Unidirectional: a causal mask, the full likelihood.
    attention : str or dict
        An attention kernel: ``softmax``, ``linear`` (the paper's softmax-free form of Props
        2–3) or any registered in :mod:`efa.core.kernels`, as a name or ``{"kernel": name,
        **options}``.
    scale : {"sqrt", "linear", "none"}
        Score scaling: 1/√d_head (Vaswani), 1/d_head (the paper's 1/K) or none (q·k).
    block : {"residual", "bare", "post_ln", "pre_ln", "residual_linear", "concat"}
        The layer around attention: x + MHA(x) (the paper's experiments), Eq. 1 alone,
        transformer blocks (with a feed-forward network of ``ffn_hidden`` units), residual
        attention then z + W'z (the linear block whose masked logits are a CBOW mixture of
        experts, :mod:`efa.moe`), or [x, MHA(x)] (the token kept beside the attended value,
        Eq. 16 of the UNN note; it can leave a field out of what is carried past attention).
    dropout : float
        Rate on the attention and feed-forward outputs (0: none).
    bias, out_proj : bool
        Biases in the projections; an output projection W^O after the heads.
    mode : {"auto", "two_stream", "copies"}
        How the exact masked pseudo-likelihood is computed: two-stream (one pass) or in-model
        masked copies; ``auto`` takes two-stream wherever it is exact
        (:mod:`efa.core.strategies`).
    chunk : int
        Masked copies built at a time (memory against speed; the result is the same).
    attend_self : bool
        Whether position i attends to its own (masked) token. False is leave-one-out attention
        (strictly causal when unidirectional, Eq. 14 of the UNN note): the masked token then
        reaches the read-out only through the block's skip path (``concat``); a position with
        no other position to attend to (the first one, causally) attends to its own masked
        token alone, so its prediction is the model's prior given that token's other fields.
    meta : dict
        Free-form, saved with the model.
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
    attention: str | dict = "softmax"
    scale: str = "sqrt"
    block: str = "residual"
    ffn_hidden: int = 64
    dropout: float = 0.0
    bias: bool = True
    out_proj: bool = True
    mode: str = "auto"
    chunk: int = 4096
    attend_self: bool = True
    meta: dict = field(default_factory=dict)  # free-form, saved with the model

    def __post_init__(self):
        if not isinstance(self.fields, list | tuple) or not all(
                isinstance(f, Field) for f in self.fields):
            raise TypeError(f"fields must be a list of efa fields (Category, Value, Attribute, "
                            f"...), got {self.fields!r}")
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise ValueError(f"field names must be unique, got {names}")
        if not any(f.target for f in self.fields):
            raise ValueError("at least one field must be a target (target=True)")
        self.mode = strategies.ALIASES.get(self.mode, self.mode)
        choices = {
            "direction": DIRECTIONS,
            "scale": ("sqrt", "linear", "none"),
            "block": BLOCKS,
            "mix": ("none", "linear", "mlp"),
            "mode": strategies.MODES,
        }
        for key, allowed in choices.items():
            if getattr(self, key) not in allowed:
                raise ValueError(f"{key} must be one of {allowed}, got {getattr(self, key)!r}")
        kernel_spec(self.attention)
        if not isinstance(self.dropout, int | float) or not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be a rate in [0, 1), got {self.dropout!r}")
        for key in ("num_layers", "num_heads", "chunk", "mix_hidden", "ffn_hidden"):
            v = getattr(self, key)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{key} must be a positive integer, got {v!r}")
        for key in ("head_dim", "d_model", "max_len"):
            v = getattr(self, key)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ValueError(f"{key} must be a positive integer or None, got {v!r}")
        _ = self.strategy  # refuses two_stream where it is not exact

    @property
    def causal(self) -> bool:
        return self.direction == "unidirectional"

    @property
    def strategy(self) -> str:
        """The exact algorithm that ``mode`` selects (efa.core.strategies)."""
        row_local = KERNELS[kernel_spec(self.attention)["kernel"]].row_local
        return strategies.choose(self.mode, self.num_layers, self.causal, row_local)

    def to_dict(self) -> dict:
        """The configuration as a JSON-ready dict (``EFAConfig.from_dict`` reads it back)."""
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "fields"}
        return {"fields": [f.config() for f in self.fields], **d}

    @classmethod
    def from_dict(cls, d: dict) -> EFAConfig:
        d = dict(d)
        d["fields"] = [field_from_config(f) for f in d["fields"]]
        return cls(**d)


class EFA(ConditionalModel):
    """An exponential family attention model over any mix of fields.

    Each token's fields are encoded and concatenated, attention layers weigh the context
    (masking decides uni- or bidirectional), the state at a masked position is read out as each
    field's natural parameter, and the field's family turns it into a likelihood.

    Parameters
    ----------
    config : EFAConfig, optional
        The fields and sizes; the model keeps its own copy.
    **kwargs
        Instead of ``config``: any :class:`EFAConfig` entry by name.

    See Also
    --------
    efa.fit : train it.
    efa.evaluate, efa.log_likelihoods : score it.
    ConditionalModel.predictive : its predictive distributions.

    Examples
    --------
    >>> model = EFA(EFAConfig([Category("movie", 50, target=False),
    ...                        Value("rating", Poisson(shift=1))], max_len=44))
    """

    def __init__(self, config: EFAConfig | None = None, **kwargs: Any):
        super().__init__()
        # The model owns a copy: fit standardises unset Value loc/scale in place (standardise),
        # which must not change the fields the user built it from (they may build another).
        if config is not None and kwargs:  # they would be ignored: the config decides
            raise TypeError(f"EFA takes a config or keyword settings, not both; got a config "
                            f"and {sorted(kwargs)}")
        cfg = copy.deepcopy(config or EFAConfig(**kwargs))
        self.config = cfg
        self.fields = cfg.fields
        self.max_len = cfg.max_len
        self.direction = cfg.direction
        width = sum(f.dim for f in cfg.fields)
        d = cfg.d_model or width
        self.encoders = nn.ModuleDict({f.name: f.build_encoder() for f in cfg.fields})
        self.mix: nn.Module
        if cfg.mix == "none":
            if cfg.d_model not in (None, width):
                raise ValueError(
                    f"d_model={cfg.d_model} needs mix='linear' or 'mlp' (width {width})"
                )
            self.mix = nn.Identity()
        elif cfg.mix == "linear":
            self.mix = nn.Linear(width, d)
        else:
            self.mix = mlp([width, cfg.mix_hidden, d])
        if cfg.max_len is not None:
            self.pos = nn.Embedding(cfg.max_len, d)
            nn.init.normal_(self.pos.weight, std=0.1)
        head_dim = cfg.head_dim or d // cfg.num_heads
        if head_dim < 1:
            raise ValueError(f"the model width {d} is smaller than num_heads={cfg.num_heads}, so "
                             "each head would have width 0: use fewer heads, wider fields, or "
                             "set head_dim")
        blocks, width = [], d
        for layer in range(cfg.num_layers):
            blocks.append(Block(width, head_dim, cfg, self._inputs() if layer == 0 else None))
            width = blocks[-1].d_out  # grows with block="concat"
        self.blocks = nn.ModuleList(blocks)
        self.readouts = nn.ModuleDict({f.name: f.build_readout(width) for f in self.target_fields})
        bags = cast("list[Category]",
                    [f for f in self.target_fields if getattr(f, "bag", False)])
        if bags:  # created last and at zero: the rest of the model starts as without them
            self.bags = nn.ParameterDict({
                f.name: nn.Parameter(torch.zeros(f.num_categories, f.num_categories))
                for f in bags})

    def _inputs(self) -> dict | None:
        """The token columns that the first layer's queries, keys, values and skip path read
        (``Field.feeds``; None where every field feeds it)."""
        cols: dict[str, list[int]]
        cols, start = {role: [] for role in ROLES}, 0
        for f in self.fields:
            for role in f.feeds:
                cols[role] += range(start, start + f.dim)
            start += f.dim
        restricted = {r: c for r, c in cols.items() if len(c) < start}
        if not restricted:
            return None
        if self.config.mix != "none":
            raise ValueError(
                "fields that feed only some of q, k, v, skip need mix='none' (a mixed token "
                "has no per-field columns)"
            )
        for role in ("q", "k", "v"):
            if role in restricted and not restricted[role]:
                raise ValueError(f"no field feeds {role!r} of the attention")
        return restricted

    @torch.no_grad()
    def standardise(self, data: Sequences) -> EFA:
        """Set every Value field's unset ``loc``/``scale`` to the mean and standard deviation
        of its observed values in ``data`` (1 if they are constant): λ₁ then sees standardised
        values and Gaussian read-outs work in standardised units. ``efa.fit`` calls this with
        the training data; fields whose loc and scale are set are left alone. Returns self."""
        # Past the first test, every field is a Value (kind "value").
        for f in cast("list[Value]", self.fields):
            if f.kind != "value" or (f.loc is not None and f.scale is not None):
                continue
            y = data.fields[f.name][data.valid() & data.observed.get(f.name, data.valid())]
            y = y.double()
            if f.loc is None:
                f.loc = float(y.mean()) if len(y) else 0.0
            if f.scale is None:
                std = float(y.std()) if len(y) > 1 else 0.0
                f.scale = std if std > 0 and std < float("inf") else 1.0
            encoder = self.encoders[f.name]
            if hasattr(encoder, "loc"):  # a MapEncoder (a TableEncoder has no loc/scale)
                cast(MapEncoder, encoder).loc.fill_(f.loc)
                cast(MapEncoder, encoder).scale.fill_(f.scale)
            if f.name in self.readouts:
                readout = cast(ValueReadout, self.readouts[f.name])
                readout.loc, readout.scale = f.loc, f.scale
        return self

    # -- encode -----------------------------------------------------------------------------
    def encode(self, data: Sequences, hidden: dict[str, Tensor | bool]) -> Tensor:
        """Token embeddings [B, I, d]; ``hidden[name]`` [B, I] marks values replaced by [MASK]
        (``True``: every value of the field, whose encoder then need not run)."""
        parts = []
        for f in self.fields:
            enc = cast("MapEncoder | TableEncoder", self.encoders[f.name])
            h, x = hidden.get(f.name), data.fields[f.name]
            parts.append(enc.masked(x.shape[:2]) if h is True else enc(x, h))
        x = self.mix(torch.cat(parts, dim=-1))
        if self.max_len is not None:
            x = x + self.pos.weight[: x.shape[1]].to(x.dtype)
        return x

    def hidden_for(self, data: Sequences, target: str | None) -> dict[str, Tensor | bool]:
        """Masks of the tokens that predict ``target`` (None: the unmasked content tokens).
        Missing values are always hidden; predicting target field k hides fields k, k+1, ...
        at every position (``True``: the query stream uses only the asked positions)."""
        hidden: dict[str, Tensor | bool] = {name: ~m for name, m in data.observed.items()}
        if target is None:
            return hidden
        names = [f.name for f in self.target_fields]
        for name in names[names.index(target) :]:
            hidden[name] = True
        return hidden

    def allowed(self, data: Sequences) -> Tensor:
        """[B, 1, I, I] which key j each query i may see. Each position sees itself, unless
        ``attend_self=False``: then only where it would otherwise see nothing."""
        valid = data.valid()
        n = valid.shape[1]
        eye = torch.eye(n, dtype=torch.bool, device=valid.device)
        a = valid[:, None, :].expand(-1, n, -1)
        if self.config.causal:
            a = a & torch.ones(n, n, dtype=torch.bool, device=valid.device).tril()
        if not self.config.attend_self:
            a = a & ~eye
            return (a | (eye & ~a.any(-1, keepdim=True)))[:, None]
        return (a | eye)[:, None]

    # -- attend + read out ------------------------------------------------------------------
    def states(self, data: Sequences, target: str, at: Tensor, want_weights: bool = False,
               head: Callable[[Tensor], Tensor] | None = None, content: Tensor | None = None,
               stream: list[Tensor] | None = None) -> tuple[Tensor, Tensor | None]:
        """The last layer's state [P, d] that predicts ``target`` at each asked position of
        ``at`` [B, I] (``head(state)`` if given), and the masked queries' attention rows
        [L, P, H, I] if ``want_weights``. ``content``: the unmasked tokens, if already encoded;
        ``stream``: a list shared by the target fields of one batch, in which the two-stream
        strategy keeps the content stream's layers (computed once, not once per field)."""
        if content is None:
            content = self.encode(data, self.hidden_for(data, None))
        query = self.encode(data, self.hidden_for(data, target))
        name = self.config.strategy
        # Inference only: counting the asked positions is a host sync, kept off the training step.
        if name == "two_stream" and self.config.mode == "auto" and not self.training \
                and not want_weights and strategies.sparse(at):
            name = "copies"  # exact too, and cheaper for so few positions
        run = strategies.STRATEGIES[name]
        kw: dict[str, Any] = {} if head is None else {"head": head}
        if name == "two_stream" and stream is not None:
            kw["stream"] = stream
        return run(self.blocks, content, query, self.allowed(data), at, want_weights,
                   chunk=self.config.chunk, **kw)

    def glm_part(self) -> tuple[list[Tensor], list[Tensor]]:
        """The multinomial logit on context counts that the ``Category(bag=True)`` fields
        contain, as (its parameters: their bag tables and read-out biases; the read-out
        weights that are 0 in it). With those weights at 0 a bag field's logits are
        b + Σ_{j in c(i)} U[x_j] exactly (b only with ``readout_bias=True``): what
        :func:`efa.training.train.fit_glm_first` fits first."""
        params: list[Tensor] = []
        zero: list[Tensor] = []
        for name in getattr(self, "bags", {}):
            net = cast(LinearReadout, self.readouts[name]).net
            params += [self.bags[name]] + ([net.bias] if net.bias is not None else [])
            zero.append(net.weight)
        return params, zero

    def penalty(self) -> Tensor | None:
        """(bag_l2 / 2)·‖U‖² of every ``Category(bag=True)`` field with a prior on U."""
        terms = [0.5 * f.bag_l2 * f.bag_table(self.bags[f.name]).pow(2).sum()
                 for f in cast("list[Category]", self.target_fields)  # bag: a Category
                 if getattr(f, "bag", False) and f.bag_l2 > 0]
        return cast(Tensor, sum(terms)) if terms else None

    def natural_params_at(self, data: Sequences, at: dict[str, Tensor]) -> dict[str, Tensor]:
        stream: list[Tensor]
        content, stream = self.encode(data, self.hidden_for(data, None)), []
        out = {}
        for name, m in at.items():
            eta, _ = self.states(data, self.target(name).name, m, head=self.readouts[name],
                                 content=content, stream=stream)
            if hasattr(self, "bags") and name in self.bags:
                table = cast(Category, self.field(name)).bag_table(self.bags[name])
                eta = eta + context_bag(data, name, table, self.direction, m)
            out[name] = self.restrict(name, data, m, eta)
        return out

    def log_probs_at(self, data: Sequences, at: dict[str, Tensor], base_measure: bool = True,
                     sampling: softmax.Sampling | None = None) -> dict[str, Tensor]:
        """As ``ConditionalModel.log_probs_at``; a category with ``vocab_chunk`` is scored
        without its [positions × D] logits (``efa.core.softmax``), and in training with ``sampling``
        (``fit(..., sampled_softmax=k)``) by the sampled softmax."""
        sampling = sampling if self.training else None
        large = [name for name in at if self.field(name).kind == "category" and (
            sampling is not None or getattr(self.field(name), "vocab_chunk", None))]
        if not large:
            return super().log_probs_at(data, at, base_measure)
        out = super().log_probs_at(data, {k: v for k, v in at.items() if k not in large},
                                   base_measure) if len(large) < len(at) else {}
        stream: list[Tensor]
        content, stream = self.encode(data, self.hidden_for(data, None)), []
        for name in large:
            f, m = cast(Category, self.field(name)), at[name]
            if f.bag:
                raise ValueError(f"field {name!r} has bag=True, which needs the dense logits: "
                                 "train it without sampled_softmax")
            h, _ = self.states(data, name, m, content=content, stream=stream)
            net = cast(LinearReadout, self.readouts[name]).net
            y = data.fields[name][m]
            excluded = context_pairs(data, name, self.direction, m) if f.distinct else None
            if sampling is not None:
                out[name] = softmax.sampled_log_prob(
                    h, net.weight, net.bias, y, sampling.k, sampling.log_q[name],
                    sampling.generator, excluded)
            else:
                out[name] = softmax.chunked_log_prob(h, net.weight, net.bias, y,
                                                   f.vocab_chunk or f.num_categories, excluded)
        return {name: out[name] for name in at}

    @torch.no_grad()
    def attention_weights(self, data: Sequences, target: str | None = None,
                          at: Tensor | None = None) -> Tensor:
        """Attention weights [L, B, H, I, I]: row i of layer l is what the masked query i pays
        to each position in the copy where i is masked (Figure 3 of the paper); rows of
        positions not in ``at`` (default: every real position) are zero."""
        self.check(data)
        f = self.target(target)
        data, at = self._here(data, at)
        at = data.valid() if at is None else at & data.valid()
        _, rows = self.states(data, f.name, at, want_weights=True)
        rows = cast(Tensor, rows)  # want_weights: never None
        b_idx, i_idx = at.nonzero(as_tuple=True)
        num_layers, _, heads, n = rows.shape
        full = rows.new_zeros(num_layers, at.shape[0], heads, n, n)
        full[:, b_idx, :, i_idx] = rows.permute(1, 0, 2, 3)
        return full

    def warm_start(self, base: EFA) -> EFA:
        """Start this model exactly at ``base``, whose fields are a subset of this model's (a
        same-day model for a model with lagged inputs): shared modules are copied, and the
        token mixer's input columns of the fields ``base`` lacks are zeroed (their encoders keep
        their initialisation and get gradients at once). Returns self."""
        if self.config.mix == "none" or base.config.mix != self.config.mix:
            raise ValueError(
                "warm_start needs both models to mix tokens with the same 'linear'/'mlp'"
            )
        mine = {f.name: f for f in self.fields}
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
                _copy_module(getattr(self, name), module, name)
            _copy_module(self.mix, base.mix, "mix", skip=first(self.mix))
            w, base_w = first(self.mix).weight, first(base.mix).weight
            w.zero_()
            first(self.mix).bias.copy_(first(base.mix).bias)
            offsets, start = {}, 0
            for f in self.fields:
                offsets[f.name], start = start, start + f.dim
            start = 0
            for f in base.fields:
                w[:, offsets[f.name] : offsets[f.name] + f.dim] = base_w[:, start : start + f.dim]
                start += f.dim
        return self


def _copy_module(dst: nn.Module, src: nn.Module, where: str,
                 skip: nn.Module | None = None) -> None:
    """Copy ``src``'s parameters and buffers into ``dst`` (same structure), except ``skip``;
    a ModuleDict copies only the keys ``src`` has."""
    if isinstance(src, nn.ModuleDict):
        peer = cast(nn.ModuleDict, dst)  # the same structure
        for key, m in src.items():
            if key not in peer:
                raise ValueError(f"{where}.{key} has no counterpart in this model")
            _copy_module(peer[key], m, f"{where}.{key}", skip)
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
        _copy_module(getattr(dst, key), child, f"{where}.{key}", skip)
