"""Peers of the tabular attention estimator (:mod:`efa.tabular`).

- The reference peers of the UAI 2023 paper, exactly as its ``baseline_results.py`` builds them
  (own code, same computation): one-hot features with the first level dropped, logistic
  regression untuned (``max_iter=2000``), random forest / gradient boosting / MLP grids selected
  by 5-fold stratified CV on accuracy (:func:`reference_peers`). Categories are aligned between
  train and test (the reference's separate ``get_dummies`` calls only agree when every level
  appears in both splits; where they do, the design matrices are identical).
- Today's peers: CatBoost with its native categorical features (:class:`CatBoostTable`, an
  sklearn-clonable wrapper), TabM (:class:`TabMTable`) and FT-Transformer
  (:class:`FTTransformerTable`), each tuned on a validation split of the training rows only,
  logistic regression on numeric features (:func:`numeric_lr`) and, for an ordered response,
  the proportional-odds model (:class:`OrderedLogit`).

Column kinds follow :class:`efa.tabular.AttentionTableClassifier`: floating-point columns are
numeric (standardised on the training rows for the deep peers), every other column categorical.
So one table gives every model the same reading of its columns; ordered levels read as numbers
(``X.astype(float)``, or scikit-learn's ``OrdinalEncoder``) are numeric for all of them.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Self

import numpy as np
import numpy.typing as npt
import pandas as pd
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.model_selection import GridSearchCV, StratifiedKFold, train_test_split

if TYPE_CHECKING:  # for annotations only
    from sklearn.pipeline import Pipeline

REFERENCE_GRIDS = {
    "RF": {"criterion": ["gini", "entropy"], "n_estimators": [50, 100, 200],
           "max_depth": [1, 3, None]},
    "GB": {"learning_rate": [0.01, 0.1, 1], "n_estimators": [50, 100, 200],
           "max_depth": [1, 3, 5]},
    "MLP": {"hidden_layer_sizes": [(50,), (100,), (100, 50)], "alpha": [0.0001, 0.001, 0.01],
            "learning_rate": ["constant", "adaptive"]},
}


def one_hot(train: pd.DataFrame, test: pd.DataFrame,
            features: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One-hot designs of ``features`` with the first level dropped, on the union of the levels
    seen in either split (so train and test columns always agree)."""
    parts_tr, parts_te = [], []
    for c in features:
        levels = sorted(set(train[c].dropna()) | set(test[c].dropna()))
        for lv in levels[1:]:
            name = f"{c}_{lv}"
            parts_tr.append((train[c] == lv).astype(float).rename(name))
            parts_te.append((test[c] == lv).astype(float).rename(name))
    return pd.concat(parts_tr, axis=1), pd.concat(parts_te, axis=1)


def reference_estimator(name: str, seed: int, grid: dict | None = None) -> BaseEstimator:
    """The reference's LR, or the GridSearchCV of RF / GB / MLP (single process); ``grid``
    replaces the reference grid (only the quick tests do that)."""
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier

    if name == "LR":
        return LogisticRegression(random_state=seed, max_iter=2000)
    base = {
        "RF": lambda: RandomForestClassifier(random_state=seed),
        "GB": lambda: GradientBoostingClassifier(random_state=seed),
        "MLP": lambda: MLPClassifier(random_state=seed, max_iter=2000, learning_rate_init=0.01),
    }[name]()
    cv = StratifiedKFold(n_splits=5, shuffle=True, random_state=seed)
    return GridSearchCV(base, grid or REFERENCE_GRIDS[name], scoring="accuracy", cv=cv)


def class_metrics(y_true: npt.ArrayLike, proba: npt.ArrayLike,
                  classes: npt.ArrayLike) -> dict[str, float]:
    """Accuracy, MSE of the predicted class index (the paper's "MSE") and log loss. The class
    index is the label itself for numeric labels, the position among ``y_true``'s categories
    for a pandas Categorical (its order, e.g. unacc < acc < good < vgood), else the position
    in ``classes``."""
    order = getattr(getattr(y_true, "cat", None), "categories", None)
    y_true = np.asarray(y_true)
    classes = np.asarray(classes)
    proba = np.asarray(proba, dtype=float)
    pred = classes[proba.argmax(1)]
    out = {"accuracy": float((pred == y_true).mean()),
           "log loss": float(row_log_loss(y_true, proba, classes).mean())}
    if np.issubdtype(classes.dtype, np.number):
        out["class MSE"] = float(((pred - y_true) ** 2).mean())
    elif order is not None:  # ordered categorical labels: the MSE of their level indices
        rank = {c: k for k, c in enumerate(order)}
        ranks = np.array([rank[v] for v in pred]) - np.array([rank[v] for v in y_true])
        out["class MSE"] = float((ranks ** 2).mean())
    else:  # unordered labels: their positions in ``classes``
        out["class MSE"] = float(((proba.argmax(1) - _positions(y_true, classes)) ** 2).mean())
    return out


def _positions(y_true, classes) -> np.ndarray:
    """Each label's column in ``classes`` (which need not be sorted: ordered labels)."""
    idx = {c: k for k, c in enumerate(np.asarray(classes))}
    return np.array([idx[v] for v in np.asarray(y_true)])


def row_log_loss(y_true: npt.ArrayLike, proba: npt.ArrayLike,
                 classes: npt.ArrayLike) -> np.ndarray:
    """−log p(y_i) of every row (probabilities clipped at 1e-15, as scikit-learn's log_loss)."""
    proba = np.asarray(proba, dtype=float)
    p = proba[np.arange(len(proba)), _positions(y_true, classes)]
    return -np.log(np.clip(p, 1e-15, 1))


def reference_peers(train: pd.DataFrame, test: pd.DataFrame, seed: int,
                    names: Iterable[str] = ("LR", "RF", "GB", "MLP"), target: str = "y",
                    grids: dict | None = None) -> dict[str, dict]:
    """Fit the reference peers on ``train`` and score them on ``test`` (and on ``train``):
    per peer the metrics of :func:`class_metrics` with ``train`` prefixes, the CV-selected
    parameters and the wall time."""
    features = [c for c in train if c != target]
    xtr, xte = one_hot(train, test, features)
    ytr, yte = train[target].to_numpy(), test[target].to_numpy()
    out = {}
    for name in names:
        t0 = time.perf_counter()
        model = reference_estimator(name, seed, (grids or {}).get(name)).fit(xtr, ytr)
        res: dict[str, Any] = class_metrics(test[target], model.predict_proba(xte),
                                            model.classes_)
        # The reference scores predict(), which is the argmax of predict_proba here.
        assert res["accuracy"] == float((model.predict(xte) == yte).mean())
        res |= {f"train {k}": v for k, v in
                class_metrics(train[target], model.predict_proba(xtr), model.classes_).items()}
        if name != "LR":
            res["best_params"] = {k: (list(v) if isinstance(v, tuple) else v)
                                  for k, v in model.best_params_.items()}
        res["seconds"] = time.perf_counter() - t0
        out[name] = res
    return out


# --------------------------------------------------------------------------- today's peers


def validation_split(y: np.ndarray, size: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) row indices, stratified by class; a class with a single row keeps
    it in training (stratifying cannot split it, and a class seen only in validation could
    not be learned). Without such a class: exactly ``train_test_split(..., stratify=y)``."""
    idx = np.arange(len(y))
    classes, counts = np.unique(y, return_counts=True)
    single = np.isin(y, classes[counts < 2])
    tr, va = train_test_split(idx[~single], test_size=size, random_state=seed,
                              stratify=y[~single])
    return (np.concatenate([tr, idx[single]]) if single.any() else tr), va


def _frame(X) -> pd.DataFrame:
    return X.copy() if isinstance(X, pd.DataFrame) else pd.DataFrame(np.asarray(X)).rename(
        columns=str)


def _numeric(X: pd.DataFrame) -> list[bool]:
    """Which columns are numeric: the floating-point ones (as in efa.tabular)."""
    return [X[c].dtype.kind == "f" for c in X]


def numeric_lr(seed: int = 0) -> Pipeline:
    """Multinomial logistic regression on standardised numeric features with its L2 strength
    picked by 5-fold stratified CV on log loss over 1e-4..1e4 (9 values), fitted to convergence
    (lbfgs, ``max_iter=10000``) — the convex peer for tables whose columns are numbers."""
    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    cv = StratifiedKFold(n_splits=5, shuffle=True, random_state=seed)
    return make_pipeline(StandardScaler(), LogisticRegressionCV(
        Cs=np.logspace(-4, 4, 9), l1_ratios=(0.0,), cv=cv, scoring="neg_log_loss",
        max_iter=10_000, use_legacy_attributes=False))


@lru_cache(maxsize=1)
def _analytic_ordered_model():
    """statsmodels' ``OrderedModel`` with the analytic score of its log-likelihood: its own
    gradient is numerical, one likelihood pass per parameter, which made the one-hot fit ~50
    parameters × slower (tests: equal to statsmodels' numerical score). Built on first use
    (statsmodels is an optional extra) and reachable as a module attribute, so fitted models
    pickle."""
    from statsmodels.miscmodels.ordinal_model import OrderedModel

    class AnalyticOrderedModel(OrderedModel):
        def score(self, params):
            low, upp = self._bounds(params)
            # d log(P + 1e-20) / d bound, as statsmodels' loglikeobs (P = F(upp) − F(low))
            g = 1.0 / (self.prob(low, upp) + 1e-20)
            f_low, f_upp = g * self.pdf(low), g * self.pdf(upp)  # pdf(±inf) = 0
            k = self.k_levels - 1  # finite thresholds a_1..a_k: a_j bounds class j−1 above
            d_thresh = (np.bincount(self.endog + 1, f_upp, minlength=k + 2)
                        - np.bincount(self.endog, f_low, minlength=k + 2))[1 : k + 1]
            d_beta = -(f_upp - f_low) @ self.exog
            # a_j = θ_0 + Σ_{1≤m<j} exp(θ_m): θ_0 moves every a_j, θ_m every a_j with j > m
            tail = np.cumsum(d_thresh[::-1])[::-1]  # Σ_{j ≥ m} d a_j
            th = params[-k:]
            d_th = np.concatenate([tail[:1], np.exp(th[1:]) * tail[1:]])
            return np.concatenate([d_beta, d_th])

    AnalyticOrderedModel.__module__ = __name__
    AnalyticOrderedModel.__qualname__ = "AnalyticOrderedModel"
    return AnalyticOrderedModel


def __getattr__(name):  # pickle finds the lazily built class by its name
    if name == "AnalyticOrderedModel":
        return _analytic_ordered_model()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class OrderedLogit(ClassifierMixin, BaseEstimator):
    """The proportional-odds model (cumulative logit), p(y ≤ k | x) = σ(θ_k − wᵀx), by
    statsmodels' ``OrderedModel`` fitted by maximum likelihood to convergence (BFGS; the flag
    is kept in ``converged_``): the plain convex peer for an ordered response. Classes are
    ordered as ``y``'s categories when it is a pandas Categorical (e.g. unacc < acc < good <
    vgood), else as sorted labels; ``classes_`` holds them in that order. Float columns are
    standardised on the training rows, the other columns one-hot with the first training
    level dropped (a level unseen in fit gets zeros, i.e. the first level's effect)."""

    def __init__(self, max_iter: int = 10_000):
        self.max_iter = max_iter

    def _design(self, X) -> np.ndarray:
        X = _frame(X)
        cols = []
        for c, numeric in zip(X.columns, self.numeric_, strict=True):
            if numeric:
                mu, sd = self.stats_[c]
                cols.append(((X[c].to_numpy(float) - mu) / sd)[:, None])
            else:
                levels = self.levels_[c][1:]
                cols.append((X[c].to_numpy()[:, None] == np.asarray(levels)[None]).astype(float))
        return np.concatenate(cols, 1)

    def fit(self, X: pd.DataFrame | npt.ArrayLike, y: npt.ArrayLike) -> Self:
        """Fit the proportional-odds model to the table ``X`` and ordered labels ``y``."""
        import warnings

        X = _frame(X)
        self.numeric_ = _numeric(X)
        self.stats_, self.levels_ = {}, {}
        for c, numeric in zip(X.columns, self.numeric_, strict=True):
            if numeric:
                v = X[c].to_numpy(float)
                self.stats_[c] = (v.mean(), v.std() if v.std() > 0 else 1.0)
            else:
                self.levels_[c] = sorted(pd.unique(X[c]))
        order = getattr(getattr(y, "cat", None), "categories", None)
        y = np.asarray(y)
        present = set(y.tolist())
        self.classes_ = (np.unique(y) if order is None else
                         np.asarray([c for c in order if c in present], dtype=object))
        codes = pd.Categorical(y, categories=self.classes_).codes
        self.model_ = _analytic_ordered_model()(codes, self._design(X), distr="logit")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # convergence is recorded, not printed
            self.result_ = self.model_.fit(method="bfgs", maxiter=self.max_iter, disp=False)
        self.converged_ = bool(self.result_.mle_retvals["converged"])
        return self

    def predict_proba(self, X: pd.DataFrame | npt.ArrayLike) -> np.ndarray:
        """Class probabilities of each row of ``X``."""
        return np.asarray(self.model_.predict(self.result_.params, exog=self._design(X)))

    def predict(self, X: pd.DataFrame | npt.ArrayLike) -> np.ndarray:
        """The most probable class of each row of ``X``."""
        return self.classes_[self.predict_proba(X).argmax(1)]


class CatBoostTable(ClassifierMixin, BaseEstimator):
    """CatBoost on a table (native categorical handling of the non-float columns: ordered target
    statistics; float columns numeric), clonable by sklearn: ``cat_features`` is computed in
    ``fit`` from the column dtypes instead of being a constructor argument (``sklearn.clone`` of
    a ``CatBoostClassifier`` with ``cat_features`` set fails). The number of trees is picked
    by early stopping (50 rounds) on the multiclass log loss of a stratified ``validation``
    fraction of the training rows; the early-stopped model is kept (no refit, to halve the
    cost)."""

    def __init__(self, depth: int = 6, learning_rate: float = 0.1, l2_leaf_reg: float = 3.0,
                 max_iterations: int = 500, max_ctr_complexity: int | None = None,
                 validation: float = 0.2, random_state: int = 0, thread_count: int = 1):
        self.depth = depth
        self.max_ctr_complexity = max_ctr_complexity
        self.learning_rate = learning_rate
        self.l2_leaf_reg = l2_leaf_reg
        self.max_iterations = max_iterations
        self.validation = validation
        self.random_state = random_state
        self.thread_count = thread_count

    def _params(self, iterations):
        extra = ({} if self.max_ctr_complexity is None
                 else {"max_ctr_complexity": self.max_ctr_complexity})
        return extra | dict(depth=self.depth, learning_rate=self.learning_rate,
                    l2_leaf_reg=self.l2_leaf_reg, iterations=iterations,
                    random_seed=self.random_state, thread_count=self.thread_count,
                    verbose=False, allow_writing_files=False, loss_function="MultiClass")

    def _prepare(self, X):
        X = _frame(X)
        for c, num in zip(list(X), self.numeric_, strict=True):
            X[c] = X[c].astype(float if num else str)
        return X

    def fit(self, X: pd.DataFrame | npt.ArrayLike, y: npt.ArrayLike) -> Self:
        """Fit CatBoost to the table ``X`` and labels ``y`` (text columns as categories)."""
        from catboost import CatBoostClassifier

        self.numeric_ = _numeric(_frame(X))
        X = self._prepare(X)
        y = np.asarray(y)
        self.classes_ = np.unique(y)
        cats = [k for k, num in enumerate(self.numeric_) if not num]
        tr, va = validation_split(y, self.validation, self.random_state)
        xtr, xva, ytr, yva = X.iloc[tr], X.iloc[va], y[tr], y[va]
        self.model_ = CatBoostClassifier(**self._params(self.max_iterations), cat_features=cats,
                                         class_names=list(self.classes_), use_best_model=True,
                                         early_stopping_rounds=50)
        self.model_.fit(xtr, ytr, eval_set=(xva, yva))
        self.best_iteration_ = int(self.model_.get_best_iteration()) + 1
        self.validation_log_loss_ = float(
            self.model_.get_best_score()["validation"]["MultiClass"])
        return self

    def predict_proba(self, X: pd.DataFrame | npt.ArrayLike) -> np.ndarray:
        """Class probabilities of each row of ``X``."""
        return self.model_.predict_proba(self._prepare(X))

    def predict(self, X: pd.DataFrame | npt.ArrayLike) -> np.ndarray:
        """The most probable class of each row of ``X``."""
        return self.classes_[self.predict_proba(X).argmax(1)]


class _TorchTable(ClassifierMixin, BaseEstimator):
    """Shared plumbing of the deep peers: ordinal-encode the categorical columns (levels seen in
    ``fit``; an unseen level at predict time maps to an extra 'unknown' index), standardise the
    numeric (float) ones, train with AdamW on mini-batches, early-stop on a stratified
    validation split of the training rows by its log loss, and keep the best weights. Inputs
    are pairs (numeric [N, n_num] float or None, categorical [N, n_cat] long or None)."""

    def _encode_fit(self, X, y):
        X = _frame(X)
        self.columns_ = list(X.columns)
        self.numeric_ = _numeric(X)
        self.levels_ = [sorted(set(X[c].astype(str)))
                        for c, num in zip(X, self.numeric_, strict=True) if not num]
        num = X.loc[:, self.numeric_].to_numpy(dtype=float)
        self.mean_ = num.mean(0)
        self.scale_ = np.where(num.std(0) > 0, num.std(0), 1.0)
        self.classes_ = np.unique(np.asarray(y))
        return self._encode(X), np.searchsorted(self.classes_, np.asarray(y))

    def _encode(self, X):
        import torch

        X = _frame(X)
        cols = []
        cats = [c for c, num in zip(X, self.numeric_, strict=True) if not num]
        for c, levels in zip(cats, self.levels_, strict=True):
            lookup = {v: k for k, v in enumerate(levels)}
            cols.append([lookup.get(v, len(levels)) for v in X[c].astype(str)])
        num = (X.loc[:, self.numeric_].to_numpy(dtype=float) - self.mean_) / self.scale_
        return (torch.tensor(num, dtype=torch.float32) if num.shape[1] else None,
                torch.tensor(np.array(cols).T, dtype=torch.long) if cols else None)

    @staticmethod
    def _rows(x, idx):
        return tuple(None if part is None else part[idx] for part in x)

    def _train(self, net, forward, x, y):
        import torch

        torch.manual_seed(self.random_state)
        tr, va = validation_split(y, self.validation, self.random_state)
        xt, yt = self._rows(x, tr), torch.tensor(y[tr])
        xv, yv = self._rows(x, va), torch.tensor(y[va])
        opt = torch.optim.AdamW(net.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        gen = torch.Generator().manual_seed(self.random_state)
        best, best_state, bad = np.inf, None, 0
        for _ in range(self.max_epochs):
            net.train()
            order = torch.randperm(len(yt), generator=gen)
            for s in range(0, len(yt), self.batch_size):
                b = order[s:s + self.batch_size]
                loss = forward(net, self._rows(xt, b), yt[b])
                opt.zero_grad()
                loss.backward()
                opt.step()
            net.eval()
            with torch.no_grad():
                v = float(forward(net, xv, yv))
            if v < best - 1e-5:
                best, best_state, bad = v, copy.deepcopy(net.state_dict()), 0
            else:
                bad += 1
                if bad >= self.patience:
                    break
        net.load_state_dict(best_state)
        net.eval()
        self.validation_log_loss_ = best
        return net

    def predict(self, X: pd.DataFrame | npt.ArrayLike) -> np.ndarray:
        return self.classes_[self.predict_proba(X).argmax(1)]


class TabMTable(_TorchTable):
    """TabM (Gorishniy et al. 2025, package ``tabm``): an efficient ensemble of ``k`` MLPs
    sharing most weights, on one-hot categorical and standardised numeric inputs; the loss is
    the mean of the ``k`` members' cross-entropies and the prediction the mean of their
    probabilities."""

    def __init__(self, k: int = 16, n_blocks: int = 2, d_block: int = 128, dropout: float = 0.1,
                 lr: float = 2e-3, weight_decay: float = 3e-4, batch_size: int = 128,
                 max_epochs: int = 100, patience: int = 10, validation: float = 0.2,
                 random_state: int = 0):
        self.k, self.n_blocks, self.d_block, self.dropout = k, n_blocks, d_block, dropout
        self.lr, self.weight_decay, self.batch_size = lr, weight_decay, batch_size
        self.max_epochs, self.patience = max_epochs, patience
        self.validation, self.random_state = validation, random_state

    def fit(self, X: pd.DataFrame | npt.ArrayLike, y: npt.ArrayLike) -> Self:
        """Fit TabM to the table ``X`` and labels ``y``."""
        import tabm
        import torch

        x, yy = self._encode_fit(X, y)
        torch.manual_seed(self.random_state)
        cards = [len(lv) + 1 for lv in self.levels_]  # + the 'unknown' level
        self.net_ = tabm.TabM.make(n_num_features=sum(self.numeric_), cat_cardinalities=cards,
                                   d_out=len(self.classes_), k=self.k, n_blocks=self.n_blocks,
                                   d_block=self.d_block, dropout=self.dropout)

        def forward(net, xb, yb):
            logits = net(x_num=xb[0], x_cat=xb[1])  # [B, k, C]
            return torch.nn.functional.cross_entropy(
                logits.flatten(0, 1), yb.repeat_interleave(logits.shape[1]))

        self._train(self.net_, forward, x, yy)
        return self

    def predict_proba(self, X: pd.DataFrame | npt.ArrayLike) -> np.ndarray:
        """Class probabilities of each row of ``X``."""
        import torch

        with torch.no_grad():
            num, cat = self._encode(X)
            return torch.softmax(self.net_(x_num=num, x_cat=cat), -1).mean(1).numpy()


class FTTransformerTable(_TorchTable):
    """FT-Transformer (Gorishniy et al. 2021, package ``rtdl-revisiting-models``) with its
    default configuration scaled by ``n_blocks`` (d_block 96/128/192 for 1/2/3 blocks)."""

    def __init__(self, n_blocks: int = 2, lr: float = 1e-4, weight_decay: float = 1e-5,
                 batch_size: int = 128, max_epochs: int = 100, patience: int = 10,
                 validation: float = 0.2, random_state: int = 0):
        self.n_blocks, self.lr, self.weight_decay = n_blocks, lr, weight_decay
        self.batch_size, self.max_epochs, self.patience = batch_size, max_epochs, patience
        self.validation, self.random_state = validation, random_state

    def fit(self, X: pd.DataFrame | npt.ArrayLike, y: npt.ArrayLike) -> Self:
        """Fit the FT-Transformer to the table ``X`` and labels ``y``."""
        import rtdl_revisiting_models as rtdl
        import torch

        x, yy = self._encode_fit(X, y)
        torch.manual_seed(self.random_state)
        cfg = rtdl.FTTransformer.get_default_kwargs(n_blocks=self.n_blocks)
        self.net_ = rtdl.FTTransformer(n_cont_features=sum(self.numeric_),
                                       cat_cardinalities=[len(lv) + 1 for lv in self.levels_],
                                       d_out=len(self.classes_), **cfg)

        def forward(net, xb, yb):
            return torch.nn.functional.cross_entropy(net(*xb), yb)

        self._train(self.net_, forward, x, yy)
        return self

    def predict_proba(self, X: pd.DataFrame | npt.ArrayLike) -> np.ndarray:
        """Class probabilities of each row of ``X``."""
        import torch

        with torch.no_grad():
            return torch.softmax(self.net_(*self._encode(X)), -1).numpy()
