"""The estimator room: :class:`AttentionTableClassifier`, the scikit-learn facade (parameters,
validation, fit, predictions, imputation, gates and experts); the fitting room
(:mod:`efa.tabular.fitting`) and the prediction room (:mod:`efa.tabular.prediction`) do the
work."""

from __future__ import annotations

import numbers
from collections.abc import Hashable, Sequence
from typing import Self

import numpy as np
import numpy.typing as npt
import pandas as pd
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_random_state

from efa.tabular.checks import validation_rows
from efa.tabular.encoding import sequences
from efa.tabular.fitting import (
    check_rules,
    fit_network,
    learn_classes,
    learn_layout,
    numeric_range,
    response_codes,
)
from efa.tabular.prediction import (
    attention_gates,
    check_table,
    column_proba,
    fill_missing,
    moe_experts,
    response_proba,
)

BACKBONES = ("paper", "linear")
RESPONSES = ("categorical", "ordinal")
#: ``cell_dropout="auto"``'s rate where predictions may meet a [MASK]: chosen on the simulation
#: generator's development seeds 1-4 (an unseen-level shift and the generator's own split;
#: 0.1 and 0.2 tried), docs/moe.md, session 25.
AUTO_CELL_DROPOUT = 0.2
#: ``cell_dropout="auto"``'s rate for the second fit of ``handle_unknown="unk"``, which predicts
#: the rows holding a level fit never saw: chosen on development data (an analogue of car's
#: shift, the simulation's unseen-level shift and own split; 0.2, 0.3, 0.5, 0.7 tried),
#: docs/moe.md, sessions 27-28.
AUTO_UNSEEN_CELL_DROPOUT = 0.5


class AttentionTableClassifier(ClassifierMixin, BaseEstimator):
    """Classifier of a table's response from its other columns by bidirectional attention.

    Parameters
    ----------
    backbone : {"paper", "linear"}
        ``"paper"``: a post-LN transformer block with a ReLU feed-forward layer;
        ``"linear"``: residual attention + W' residual, no LayerNorm, no biases (the CBOW
        mixture of experts of :mod:`efa.moe`).
    embedding_dim, num_heads, ffn_hidden, num_layers : int
        The embeddings' width, the attention heads, the feed-forward layer's width and the
        number of blocks (the paper's, and the defaults: 20, 5, 5, 1).
    dropout : float, default 0.1
        Dropout of the ``"paper"`` block, in [0, 1) (none in the ``"linear"`` one).
    numeric : {"quantile", "gaussian"}
        ``"quantile"``: float columns cut into ``n_bins`` quantile bins on the training rows;
        ``"gaussian"``: a heteroscedastic Gaussian value field per float column.
    clip_numeric : bool or "auto", default "auto"
        With ``numeric="gaussian"``, True: the attention network reads each float column
        clipped to the range it had in fit (``numeric_range_``), while the GLM term
        (``additive``) and the column's own likelihood read the value as given. A value
        beyond the training range then looks to the network like the nearest one it was
        trained on, and only the GLM extrapolates, linearly: attention over a linearly
        encoded value has no evidence beyond its range and can extrapolate wildly. False:
        the network reads values as given (efa before session 24). ``"auto"``: True with a
        GLM term, else False (without one, clipping leaves nothing to extrapolate). Measured
        in docs/guide/tables.md.
    n_bins : int, default 10
        The most bins per float column with ``numeric="quantile"`` (at least 2).
    categorical : sequence of hashable, optional
        Column names (or indices) to treat as categorical; default: every column that is not
        floating point (integers, strings, booleans, pandas categoricals).
    response : {"auto", "categorical", "ordinal"}, default "auto"
        ``"categorical"``: a softmax over the classes, the paper's model; ``"ordinal"``:
        ordered classes, in the order of ``classes_`` (a pandas Categorical ``y``'s
        categories, e.g. unacc < acc < good < vgood, else sorted labels);
        :class:`efa.core.families.Ordinal`, p(y = k) ∝ exp(η s_k + b_k) with one natural
        parameter η read out at the response and learned increasing scores s; for a binned
        continuous response, or any ordered label. ``"auto"``: ``"ordinal"`` where ``y`` is
        an ordered pandas Categorical (the order declared; not with ``additive="ordinal"``),
        else ``"categorical"`` (numbers as labels are not taken to be ordered); the choice is
        ``response_``. Measured in docs/guide/tables.md.
    additive : bool or "ordinal", default False
        Add a GLM term to the response's natural parameter: an effect per feature level and a
        slope per numeric column, summed over the row's observed cells (learned with the
        network, from 0). The model class then contains the logistic regression on the
        one-hot / numeric features (categorical response) or the adjacent-categories ordinal
        logit (ordinal response): with the attention's read-out at 0 it is exactly that GLM
        (tests/test_tabular.py). ``"ordinal"`` (categorical response only): one GLM term g
        enters the class logits as g s_k + b_k with learned increasing scores s, so the GLM
        part is the adjacent-categories ordinal logit while the attention adds free logits per
        class (the classes ordered as for ``response="ordinal"``).
    init : {None, "glm"}
        None: every parameter from its initialisation, the GLM term from 0; ``"glm"`` (needs
        ``additive``): fit the GLM part first, the network's read-out held at 0 (its biases
        free), then every parameter from there (``glm_history_`` holds the first stage).
    glm_solver : {"adam", "lbfgs"}, default "adam"
        How ``init="glm"`` fits its first stage (ignored otherwise). ``"adam"``: trained and
        stopped early like the second stage (settings below). ``"lbfgs"``: the GLM's
        L2-penalised maximum-likelihood fit (``glm_C``), by full-batch L-BFGS in float64 to
        convergence (largest gradient entry ≤ 1e-7, at most 1,000 iterations, else a
        ``ConvergenceWarning``), without dropout and independent of batch order. With a
        penalty the ordinal scores are held at s_k = k in the stage (the ridge
        adjacent-categories logit, a convex fit) and learned in the second; with
        ``glm_C=math.inf`` they are learned in both. ``glm_history_.epochs_run`` (in
        ``n_iter_``) then counts its iterations, over every C tried.
    glm_C : float or "auto", default "auto"
        With ``init="glm"`` and ``glm_solver="lbfgs"`` (ignored otherwise): the inverse
        strength of the stage's penalty, as scikit-learn's ``LogisticRegression(C=...)``
        (½‖effects, slopes‖² / C against the response's summed log loss; ``math.inf``:
        unpenalised, which does not exist where the GLM separates the classes). ``"auto"``: C
        from 1e-3 to 1e3 (powers of 10) from the strongest, warm-started, keeping the best
        response log loss on the validation split (needs ``early_stopping=True``); the choice
        is ``glm_C_``. Measured in docs/guide/tables.md.
    handle_unknown : {"error", "unk"}
        ``"error"``: a level unseen in fit is an error naming column and value; ``"unk"``: it
        is treated as unobserved (the [MASK] embedding stands for [UNK]).
    missing : {"error", "mask"}
        ``"error"``: NaN (None, NA) in X is an error naming the column; ``"mask"``: a missing
        cell is hidden from the model and not predicted. inf, or a numeric column's cell that
        is not a number, is an error either way. Missing labels in ``y`` are always allowed:
        those rows train the features' likelihood only.
    lr, batch_size, max_epochs, patience, weight_decay : float, int, int, int or "auto", float
        Adam training: the learning rate, rows per step, the most epochs, the epochs without
        improvement before stopping early on an internal validation split (best weights
        restored; ``"auto"``: 10, or 500 steps' worth while the validation loss is within
        0.02 nats of the first epoch's, ``TrainConfig.plateau_steps``), and the weight decay
        (defaults 1e-2, 128, 200, "auto", 0.0).
    validation_fraction : float, default 0.15
        The split's fraction of the rows, in (0, 1), stratified by label; too few rows leave
        it empty: a warning, or an error with ``calibration="temperature"`` or ``"soften"``.
    shared_vocabulary : bool, default False
        One embedding table and one read-out for every categorical column (the paper's model,
        whose columns are all bins 0..C−1 of one scale); needs every categorical column's
        levels among the response's classes (each column then takes the classes as its
        levels).
    cell_dropout : float or "auto", default "auto"
        In training, hide each observed cell with this probability as well (from the context
        and from the likelihood), so that rows with [MASK]s (missing cells, unseen levels with
        ``handle_unknown="unk"``) are read as in training. ``"auto"``: 0.2 where predictions
        may meet a [MASK] (``handle_unknown="unk"`` or ``missing="mask"``), else 0.0 (the
        choice is ``cell_dropout_``); with ``handle_unknown="unk"`` also a second fit at 0.5
        (``unseen_model_``, same seed and split), whose response probabilities are those of
        every row holding a level that fit never saw: interactions learned on the seen levels
        extrapolate overconfidently to an unseen one, and the larger rate tempers them, while
        it would cost accuracy on rows whose levels were all seen (docs/guide/tables.md).
        This doubles the fit's time; a number gives one fit at that rate. Without cell
        dropout a [MASK] in a row's context is an input the network never saw in training;
        measured in docs/guide/tables.md.
    calibration : {"auto", "soften", "temperature", None}, default "auto"
        ``"temperature"``: after training, one temperature T divides the response's logits,
        chosen on the validation split by its log loss (``temperature_``; Guo et al., 2017),
        so probabilities are neither over- nor under-confident there while every row's most
        probable class stays the same; needs ``early_stopping=True``. ``"soften"``: the same
        with T ≥ 1: never sharper than the model, since a split drawn from the training rows
        cannot vouch for more confidence on shifted rows. ``"auto"``: ``"soften"`` where there
        is a validation split, else None. None: T = 1. Measured in docs/guide/tables.md.
    early_stopping : bool, default True
        False trains on every row for ``max_epochs`` and keeps the last weights (the paper's
        protocol; scikit-learn's MLP default), True holds out the split above.
    stop_on : {"auto", "joint", "response"}
        What the validation split scores for early stopping: ``"joint"`` (every cell's
        pseudo-likelihood, as trained), ``"response"`` (the response's log loss) or ``"auto"``
        (``"response"`` with ``additive``, else ``"joint"``; the choice is ``stop_on_``). A
        stage keeps its start unless an epoch beats it on this score (:func:`efa.fit`): with
        ``init="glm"`` the model never ends worse on validation than its own GLM.
    random_state : int, RandomState or None
        Seeds initialisation, split and shuffling.
    """

    def __init__(self, backbone: str = "paper", embedding_dim: int = 20, num_heads: int = 5,
                 ffn_hidden: int = 5, dropout: float = 0.1, num_layers: int = 1,
                 numeric: str = "quantile", clip_numeric: bool | str = "auto",
                 n_bins: int = 10,
                 categorical: Sequence[Hashable] | None = None,
                 response: str = "auto", additive: bool | str = False,
                 init: str | None = None, glm_solver: str = "adam",
                 glm_C: float | str = "auto",
                 handle_unknown: str = "error",
                 missing: str = "error", lr: float = 1e-2, batch_size: int = 128,
                 max_epochs: int = 200, patience: int | str = "auto", weight_decay: float = 0.0,
                 validation_fraction: float = 0.15,
                 shared_vocabulary: bool = False, cell_dropout: float | str = "auto",
                 calibration: str | None = "auto", early_stopping: bool = True,
                 stop_on: str = "auto",
                 random_state: int | np.random.RandomState | None = None):
        self.backbone = backbone
        self.embedding_dim = embedding_dim
        self.num_heads = num_heads
        self.ffn_hidden = ffn_hidden
        self.dropout = dropout
        self.num_layers = num_layers
        self.numeric = numeric
        self.clip_numeric = clip_numeric
        self.n_bins = n_bins
        self.categorical = categorical
        self.response = response
        self.additive = additive
        self.init = init
        self.glm_solver = glm_solver
        self.glm_C = glm_C
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
        self.calibration = calibration
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
        "clip_numeric": ["boolean", StrOptions({"auto"})],
        "n_bins": [Interval(numbers.Integral, 2, None, closed="left")],
        "categorical": ["array-like", None],
        "response": [StrOptions({*RESPONSES, "auto"})],
        "additive": ["boolean", StrOptions({"ordinal"})],
        "init": [StrOptions({"glm"}), None],
        "glm_solver": [StrOptions({"adam", "lbfgs"})],
        "glm_C": [Interval(numbers.Real, 0, None, closed="right"), StrOptions({"auto"})],
        "handle_unknown": [StrOptions({"error", "unk"})],
        "missing": [StrOptions({"error", "mask"})],
        "lr": [Interval(numbers.Real, 0, None, closed="neither")],
        "batch_size": [Interval(numbers.Integral, 1, None, closed="left")],
        "max_epochs": [Interval(numbers.Integral, 1, None, closed="left")],
        "patience": [Interval(numbers.Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "weight_decay": [Interval(numbers.Real, 0, None, closed="left")],
        "validation_fraction": [Interval(numbers.Real, 0, 1, closed="neither")],
        "shared_vocabulary": ["boolean"],
        "cell_dropout": [Interval(numbers.Real, 0, 1, closed="left"), StrOptions({"auto"})],
        "calibration": [StrOptions({"auto", "soften", "temperature"}), None],
        "early_stopping": ["boolean"],
        "stop_on": [StrOptions({"joint", "response", "auto"})],
        "random_state": ["random_state"],
    }

    def _check_params(self):
        self._validate_params()
        check_rules(self)  # the rules that join two parameters

    # ------------------------------------------------------------------ fit
    # (the work is done in the fitting room, efa.tabular.fitting)
    def fit(self, X: pd.DataFrame | npt.ArrayLike, y: npt.ArrayLike) -> Self:
        """Fit on a DataFrame or 2-D array ``X`` and labels ``y`` (NaN/None: unlabelled rows).

        Parameters
        ----------
        X : pandas.DataFrame or array-like of shape (n, n_features)
            The features; column kinds as ``categorical`` says.
        y : array-like, shape (n,)
            The labels; NaN/None marks an unlabelled row, which trains the features'
            likelihood only.

        Returns
        -------
        AttentionTableClassifier
            ``self``, fitted: ``classes_``, ``response_``, ``model_`` (a
            :class:`efa.tabular.TableEFA`), ``history_``, ``stop_on_``, ``cell_dropout_``,
            ``patience_``, ``temperature_``, ``n_iter_``, the columns' learned state; with
            ``init="glm"`` ``glm_history_`` and ``glm_C_`` (None with ``glm_solver="adam"``);
            ``numeric_range_``, shape (2, n_positions): each position's lowest and highest
            float value in fit, in the model's standardised units, which the network's inputs
            are clipped to (None without float columns or without clipping); ``unseen_model_``,
            ``unseen_history_`` and ``unseen_temperature_``: the second fit of
            ``cell_dropout="auto"`` with ``handle_unknown="unk"`` (None, None and 1.0
            otherwise; ``n_iter_`` counts the first fit's epochs only).

        Raises
        ------
        ValueError
            If the parameters are invalid or contradict each other, or ``X`` / ``y`` cannot be
            read (no rows or columns, fewer than 2 classes, a missing cell with
            ``missing="error"``, ...).
        """
        self._check_params()
        X, y = learn_classes(self, X, y)
        learn_layout(self, X)
        y_codes = response_codes(self, y, len(y))
        assert y_codes is not None  # fit has labels (learn_classes refused None)

        rng = check_random_state(self.random_state)
        seed = int(rng.randint(2**31 - 1))
        data = sequences(self, X, y_codes)
        clip = bool(self.additive) if self.clip_numeric == "auto" else self.clip_numeric
        masks = self.handle_unknown == "unk" or self.missing == "mask"
        self.cell_dropout_ = ((AUTO_CELL_DROPOUT if masks else 0.0)
                              if self.cell_dropout == "auto" else float(self.cell_dropout))
        self.numeric_range_ = numeric_range(data) if clip else None
        train_idx, val_idx = validation_rows(self, y_codes, seed)
        self.patience_ = 10 if self.patience == "auto" else int(self.patience)
        self.stop_on_ = (("response" if self.additive else "joint") if self.stop_on == "auto"
                         else self.stop_on)
        split = (train_idx, val_idx)
        net = fit_network(self, X, data, y_codes, split, seed, self.cell_dropout_)
        self.model_, self.history_, self.temperature_ = net.model, net.history, net.temperature
        if self.init == "glm":
            self.glm_history_, self.glm_C_ = net.glm_history, net.glm_C
        self.n_iter_ = self.history_.epochs_run + (net.glm_history.epochs_run
                                                   if net.glm_history is not None else 0)
        self.unseen_model_, self.unseen_history_, self.unseen_temperature_ = None, None, 1.0
        if self.cell_dropout == "auto" and self.handle_unknown == "unk":
            unseen = fit_network(self, X, data, y_codes, split, seed, AUTO_UNSEEN_CELL_DROPOUT)
            self.unseen_model_, self.unseen_history_ = unseen.model, unseen.history
            self.unseen_temperature_ = unseen.temperature
        return self

    # ------------------------------------------------------------------ predict
    def predict_proba(self, X: pd.DataFrame | npt.ArrayLike) -> np.ndarray:
        """p(y = class | the row's features), the response masked, at the fitted temperature
        (``temperature_``, see ``calibration``); a row holding a level that fit never saw is
        read from ``unseen_model_`` where there is one (see ``cell_dropout``).

        Parameters
        ----------
        X : pandas.DataFrame or array-like of shape (n, n_features)
            The table, with the columns seen in fit.

        Returns
        -------
        numpy.ndarray, shape (n, n_classes)
            The probabilities, in the order of ``classes_``.
        """
        return response_proba(self, check_table(self, X))

    def predict(self, X: pd.DataFrame | npt.ArrayLike) -> np.ndarray:
        """The most probable class of each row of ``X``.

        Parameters
        ----------
        X : pandas.DataFrame or array-like of shape (n, n_features)
            The table, with the columns seen in fit.

        Returns
        -------
        numpy.ndarray, shape (n,)
            The labels, from ``classes_``.
        """
        proba = self.predict_proba(X)  # first: it refuses an unfitted estimator
        return self.classes_[proba.argmax(1)]

    def predict_column_proba(self, X: pd.DataFrame | npt.ArrayLike, column: Hashable | None,
                             y: npt.ArrayLike | None = None) -> pd.DataFrame:
        """p(column = level | every other cell of the row, and ``y`` if given): any categorical
        (or binned) column of X (from ``model_``), or the response when ``column`` is None
        (as :meth:`predict_proba` gives it).

        Parameters
        ----------
        X : pandas.DataFrame or array-like of shape (n, n_features)
            The table, with the columns seen in fit.
        column : hashable or None
            The column to predict (its name), or None for the response.
        y : array-like of shape (n,), optional
            The rows' labels, as context (NaN/None: not given).

        Returns
        -------
        pandas.DataFrame
            One column per level (a binned column's bin indices; the classes for the
            response), indexed as ``X``.

        Raises
        ------
        ValueError
            If ``column`` is a Gaussian value field.
        KeyError
            If ``X`` has no column ``column``.
        """
        X = check_table(self, X)
        if column is None:
            return pd.DataFrame(self.predict_proba(X), columns=self.classes_, index=X.index)
        pos = self._position(column)
        if not self.is_cat_[pos]:
            raise ValueError(f"column {column!r} is a Gaussian value field: use impute() for its "
                             "conditional mean")
        data = sequences(self, X, response_codes(self, y, len(X)))
        name = self.columns_[pos]
        levels = self.levels_[name]
        return pd.DataFrame(column_proba(self, data, pos, name), columns=levels, index=X.index)

    def impute(self, X: pd.DataFrame | npt.ArrayLike,
               y: npt.ArrayLike | None = None) -> pd.DataFrame:
        """X with each missing cell (NaN/None; needs ``missing='mask'``) replaced, given the
        row's observed cells, by its most probable level (categorical), the training median of
        its most probable bin (a binned number, in the column's units) or its conditional mean
        (Gaussian). Columns keep their dtypes where the imputed values fit them.

        Parameters
        ----------
        X : pandas.DataFrame or array-like of shape (n, n_features)
            The table, with the columns seen in fit.
        y : array-like of shape (n,), optional
            The rows' labels, as context (NaN/None: not given).

        Returns
        -------
        pandas.DataFrame
            A copy of ``X`` with its missing cells filled.
        """
        X = check_table(self, X)
        return fill_missing(self, X, sequences(self, X, response_codes(self, y, len(X))))

    def gates(self, X: pd.DataFrame | npt.ArrayLike, column: Hashable | None = None,
              layer: int = -1) -> np.ndarray:
        """Attention weights [n, heads, columns + 1] of the masked ``column`` (default: the
        response) over every column, its own [MASK] slot included. With the ``linear``
        backbone these are exactly the mixture-of-experts gates π of efa.moe. Read from
        ``model_`` for every row (not from ``unseen_model_``; see ``cell_dropout``).

        Parameters
        ----------
        X : pandas.DataFrame or array-like of shape (n, n_features)
            The table, with the columns seen in fit.
        column : hashable, optional
            The masked column (default: the response).
        layer : int, default -1
            The layer whose attention is read.

        Returns
        -------
        numpy.ndarray, shape (n, heads, columns + 1)
            The weights of every row and head, the response's slot last.

        Raises
        ------
        KeyError
            If ``X`` has no column ``column``.
        """
        return attention_gates(self, check_table(self, X), column, layer)

    def experts(self, X: pd.DataFrame | npt.ArrayLike,
                column: Hashable | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The mixture of experts of the masked ``column`` (default: the response), ``linear``
        backbone: gates π [n, heads, columns + 1], expert logits [n, heads, columns + 1,
        levels] over the column's levels; Σ π·f is the column's logits (efa.moe, Theorem 2).
        Read from ``model_`` for every row (not from ``unseen_model_``).

        Parameters
        ----------
        X : pandas.DataFrame or array-like of shape (n, n_features)
            The table, with the columns seen in fit.
        column : hashable, optional
            The masked column (default: the response); it must be categorical.

        Returns
        -------
        gates : numpy.ndarray, shape (n, heads, columns + 1)
            π of every row and head.
        experts : numpy.ndarray, shape (n, heads, columns + 1, levels)
            Each expert's logits over the column's levels.

        Raises
        ------
        ValueError
            Unless ``backbone="linear"``, ``num_layers=1`` and ``response="categorical"``, or
            if ``column`` is a Gaussian value field.
        """
        return moe_experts(self, check_table(self, X), column)

    def _position(self, column) -> int:
        if column in self._index:
            return self._index[column]
        raise KeyError(f"no column {column!r} (columns: {self.feature_columns_})")

