"""Bidirectional attention as a mixture of continuous-bag-of-words experts (Wibisono & Wang,
UAI 2023, Lemma 1 and Theorem 2), executable.

The paper's Appendix-B block is an efa configuration (:func:`appendix_b`): token embeddings C
with a [MASK] row, learned positions P, one ``residual_linear`` block (z' = x + MHA(x),
z'' = z' + W'z', no LayerNorm, no biases) and the read-out W''. With the masked token at m and
x'_j the token at j of the masked copy (x'_m = c_[MASK] + p_m), its logits are exactly::

    F_m = Σ_h Σ_j π^h_j f^h_j,   π^h = softmax_j(x'_jᵀ W^KQ_h x'_m / √d_w),
    f^h_j = W^LOV_h x'_j + (g + D e_m) / H,

with W^ℓ = W''(I + W'), W^KQ_h = W^K_hᵀ W^Q_h, W^LOV_h = W^ℓ W^O_h W^V_h, g = W^ℓ c_[MASK],
D = W^ℓ Pᵀ (:func:`~efa.reparam.reparameterise`). The sum over j includes the [MASK] slot j = m.

- :func:`mixture` computes the gates π and the expert logits f of any one-layer
  ``residual_linear`` efa model from its encoded tokens (so any field mix, e.g. the tabular
  estimator's columns) and :func:`two_layer_terms` the exact decomposition of two layers
  (``docs/moe.md``).
- :class:`CBOWMoE` is the explicit model: *tied* (its parameters are the reparameterisation of an
  attention model's, recomputed from them at every call, so training one trains the other) or
  *free* (its own W^KQ, W^LOV, g, D, C, P: a superset of the attention model, whose W^LOV and
  W^KQ have rank ≤ d_w and whose g, D, W^LOV share W^ℓ).

The one-layer maths (:class:`~efa.reparam.Reparam`, ``reparameterise``, ``copy_tokens``,
``gates_and_experts``, ``moe_logits``) lives in :mod:`efa.reparam` and is importable from here
too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import torch
from torch import Tensor, nn

from efa.core.conditional import ConditionalModel
from efa.core.config import EFAConfig
from efa.core.data import Sequences
from efa.core.fields import Category
from efa.core.model import EFA
from efa.reparam import Reparam as Reparam
from efa.reparam import check_category_target, check_linear
from efa.reparam import copy_tokens as copy_tokens
from efa.reparam import gates_and_experts as gates_and_experts
from efa.reparam import moe_logits as moe_logits
from efa.reparam import reparameterise as reparameterise
from efa.training.scoring import check_int

if TYPE_CHECKING:  # for annotations only
    from efa.core.attention import Block
    from efa.core.encoders import LinearReadout


def appendix_b(vocab_size: int, seq_len: int, dim: int, num_heads: int = 1,
               head_dim: int | None = None, name: str = "token") -> EFA:
    """The paper's Appendix-B attention model, as an efa model.

    Bidirectional, one masked token predicted at a time: one bias-free ``residual_linear``
    block with W^O, softmax scores scaled by 1/√d_w, learned positions, no LayerNorm.

    Parameters
    ----------
    vocab_size : int
        Words in the vocabulary, V (the token table gets a [MASK] row besides).
    seq_len : int
        Tokens per sentence (the size S of the positional table).
    dim : int
        Token width p.
    num_heads : int, default 1
        Attention heads H.
    head_dim : int, optional
        Width d_w of each head (default: ``dim // num_heads``).
    name : str, default "token"
        Name of the one Category field.

    Returns
    -------
    EFA
        The untrained model.
    """
    return EFA(EFAConfig(
        [Category(name, vocab_size, dim=dim)], num_layers=1, num_heads=num_heads,
        head_dim=head_dim, max_len=seq_len, block="residual_linear", bias=False,
        out_proj=True, scale="sqrt", direction="bidirectional",
    ))


def mixture(model: EFA, data: Sequences, target: str | None = None,
            experts: bool = True) -> tuple[Tensor, Tensor | None]:
    """Gates π and expert logits f of the masked copies of every position m of a model.

    ``Σ_{h,j} π f`` is the model's logits at m (:func:`~efa.reparam.moe_logits`). Any field
    mix works (e.g. the tabular estimator's columns): the tokens are the model's encoded ones.
    Padding: gates of padded keys are 0; rows of padded m are meaningless.

    Parameters
    ----------
    model : EFA
        A one-layer, bias-free ``residual_linear`` model (as for
        :func:`~efa.reparam.reparameterise`).
    data : Sequences
        The sequences.
    target : str, optional
        The predicted field (default: the first target).
    experts : bool, default True
        Compute the expert logits (False: only the gates).

    Returns
    -------
    pi : torch.Tensor, shape (B, M, H, J)
        The gates.
    f : torch.Tensor, shape (B, M, H, J, V), or None
        The expert logits; None unless ``experts``.

    Raises
    ------
    ValueError
        If the model is not of that form.
    """
    check_linear(model)
    f = check_category_target(model, target)
    content = model.encode(data, model.hidden_for(data, None))
    query = model.encode(data, model.hidden_for(data, f.name))
    rep = reparameterise(model, f.name)
    valid = data.valid()
    return gates_and_experts(rep, copy_tokens(content, query), query, valid[:, None, :],
                             experts)


def two_layer_terms(model: EFA, data: Sequences, target: str | None = None) -> dict[str, Tensor]:
    """Two layers' masked logits, decomposed exactly into mixtures over the input tokens.

    The model is a two-layer bias-free ``residual_linear`` one; the mixtures are over the input
    tokens x'_j of copy m (derivation in ``docs/moe.md``). With T = I + W'_1,
    L = W''(I + W'_2), M^l_h = W^O_h W^V_h of layer l, A¹_h (all rows) and A²_h (row m) the
    two layers' attention in copy m::

        F_m = L T x'_m                                      ("self")
            + Σ_h  Σ_j A¹_h[m, j]        L T M¹_h x'_j      ("layer1": H₁ MoEs)
            + Σ_h  Σ_i A²_h[m, i]        L M²_h T x'_i      ("layer2": H₂ MoEs)
            + Σ_hh' Σ_j (A²_h A¹_h')[m, j] L M²_h T M¹_h' x'_j  ("path": H₁H₂ MoEs)

    Every gate row is a distribution over the tokens (A²A¹ is a product of stochastic
    matrices), but the layer-2 gates are a softmax of the *layer-1 states*, which in copy m
    depend on the [MASK] at m: the states are not those of the unmasked sentence. A read-out
    bias is a constant expert, added to ``"self"``.

    Parameters
    ----------
    model : EFA
        A two-layer, bias-free ``residual_linear`` model with softmax attention and
        ``out_proj=True``.
    data : Sequences
        The sequences.
    target : str, optional
        The predicted field (default: the first target).

    Returns
    -------
    dict of str to torch.Tensor
        The four terms ``"self"``, ``"layer1"``, ``"layer2"``, ``"path"``, each of shape
        (B, M, V), which sum to the logits; and the gates ``"A1"`` (B, M, H, J, J) and
        ``"A2"`` (B, M, H, J).

    Raises
    ------
    ValueError
        If the model is not of that form.
    """
    check_linear(model, layers=2)
    f = check_category_target(model, target)
    content = model.encode(data, model.hidden_for(data, None))
    query = model.encode(data, model.hidden_for(data, f.name))
    X = copy_tokens(content, query)  # [B, M, J, p]
    valid = data.valid()
    b1, b2 = cast("Sequence[Block]", model.blocks)
    W_read = cast("LinearReadout", model.readouts[f.name]).net.weight
    p = X.shape[-1]
    T = torch.eye(p, dtype=X.dtype) + b1.lin.weight
    L = W_read + W_read @ b2.lin.weight

    def heads(block):
        a = block.attn
        h, d = a.num_heads, a.head_dim
        Wq, Wk, Wv = (w.weight.view(h, d, p) for w in (a.q, a.k, a.v))
        Wo = a.o.weight.view(p, h, d).transpose(0, 1)
        return Wk.transpose(1, 2) @ Wq, Wo @ Wv, a.kernel.scale  # W^KQ, M, scale

    KQ1, M1, s1 = heads(b1)
    KQ2, M2, s2 = heads(b2)
    keys = valid[:, None, None, None, :]  # [B, 1, 1, 1, J]
    A1 = torch.softmax((torch.einsum("bmjp,hpq,bmiq->bmhij", X, KQ1, X) * s1)
                       .masked_fill(~keys, float("-inf")), -1)  # [B, M, H, I, J]
    # Layer-1 states of copy m at every i: T (x'_i + Σ_h Σ_j A1 M1_h x'_j).
    Z = torch.einsum("pq,bmiq->bmip", T, X + torch.einsum("bmhij,hpq,bmjq->bmip", A1, M1, X))
    n = X.shape[1]
    zm = Z[:, torch.arange(n), torch.arange(n)]  # [B, M, p]: the state at the masked slot
    A2 = torch.softmax((torch.einsum("bmip,hpq,bmq->bmhi", Z, KQ2, zm) * s2)
                       .masked_fill(~valid[:, None, None, :], float("-inf")), -1)
    diag = torch.arange(n)
    A1m = A1[:, diag, :, diag]  # [M, B, H, J] -> row m of copy m
    A1m = A1m.permute(1, 0, 2, 3)  # [B, M, H, J]
    xm = X[:, diag, diag]  # [B, M, p]
    terms = {
        "self": xm @ (L @ T).T,
        "layer1": torch.einsum("bmhj,vp,pq,hqr,bmjr->bmv", A1m, L, T, M1, X),
        "layer2": torch.einsum("bmhi,vp,hpq,qr,bmir->bmv", A2, L, M2, T, X),
        "path": torch.einsum("bmhi,bmgij,vp,hpq,qr,grs,bmjs->bmv", A2, A1, L, M2, T, M1, X),
    }
    bias = cast("LinearReadout", model.readouts[f.name]).net.bias
    if bias is not None:  # a read-out bias is a constant expert
        terms["self"] = terms["self"] + bias
    terms["A1"], terms["A2"] = A1, A2
    return terms


class CBOWMoE(ConditionalModel):
    """The CBOW mixture of experts of Theorem 2 over one Category field with positions.

    ``CBOWMoE.tied(model)``: parameters are :func:`~efa.reparam.reparameterise` of the
    attention ``model`` (recomputed at every call; gradients reach the attention weights).
    ``CBOWMoE(field, seq_len, dim, num_heads, head_dim)``: free parameters W^KQ [H, p, p],
    W^LOV [H, V, p], g [V], D [V, S], C [V+1, p], P [S, p] (initialised N(0, 0.1²)), score
    scale 1/√head_dim.
    Every position is predicted as if masked (:meth:`natural_params`).

    Parameters
    ----------
    field : Category, optional
        The field (free model; V = its number of categories).
    seq_len : int, optional
        Tokens per sentence S (free model).
    dim : int, default 16
        Token width p (free model).
    num_heads : int, default 1
        Experts' heads H (free model).
    head_dim : int, optional
        d_w of the score scale 1/√d_w (free model; default ``max(1, dim // num_heads)``).
    source : EFA, optional
        The attention model of a tied CBOWMoE (use :meth:`tied`); the other arguments are then
        ignored.

    Raises
    ------
    ValueError
        If a free model lacks ``field`` or ``seq_len``, or ``source`` is not a one-layer
        bias-free ``residual_linear`` model over one Category field with positions.
    """

    def __init__(self, field: Category | None = None, seq_len: int | None = None,
                 dim: int = 16, num_heads: int = 1, head_dim: int | None = None,
                 source: EFA | None = None):
        super().__init__()
        self.direction = "bidirectional"
        self._source: list[EFA] | None
        if source is not None:
            check_linear(source)
            if len(source.fields) != 1 or not isinstance(source.fields[0], Category):
                raise ValueError("a tied CBOWMoE needs an attention model over one Category "
                                 "field (efa.moe.appendix_b)")
            if source.max_len is None:
                raise ValueError("a tied CBOWMoE needs learned positions (max_len)")
            self.fields, self.max_len = source.fields, source.max_len
            self._source = [source]  # a list: not registered as a submodule (no double params)
            return
        if not isinstance(field, Category) or seq_len is None:
            raise ValueError(f"a free CBOWMoE needs a Category field and seq_len; got field "
                             f"{field!r}, seq_len {seq_len!r}")
        for name, v in (("dim", dim), ("num_heads", num_heads), ("seq_len", seq_len)):
            check_int(name, v, 1)
        if head_dim is not None:
            check_int("head_dim", head_dim, 1)
        self.fields, self.max_len, self._source = [field], seq_len, None
        V, p, H = field.num_categories, dim, num_heads
        self.scale = 1 / math.sqrt(head_dim or max(1, dim // num_heads))
        init = lambda *s: nn.Parameter(torch.randn(*s) * 0.1)  # noqa: E731
        self.W_KQ, self.W_LOV = init(H, p, p), init(H, V, p)
        self.g, self.D = init(V), init(V, seq_len)
        self.C, self.P = init(V + 1, p), init(seq_len, p)

    @classmethod
    def tied(cls, model: EFA) -> CBOWMoE:
        """The mixture whose parameters are the reparameterisation of ``model``.

        Parameters
        ----------
        model : EFA
            A one-layer bias-free ``residual_linear`` model over one Category field with
            positions (e.g. :func:`appendix_b`). It is not registered as a submodule: the
            mixture has no parameters of its own, and training it trains ``model``.

        Returns
        -------
        CBOWMoE
            The tied mixture.
        """
        return cls(source=model)

    @property
    def source(self) -> EFA | None:
        """The attention model of a tied mixture (None for a free one)."""
        return self._source[0] if self._source else None

    def parts(self) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, float]:
        """The mixture's parameters, recomputed from the attention model when tied.

        Returns
        -------
        tuple
            (C [V+1, p], P [S, p], W^KQ [H, p, p], W^LOV [H, V, p], g [V], D [V, S], scale).
        """
        if self.source is not None:
            r = reparameterise(self.source)
            C, P = cast(Tensor, r.C), cast(Tensor, r.P)  # one Category field, positions
            return C, P, r.W_KQ, r.W_LOV, r.g, r.D, r.scale
        return self.C, self.P, self.W_KQ, self.W_LOV, self.g, self.D, self.scale

    def gates_and_experts(self, data: Sequences,
                          experts: bool = True) -> tuple[Tensor, Tensor | None]:
        """The gates π and expert logits f for every masked position m.

        Parameters
        ----------
        data : Sequences
            Sequences of the field (checked against the model).
        experts : bool, default True
            Compute the expert logits (False: only the gates).

        Returns
        -------
        pi : torch.Tensor, shape (B, M, H, J)
            The gates.
        f : torch.Tensor, shape (B, M, H, J, V), or None
            The expert logits; None unless ``experts``.
        """
        self.check(data)
        C, P, W_KQ, W_LOV, g, D, scale = self.parts()
        name = self.fields[0].name
        x = data.fields[name].long()
        n = x.shape[1]
        # An unobserved value is [MASK] in the context, as in the attention model (padding
        # too: its gates are 0).
        seen = data.predicted(name, scored=False)
        content = torch.where(seen[..., None], C[x], C[-1]) + P[:n]
        query = (C[-1] + P[:n]).expand_as(content)
        tokens = copy_tokens(content, query)
        H = W_KQ.shape[0]
        h = torch.einsum("bmjp,hpq,bmq->bmhj", tokens, W_KQ, query) * scale
        h = h.masked_fill(~data.valid()[:, None, None, :], float("-inf"))
        pi = torch.softmax(h, -1)
        if not experts:
            return pi, None
        bias = (g[:, None] + D[:, :n]).T / H  # [M, V]: (g + D e_m) / H
        f = torch.einsum("hvp,bmjp->bmhjv", W_LOV, tokens) + bias[None, :, None, None, :]
        return pi, f

    def gates(self, data: Sequences) -> Tensor:
        """The mixture weights π of each expert at every position.

        Parameters
        ----------
        data : Sequences
            Sequences of the field.

        Returns
        -------
        torch.Tensor, shape (B, M, H, J)
            π of copy m's experts (head h, token j).
        """
        return self.gates_and_experts(data, experts=False)[0]

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        """The logits F_m = Σ_h Σ_j π^h_j f^h_j at every position m, each predicted as masked.

        Parameters
        ----------
        data : Sequences
            Sequences of the field.

        Returns
        -------
        dict of str to torch.Tensor
            The field's logits, of shape (B, M, V).
        """
        pi, f = self.gates_and_experts(data)
        return {self.fields[0].name: moe_logits(pi, cast(Tensor, f))}  # experts=True
