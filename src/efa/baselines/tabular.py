"""Peers of the tabular attention estimator (:mod:`efa.tabular`).

- The reference peers of the UAI 2023 paper, exactly as its ``baseline_results.py`` builds them
  (own code, same computation): one-hot features with the first level dropped, logistic
  regression untuned (``max_iter=2000``), random forest / gradient boosting / MLP grids selected
  by 5-fold stratified CV on accuracy (:func:`reference_peers`). Categories are aligned between
  train and test (the reference's separate ``get_dummies`` calls only agree when every level
  appears in both splits; where they do, the design matrices are identical).
- Today's peers: CatBoost with its native categorical features (``CatBoostTable``, an
  sklearn-clonable wrapper), TabM (``TabMTable``) and FT-Transformer (``FTTransformerTable``),
  each tuned on a validation split of the training rows only (:func:`validation_split`; they
  live in :mod:`efa.baselines.tabular_tuned`), logistic regression on numeric features
  (:func:`numeric_lr`) and, for an ordered response, the proportional-odds model
  (:class:`OrderedLogit`).

Column kinds follow :class:`efa.tabular.AttentionTableClassifier`: floating-point columns are
numeric (standardised on the training rows for the deep peers), every other column categorical.
So one table gives every model the same reading of its columns; ordered levels read as numbers
(``X.astype(float)``, or scikit-learn's ``OrdinalEncoder``) are numeric for all of them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Self

import numpy as np
import numpy.typing as npt
import pandas as pd
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.model_selection import GridSearchCV, StratifiedKFold, train_test_split

from efa.deprecation import moved_out

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
    seen in either split (so train and test columns always agree).

    Parameters
    ----------
    train : pandas.DataFrame
        The training rows.
    test : pandas.DataFrame
        The test rows.
    features : list of str
        The columns to encode, each as categorical (missing values get zeros).

    Returns
    -------
    train_design : pandas.DataFrame
        float 0/1 columns named ``{column}_{level}``, one per level after the first (sorted).
    test_design : pandas.DataFrame
        The same columns for ``test``.
    """
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
    replaces the reference grid (only the quick tests do that).

    Parameters
    ----------
    name : {"LR", "RF", "GB", "MLP"}
        The peer: logistic regression (untuned, ``max_iter=2000``), random forest, gradient
        boosting, or MLP (``max_iter=2000``, ``learning_rate_init=0.01``).
    seed : int
        The estimators' ``random_state`` and the CV's shuffle.
    grid : dict, optional
        The parameter grid of RF / GB / MLP (default: ``REFERENCE_GRIDS[name]``).

    Returns
    -------
    sklearn.base.BaseEstimator
        An unfitted ``LogisticRegression``, or a ``GridSearchCV`` selecting on accuracy by
        5-fold stratified CV.
    """
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
    in ``classes``.

    Parameters
    ----------
    y_true : array-like, shape (n,)
        The true labels (a pandas Categorical carries the order of ordered labels).
    proba : array-like, shape (n, n_classes)
        The predicted class probabilities, columns in the order of ``classes``.
    classes : array-like, shape (n_classes,)
        The labels of ``proba``'s columns (an estimator's ``classes_``).

    Returns
    -------
    dict of str to float
        ``"accuracy"`` (of the most probable class; a row whose k most probable classes tie
        scores 1/k if its label is among them), ``"log loss"`` (the mean of
        :func:`row_log_loss`) and ``"class MSE"`` (of the first most probable class).

    Raises
    ------
    ValueError
        If ``proba`` is not of shape (n, n_classes) or a row is not a probability vector
        (finite entries in [0, 1] summing to 1 within 1e-6), or a label is not a class.
    """
    order = getattr(getattr(y_true, "cat", None), "categories", None)
    y_true = np.asarray(y_true)
    classes = np.asarray(classes)
    proba, at = _check_proba(y_true, proba, classes)
    pred = classes[proba.argmax(1)]
    # Ties within rounding (equal vote shares summed in another order) count, as in calibration
    tied = proba >= proba.max(1, keepdims=True) * (1 - 1e-12)
    hits = tied[np.arange(len(proba)), at] / tied.sum(1)
    out = {"accuracy": float(hits.mean()),
           "log loss": float(row_log_loss(y_true, proba, classes).mean())}
    if np.issubdtype(classes.dtype, np.number):
        out["class MSE"] = float(((pred - y_true) ** 2).mean())
    elif order is not None:  # ordered categorical labels: the MSE of their level indices
        rank = {c: k for k, c in enumerate(order)}
        ranks = np.array([rank[v] for v in pred]) - np.array([rank[v] for v in y_true])
        out["class MSE"] = float((ranks ** 2).mean())
    else:  # unordered labels: their positions in ``classes``
        out["class MSE"] = float(((proba.argmax(1) - at) ** 2).mean())
    return out


def _check_proba(y_true, proba, classes) -> tuple[np.ndarray, np.ndarray]:
    """``proba`` as float64 (a probability vector per label, a column per class) and each
    label's column in ``classes``; a ValueError naming the first row that is not."""
    y_true, classes = np.asarray(y_true), np.asarray(classes)
    proba = np.asarray(proba, dtype=float)
    if proba.shape != (len(y_true), len(classes)):
        raise ValueError(f"proba has shape {proba.shape}; expected ({len(y_true)}, "
                         f"{len(classes)}): a row per label and a column per class")
    bad = ~np.isfinite(proba).all(1) | (proba < 0).any(1) | (proba > 1 + 1e-6).any(1)
    # (float32 probabilities sum to 1 within a few 1e-7)
    bad |= np.abs(proba.sum(1) - 1) > 1e-6
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise ValueError(f"proba's row {r} is not a probability vector: {proba[r].tolist()} "
                         "(expected finite entries in [0, 1] summing to 1; "
                         f"{int(bad.sum())} such row(s))")
    idx = {c: k for k, c in enumerate(classes)}  # classes need not be sorted: ordered labels
    at = [idx.get(v, -1) for v in y_true]
    if -1 in at:
        r = at.index(-1)
        raise ValueError(f"y_true has the label {y_true.tolist()[r]!r} (row {r}) that is not "
                         f"among the classes {classes.tolist()[:20]}")
    return proba, np.array(at, dtype=int)


def row_log_loss(y_true: npt.ArrayLike, proba: npt.ArrayLike,
                 classes: npt.ArrayLike) -> np.ndarray:
    """−log p(y_i) of every row (probabilities clipped at 1e-15, as scikit-learn's log_loss).

    Parameters
    ----------
    y_true : array-like, shape (n,)
        The true labels, each one of ``classes``.
    proba : array-like, shape (n, n_classes)
        The predicted class probabilities, columns in the order of ``classes``.
    classes : array-like, shape (n_classes,)
        The labels of ``proba``'s columns.

    Returns
    -------
    numpy.ndarray, shape (n,)
        Each row's negative log-probability of its label.

    Raises
    ------
    ValueError
        As :func:`class_metrics`.
    """
    proba, at = _check_proba(y_true, proba, classes)
    return -np.log(np.clip(proba[np.arange(len(proba)), at], 1e-15, 1))


def reference_peers(train: pd.DataFrame, test: pd.DataFrame, seed: int,
                    names: Iterable[str] = ("LR", "RF", "GB", "MLP"), target: str = "y",
                    grids: dict | None = None, per_row: bool = False) -> dict[str, dict]:
    """Fit the reference peers on ``train`` and score them on ``test`` (and on ``train``):
    per peer the metrics of :func:`class_metrics` with ``train`` prefixes, the CV-selected
    parameters and the wall time.

    Parameters
    ----------
    train : pandas.DataFrame
        The training rows: the features (all one-hot encoded, see :func:`one_hot`), the target.
    test : pandas.DataFrame
        The test rows, with the same columns.
    seed : int
        Seeds every estimator and CV split.
    names : iterable of str, default ("LR", "RF", "GB", "MLP")
        The peers to fit (see :func:`reference_estimator`).
    target : str, default "y"
        The label column.
    grids : dict, optional
        Peer name → a parameter grid replacing the reference's.
    per_row : bool, default False
        Also return each test row's ``"correct"`` (0/1) and ``"row_log_loss"`` (lists), for
        paired comparisons.

    Returns
    -------
    dict of str to dict
        Peer name → its test metrics, the same prefixed ``"train "`` on the training rows,
        ``"best_params"`` (not for LR), ``"seconds"``, and with ``per_row`` the per-row lists.
    """
    features = [c for c in train if c != target]
    xtr, xte = one_hot(train, test, features)
    ytr, yte = train[target].to_numpy(), test[target].to_numpy()
    out = {}
    for name in names:
        t0 = time.perf_counter()
        model = reference_estimator(name, seed, (grids or {}).get(name)).fit(xtr, ytr)
        proba, correct = model.predict_proba(xte), model.predict(xte) == yte
        res: dict[str, Any] = class_metrics(test[target], proba, model.classes_)
        # The reference scores predict(), which is the argmax of predict_proba here (a tie
        # of k classes scores 1/k in the accuracy, not the first class's hit).
        assert (model.classes_[proba.argmax(1)] == model.predict(xte)).all()
        if per_row:
            res["correct"] = correct.astype(int).tolist()
            res["row_log_loss"] = row_log_loss(yte, proba, model.classes_).tolist()
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
    not be learned). Without such a class: exactly ``train_test_split(..., stratify=y)``.

    Parameters
    ----------
    y : numpy.ndarray, shape (n,)
        The labels.
    size : float
        The validation fraction, in (0, 1).
    seed : int
        The split's ``random_state``.

    Returns
    -------
    train : numpy.ndarray
        The training rows' indices.
    validation : numpy.ndarray
        The validation rows' indices.
    """
    idx = np.arange(len(y))
    classes, counts = np.unique(y, return_counts=True)
    single = np.isin(y, classes[counts < 2])
    tr, va = train_test_split(idx[~single], test_size=size, random_state=seed, stratify=y[~single])
    return (np.concatenate([tr, idx[single]]) if single.any() else tr), va


def as_table(X: pd.DataFrame | npt.ArrayLike) -> pd.DataFrame:
    """A copy of the table ``X`` as a DataFrame.

    Parameters
    ----------
    X : pandas.DataFrame or array-like of shape (n, d)
        The table.

    Returns
    -------
    pandas.DataFrame
        A copy of a DataFrame, or an array's columns named ``"0"``, ``"1"``, ….
    """
    return X.copy() if isinstance(X, pd.DataFrame) else pd.DataFrame(np.asarray(X)).rename(
        columns=str)


def numeric_columns(X: pd.DataFrame) -> list[bool]:
    """Which columns are numeric: the floating-point ones (as in efa.tabular).

    Parameters
    ----------
    X : pandas.DataFrame
        The table.

    Returns
    -------
    list of bool
        One flag per column, True for a floating-point dtype.
    """
    return [X[c].dtype.kind == "f" for c in X]


def numeric_lr(seed: int = 0) -> Pipeline:
    """Multinomial logistic regression on standardised numeric features with its L2 strength
    picked by 5-fold stratified CV on log loss over 1e-4..1e4 (9 values), fitted to convergence
    (lbfgs, ``max_iter=10000``) — the convex peer for tables whose columns are numbers.

    Parameters
    ----------
    seed : int, default 0
        The CV's shuffle.

    Returns
    -------
    sklearn.pipeline.Pipeline
        An unfitted ``StandardScaler`` → ``LogisticRegressionCV`` pipeline.
    """
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
    # and names that moved out answer here for one release (efa.deprecation.MOVED_NAMES)
    return (_analytic_ordered_model() if name == "AnalyticOrderedModel"
            else moved_out(__name__)(name))


class OrderedLogit(ClassifierMixin, BaseEstimator):
    """The proportional-odds model (cumulative logit), p(y ≤ k | x) = σ(θ_k − wᵀx), by
    statsmodels' ``OrderedModel`` fitted by maximum likelihood to convergence (BFGS; the flag
    is kept in ``converged_``): the plain convex peer for an ordered response. Classes are
    ordered as ``y``'s categories when it is a pandas Categorical (e.g. unacc < acc < good <
    vgood), else as sorted labels; ``classes_`` holds them in that order. Float columns are
    standardised on the training rows, the other columns one-hot with the first training
    level dropped (a level unseen in fit gets zeros, i.e. the first level's effect).

    Needs statsmodels (the ``experiments`` extra).

    Parameters
    ----------
    max_iter : int, default 10000
        The most BFGS iterations.
    """

    def __init__(self, max_iter: int = 10_000):
        self.max_iter = max_iter

    def _design(self, X) -> np.ndarray:
        X = as_table(X)
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
        """Fit the proportional-odds model to the table ``X`` and ordered labels ``y``.

        Parameters
        ----------
        X : pandas.DataFrame or array-like of shape (n, d)
            The table (float columns numeric, the others categorical).
        y : array-like, shape (n,)
            The ordered labels (a pandas Categorical gives their order, else they are
            sorted).

        Returns
        -------
        OrderedLogit
            ``self``, fitted: ``classes_``, ``result_`` (statsmodels' fit) and
            ``converged_``.
        """
        import warnings

        X = as_table(X)
        self.numeric_ = numeric_columns(X)
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
        """Class probabilities of each row of ``X``.

        Parameters
        ----------
        X : pandas.DataFrame or array-like of shape (n, d)
            A table with the training columns.

        Returns
        -------
        numpy.ndarray, shape (n, n_classes)
            The probabilities, columns in the order of ``classes_``.
        """
        return np.asarray(self.model_.predict(self.result_.params, exog=self._design(X)))

    def predict(self, X: pd.DataFrame | npt.ArrayLike) -> np.ndarray:
        """The most probable class of each row of ``X``.

        Parameters
        ----------
        X : pandas.DataFrame or array-like of shape (n, d)
            A table with the training columns.

        Returns
        -------
        numpy.ndarray, shape (n,)
            The labels, from ``classes_``.
        """
        return self.classes_[self.predict_proba(X).argmax(1)]
