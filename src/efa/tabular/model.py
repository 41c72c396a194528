"""The model room of the table estimator: :class:`TableEFA`, an EFA over table rows whose
categorical cells share one vocabulary and whose softmax at a column runs over that column's
levels only, with the response's optional GLM term."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, cast

import torch
from torch import Tensor, nn

from efa.core.checks import refuse_generic_options
from efa.core.config import EFAConfig
from efa.core.data import Sequences
from efa.core.encoders import LinearReadout
from efa.core.families import Ordinal
from efa.core.fields import EXCLUDED, Category, Value
from efa.core.model import EFA

if TYPE_CHECKING:  # for annotations only
    from efa.core.attention import Block
    from efa.core.softmax import Sampling

# The model whose init="glm" first stage is running (efa.tabular.glm_stage.fit_glm_stage): its
# read-outs' weights are held at 0, so TableEFA.states skips the network. A context, not a
# flag written onto the model.
GLM_STAGE: ContextVar[TableEFA | None] = ContextVar("efa_glm_stage", default=None)


class TableEFA(EFA):
    """An EFA over table rows whose categorical field ``cat`` holds every categorical column's
    levels in one id range; ``support`` [columns, vocabulary] restricts the softmax at column k
    to column k's own levels (a context-free base measure, so the family stays exponential).

    The training loss computes each masked cell's softmax over its column's levels only (the
    same numbers as the restricted full softmax, whose excluded logits underflow to exactly 0,
    at the cost of the column's size instead of the whole vocabulary's).

    :class:`efa.tabular.AttentionTableClassifier` builds it; the response is the last column.

    Parameters
    ----------
    config : EFAConfig
        The network and the fields (``cat``; ``num`` for Gaussian numeric columns; ``resp``
        for an ordinal response).
    support : torch.Tensor, shape (columns, vocabulary)
        Bool, True where a vocabulary id is one of the column's levels.
    cell_dropout : float, default 0.0
        The probability that training hides an observed cell (see :meth:`loss`).
    additive : int, default 0
        The outputs of the response's GLM term (the classes' logits, or 1 for the ordinal
        η); 0: no GLM term.
    response : {"cat", "resp"}
        The response's field: ``"cat"`` (its classes are levels of the shared vocabulary) or
        ``"resp"`` (an ordinal Category).
    ordered_classes : int, default 0
        With K > 0 the GLM term g enters the K classes' logits as g s_k + b_k
        (``additive="ordinal"``, an ``Ordinal`` family's learned increasing scores).
    num_range : torch.Tensor, shape (2, columns), optional
        Per column, the lowest and highest value of ``num`` the network may read: the
        encoders see each value clipped to it, while the GLM term and the likelihood read it
        as given (None: no clipping).
    """

    own_objective = True  # see ConditionalModel.own_objective
    # buffers, declared for the type checker
    support: Tensor
    num_range: Tensor | None
    local_ids: Tensor
    local_ok: Tensor
    local_rank: Tensor

    def __init__(self, config: EFAConfig, support: torch.Tensor, cell_dropout: float = 0.0,
                 additive: int = 0, response: str = "cat", ordered_classes: int = 0,
                 num_range: Tensor | None = None):
        super().__init__(config)
        self.register_buffer("support", support)
        self.register_buffer("num_range", num_range)
        self.cell_dropout = cell_dropout
        self.response = response
        if additive:
            # The response's GLM term (AttentionTableClassifier(additive=True)): an effect per
            # (column, level) and a slope per numeric column, [additive] outputs each (the
            # classes' logits, or the ordinal η), starting at 0. Per column, because a shared
            # vocabulary gives the same id to level k of every column.
            self.level_effect = nn.Parameter(torch.zeros(*support.shape, additive))
            self.slope = nn.Parameter(torch.zeros(support.shape[0], additive))
        if ordered_classes:
            # additive="ordinal": one GLM term g enters the classes' logits as g s_k + b_k
            # (the adjacent-categories logit's form, learned increasing scores s), so the GLM
            # part is the ordinal logit while the attention still adds free class logits.
            self.glm_family = Ordinal(ordered_classes)
        width = max(1, int(support.sum(1).max()))
        local = torch.zeros(support.shape[0], width, dtype=torch.long)
        for k in range(support.shape[0]):
            ids = support[k].nonzero().flatten()
            local[k, : len(ids)] = ids
        self.register_buffer("local_ids", local)  # [columns, width]: the column's vocabulary
        self.register_buffer("local_ok", torch.arange(width) < support.sum(1, keepdim=True))
        rank = torch.cumsum(support.long(), 1) - 1  # vocabulary id -> index within its column
        self.register_buffer("local_rank", rank)

    def encode(self, data: Sequences, hidden: dict[str, Tensor | bool]) -> Tensor:
        """The tokens, as :meth:`efa.EFA.encode`, with each numeric value clipped to
        ``num_range`` first outside training: attention and read-outs trained on a range
        have no evidence beyond it, where a linear encoder's tokens (and so the attention's
        scores) would keep growing; the GLM term reads the value unclipped and extrapolates
        linearly.

        Parameters
        ----------
        data : Sequences
            The rows, as sequences.
        hidden : dict of str to torch.Tensor or bool
            As in :meth:`efa.EFA.encode`.

        Returns
        -------
        torch.Tensor, shape (B, I, d)
            The tokens.
        """
        # (in training the rows are the fit rows, inside the range by construction: the
        # clipping would cost ~3 % of a step for nothing)
        if self.num_range is not None and "num" in data.fields and not self.training:
            x = data.fields["num"]
            lo, hi = self.num_range.to(x.dtype)
            data = Sequences({**data.fields, "num": torch.minimum(torch.maximum(x, lo), hi)},
                             data.lengths, data.observed, data.scored)
        return super().encode(data, hidden)

    def additive_term(self, data: Sequences, rows: torch.Tensor) -> torch.Tensor:
        """Σ over the row's observed feature cells of their effect on the response (the response
        cell itself and hidden cells add nothing): an effect per (column, level) and a slope per
        numeric column.

        Parameters
        ----------
        data : Sequences
            The rows, as sequences.
        rows : torch.Tensor, shape (R,)
            The rows to compute it for.

        Returns
        -------
        torch.Tensor, shape (R, additive)
            The GLM term of each row.
        """
        batch = data[rows]
        width = batch.fields["cat"].shape[1]
        feats = torch.arange(width, device=rows.device) < width - 1
        cat = batch.observed["cat"] & feats
        # a cell that is not an observed level (numeric, hidden, the response) may hold any id
        ids = torch.where(cat, batch.fields["cat"], 0)
        effect = self.level_effect[torch.arange(width, device=rows.device), ids]
        term = (effect * cat[..., None]).sum(1)
        if "num" in batch.fields:
            num = batch.observed["num"] & feats
            x = torch.where(num, batch.fields["num"], 0).to(term.dtype)
            term = term + x @ self.slope
        return term

    def glm_logits(self, data: Sequences, rows: torch.Tensor) -> torch.Tensor:
        """What the GLM term adds to the response's natural parameter at rows ``rows``.

        Parameters
        ----------
        data : Sequences
            The rows, as sequences.
        rows : torch.Tensor, shape (R,)
            The rows to compute it for.

        Returns
        -------
        torch.Tensor
            :meth:`additive_term`, shape (R, additive), or with ``ordered_classes`` its
            ordinal logits g s_k + b_k, shape (R, K).
        """
        term = self.additive_term(data, rows)
        return self.glm_family.logits(term) if hasattr(self, "glm_family") else term

    def glm_parameters(self) -> list[nn.Parameter]:
        """The GLM's parameters: the term's effects and slopes, the ordered response's (or the
        ordered term's) scores and base measure, and the read-out's biases (the classes'
        intercepts for a categorical response).

        Returns
        -------
        list of torch.nn.Parameter
            The parameters the first stage of ``init="glm"`` trains.
        """
        out = [self.level_effect, self.slope]
        if hasattr(self, "glm_family"):
            out += list(self.glm_family.parameters())
        if self.response != "cat":  # the ordinal response field (a Category with Ordinal)
            out += list(cast(Category, self.field(self.response)).family.parameters())
        bias = cast(LinearReadout, self.readouts[self.response]).net.bias
        return out + ([bias] if bias is not None else [])

    def hidden_for(self, data: Sequences, target: str | None) -> dict[str, Tensor | bool]:
        """Masks of the tokens that predict ``target``: a query token hides every field.

        In a table each position holds one field and the others are unobserved (so hidden)
        there, and the two-stream query of position i reads only its own token: this is the
        query of i's own field. One query stream then serves every field of a batch
        (:meth:`field_states`) instead of one per field (test, float64).

        Parameters
        ----------
        data : Sequences
            The rows, as sequences.
        target : str or None
            The predicted field; None: the content tokens (missing cells hidden).

        Returns
        -------
        dict of str to torch.Tensor or bool
            Field name → hidden mask of shape (B, I), or True (hidden everywhere).
        """
        if target is None:
            return super().hidden_for(data, None)
        return {f.name: True for f in self.fields}

    def states(self, data: Sequences, target: str, at: Tensor, want_weights: bool = False,
               head: Callable[[Tensor], Tensor] | None = None, content: Tensor | None = None,
               stream: list[Tensor] | None = None) -> tuple[Tensor, Tensor | None]:
        """The last layer's state that predicts ``target`` at the asked positions, as
        :meth:`efa.EFA.states`; while this model's ``init="glm"`` first stage runs, a zero
        state (the read-outs' weights are held at 0 then).

        Parameters
        ----------
        data : Sequences
            The rows, as sequences.
        target : str
            The predicted field.
        at : torch.Tensor, shape (B, I)
            Bool, the asked positions.
        want_weights : bool, default False
            Also return the masked queries' attention rows.
        head : callable, optional
            Applied to the states before they are returned.
        content : torch.Tensor, optional
            The unmasked tokens, if already encoded.
        stream : list of torch.Tensor, optional
            The content stream's layers, shared by the target fields of one batch.

        Returns
        -------
        states : torch.Tensor, shape (P, d)
            The states (or ``head(states)``) at the P asked positions.
        weights : torch.Tensor or None
            The attention rows, shape (L, P, H, I), with ``want_weights`` (None in the GLM
            stage).
        """
        if GLM_STAGE.get() is not self:
            return super().states(data, target, at, want_weights, head, content, stream)
        # The first stage of init="glm" holds every read-out weight at 0, so the state a
        # read-out reads does not matter: a zero state gives the same outputs bit for bit
        # without running the attention or the encoders (test).
        width = cast("Block", self.blocks[-1]).d_out  # the read-outs' input width
        h = at.new_zeros(int(at.sum()), width, dtype=self.level_effect.dtype)
        return (h if head is None else head(h)), None

    def field_states(self, data: Sequences, at: dict[str, torch.Tensor]) -> dict:
        """The last layer's state at the positions ``at[f]`` of every field f, from one pass
        over the union of the positions (see :meth:`hidden_for`).

        Parameters
        ----------
        data : Sequences
            The rows, as sequences.
        at : dict of str to torch.Tensor
            Field name → the asked positions, bool of shape (B, I).

        Returns
        -------
        dict of str to torch.Tensor
            Field name → its states, shape (P_f, d), in the order of ``at[f].nonzero()``.
        """
        union = torch.stack(list(at.values())).any(0)
        h, _ = self.states(data, next(iter(at)), union)
        return {name: h[m[union]] for name, m in at.items()}

    def natural_params_at(self, data: Sequences, at: dict[str, Tensor]) -> dict[str, Tensor]:
        """η of each field at its asked positions, from one pass (:meth:`field_states`): the
        read-out, restricted to the column's levels, plus the GLM term at the response.

        Parameters
        ----------
        data : Sequences
            The rows, as sequences.
        at : dict of str to torch.Tensor
            Field name → the asked positions, bool of shape (B, I).

        Returns
        -------
        dict of str to torch.Tensor
            Field name → η, shape (P_f, num_natural), in the order of ``at[f].nonzero()``.
        """
        return self._natural_params(data, at, self.field_states(data, at))

    def _natural_params(self, data, at, states):
        out = {name: self.restrict(name, data, m, self.readouts[name](states[name]))
               for name, m in at.items()}
        if not hasattr(self, "level_effect") or self.response not in at:
            return out
        m = at[self.response]
        last = m.nonzero()[:, 1] == m.shape[1] - 1
        if last.any():
            rows = m.nonzero()[:, 0][last]
            eta = out[self.response].clone()
            term = self.glm_logits(data, rows)
            if self.response == "cat":  # the classes' ids in the shared vocabulary
                ids = self.local_ids[-1][self.local_ok[-1]]
                eta[last.nonzero()[:, :1], ids[None]] += term
            else:
                eta[last] += term
            out[self.response] = eta
        return out

    def restrict(self, name: str, data: Sequences, at: Tensor, eta: Tensor) -> Tensor:
        """The support restrictions: the field's own (``distinct``), and at a ``cat`` cell the
        column's levels only (the other ids' logits set to ``EXCLUDED``).

        Parameters
        ----------
        name : str
            The field.
        data : Sequences
            The rows, as sequences.
        at : torch.Tensor, shape (B, I)
            Bool, the positions of ``eta``'s rows.
        eta : torch.Tensor, shape (P, num_natural)
            The natural parameters at those positions.

        Returns
        -------
        torch.Tensor, shape (P, num_natural)
            ``eta`` restricted.
        """
        eta = super().restrict(name, data, at, eta)
        if name != "cat":
            return eta
        return eta.masked_fill(~self.support[at.nonzero()[:, 1]], EXCLUDED)

    def loss(
        self, data: Sequences, check: bool = False, weights: Tensor | None = None,
        counts: dict[str, int] | None = None, sampling: Sampling | None = None,
    ) -> Tensor:
        """Sum over fields of the mean negative log-likelihood of the masked cells. In training,
        each observed cell is also hidden with probability ``cell_dropout`` (hidden from the
        context and not scored): the likelihood of a cell given a random subset of the others,
        so that the model learns to read rows with [MASK]s in them (missing cells, unseen
        levels) as well as rows without.

        Parameters
        ----------
        data : Sequences
            The batch of rows.
        check : bool, default False
            Check ``data`` against the model's fields first.
        weights : torch.Tensor, optional
            Refused: the table's objective is its own.
        counts : dict of str to int, optional
            Refused, as ``weights``.
        sampling : Sampling, optional
            Refused, as ``weights``.

        Returns
        -------
        torch.Tensor
            A scalar (0, with zero gradients, when nothing is to be predicted).

        Raises
        ------
        ValueError
            If ``weights``, ``counts`` or ``sampling`` is given.
        """
        refuse_generic_options(self, weights, counts, sampling)
        if check:
            self.check(data)
        if self.training and self.cell_dropout > 0:
            keep = {k: m & (torch.rand(m.shape) >= self.cell_dropout)
                    for k, m in data.observed.items()}
            data = Sequences(data.fields, data.lengths, keep, data.scored)
        at = {f.name: data.predicted(f.name) for f in self.target_fields}
        at = {name: m for name, m in at.items() if m.any()}
        if not at:  # nothing to predict: 0, on the graph so that backward() works (grads 0)
            return torch.stack([p.sum() for p in self.parameters()]).sum() * 0.0
        total = torch.zeros(())
        states = self.field_states(data, at)  # one pass for every field
        others = {name: m for name, m in at.items() if name != "cat"}
        etas = self._natural_params(data, others, states)
        for name, eta in etas.items():
            f = cast("Category | Value", self.field(name))
            ll = f.family.log_prob(data.fields[name][at[name]], eta)
            total = total - ll.mean()
        if "cat" not in at:
            return total
        # The categorical cells' softmax runs over each cell's own column's levels only.
        m = at["cat"]
        h = states["cat"]  # [P, d]
        cols = m.nonzero()[:, 1]
        ids = self.local_ids[cols]  # [P, width]
        read = cast(LinearReadout, self.readouts["cat"]).net
        logits = torch.einsum("pd,pld->pl", h, read.weight[ids])
        if read.bias is not None:
            logits = logits + read.bias[ids]
        last = cols == m.shape[1] - 1
        if hasattr(self, "level_effect") and self.response == "cat" and last.any():
            term = self.glm_logits(data, m.nonzero()[:, 0][last])
            extra = torch.zeros_like(logits)  # local index k of the response = class k
            extra[last, : term.shape[1]] = term
            logits = logits + extra
        logits = logits.masked_fill(~self.local_ok[cols], float("-inf"))
        target = self.local_rank[cols, data.fields["cat"][m]]
        return total + torch.nn.functional.cross_entropy(logits, target)
