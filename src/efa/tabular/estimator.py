"""The estimator room: :class:`AttentionTableClassifier`, the scikit-learn facade (parameters,
validation, fit, predictions, imputation, gates and experts)."""

from __future__ import annotations

import numbers
from collections.abc import Hashable, Sequence
from typing import Self, cast

import numpy as np
import numpy.typing as npt
import pandas as pd
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, check_random_state, validate_data

from efa.core.data import Sequences
from efa.core.families import HeteroscedasticGaussian, Ordinal
from efa.core.fields import Category, Value
from efa.core.model import EFAConfig
from efa.tabular.encoding import (
    as_1d,
    as_frame,
    learn_columns,
    lookup,
    sequences,
    split_rows,
)
from efa.tabular.model import GLM_STAGE, TableEFA
from efa.training.train import TrainConfig, fit, seed_everything

BACKBONES = ("paper", "linear")
RESPONSES = ("categorical", "ordinal")


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
        :class:`efa.core.families.Ordinal`, p(y = k) ∝ exp(η s_k + b_k) with one natural parameter
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
        (needs ``additive``): fit the GLM part first, the network's read-out held at 0 (its
        biases free), then every parameter from there (both stages stop early as set below;
        ``glm_history_`` holds the first).
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
    stop_on : what the validation split scores for early stopping: ``"joint"`` (every cell's
        pseudo-likelihood, as trained), ``"response"`` (the response's log loss) or ``"auto"``
        (``"response"`` with ``additive``, else ``"joint"``; the choice is ``stop_on_``). A
        stage keeps its start unless an epoch beats it on this score (:func:`efa.fit`): with
        ``init="glm"`` the model never ends worse on validation than its own GLM.
    shared_vocabulary : one embedding table and one read-out for every categorical column
        (the paper's model, whose columns are all bins 0..C−1 of one scale); needs every
        categorical column and the response to have the same levels.
    cell_dropout : in training, hide each observed cell with this probability as well (from
        the context and from the likelihood), so that rows with [MASK]s (missing cells, unseen
        levels with ``handle_unknown="unk"``) are read as in training.
    random_state : int, RandomState or None (seeds initialisation, split and shuffling).
    """

    def __init__(self, backbone: str = "paper", embedding_dim: int = 20, num_heads: int = 5,
                 ffn_hidden: int = 5, dropout: float = 0.1, num_layers: int = 1,
                 numeric: str = "quantile", n_bins: int = 10,
                 categorical: Sequence[Hashable] | None = None,
                 response: str = "categorical", additive: bool | str = False,
                 init: str | None = None,
                 handle_unknown: str = "error",
                 missing: str = "error", lr: float = 1e-2, batch_size: int = 128,
                 max_epochs: int = 200, patience: int = 10, weight_decay: float = 0.0,
                 validation_fraction: float = 0.15,
                 shared_vocabulary: bool = False, cell_dropout: float = 0.0,
                 early_stopping: bool = True, stop_on: str = "auto",
                 random_state: int | np.random.RandomState | None = None):
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
    # Declared, and checked by scikit-learn's own validation (its messages name the parameter,
    # the accepted values and the value given).
    _parameter_constraints: dict = {
        "backbone": [StrOptions(set(BACKBONES))],
        "embedding_dim": [Interval(numbers.Integral, 1, None, closed="left")],
        "num_heads": [Interval(numbers.Integral, 1, None, closed="left")],
        "ffn_hidden": [Interval(numbers.Integral, 1, None, closed="left")],
        "dropout": [Interval(numbers.Real, 0, 1, closed="left")],
        "num_layers": [Interval(numbers.Integral, 1, None, closed="left")],
        "numeric": [StrOptions({"quantile", "gaussian"})],
        "n_bins": [Interval(numbers.Integral, 2, None, closed="left")],
        "categorical": ["array-like", None],
        "response": [StrOptions(set(RESPONSES))],
        "additive": ["boolean", StrOptions({"ordinal"})],
        "init": [StrOptions({"glm"}), None],
        "handle_unknown": [StrOptions({"error", "unk"})],
        "missing": [StrOptions({"error", "mask"})],
        "lr": [Interval(numbers.Real, 0, None, closed="neither")],
        "batch_size": [Interval(numbers.Integral, 1, None, closed="left")],
        "max_epochs": [Interval(numbers.Integral, 1, None, closed="left")],
        "patience": [Interval(numbers.Integral, 1, None, closed="left")],
        "weight_decay": [Interval(numbers.Real, 0, None, closed="left")],
        "validation_fraction": [Interval(numbers.Real, 0, 1, closed="neither")],
        "shared_vocabulary": ["boolean"],
        "cell_dropout": [Interval(numbers.Real, 0, 1, closed="left")],
        "early_stopping": ["boolean"],
        "stop_on": [StrOptions({"joint", "response", "auto"})],
        "random_state": ["random_state"],
    }

    def _check_params(self):
        self._validate_params()
        # the rules that join two parameters
        if self.additive == "ordinal" and self.response != "categorical":
            raise ValueError("additive='ordinal' orders the GLM term of a categorical response; "
                             "with response='ordinal' use additive=True")
        if self.init == "glm" and not self.additive:
            raise ValueError("init='glm' fits the GLM term first: it needs additive=True "
                             "or 'ordinal'")


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

    def fit(self, X: pd.DataFrame | npt.ArrayLike, y: npt.ArrayLike) -> Self:
        """Fit on a DataFrame or 2-D array ``X`` and labels ``y`` (NaN/None: unlabelled rows)."""
        self._check_params()
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y "
                             "is None")
        frame = as_frame(X)
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
        y = as_1d(y)
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
        learn_columns(self, X)
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
        self.lookup_ = {c: lookup(self.levels_[c]) for c in self.offsets_}
        self.lookup_[self._target] = lookup(self.classes_)
        y_codes = self._y_codes(y, len(y))

        rng = check_random_state(self.random_state)
        seed = int(rng.randint(2**31 - 1))
        data = sequences(self, X, y_codes)
        val_idx: np.ndarray | list[int]
        train_idx, val_idx = (split_rows(y_codes, self.validation_fraction, seed)
                              if self.early_stopping else (np.arange(len(y_codes)), []))
        seed_everything(seed)
        self.model_ = self._build()
        auto = "response" if self.additive else "joint"
        self.stop_on_ = auto if self.stop_on == "auto" else self.stop_on
        cfg = TrainConfig(lr=self.lr, weight_decay=self.weight_decay, batch_size=self.batch_size,
                          max_epochs=self.max_epochs, patience=self.patience,
                          schedule="constant", seed=seed, progress=False, grad_clip=1.0,
                          min_delta=1e-6,  # the stopping threshold of the committed tables
                          monitor=(self.model_.response,) if self.stop_on_ == "response"
                          else None)
        val = data[torch.as_tensor(val_idx)] if len(val_idx) else None
        if val is not None and self.stop_on_ == "response":  # score the response cells only
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
        token = GLM_STAGE.set(model)
        try:
            return fit(model, train, val, cfg)
        finally:
            GLM_STAGE.reset(token)
            for p in frozen:
                p.requires_grad_(True)

    # ------------------------------------------------------------------ predict
    def _check_X(self, X):
        check_is_fitted(self, "model_")
        frame = as_frame(X)
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

    def predict_proba(self, X: pd.DataFrame | npt.ArrayLike) -> np.ndarray:
        """p(y = class | the row's features), [n, n_classes] in the order of ``classes_``."""
        X = self._check_X(X)
        return self._column_proba(sequences(self, X), self.n_positions_ - 1, self._target)

    def predict(self, X: pd.DataFrame | npt.ArrayLike) -> np.ndarray:
        """The most probable class of each row of ``X``."""
        proba = self.predict_proba(X)  # first: it refuses an unfitted estimator
        return self.classes_[proba.argmax(1)]

    def predict_column_proba(self, X: pd.DataFrame | npt.ArrayLike, column: Hashable | None,
                             y: npt.ArrayLike | None = None) -> pd.DataFrame:
        """p(column = level | every other cell of the row, and ``y`` if given): any categorical
        (or binned) column of X, or the response when ``column`` is None."""
        X = self._check_X(X)
        if column is None:
            return pd.DataFrame(self.predict_proba(X), columns=self.classes_, index=X.index)
        pos = self._position(column)
        if not self.is_cat_[pos]:
            raise ValueError(f"column {column!r} is a Gaussian value field: use impute() for its "
                             "conditional mean")
        data = sequences(self, X, self._y_codes(y, len(X)))
        name = self.columns_[pos]
        levels = self.levels_[name]
        return pd.DataFrame(self._column_proba(data, pos, name), columns=levels, index=X.index)

    def impute(self, X: pd.DataFrame | npt.ArrayLike,
               y: npt.ArrayLike | None = None) -> pd.DataFrame:
        """X with each missing cell (NaN/None; needs ``missing='mask'``) replaced, given the
        row's observed cells, by its most probable level (categorical), the training median of
        its most probable bin (a binned number, in the column's units) or its conditional mean
        (Gaussian). Columns keep their dtypes where the imputed values fit them."""
        X = self._check_X(X)
        data = sequences(self, X, self._y_codes(y, len(X)))
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
    def gates(self, X: pd.DataFrame | npt.ArrayLike, column: Hashable | None = None,
              layer: int = -1) -> np.ndarray:
        """Attention weights [n, heads, columns + 1] of the masked ``column`` (default: the
        response) over every column, its own [MASK] slot included. With the ``linear``
        backbone these are exactly the mixture-of-experts gates π of efa.moe."""
        X = self._check_X(X)
        pos = self.n_positions_ - 1 if column is None else self._position(column)
        data = sequences(self, X)
        at = torch.zeros(len(X), self.n_positions_, dtype=torch.bool)
        at[:, pos] = True
        target = ("cat" if self.is_cat_[pos] else
                  "resp" if pos == self.n_positions_ - 1 else "num")
        w = self.model_.attention_weights(data, target, at=at)  # [L, B, H, I, I]
        return w[layer, :, :, pos].double().numpy()

    @torch.no_grad()
    def experts(self, X: pd.DataFrame | npt.ArrayLike,
                column: Hashable | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The mixture of experts of the masked ``column`` (default: the response), ``linear``
        backbone: gates π [n, heads, columns + 1], expert logits [n, heads, columns + 1,
        levels] over the column's levels; Σ π·f is the column's logits (efa.moe, Theorem 2)."""
        from efa.moe import mixture

        X = self._check_X(X)
        if self.backbone != "linear" or self.num_layers != 1 or self.response != "categorical":
            raise ValueError("experts() needs backbone='linear', num_layers=1 and "
                             "response='categorical' (the block whose logits are a mixture of "
                             "CBOW experts)")
        pos = self.n_positions_ - 1 if column is None else self._position(column)
        if not self.is_cat_[pos]:
            raise ValueError(f"column {column!r} is a Gaussian value field, not categorical")
        pi, f = mixture(self.model_, sequences(self, X), "cat")
        name = self.columns_[pos]
        lo = self.offsets_[name]
        f = cast(torch.Tensor, f)[:, pos, ..., lo : lo + len(self.levels_[name])]  # experts
        return pi[:, pos].double().numpy(), f.double().numpy()

    def _position(self, column) -> int:
        if column in self._index:
            return self._index[column]
        raise KeyError(f"no column {column!r} (columns: {self.feature_columns_})")

    def _y_codes(self, y, n):
        if y is None:
            return None
        y = as_1d(y)
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
