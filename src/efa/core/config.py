"""The configuration of an EFA network, :class:`EFAConfig`: what a token is made of (its
fields), the sizes of the network, the attention kernel and block, and how the exact masked
pseudo-likelihood is computed; checked as it is made, saved with the model
(:meth:`EFAConfig.to_dict`). The network itself is :class:`efa.core.model.EFA`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from efa.core import strategies
from efa.core.attention import BLOCKS
from efa.core.fields import Field, field_from_config
from efa.core.kernels import KERNELS, kernel_spec

DIRECTIONS = ("bidirectional", "unidirectional")


@dataclass
class EFAConfig:
    """Sizes and switches of an EFA network (the fields say what a token is).

    Parameters
    ----------
    fields : list of Field
        What a token is made of (``Category``, ``Value``, ``Attribute``), in factorisation
        order.
    num_layers, num_heads : int, default 2
        Attention layers, and heads per layer.
    head_dim : int, optional
        Width of each head (default: the token width divided by ``num_heads``).
    d_model : int, optional
        Token width after the mixing network (None keeps the concatenation of the field
        embeddings; another width needs ``mix``).
    mix : {"none", "linear", "mlp"}, default "none"
        The network from the concatenated field embeddings to the token.
    mix_hidden : int, default 64
        Hidden units of the "mlp" mix.
    max_len : int, optional
        Size of the learned positional table (None: no positions, for sets).
    direction : {"bidirectional", "unidirectional"}, default "bidirectional"
        Bidirectional: every other position is context (the masked pseudo-likelihood, Remarks
        4–5). Unidirectional: a causal mask, the full likelihood.
    attention : str or dict, default "softmax"
        An attention kernel: ``softmax``, ``linear`` (the paper's softmax-free form of Props
        2–3) or any registered in :mod:`efa.core.kernels`, as a name or ``{"kernel": name,
        **options}``.
    scale : {"sqrt", "linear", "none"}, default "sqrt"
        Score scaling: 1/√d_head (Vaswani), 1/d_head (the paper's 1/K) or none (q·k).
    block : {"residual", "bare", "post_ln", "pre_ln", "residual_linear", "concat"}
        The layer around attention (default "residual"): x + MHA(x) (the paper's
        experiments), Eq. 1 alone, transformer blocks (with a feed-forward network), residual
        attention then z + W'z (the linear block whose masked logits are a CBOW mixture of
        experts, :mod:`efa.moe`), or [x, MHA(x)] (the token kept beside the attended value,
        Eq. 16 of the UNN note; it can leave a field out of what is carried past attention).
    ffn_hidden : int, default 64
        Hidden units of the feed-forward network of the "post_ln" and "pre_ln" blocks.
    dropout : float, default 0.0
        Rate on the attention and feed-forward outputs (0: none), in [0, 1).
    bias, out_proj : bool, default True
        Biases in the projections; an output projection W^O after the heads.
    mode : {"auto", "two_stream", "copies"}, default "auto"
        How the exact masked pseudo-likelihood is computed: two-stream (one pass) or in-model
        masked copies; ``auto`` takes two-stream wherever it is exact
        (:mod:`efa.core.strategies`).
    chunk : int, default 4096
        Masked copies built at a time (memory against speed; the result is the same).
    attend_self : bool, default True
        Whether position i attends to its own (masked) token. False is leave-one-out attention
        (strictly causal when unidirectional, Eq. 14 of the UNN note): the masked token then
        reaches the read-out only through the block's skip path (``concat``); a position with
        no other position to attend to (the first one, causally) attends to its own masked
        token alone, so its prediction is the model's prior given that token's other fields.
    meta : dict, optional
        Free-form, saved with the model (default: empty).

    Raises
    ------
    TypeError
        If ``fields`` is not a list of efa fields.
    ValueError
        If field names repeat, no field is a target, a setting is not one of its choices or
        not a positive integer, the attention kernel refuses its options, or
        ``mode="two_stream"`` would not be exact.
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
        for key in ("bias", "out_proj", "attend_self"):  # the string "false" is truthy
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f"{key} must be True or False, got {getattr(self, key)!r}")
        if not isinstance(self.meta, dict):
            raise ValueError(f"meta must be a dict, got {self.meta!r}")
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
        """Whether attention is unidirectional (a causal mask)."""
        return self.direction == "unidirectional"

    @property
    def strategy(self) -> str:
        """The exact algorithm that ``mode`` selects (efa.core.strategies)."""
        row_local = KERNELS[kernel_spec(self.attention)["kernel"]].row_local
        return strategies.choose(self.mode, self.num_layers, self.causal, row_local)

    def to_dict(self) -> dict:
        """The configuration as a JSON-ready dict (``EFAConfig.from_dict`` reads it back).

        Returns
        -------
        dict
            Every setting, the fields as their ``config()`` dicts.
        """
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "fields"}
        return {"fields": [f.config() for f in self.fields], **d}

    @classmethod
    def from_dict(cls, d: dict) -> EFAConfig:
        """The configuration that :meth:`to_dict` wrote.

        Parameters
        ----------
        d : dict
            The dict (its fields as ``config()`` dicts).

        Returns
        -------
        EFAConfig
            The configuration, checked.
        """
        d = dict(d)
        d["fields"] = [field_from_config(f) for f in d["fields"]]
        return cls(**d)
