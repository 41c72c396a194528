"""CatBoost, TabM and FT-Transformer on a table (the tabular estimator's current peers), as
scikit-learn classifiers, each tuned on a validation split of the training rows only
(:func:`efa.baselines.tabular.validation_split`): CatBoost's number of trees and the deep peers'
epochs by early stopping on the validation log loss.

Column kinds follow :mod:`efa.baselines.tabular`: floating-point columns are numeric
(standardised on the training rows for the deep peers), every other column categorical.
At prediction a DataFrame must have fit's column labels in fit's order (an array is read by
position), and a categorical cell matches the level of the same value whatever its numeric
dtype (1.0 is the int level 1). Each needs a package of the ``experiments`` extra (catboost,
tabm, rtdl-revisiting-models).
"""

from __future__ import annotations

import copy
from numbers import Integral
from typing import Any, Self

import numpy as np
import numpy.typing as npt
import pandas as pd
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from efa.baselines.tabular import as_table, numeric_columns, validation_split


def _level_keys(column: pd.Series, seen: Any) -> pd.Series:
    """A categorical column's cells as the text its levels were learned under (fit's dtype
    ``seen``): as themselves where the dtype is fit's (the path of every committed run), else
    numbers by value, so a float 1.0 finds the int level '1' rather than 'unknown' ('1.0')."""
    kinds = [t.kind if isinstance(t, np.dtype) else "" for t in (column.dtype, seen)]
    if not all(k and k in "biuf" for k in kinds) or column.dtype == seen:
        return column.astype(str)
    values = column.to_numpy()
    with np.errstate(invalid="ignore", over="ignore"):  # what cannot be cast stays unmatched
        cast = np.where(np.isfinite(values.astype(float)), values, 0).astype(seen)
        same = cast == values  # 1.5 or NaN is no level of an int column: it stays 'unknown'
    return pd.Series(np.where(same, pd.Series(cast).astype(str), column.astype(str)),
                     index=column.index)


class _TablePeer(ClassifierMixin, BaseEstimator):
    """What the peers share: the columns learned in fit, a prediction table checked against
    them (a DataFrame's labels as :class:`efa.tabular.AttentionTableClassifier` checks them: a
    swapped or renamed column read by position would silently stand for another), and
    ``predict``."""

    def _learn_columns(self, X):
        table = as_table(X)
        self.columns_ = list(table.columns)
        self.named_ = isinstance(X, pd.DataFrame)
        self.numeric_ = numeric_columns(table)
        self.dtypes_ = list(table.dtypes)
        return table

    def _checked(self, X):
        from efa.tabular.prediction import label_error  # lazily: it imports all of efa.tabular

        check_is_fitted(self, "columns_")
        table = as_table(X)
        if isinstance(X, pd.DataFrame) and self.named_ and list(X.columns) != self.columns_:
            raise label_error(list(X.columns), self.columns_)
        if table.shape[1] != len(self.columns_):
            raise ValueError(f"X has {table.shape[1]} features, but {type(self).__name__} is "
                             f"expecting {len(self.columns_)} features as input")
        table.columns = self.columns_  # an array's (or an unnamed fit's): read by position
        return table

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

        Raises
        ------
        ValueError
            As :meth:`predict_proba`.
        """
        return self.classes_[self.predict_proba(X).argmax(1)]


class CatBoostTable(_TablePeer):
    """CatBoost on a table (native categorical handling of the non-float columns: ordered target
    statistics; float columns numeric), clonable by sklearn: ``cat_features`` is computed in
    ``fit`` from the column dtypes instead of being a constructor argument (``sklearn.clone`` of
    a ``CatBoostClassifier`` with ``cat_features`` set fails). The number of trees is picked
    by early stopping (50 rounds) on the multiclass log loss of a stratified ``validation``
    fraction of the training rows; the early-stopped model is kept (no refit, to halve the
    cost). A missing number (NaN) is CatBoost's own to read, in fit and at prediction: its
    default ``nan_mode`` 'Min' puts it below every value of its column (a missing categorical
    cell is the level 'nan'). Needs catboost (the ``experiments`` extra).

    Parameters
    ----------
    depth : int, default 6
        The trees' depth.
    learning_rate : float, default 0.1
        The boosting step.
    l2_leaf_reg : float, default 3.0
        The L2 penalty of the leaf values.
    max_iterations : int, default 500
        The most trees.
    max_ctr_complexity : int, optional
        The most categorical features combined (default: CatBoost's).
    validation : float, default 0.2
        The fraction of the training rows held out for early stopping.
    random_state : int, default 0
        Seeds CatBoost and the validation split.
    thread_count : int, default 1
        CatBoost's threads.
    """

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
        for c, num, seen in zip(list(X), self.numeric_, self.dtypes_, strict=True):
            X[c] = X[c].astype(float) if num else _level_keys(X[c], seen)
        return X

    def fit(self, X: pd.DataFrame | npt.ArrayLike, y: npt.ArrayLike) -> Self:
        """Fit CatBoost to the table ``X`` and labels ``y`` (text columns as categories).

        Parameters
        ----------
        X : pandas.DataFrame or array-like of shape (n, d)
            The table: float columns numeric, the others categorical (read as text).
        y : array-like, shape (n,)
            The labels.

        Returns
        -------
        CatBoostTable
            ``self``, fitted: ``classes_``, ``model_``, ``best_iteration_`` (the trees kept),
            ``validation_log_loss_`` and the columns seen (``columns_``, ``numeric_``).
        """
        from catboost import CatBoostClassifier

        X = self._prepare(self._learn_columns(X))
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
        """Class probabilities of each row of ``X``.

        Parameters
        ----------
        X : pandas.DataFrame or array-like of shape (n, d)
            A table with the training columns.

        Returns
        -------
        numpy.ndarray, shape (n, n_classes)
            The probabilities, columns in the order of ``classes_``.

        Raises
        ------
        ValueError
            If ``X`` is a DataFrame whose column labels or their order differ from fit's, or
            has another number of columns.
        """
        return self.model_.predict_proba(self._prepare(self._checked(X)))


class _TorchTable(_TablePeer):
    """Shared plumbing of the deep peers: ordinal-encode the categorical columns (levels seen in
    ``fit``; an unseen level at predict time maps to an extra 'unknown' index), standardise the
    numeric (float) ones, train with AdamW on mini-batches, early-stop on a stratified
    validation split of the training rows by its log loss, and keep the best weights. Inputs
    are pairs (numeric [N, n_num] float or None, categorical [N, n_cat] long or None). A missing
    or infinite number is refused, in fit and at prediction: the networks have no reading of
    it, and it would turn the loss or the probabilities into NaN."""

    def _encode_fit(self, X, y):
        if not isinstance(self.max_epochs, Integral) or self.max_epochs < 1:
            # no epoch means no validated weights to keep
            raise ValueError(f"max_epochs must be an integer of at least 1, got "
                             f"{self.max_epochs!r}")
        X = self._learn_columns(X)
        self.levels_ = [sorted(set(X[c].astype(str)))
                        for c, num in zip(X, self.numeric_, strict=True) if not num]
        num = self._numbers(X)
        self.mean_ = num.mean(0)
        self.scale_ = np.where(num.std(0) > 0, num.std(0), 1.0)
        self.classes_ = np.unique(np.asarray(y))
        return self._encode(X), np.searchsorted(self.classes_, np.asarray(y))

    def _numbers(self, X):
        num = X.loc[:, self.numeric_].to_numpy(dtype=float)
        if not np.isfinite(num).all():
            r, k = np.argwhere(~np.isfinite(num))[0]
            name = [c for c, n in zip(X, self.numeric_, strict=True) if n][k]
            raise ValueError(f"column {name!r} has {num[r, k]} in row {X.index[r]!r} (position "
                             f"{r}): {type(self).__name__} reads no missing or infinite number; "
                             "drop or impute it first")
        return num

    def _encode(self, X):
        import torch

        cols = []
        cats = [(c, seen) for c, num, seen in zip(X, self.numeric_, self.dtypes_, strict=True)
                if not num]
        for (c, seen), levels in zip(cats, self.levels_, strict=True):
            lookup = {v: k for k, v in enumerate(levels)}
            cols.append([lookup.get(v, len(levels)) for v in _level_keys(X[c], seen)])
        num = (self._numbers(X) - self.mean_) / self.scale_
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
        if best_state is None:  # every epoch's log loss was NaN or infinite: nothing to keep
            raise FloatingPointError(
                f"{type(self).__name__}: no epoch gave a finite validation log loss (the last "
                f"was {v}); the training diverged: try a smaller lr")
        net.load_state_dict(best_state)
        net.eval()
        self.validation_log_loss_ = best
        return net


class TabMTable(_TorchTable):
    """TabM (Gorishniy et al. 2025, package ``tabm``): an efficient ensemble of ``k`` MLPs
    sharing most weights, on one-hot categorical and standardised numeric inputs; the loss is
    the mean of the ``k`` members' cross-entropies and the prediction the mean of their
    probabilities. Needs tabm (the ``experiments`` extra).

    Parameters
    ----------
    k : int, default 16
        The ensemble's members.
    n_blocks : int, default 2
        The MLP's blocks.
    d_block : int, default 128
        The blocks' width.
    dropout : float, default 0.1
        Dropout in the blocks.
    lr : float, default 2e-3
        AdamW's learning rate.
    weight_decay : float, default 3e-4
        AdamW's weight decay.
    batch_size : int, default 128
        Rows per step.
    max_epochs : int, default 100
        The most passes over the training rows.
    patience : int, default 10
        Epochs without a better validation log loss before stopping.
    validation : float, default 0.2
        The fraction of the training rows held out for early stopping.
    random_state : int, default 0
        Seeds the initialisation, the batches and the validation split.
    """

    def __init__(self, k: int = 16, n_blocks: int = 2, d_block: int = 128, dropout: float = 0.1,
                 lr: float = 2e-3, weight_decay: float = 3e-4, batch_size: int = 128,
                 max_epochs: int = 100, patience: int = 10, validation: float = 0.2,
                 random_state: int = 0):
        self.k, self.n_blocks, self.d_block, self.dropout = k, n_blocks, d_block, dropout
        self.lr, self.weight_decay, self.batch_size = lr, weight_decay, batch_size
        self.max_epochs, self.patience = max_epochs, patience
        self.validation, self.random_state = validation, random_state

    def fit(self, X: pd.DataFrame | npt.ArrayLike, y: npt.ArrayLike) -> Self:
        """Fit TabM to the table ``X`` and labels ``y``.

        Parameters
        ----------
        X : pandas.DataFrame or array-like of shape (n, d)
            The table: float columns numeric, the others categorical.
        y : array-like, shape (n,)
            The labels.

        Returns
        -------
        TabMTable
            ``self``, fitted: ``classes_``, ``net_`` (the best weights) and
            ``validation_log_loss_``.

        Raises
        ------
        ValueError
            If ``max_epochs`` is not at least 1, or a numeric cell of ``X`` is NaN or infinite.
        FloatingPointError
            If no epoch gives a finite validation log loss (the training diverged).
        """
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
        """Class probabilities of each row of ``X``.

        Parameters
        ----------
        X : pandas.DataFrame or array-like of shape (n, d)
            A table with the training columns (a level unseen in fit reads as 'unknown').

        Returns
        -------
        numpy.ndarray, shape (n, n_classes)
            The probabilities, columns in the order of ``classes_``.

        Raises
        ------
        ValueError
            If ``X`` is a DataFrame whose column labels or their order differ from fit's, has
            another number of columns, or a numeric cell that is NaN or infinite.
        """
        import torch

        with torch.no_grad():
            num, cat = self._encode(self._checked(X))
            return torch.softmax(self.net_(x_num=num, x_cat=cat), -1).mean(1).numpy()


class FTTransformerTable(_TorchTable):
    """FT-Transformer (Gorishniy et al. 2021, package ``rtdl-revisiting-models``) with its
    default configuration scaled by ``n_blocks`` (d_block 96/128/192 for 1/2/3 blocks).
    Needs rtdl-revisiting-models (the
    ``experiments`` extra).

    Parameters
    ----------
    n_blocks : int, default 2
        The transformer's blocks, which set rtdl's default configuration.
    lr : float, default 1e-4
        AdamW's learning rate.
    weight_decay : float, default 1e-5
        AdamW's weight decay.
    batch_size : int, default 128
        Rows per step.
    max_epochs : int, default 100
        The most passes over the training rows.
    patience : int, default 10
        Epochs without a better validation log loss before stopping.
    validation : float, default 0.2
        The fraction of the training rows held out for early stopping.
    random_state : int, default 0
        Seeds the initialisation, the batches and the validation split.
    """

    def __init__(self, n_blocks: int = 2, lr: float = 1e-4, weight_decay: float = 1e-5,
                 batch_size: int = 128, max_epochs: int = 100, patience: int = 10,
                 validation: float = 0.2, random_state: int = 0):
        self.n_blocks, self.lr, self.weight_decay = n_blocks, lr, weight_decay
        self.batch_size, self.max_epochs, self.patience = batch_size, max_epochs, patience
        self.validation, self.random_state = validation, random_state

    def fit(self, X: pd.DataFrame | npt.ArrayLike, y: npt.ArrayLike) -> Self:
        """Fit the FT-Transformer to the table ``X`` and labels ``y``.

        Parameters
        ----------
        X : pandas.DataFrame or array-like of shape (n, d)
            The table: float columns numeric, the others categorical.
        y : array-like, shape (n,)
            The labels.

        Returns
        -------
        FTTransformerTable
            ``self``, fitted: ``classes_``, ``net_`` (the best weights) and
            ``validation_log_loss_``.

        Raises
        ------
        ValueError
            If ``max_epochs`` is not at least 1, or a numeric cell of ``X`` is NaN or infinite.
        FloatingPointError
            If no epoch gives a finite validation log loss (the training diverged).
        """
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
        """Class probabilities of each row of ``X``.

        Parameters
        ----------
        X : pandas.DataFrame or array-like of shape (n, d)
            A table with the training columns (a level unseen in fit reads as 'unknown').

        Returns
        -------
        numpy.ndarray, shape (n, n_classes)
            The probabilities, columns in the order of ``classes_``.

        Raises
        ------
        ValueError
            If ``X`` is a DataFrame whose column labels or their order differ from fit's, has
            another number of columns, or a numeric cell that is NaN or infinite.
        """
        import torch

        with torch.no_grad():
            return torch.softmax(self.net_(*self._encode(self._checked(X))), -1).numpy()
