"""A scikit-learn classifier for tables: bidirectional attention over the columns, trained on the
joint masked pseudo-likelihood of *all* columns (Wibisono & Wang, UAI 2023, Section 3.1).

Each row is a sequence whose positions are the columns (the response last); a categorical cell
is a token of a column-specific vocabulary, a numeric cell is either a quantile bin (bins learned
in ``fit``) or a Gaussian value field (``numeric="gaussian"``). The model is an :class:`efa.EFA`
whose likelihood is, for every row and every column k, log p(x_k | the other cells): every
column, the response included, is masked in turn, computed exactly by the core's two-stream
algorithm (one pass per row; no masked copies of the data). A categorical column's softmax
runs over its own levels only (:class:`TableEFA`). Prediction masks the response;
``predict_column_proba`` and ``impute`` do the same for any column.

Rows whose label is missing (NaN / None in ``y``) still enter the likelihood of the features
(the paper's Y = [MASK], semi-supervised). Two backbones: ``"paper"`` (the authors' single post-LN
transformer block: 5 heads, width 20, feed-forward 5, dropout 0.1) and ``"linear"`` (the
theory-exact ``residual_linear`` block, whose response logits are the CBOW mixture of experts of
:mod:`efa.moe`; ``gates`` returns its π).
"""

from __future__ import annotations

import numbers
import warnings
from contextvars import ContextVar

import numpy as np
import pandas as pd
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, check_random_state, validate_data
from torch import nn

from efa.data import Sequences
from efa.families import HeteroscedasticGaussian, Ordinal
from efa.fields import EXCLUDED, Category, Value
from efa.model import EFA, EFAConfig, refuse_generic_options
from efa.train import TrainConfig, fit, seed_everything

BACKBONES = ("paper", "linear")
RESPONSES = ("categorical", "ordinal")


# The model whose init="glm" first stage is running (AttentionTableClassifier._fit_glm): its
# read-outs' weights are held at 0, so TableEFA.states skips the network. A context, not a
# flag written onto the model.
_GLM_STAGE: ContextVar[TableEFA | None] = ContextVar("efa_glm_stage", default=None)


class TableEFA(EFA):
    """An EFA over table rows whose categorical field ``cat`` holds every categorical column's
    levels in one id range; ``support`` [columns, vocabulary] restricts the softmax at column k
    to column k's own levels (a context-free base measure, so the family stays exponential).

    The training loss computes each masked cell's softmax over its column's levels only (the
    same numbers as the restricted full softmax, whose excluded logits underflow to exactly 0,
    at the cost of the column's size instead of the whole vocabulary's)."""

    own_objective = True  # see ConditionalModel.own_objective

    def __init__(self, config: EFAConfig, support: torch.Tensor, cell_dropout: float = 0.0,
                 additive: int = 0, response: str = "cat", ordered_classes: int = 0):
        super().__init__(config)
        self.register_buffer("support", support)
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

    def additive_term(self, data: Sequences, rows: torch.Tensor) -> torch.Tensor:
        """Σ over the row's observed feature cells of their effect on the response, [R, out]
        for the rows ``rows`` [R] (the response cell itself and hidden cells add nothing)."""
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
        """What the GLM term adds to the response's natural parameter at rows ``rows``."""
        term = self.additive_term(data, rows)
        return self.glm_family.logits(term) if hasattr(self, "glm_family") else term

    def glm_parameters(self) -> list[nn.Parameter]:
        """The GLM's parameters: the term's effects and slopes, the ordered response's (or the
        ordered term's) scores and base measure, and the read-out's biases (the classes'
        intercepts for a categorical response)."""
        out = [self.level_effect, self.slope]
        if hasattr(self, "glm_family"):
            out += list(self.glm_family.parameters())
        if self.response != "cat":
            out += list(self.field(self.response).family.parameters())
        bias = self.readouts[self.response].net.bias
        return out + ([bias] if bias is not None else [])

    def hidden_for(self, data, target):
        # A query token hides every field. In a table each position holds one field and the
        # others are unobserved (so hidden) there, and the two-stream query of position i reads
        # only its own token: this is the query of i's own field. One query stream then serves
        # every field of a batch (field_states) instead of one per field (test, float64).
        if target is None:
            return super().hidden_for(data, None)
        return {f.name: True for f in self.fields}

    def states(self, data, target, at, want_weights=False, head=None, content=None,
               stream=None):
        if _GLM_STAGE.get() is not self:
            return super().states(data, target, at, want_weights, head, content, stream)
        # The first stage of init="glm" holds every read-out weight at 0, so the state a
        # read-out reads does not matter: a zero state gives the same outputs bit for bit
        # without running the attention or the encoders (test).
        width = self.blocks[-1].d_out  # the read-outs' input width
        h = at.new_zeros(int(at.sum()), width, dtype=self.level_effect.dtype)
        return (h if head is None else head(h)), None

    def field_states(self, data: Sequences, at: dict[str, torch.Tensor]) -> dict:
        """The last layer's state [P_f, d] at the positions ``at[f]`` of every field f, from
        one pass over the union of the positions (see hidden_for)."""
        union = torch.stack(list(at.values())).any(0)
        h, _ = self.states(data, next(iter(at)), union)
        return {name: h[m[union]] for name, m in at.items()}

    def natural_params_at(self, data, at):
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

    def restrict(self, name, data, at, eta):
        eta = super().restrict(name, data, at, eta)
        if name != "cat":
            return eta
        return eta.masked_fill(~self.support[at.nonzero()[:, 1]], EXCLUDED)

    def loss(self, data, check=False, weights=None, counts=None, sampling=None):
        """Sum over fields of the mean negative log-likelihood of the masked cells. In training,
        each observed cell is also hidden with probability ``cell_dropout`` (hidden from the
        context and not scored): the likelihood of a cell given a random subset of the others,
        so that the model learns to read rows with [MASK]s in them (missing cells, unseen
        levels) as well as rows without."""
        refuse_generic_options(self, weights, counts, sampling)
        if check:
            self.check(data)
        if self.training and self.cell_dropout > 0:
            keep = {k: m & (torch.rand(m.shape) >= self.cell_dropout)
                    for k, m in data.observed.items()}
            data = Sequences(data.fields, data.lengths, keep, data.scored)
        at = {f.name: data.predicted(f.name) for f in self.target_fields}
        at = {name: m for name, m in at.items() if m.any()}
        total = 0.0
        if not at:
            return total
        states = self.field_states(data, at)  # one pass for every field
        others = {name: m for name, m in at.items() if name != "cat"}
        etas = self._natural_params(data, others, states)
        for name, eta in etas.items():
            ll = self.field(name).family.log_prob(data.fields[name][at[name]], eta)
            total = total - ll.mean()
        if "cat" not in at:
            return total
        # The categorical cells' softmax runs over each cell's own column's levels only.
        m = at["cat"]
        h = states["cat"]  # [P, d]
        cols = m.nonzero()[:, 1]
        ids = self.local_ids[cols]  # [P, width]
        read = self.readouts["cat"].net
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


class AttentionTableClassifier(ClassifierMixin, BaseEstimator):
    """Classifier of a table's response from its other columns by bidirectional attention.

    Parameters
    ----------
    backbone : ``"paper"`` (post-LN transformer block with a ReLU feed-forward layer) or
        ``"linear"`` (residual attention + W' residual, no LayerNorm, no biases: the CBOW mixture
        of experts of efa.moe).
    embedding_dim, num_heads, ffn_hidden, dropout, num_layers : sizes (paper: 20, 5, 5, 0.1, 1).
    numeric : ``"quantile"`` (float columns cut into ``n_bins`` quantile bins on the training
        rows) or ``"gaussian"`` (a heteroscedastic Gaussian value field per float column).
    categorical : column names (or indices) to treat as categorical; default: every column that
        is not floating point (integers, strings, booleans, pandas categoricals).
    response : ``"categorical"`` (a softmax over the classes, the paper's model) or
        ``"ordinal"`` (ordered classes, in the order of ``classes_``: a pandas Categorical
        ``y``'s categories (e.g. unacc < acc < good < vgood), else sorted labels;
        :class:`efa.families.Ordinal`, p(y = k) ∝ exp(η s_k + b_k) with one natural parameter
        η read out at the response and learned increasing scores s; for a binned continuous
        response, or any ordered label).
    additive : add a GLM term to the response's natural parameter: an effect per feature
        level and a slope per numeric column, summed over the row's observed cells (learned
        with the network, from 0). The model class then contains the logistic regression on
        the one-hot / numeric features (categorical response) or the adjacent-categories
        ordinal logit (ordinal response): with the attention's read-out at 0 it is exactly
        that GLM (tests/test_tabular.py). ``"ordinal"`` (categorical response): one GLM term
        g enters the class logits as g s_k + b_k with learned increasing scores s, so the GLM
        part is the adjacent-categories ordinal logit while the attention adds free logits
        per class (the classes ordered as for ``response="ordinal"``).
    init : ``None`` (every parameter from its initialisation, the GLM term from 0), or ``"glm"``
        (needs ``additive``): fit the GLM part first, with the network's read-out held at 0
        (its biases free), then every parameter from there; both stages stop early as set
        below. The model starts from the plain GLM's fit instead of from 0, and
        ``glm_history_`` holds the first stage.
    handle_unknown : ``"error"`` (a level unseen in fit is an error naming column and value) or
        ``"unk"`` (it is treated as unobserved: the [MASK] embedding stands for [UNK]).
    missing : ``"error"`` (NaN in X is an error naming the column) or ``"mask"`` (a missing
        cell is hidden from the model and not predicted). Missing labels in ``y`` are always
        allowed: those rows train the features' likelihood only.
    lr, batch_size, max_epochs, patience, weight_decay : Adam training; early stopping on the
        joint pseudo-likelihood of an internal validation split (``validation_fraction`` of the
        rows, stratified by label), best weights restored.
    early_stopping : False trains on every row for ``max_epochs`` and keeps the last weights
        (the paper's protocol; scikit-learn's MLP default), True holds out the split above.
    stop_on : what the validation split scores for early stopping: ``"joint"`` (the joint
        pseudo-likelihood of every cell, as trained) or ``"response"`` (the response's log
        likelihood only, the classifier's own loss).
    shared_vocabulary : one embedding table and one read-out for every categorical column
        (the paper's model, whose columns are all bins 0..C−1 of one scale); needs every
        categorical column and the response to have the same levels.
    cell_dropout : in training, hide each observed cell with this probability as well (from
        the context and from the likelihood), so that rows with [MASK]s (missing cells, unseen
        levels with ``handle_unknown="unk"``) are read as in training.
    random_state : int, RandomState or None (seeds initialisation, split and shuffling).
    """

    def __init__(self, backbone="paper", embedding_dim=20, num_heads=5, ffn_hidden=5,
                 dropout=0.1, num_layers=1, numeric="quantile", n_bins=10, categorical=None,
                 response="categorical", additive=False, init=None,
                 handle_unknown="error",
                 missing="error", lr=1e-2, batch_size=128,
                 max_epochs=200, patience=10, weight_decay=0.0, validation_fraction=0.15,
                 shared_vocabulary=False, cell_dropout=0.0, early_stopping=True,
                 stop_on="joint", random_state=None):
        self.backbone = backbone
        self.embedding_dim = embedding_dim
        self.num_heads = num_heads
        self.ffn_hidden = ffn_hidden
        self.dropout = dropout
        self.num_layers = num_layers
        self.numeric = numeric
        self.n_bins = n_bins
        self.categorical = categorical
        self.response = response
        self.additive = additive
        self.init = init
        self.handle_unknown = handle_unknown
        self.missing = missing
        self.lr = lr
        self.batch_size = batch_size
        self.max_epochs = max_epochs
        self.patience = patience
        self.weight_decay = weight_decay
        self.validation_fraction = validation_fraction
        self.shared_vocabulary = shared_vocabulary
        self.cell_dropout = cell_dropout
        self.early_stopping = early_stopping
        self.stop_on = stop_on
        self.random_state = random_state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.categorical = True
        tags.input_tags.string = True
        tags.input_tags.allow_nan = self.missing == "mask"
        tags.non_deterministic = False
        # scikit-learn's generic checks score on blobs whose classes have no order, which an
        # ordinal response cannot separate: skip only their accuracy thresholds
        tags.classifier_tags.poor_score = self.response == "ordinal"
        return tags

    # ------------------------------------------------------------------ checks and encoding
    def _check_params(self):
        if self.backbone not in BACKBONES:
            raise ValueError(f"backbone must be one of {BACKBONES}, got {self.backbone!r}")
        if self.response not in RESPONSES:
            raise ValueError(f"response must be one of {RESPONSES}, got {self.response!r}")
        if self.numeric not in ("quantile", "gaussian"):
            raise ValueError(f"numeric must be 'quantile' or 'gaussian', got {self.numeric!r}")
        if self.handle_unknown not in ("error", "unk"):
            raise ValueError(f"handle_unknown must be 'error' or 'unk', got "
                             f"{self.handle_unknown!r}")
        if self.missing not in ("error", "mask"):
            raise ValueError(f"missing must be 'error' or 'mask', got {self.missing!r}")
        for key in ("embedding_dim", "num_heads", "ffn_hidden", "num_layers"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise ValueError(f"{key} must be a positive integer, got {v!r}")
        if self.categorical is not None and (
                isinstance(self.categorical, str) or not hasattr(self.categorical, "__iter__")):
            raise ValueError(f"categorical must be a list of column names or indices, got "
                             f"{self.categorical!r}")
        if not isinstance(self.n_bins, numbers.Integral) or self.n_bins < 2:
            raise ValueError(f"n_bins must be an integer >= 2, got {self.n_bins!r}")
        if not (isinstance(self.additive, bool | np.bool_) or self.additive == "ordinal"):
            raise ValueError(f"additive must be True, False or 'ordinal', got "
                             f"{self.additive!r}")
        if self.additive == "ordinal" and self.response != "categorical":
            raise ValueError("additive='ordinal' orders the GLM term of a categorical response; "
                             "with response='ordinal' use additive=True")
        if self.init not in (None, "glm"):
            raise ValueError(f"init must be None or 'glm', got {self.init!r}")
        if self.init == "glm" and not self.additive:
            raise ValueError("init='glm' fits the GLM term first: it needs additive=True "
                             "or 'ordinal'")
        if not isinstance(self.early_stopping, bool | np.bool_):
            raise ValueError(f"early_stopping must be True or False, got {self.early_stopping!r}")
        if self.stop_on not in ("joint", "response"):
            raise ValueError(f"stop_on must be 'joint' or 'response', got {self.stop_on!r}")
        for name, lo, lo_open in (("validation_fraction", 0.0, True), ("cell_dropout", 0.0, False)):
            v = getattr(self, name)
            if (isinstance(v, bool) or not isinstance(v, numbers.Real) or not v < 1
                    or not (v > lo if lo_open else v >= lo)):
                raise ValueError(f"{name} must be a number in {'(' if lo_open else '['}0, 1), "
                                 f"got {v!r}")

    @staticmethod
    def _frame(X) -> pd.DataFrame:
        if isinstance(X, pd.DataFrame):
            return X
        if hasattr(X, "toarray") or hasattr(X, "tocsr"):
            raise TypeError("sparse input is not supported: pass a dense array or a DataFrame")
        arr = np.asarray(X)
        if arr.dtype.kind == "c":
            raise ValueError("Complex data not supported")
        if arr.ndim != 2:
            raise ValueError(f"Expected 2D array, got {arr.ndim}D array instead. Reshape your "
                             "data with array.reshape(-1, 1) for a single feature or "
                             "array.reshape(1, -1) for a single sample")
        return pd.DataFrame(arr)

    def _column_kinds(self, X: pd.DataFrame) -> list[str]:
        """'cat' or 'num' per column; refuse dtypes the estimator cannot take."""
        chosen = None
        if self.categorical is not None:
            out = [c for c in self.categorical if isinstance(c, numbers.Integral)
                   and c not in X.columns and not -X.shape[1] <= c < X.shape[1]]
            if out:
                raise ValueError(f"categorical index {out[0]} is out of range: X has "
                                 f"{X.shape[1]} columns")
            chosen = {X.columns[c] if isinstance(c, numbers.Integral) and c not in X.columns
                      else c for c in self.categorical}
            unknown = chosen - set(X.columns)
            if unknown:
                raise ValueError(f"categorical names columns {sorted(map(str, unknown))} that X "
                                 "does not have")
        kinds = []
        for c in X.columns:
            dt = X[c].dtype
            if dt.kind in "mMc" or isinstance(dt, pd.PeriodDtype | pd.IntervalDtype):
                raise TypeError(f"column {c!r} has dtype {dt}, which the estimator cannot take "
                                "(use numbers, strings, booleans or categoricals)")
            if chosen is not None:
                kinds.append("cat" if c in chosen else "num")
            else:
                kinds.append("num" if dt.kind == "f" else "cat")
        return kinds

    def _nan_error(self, col, rows):
        return ValueError(
            f"column {col!r} has NaN or inf in {len(rows)} row(s) (first: row {rows[0]}); pass "
            "missing='mask' to treat missing cells as unobserved")

    def _learn_columns(self, X: pd.DataFrame):
        self.kinds_ = self._column_kinds(X)
        self.levels_, self.bins_, self.stats_, self.bin_values_ = {}, {}, {}, {}
        for c, kind in zip(X.columns, self.kinds_, strict=True):
            col = X[c]
            if kind == "num":
                v = pd.to_numeric(col, errors="coerce").to_numpy(dtype=float)
                ok = np.isfinite(v)
                if not ok.any():
                    raise ValueError(f"column {c!r} has no finite value")
                if self.numeric == "quantile":
                    self.bins_[c] = _bin_edges(v[ok], self.n_bins, c)
                    self.levels_[c] = list(range(len(self.bins_[c]) + 1))
                    # each bin's training median: what impute() writes, in the column's units
                    b = np.searchsorted(self.bins_[c], v[ok], "right")
                    self.bin_values_[c] = [float(np.median(v[ok][b == k]))
                                           for k in self.levels_[c]]
                else:
                    mu, sd = float(v[ok].mean()), float(v[ok].std())
                    self.stats_[c] = (mu, sd if sd > 0 else 1.0)
            else:
                values = col[col.notna()]
                _check_scalars(values, c)
                levels = pd.unique(values)
                try:
                    levels = sorted(levels)
                except TypeError:
                    levels = sorted(levels, key=str)
                self.levels_[c] = list(levels)

    def _cells(self, X: pd.DataFrame, columns, unknown_ok: bool):
        """(ids [N, K] into the categorical vocabulary, values [N, K], observed [N, K] bool,
        is_cat [K]) for the given feature columns of X."""
        n, k = len(X), len(columns)
        ids = np.zeros((n, k), dtype=np.int64)
        vals = np.zeros((n, k), dtype=float)
        obs = np.ones((n, k), dtype=bool)
        for j, c in enumerate(columns):
            col = X[c]
            kind = self.kinds_[self._index[c]]
            if kind == "num":
                v = pd.to_numeric(col, errors="coerce").to_numpy(dtype=float)
                bad = ~np.isfinite(v)
                if bad.any():
                    if self.missing == "error":
                        raise self._nan_error(c, np.flatnonzero(bad))
                    obs[bad, j] = False
                if self.numeric == "quantile":
                    ids[:, j] = self.offsets_[c] + np.searchsorted(self.bins_[c],
                                                                   np.nan_to_num(v), "right")
                else:
                    mu, sd = self.stats_[c]
                    vals[:, j] = np.where(bad, 0.0, (np.nan_to_num(v) - mu) / sd)
                continue
            missing = col.isna().to_numpy()
            if missing.any():
                if self.missing == "error":
                    raise self._nan_error(c, np.flatnonzero(missing))
                obs[missing, j] = False
            _check_scalars(col[~missing], c)
            infinite = np.array([isinstance(v, float | np.floating) and np.isinf(v)
                                 for v in col], dtype=bool)
            if infinite.any():  # not a level, and not missing either: never an unknown
                raise ValueError(f"column {c!r} has inf in {int(infinite.sum())} row(s) (first: "
                                 f"row {int(np.flatnonzero(infinite)[0])}); a level must be "
                                 "finite")
            lookup = self.lookup_[c]
            codes = np.array([lookup.get(v, -1) for v in col.where(~col.isna(), None)])
            unseen = (codes < 0) & ~missing
            if unseen.any():
                r = int(np.flatnonzero(unseen)[0])
                if self.handle_unknown == "error" and not unknown_ok:
                    known = self.levels_[c]
                    more = " ..." if len(known) > 10 else ""
                    raise ValueError(
                        f"column {c!r} has the value {col.iloc[r]!r} (row {r}) that fit never "
                        f"saw (known: {known[:10]}{more}); pass handle_unknown='unk' to treat "
                        "unseen values as unknown")
                obs[unseen, j] = False
            ids[:, j] = self.offsets_[c] + np.where(codes < 0, 0, codes)
        return ids, vals, obs

    def _sequences(self, X: pd.DataFrame, y_codes=None, unknown_ok=False) -> Sequences:
        """Rows → Sequences over the K feature columns and the response (last position)."""
        n = len(X)
        ids, vals, obs = self._cells(X, list(X.columns), unknown_ok)
        if y_codes is None:
            y_codes = np.full(n, -1)
        y_obs = y_codes >= 0
        y_ids = self.offsets_.get(self._target, 0) + np.where(y_obs, y_codes, 0)
        ids = np.concatenate([ids, y_ids[:, None]], 1)
        vals = np.concatenate([vals, np.zeros((n, 1))], 1)
        obs = np.concatenate([obs, y_obs[:, None]], 1)
        cat_pos = np.array(self.is_cat_)
        fields = {"cat": torch.from_numpy(ids)}
        observed = {"cat": torch.from_numpy(obs & cat_pos[None])}
        if self.has_num_:
            num_pos = ~cat_pos
            num_pos[-1] = False
            fields["num"] = torch.from_numpy(vals.astype(np.float32))
            observed["num"] = torch.from_numpy(obs & num_pos[None])
        if self.response == "ordinal":  # the response is its own field, at the last position
            resp = np.zeros_like(ids)
            resp[:, -1] = np.where(y_obs, y_codes, 0)
            at_last = np.zeros_like(obs)
            at_last[:, -1] = y_obs
            fields["resp"] = torch.from_numpy(resp)
            observed["resp"] = torch.from_numpy(at_last)
        return Sequences(fields, torch.full((n,), ids.shape[1]), observed)

    # ------------------------------------------------------------------ fit
    def _build(self):
        d = self.embedding_dim
        # (with Gaussian features and an ordinal response no cell is categorical: the field
        # then only carries [MASK] embeddings and has nothing to predict)
        fields = [Category("cat", max(self.vocab_size_, 2), dim=d, readout_bias=True,
                           target=any(self.is_cat_))]
        mix, d_model = "none", None
        if self.has_num_:
            fields.append(Value("num", HeteroscedasticGaussian(), dim=d, encoder="linear",
                                readout="mlp", readout_hidden=(d,), loc=0.0, scale=1.0))
            # loc/scale fixed: _cells already standardised each float column on the fit data
            mix, d_model = "linear", d
        if self.response == "ordinal":
            k = len(self.classes_)
            fields.append(Value("resp", Ordinal(k), dim=d, encoder="table", num_values=k,
                                readout="linear", loc=0.0, scale=1.0))
            mix, d_model = "linear", d
        paper = self.backbone == "paper"
        cfg = EFAConfig(
            fields, num_layers=self.num_layers, num_heads=self.num_heads,
            head_dim=max(1, d // self.num_heads), d_model=d_model, mix=mix,
            max_len=self.n_positions_, direction="bidirectional",
            block="post_ln" if paper else "residual_linear", ffn_hidden=self.ffn_hidden,
            dropout=self.dropout if paper else 0.0, bias=paper, scale="sqrt",
        )
        support = torch.zeros(self.n_positions_, max(self.vocab_size_, 2), dtype=torch.bool)
        for pos, c in enumerate(self.columns_):
            if self.is_cat_[pos]:
                lo = self.offsets_[c]
                support[pos, lo : lo + len(self.levels_[c])] = True
        ordinal = self.response == "ordinal"
        ordered = self.additive == "ordinal"
        out = (1 if ordinal or ordered else len(self.classes_)) if self.additive else 0
        return TableEFA(cfg, support, self.cell_dropout, additive=out,
                        response="resp" if ordinal else "cat",
                        ordered_classes=len(self.classes_) if ordered else 0)

    def fit(self, X, y):
        """Fit on a DataFrame or 2-D array ``X`` and labels ``y`` (NaN/None: unlabelled rows)."""
        self._check_params()
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y "
                             "is None")
        frame = self._frame(X)
        validate_data(self, X, reset=True, skip_check_array=True)
        X = frame
        if X.shape[1] < 1:
            raise ValueError(f"X has 0 feature(s) (shape=({len(X)}, 0)) while a minimum of 1 "
                             "is required.")
        if len(X) == 0:
            raise ValueError(f"Found array with 0 sample(s) (shape=(0, {X.shape[1]})) while a "
                             "minimum of 1 is required.")
        order = (y.categories if isinstance(y, pd.Categorical)  # a bare Categorical too
                 else getattr(getattr(y, "cat", None), "categories", None))
        y = _as_1d(y)
        if len(y) != len(X):
            raise ValueError(f"X has {len(X)} rows but y has {len(y)} labels")
        labelled = ~pd.isna(pd.Series(y, dtype=object)).to_numpy()
        if not labelled.any():
            raise ValueError("y has no label (every entry is missing)")
        check_classification_targets(y[labelled])
        self.classes_ = np.unique(y[labelled])
        if order is not None and (self.response == "ordinal" or self.additive == "ordinal"):
            present = set(self.classes_.tolist())
            self.classes_ = np.asarray([c for c in order if c in present],
                                       dtype=self.classes_.dtype)
        if len(self.classes_) < 2:
            raise ValueError(f"y has one class only ({self.classes_[0]!r}): a classifier needs "
                             "at least 2 classes")
        self._target = "__response__"  # the response's column in the internal table
        while self._target in set(map(str, X.columns)):  # a feature may have that name too
            self._target += "_"
        self.feature_columns_ = list(X.columns)
        self._index = {c: i for i, c in enumerate(X.columns)}
        self._learn_columns(X)
        self.has_num_ = self.numeric == "gaussian" and "num" in self.kinds_
        self.is_cat_ = ([k == "cat" or self.numeric == "quantile" for k in self.kinds_]
                        + [self.response == "categorical"])
        self.columns_ = [*self.feature_columns_, self._target]
        self.n_positions_ = len(self.columns_)
        if self.response == "categorical":
            self.levels_[self._target] = list(self.classes_)
        self.offsets_, start = {}, 0
        cats = [c for c, is_cat in zip(self.columns_, self.is_cat_, strict=True) if is_cat]
        if self.shared_vocabulary:
            for c in cats:
                extra = [v for v in self.levels_[c] if v not in set(self.classes_)]
                if extra:
                    raise ValueError(
                        f"shared_vocabulary=True needs every categorical column's levels among "
                        f"the response's {list(self.classes_)}; column {c!r} has {extra}")
                self.levels_[c] = list(self.classes_)
            self.offsets_ = dict.fromkeys(cats, 0)
            start = len(self.classes_)
        else:
            for c in cats:
                self.offsets_[c], start = start, start + len(self.levels_[c])
        self.vocab_size_ = start
        self.lookup_ = {c: _lookup(self.levels_[c]) for c in self.offsets_}
        self.lookup_[self._target] = _lookup(self.classes_)
        y_codes = self._y_codes(y, len(y))

        rng = check_random_state(self.random_state)
        seed = int(rng.randint(2**31 - 1))
        data = self._sequences(X, y_codes)
        train_idx, val_idx = (_split(y_codes, self.validation_fraction, seed)
                              if self.early_stopping else (np.arange(len(y_codes)), []))
        seed_everything(seed)
        self.model_ = self._build()
        cfg = TrainConfig(lr=self.lr, weight_decay=self.weight_decay, batch_size=self.batch_size,
                          max_epochs=self.max_epochs, patience=self.patience,
                          schedule="constant", seed=seed, progress=False, grad_clip=1.0,
                          min_delta=1e-6,  # the stopping threshold of the committed tables
                          monitor=(self.model_.response,) if self.stop_on == "response"
                          else None)
        val = data[torch.as_tensor(val_idx)] if len(val_idx) else None
        if val is not None and self.stop_on == "response":  # score the response cells only
            last = torch.zeros_like(val.valid())
            last[:, -1] = True
            val = val.with_scored(last)
        train = data[torch.as_tensor(train_idx)]
        if self.init == "glm":
            self.glm_history_ = self._fit_glm(train, val, cfg)
        self.history_ = fit(self.model_, train, val, cfg)
        self.model_.eval()
        self.n_iter_ = self.history_.epochs_run + (self.glm_history_.epochs_run
                                                   if self.init == "glm" else 0)
        return self

    def _fit_glm(self, train, val, cfg):
        """The first stage of init="glm": only the GLM's parameters move, with the
        network's read-outs (weights) at 0, so the model is the plain GLM on the response
        (the features' cells keep a context-free prediction meanwhile)."""
        model = self.model_
        with torch.no_grad():
            for readout in model.readouts.values():
                for name, p in readout.named_parameters():
                    if not name.endswith("bias"):
                        p.zero_()
        glm = {id(p) for p in model.glm_parameters()}
        for readout in model.readouts.values():  # the features' intercepts too
            glm |= {id(p) for n, p in readout.named_parameters() if n.endswith("bias")}
        frozen = [p for p in model.parameters() if id(p) not in glm]
        for p in frozen:
            p.requires_grad_(False)
        token = _GLM_STAGE.set(model)
        try:
            return fit(model, train, val, cfg)
        finally:
            _GLM_STAGE.reset(token)
            for p in frozen:
                p.requires_grad_(True)

    # ------------------------------------------------------------------ predict
    def _check_X(self, X):
        check_is_fitted(self, "model_")
        frame = self._frame(X)
        validate_data(self, X, reset=False, skip_check_array=True)
        X = frame
        if len(X) == 0:
            raise ValueError("Found array with 0 sample(s) while a minimum of 1 is required.")
        if hasattr(self, "feature_names_in_") and isinstance(X, pd.DataFrame) and list(
                X.columns) == list(self.feature_names_in_):
            return X
        X = X.copy()
        X.columns = self.feature_columns_
        return X

    @torch.no_grad()
    def _column_proba(self, data: Sequences, pos: int, column) -> np.ndarray:
        at = torch.zeros(len(data), self.n_positions_, dtype=torch.bool)
        at[:, pos] = True
        ordinal = column == self._target and self.response == "ordinal"
        out = []
        for s in range(0, len(data), 4096):
            batch = data[torch.arange(s, min(s + 4096, len(data)))]
            here = at[s : s + len(batch)]
            if ordinal:
                eta = self.model_.natural_params_at(batch, {"resp": here})["resp"]
                out.append(self.model_.field("resp").family.probabilities(eta))
            else:
                out.append(self.model_.predict_mean(batch, at=here)["cat"][:, pos])
        p = torch.cat(out).double().numpy()
        if ordinal:
            return p
        lo = self.offsets_[column]
        p = p[:, lo : lo + len(self.levels_[column])]
        return p / p.sum(1, keepdims=True)

    def predict_proba(self, X) -> np.ndarray:
        """p(y = class | the row's features), [n, n_classes] in the order of ``classes_``."""
        X = self._check_X(X)
        return self._column_proba(self._sequences(X), self.n_positions_ - 1, self._target)

    def predict(self, X) -> np.ndarray:
        proba = self.predict_proba(X)
        return self.classes_[proba.argmax(1)]

    def predict_column_proba(self, X, column, y=None) -> pd.DataFrame:
        """p(column = level | every other cell of the row, and ``y`` if given): any categorical
        (or binned) column of X, or the response when ``column`` is None."""
        X = self._check_X(X)
        if column is None:
            return pd.DataFrame(self.predict_proba(X), columns=self.classes_, index=X.index)
        pos = self._position(column)
        if not self.is_cat_[pos]:
            raise ValueError(f"column {column!r} is a Gaussian value field: use impute() for its "
                             "conditional mean")
        data = self._sequences(X, self._y_codes(y, len(X)))
        name = self.columns_[pos]
        levels = self.levels_[name]
        return pd.DataFrame(self._column_proba(data, pos, name), columns=levels, index=X.index)

    def impute(self, X, y=None) -> pd.DataFrame:
        """X with each missing cell (NaN/None; needs ``missing='mask'``) replaced, given the
        row's observed cells, by its most probable level (categorical), the training median of
        its most probable bin (a binned number, in the column's units) or its conditional mean
        (Gaussian). Columns keep their dtypes where the imputed values fit them."""
        X = self._check_X(X)
        data = self._sequences(X, self._y_codes(y, len(X)))
        hole = ~(data.observed["cat"] | data.observed.get("num", torch.zeros_like(
            data.observed["cat"])))
        hole[:, -1] = False
        out = X.copy()
        if not hole.any():
            return out
        with torch.no_grad():
            mean = self.model_.predict_mean(data, at=hole)
        for pos in range(self.n_positions_ - 1):
            rows = hole[:, pos].numpy()
            if not rows.any():
                continue
            c = self.columns_[pos]
            if self.is_cat_[pos]:
                p = mean["cat"][rows, pos].double().numpy()
                lo = self.offsets_[c]
                best = p[:, lo : lo + len(self.levels_[c])].argmax(1)
                values = (self.bin_values_[c] if c in self.bin_values_ else self.levels_[c])
                filled = [values[b] for b in best]
            else:
                mu, sd = self.stats_[c]
                filled = mu + sd * mean["num"][rows, pos].double().numpy()
            col = out[c].copy()
            try:
                col.iloc[np.flatnonzero(rows)] = filled
            except (TypeError, ValueError):  # e.g. a level the column's dtype cannot hold
                col = col.astype(object)
                col.iloc[np.flatnonzero(rows)] = filled
            out[c] = col
        return out

    @torch.no_grad()
    def gates(self, X, column=None, layer: int = -1) -> np.ndarray:
        """Attention weights [n, heads, columns + 1] of the masked ``column`` (default: the
        response) over every column, its own [MASK] slot included. With the ``linear``
        backbone these are exactly the mixture-of-experts gates π of efa.moe."""
        X = self._check_X(X)
        pos = self.n_positions_ - 1 if column is None else self._position(column)
        data = self._sequences(X)
        at = torch.zeros(len(X), self.n_positions_, dtype=torch.bool)
        at[:, pos] = True
        target = ("cat" if self.is_cat_[pos] else
                  "resp" if pos == self.n_positions_ - 1 else "num")
        w = self.model_.attention_weights(data, target, at=at)  # [L, B, H, I, I]
        return w[layer, :, :, pos].double().numpy()

    @torch.no_grad()
    def experts(self, X, column=None) -> tuple[np.ndarray, np.ndarray]:
        """The mixture of experts of the masked ``column`` (default: the response) for the
        ``linear`` backbone: gates π [n, heads, columns + 1] and expert logits
        [n, heads, columns + 1, levels] over the column's levels; Σ π·f is the column's logits
        (efa.moe, Theorem 2)."""
        from efa.moe import mixture

        X = self._check_X(X)
        if self.backbone != "linear" or self.num_layers != 1 or self.response != "categorical":
            raise ValueError("experts() needs backbone='linear', num_layers=1 and "
                             "response='categorical' (the block whose logits are a mixture of "
                             "CBOW experts)")
        pos = self.n_positions_ - 1 if column is None else self._position(column)
        if not self.is_cat_[pos]:
            raise ValueError(f"column {column!r} is a Gaussian value field, not categorical")
        pi, f = mixture(self.model_, self._sequences(X), "cat")
        name = self.columns_[pos]
        lo = self.offsets_[name]
        f = f[:, pos, ..., lo : lo + len(self.levels_[name])]
        return pi[:, pos].double().numpy(), f.double().numpy()

    def _position(self, column) -> int:
        if column in self._index:
            return self._index[column]
        raise KeyError(f"no column {column!r} (columns: {self.feature_columns_})")

    def _y_codes(self, y, n):
        if y is None:
            return None
        y = _as_1d(y)
        if len(y) != n:
            raise ValueError(f"X has {n} rows but y has {len(y)} labels")
        lookup = self.lookup_[self._target]
        known = ~pd.isna(pd.Series(y, dtype=object)).to_numpy()
        codes = np.array([lookup.get(v, -2) if k else -1 for v, k in zip(y, known, strict=True)])
        if (codes == -2).any():
            r = int(np.flatnonzero(codes == -2)[0])
            raise ValueError(f"y has the label {y[r]!r} (row {r}) that fit never saw "
                             f"(classes: {list(self.classes_)})")
        return codes


# --------------------------------------------------------------------------- helpers


def _as_1d(y) -> np.ndarray:
    arr = np.asarray(y)
    if arr.ndim == 2 and arr.shape[1] == 1:
        from sklearn.exceptions import DataConversionWarning

        warnings.warn("A column-vector y was passed when a 1d array was expected. Please "
                      "change the shape of y to (n_samples, ), for example using ravel().",
                      DataConversionWarning, stacklevel=3)
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ValueError(f"y must be 1-dimensional, got shape {arr.shape}")
    return arr


def _lookup(levels) -> dict:
    out = {}
    for k, v in enumerate(levels):
        out[v] = k
        if isinstance(v, np.generic):
            out[v.item()] = k
    return out


def _bin_edges(v: np.ndarray, n_bins: int, column) -> np.ndarray:
    """Interior edges of at most ``n_bins`` bins of the values ``v`` (a cell goes to the bin
    ``searchsorted(edges, x, "right")``). Every edge lies halfway between two distinct training
    values, so no bin is empty and no value straddles an edge. A column with at most
    ``n_bins`` distinct values keeps each apart; one with more gets quantile bins, and a
    warning names it if ties leave it fewer than ``n_bins``."""
    u = np.unique(v)
    if len(u) <= n_bins:
        gaps = np.arange(1, len(u))
    else:
        q = np.quantile(v, np.linspace(0, 1, n_bins + 1)[1:-1])
        gaps = np.unique(np.clip(np.searchsorted(u, q, "right"), 1, len(u) - 1))
    lo, hi = u[gaps - 1], u[gaps]
    mid = lo / 2 + hi / 2  # (hi - lo) overflows for values near ±1.8e308
    edges = np.where(mid > lo, mid, hi)  # adjacent floats: the upper value opens its bin
    if len(u) > n_bins and len(edges) + 1 < n_bins:
        warnings.warn(f"column {column!r}: ties leave {len(edges) + 1} quantile bins of the "
                      f"{n_bins} asked for, so some bins merge several values", stacklevel=4)
    return edges


def _check_scalars(values: pd.Series, column) -> None:
    for v in values:
        if not isinstance(v, str | numbers.Number | bool | np.generic):
            raise TypeError(f"column {column!r}: argument must be a string or a number, got "
                            f"{type(v).__name__} {v!r}")


def _split(y_codes: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) row indices: labelled rows stratified by class where every class has
    at least 2 of them, unlabelled rows split at random; at least one row stays in training."""
    rng = np.random.RandomState(seed)
    n = len(y_codes)
    if n < 4:
        return np.arange(n), np.arange(0)
    val = []
    for c in np.unique(y_codes):
        rows = np.flatnonzero(y_codes == c)
        rng.shuffle(rows)
        k = int(round(fraction * len(rows))) if len(rows) >= 2 else 0
        val.extend(rows[:k])
    val = np.sort(np.array(val, dtype=int))
    train = np.setdiff1d(np.arange(n), val)
    return train, val
