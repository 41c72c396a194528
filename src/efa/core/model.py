"""Exponential family attention (EFA), Wibisono & Wang, Section 2.

    encode   each token's fields and position (efa.core.fields)      -> tokens  [B, I, d]
    attend   L blocks of masked self-attention (efa.core.attention)  -> states  [B, I, d]
    read out the state of the copy where position i is masked   -> η_i     (efa.core.strategies)
    family   log p(y_i | context) = η_i·t(y_i) − A(η_i) + log h(y_i)   (efa.core.families)

:class:`ConditionalModel` (:mod:`efa.core.conditional`) is what EFA shares with its special cases
and peers (efa.baselines): natural parameters at asked positions, and the (pseudo)
log-likelihood they define. Its configuration, :class:`EFAConfig`, is in :mod:`efa.core.config`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import Tensor, nn

from efa.core import softmax, strategies, warmstart
from efa.core.attention import Block
from efa.core.checks import refuse_padding
from efa.core.conditional import ConditionalModel, evaluating
from efa.core.config import EFAConfig
from efa.core.context import context_bag, context_pairs
from efa.core.data import Sequences
from efa.core.encoders import LinearReadout, MapEncoder, TableEncoder, ValueReadout
from efa.core.families import LearnedGaussian
from efa.core.fields import ROLES, Category, Value
from efa.core.mlp import mlp
from efa.deprecation import moved_out

__getattr__ = moved_out(__name__)  # names moved out: efa.deprecation.MOVED_NAMES


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
        of its observed values in ``data`` (1 if they are constant; :meth:`Value.standardise_on`
        warns of a float32 model that cannot resolve them and of a fixed σ far from their
        spread): λ₁ then sees standardised values and Gaussian read-outs work in standardised
        units. An unset ``LearnedGaussian`` σ starts at the field's scale. ``efa.fit`` calls
        this with the training data; fields whose loc and scale are set are left alone.

        Parameters
        ----------
        data : Sequences
            The training data (observed values at real positions are counted).

        Returns
        -------
        EFA
            The model itself (its encoders and read-outs updated in place).
        """
        # Past the first test, every field is a Value (kind "value").
        dtype = next(self.parameters()).dtype
        for f in cast("list[Value]", self.fields):
            if f.kind != "value":
                continue
            unset = f.loc is None or f.scale is None
            if unset:
                f.standardise_on(data.fields[f.name][data.predicted(f.name, scored=False)],
                                 dtype)
            if isinstance(f.family, LearnedGaussian):
                f.family.start_at(f.moments[1])  # an unset init_sigma: the data's scale
            if not unset:
                continue
            loc, scale = f.moments
            encoder = self.encoders[f.name]
            if hasattr(encoder, "loc"):  # a MapEncoder (a TableEncoder has no loc/scale)
                cast(MapEncoder, encoder).loc.fill_(loc)
                cast(MapEncoder, encoder).scale.fill_(scale)
            if f.name in self.readouts:
                readout = cast(ValueReadout, self.readouts[f.name])
                readout.loc, readout.scale = loc, scale
        return self

    # -- encode -----------------------------------------------------------------------------
    def encode(self, data: Sequences, hidden: dict[str, Tensor | bool]) -> Tensor:
        """Token embeddings: each field encoded, concatenated, mixed, plus the positions.

        Parameters
        ----------
        data : Sequences
            The sequences.
        hidden : dict of str to torch.Tensor or bool
            Per field, the values replaced by [MASK], bool of shape (B, I), or ``True`` for
            every value of the field (whose encoder then need not run); a field not in it is
            not hidden.

        Returns
        -------
        torch.Tensor, shape (B, I, d)
            The tokens.
        """
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
        """Masks of the tokens that predict ``target``.

        Missing values are always hidden; predicting target field k hides fields k, k+1, ...
        at every position (``True``: the query stream uses only the asked positions).

        Parameters
        ----------
        data : Sequences
            The sequences.
        target : str or None
            A target field (None: the unmasked content tokens, only missing values hidden).

        Returns
        -------
        dict of str to torch.Tensor or bool
            Per field, what :meth:`encode` hides.
        """
        hidden: dict[str, Tensor | bool] = {name: ~m for name, m in data.observed.items()}
        if target is None:
            return hidden
        names = [f.name for f in self.target_fields]
        for name in names[names.index(target) :]:
            hidden[name] = True
        return hidden

    def allowed(self, data: Sequences) -> Tensor:
        """Which key j each query i may see: the real positions (j ≤ i when unidirectional).

        Each position sees itself, unless ``attend_self=False``: then only where it would
        otherwise see nothing.

        Parameters
        ----------
        data : Sequences
            The sequences (their lengths are read).

        Returns
        -------
        torch.Tensor, shape (B, 1, I, I)
            The attention mask (bool).
        """
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
        """The last layer's state that predicts ``target`` at each asked position, by the
        configuration's strategy (:mod:`efa.core.strategies`).

        Parameters
        ----------
        data : Sequences
            The sequences.
        target : str
            The target field.
        at : torch.Tensor, shape (B, I)
            The asked positions (bool).
        want_weights : bool, default False
            Also return the masked queries' attention rows.
        head : callable, optional
            Applied to the states (the read-out).
        content : torch.Tensor, shape (B, I, d), optional
            The unmasked tokens, if already encoded.
        stream : list of torch.Tensor, optional
            A list shared by the target fields of one batch, in which the two-stream strategy
            keeps the content stream's layers (computed once, not once per field).

        Returns
        -------
        states : torch.Tensor, shape (P, d)
            The states (``head(state)`` if given) in the order of ``at.nonzero()``.
        weights : torch.Tensor, shape (L, P, H, I), or None
            The attention rows, None unless ``want_weights``.
        """
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
        :func:`efa.training.train.fit_glm_first` fits first.

        Returns
        -------
        params : list of torch.Tensor
            The GLM's parameters (empty without bag fields).
        zero : list of torch.Tensor
            The read-out weights that are 0 in it.
        """
        params: list[Tensor] = []
        zero: list[Tensor] = []
        for name in getattr(self, "bags", {}):
            net = cast(LinearReadout, self.readouts[name]).net
            params += [self.bags[name]] + ([net.bias] if net.bias is not None else [])
            zero.append(net.weight)
        return params, zero

    def penalty(self) -> Tensor | None:
        """(bag_l2 / 2)·‖U‖² of every ``Category(bag=True)`` field with a prior on U.

        Returns
        -------
        torch.Tensor or None
            The sum, a scalar, added to the training loss; None where no field has a prior.
        """
        terms = [0.5 * f.bag_l2 * f.bag_table(self.bags[f.name]).pow(2).sum()
                 for f in cast("list[Category]", self.target_fields)  # bag: a Category
                 if getattr(f, "bag", False) and f.bag_l2 > 0]
        return cast(Tensor, sum(terms)) if terms else None

    def natural_params_at(self, data: Sequences, at: dict[str, Tensor]) -> dict[str, Tensor]:
        """η of each field in ``at`` at its asked positions: the read-out of the masked copy's
        state (plus the bag term), support restrictions applied.

        Parameters
        ----------
        data : Sequences
            The sequences, on the model's device.
        at : dict of str to torch.Tensor
            Per target field, where to predict: bool of shape (B, I).

        Returns
        -------
        dict of str to torch.Tensor
            Per field of ``at``, η of shape (P, num_natural) in the order of
            ``at[name].nonzero()``.
        """
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
        """log p(y_i | context) of each field in ``at`` at its asked positions.

        As ``ConditionalModel.log_probs_at``; a category with ``vocab_chunk`` is scored without
        its [positions × D] logits (:mod:`efa.core.softmax`), and in training with ``sampling``
        by the sampled softmax.

        Parameters
        ----------
        data : Sequences
            The sequences, on the model's device.
        at : dict of str to torch.Tensor
            Per target field, where to score: bool of shape (B, I).
        base_measure : bool, default True
            Include log h(y).
        sampling : Sampling, optional
            The sampled softmax (``fit(..., sampled_softmax=k)``); used in training mode only.

        Returns
        -------
        dict of str to torch.Tensor
            Per field of ``at``, shape (P,), in the order of ``at[name].nonzero()``.

        Raises
        ------
        ValueError
            If a ``bag=True`` category would be scored by the chunked or sampled softmax.
        """
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
        """Attention weights: row i of layer l is what the masked query i pays to each
        position in the copy where i is masked (Figure 3 of the paper).

        Parameters
        ----------
        data : Sequences
            The sequences (checked, and moved to the model's device).
        target : str, optional
            The target field whose masked copies are read (default: the first).
        at : torch.Tensor, shape (B, I), optional
            The rows wanted (bool; default: every real position).

        Returns
        -------
        torch.Tensor, shape (L, B, H, I, I)
            The weights; rows of positions not asked are zero.

        Raises
        ------
        ValueError
            If ``at`` asks for padding or for no position.
        """
        self.check(data)
        f = self.target(target)
        data, at = self._here(data, at)
        refuse_padding(data, at)
        at = data.valid() if at is None else at
        if not at.any():
            raise ValueError("at asks for no position: there is no attention row to return")
        with evaluating(self):  # attention dropout off: the weights the model predicts with
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
        their initialisation and get gradients at once).

        Parameters
        ----------
        base : EFA
            The model to start from; its fields must be among this model's, with the same
            widths, and both must mix tokens with the same "linear" or "mlp".

        Returns
        -------
        EFA
            The model itself.

        Raises
        ------
        ValueError
            If the two models do not fit together so.
        """
        return warmstart.warm_start(self, base)
