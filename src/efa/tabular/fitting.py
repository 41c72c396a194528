"""The fitting room of the table estimator: the labels' classes and codes, the layout of the
internal table (the response's column, which positions are categorical, the categorical cells'
shared vocabulary), the :class:`~efa.tabular.model.TableEFA` built from that fitted state, one
fit of it (:func:`fit_network`: the first stage of ``init="glm"`` in
:mod:`efa.tabular.glm_stage`, training, the response's temperature). Like
:mod:`efa.tabular.encoding`, the functions read and write the estimator's fitted state, the
scikit-learn way."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pandas as pd
import torch
from scipy.optimize import minimize_scalar
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import validate_data

from efa.core.families import HeteroscedasticGaussian, Ordinal
from efa.core.fields import Category, Field, Value
from efa.core.model import EFAConfig
from efa.deprecation import moved_out
from efa.tabular.checks import typed_labels
from efa.tabular.encoding import as_1d, as_frame, learn_columns, lookup, sequences
from efa.tabular.glm_stage import fit_glm_stage
from efa.tabular.model import TableEFA
from efa.tabular.prediction import column_proba, tempered
from efa.training.train import History, TrainConfig, fit, seed_everything

if TYPE_CHECKING:  # for annotations only
    from efa.core.data import Sequences
    from efa.tabular.estimator import AttentionTableClassifier

__getattr__ = moved_out(__name__)  # names moved out: efa.deprecation.MOVED_NAMES


def learn_classes(est: AttentionTableClassifier, X: pd.DataFrame | npt.ArrayLike,
                  y: npt.ArrayLike) -> tuple[pd.DataFrame, np.ndarray]:
    """Check the training table and its labels, and learn the classes (``classes_``).

    The classes are the sorted labels; with an ordered response (``response_`` "ordinal" or
    ``additive="ordinal"``) and a pandas Categorical ``y``, its categories' order instead.
    Resolves ``response="auto"`` (``response_``): "ordinal" for an ordered Categorical ``y``.
    Records ``n_features_in_`` (and ``feature_names_in_``) as scikit-learn does.

    Parameters
    ----------
    est : AttentionTableClassifier
        The estimator being fitted.
    X : pandas.DataFrame or array-like of shape (n, n_features)
        The training table.
    y : array-like, shape (n,)
        The labels (NaN/None: unlabelled rows).

    Returns
    -------
    X : pandas.DataFrame
        The table as a DataFrame.
    y : numpy.ndarray, shape (n,)
        The labels as a 1-d array.

    Raises
    ------
    ValueError
        If ``y`` is None, is not a classification target, mixes kinds of labels, or has no
        label or one class only, ``X`` has no row or no column, or their lengths differ.
    """
    if y is None:
        raise ValueError(f"{type(est).__name__} requires y to be passed, but the target y "
                         "is None")
    frame = as_frame(X)
    validate_data(est, X, reset=True, skip_check_array=True)
    X = frame
    if X.shape[1] < 1:
        raise ValueError(f"X has 0 feature(s) (shape=({len(X)}, 0)) while a minimum of 1 "
                         "is required.")
    if len(X) == 0:
        raise ValueError(f"Found array with 0 sample(s) (shape=(0, {X.shape[1]})) while a "
                         "minimum of 1 is required.")
    order = (y.categories if isinstance(y, pd.Categorical)  # a bare Categorical too
             else getattr(getattr(y, "cat", None), "categories", None))
    dtype = getattr(y, "dtype", None)  # a Series' or a bare Categorical's
    declared = isinstance(dtype, pd.CategoricalDtype) and bool(dtype.ordered)
    if isinstance(dtype, pd.api.extensions.ExtensionDtype) and pd.isna(y).any():
        # NumPy would read nullable integers with NA as floats: keep the labels as they are
        y = pd.Series(y).astype(object).to_numpy()
    y = as_1d(y)
    if len(y) != len(X):
        raise ValueError(f"X has {len(X)} rows but y has {len(y)} labels")
    labelled = ~pd.isna(pd.Series(y, dtype=object)).to_numpy()
    if not labelled.any():
        raise ValueError("y has no label (every entry is missing)")
    labels = typed_labels(y[labelled])
    check_classification_targets(labels)
    est.classes_ = np.unique(labels)
    est.response_ = (est.response if est.response != "auto" else
                     "ordinal" if declared and est.additive != "ordinal" else "categorical")
    if order is not None and (est.response_ == "ordinal" or est.additive == "ordinal"):
        present = set(est.classes_.tolist())
        est.classes_ = np.asarray([c for c in order if c in present],
                                  dtype=est.classes_.dtype)
    if len(est.classes_) < 2:
        raise ValueError(f"y has one class only ({est.classes_[0]!r}): a classifier needs "
                         "at least 2 classes")
    return X, y


def learn_layout(est: AttentionTableClassifier, X: pd.DataFrame) -> None:
    """Learn the layout of the internal table from the training table ``X``.

    The response takes the last position, under a column name no feature has; each column's
    kind and levels come from :func:`efa.tabular.encoding.learn_columns`. Sets
    ``feature_columns_``, ``columns_``, ``n_positions_``, ``is_cat_`` (which positions are
    cells of the categorical field), ``has_num_``, and the shared vocabulary: ``offsets_``
    (each categorical column's first id), ``vocab_size_`` and ``lookup_`` (level → code).

    Parameters
    ----------
    est : AttentionTableClassifier
        The estimator being fitted, with its ``classes_`` learned.
    X : pandas.DataFrame
        The training table's feature columns.

    Raises
    ------
    ValueError
        With ``shared_vocabulary=True``, if a categorical column has a level that is not a
        class (and as :func:`efa.tabular.encoding.learn_columns`).
    """
    est._target = "__response__"  # the response's column in the internal table
    while est._target in set(map(str, X.columns)):  # a feature may have that name too
        est._target += "_"
    est.feature_columns_ = list(X.columns)
    est._index = {c: i for i, c in enumerate(X.columns)}
    learn_columns(est, X)
    est.has_num_ = est.numeric == "gaussian" and "num" in est.kinds_
    if est.has_num_:
        warn_collinear(X[[c for c, k in zip(X.columns, est.kinds_, strict=True) if k == "num"]])
    est.is_cat_ = ([k == "cat" or est.numeric == "quantile" for k in est.kinds_]
                   + [est.response_ == "categorical"])
    est.columns_ = [*est.feature_columns_, est._target]
    est.n_positions_ = len(est.columns_)
    if est.response_ == "categorical":
        est.levels_[est._target] = list(est.classes_)
    est.offsets_, start = {}, 0
    cats = [c for c, is_cat in zip(est.columns_, est.is_cat_, strict=True) if is_cat]
    if est.shared_vocabulary:
        for c in cats:
            extra = [v for v in est.levels_[c] if v not in set(est.classes_)]
            if extra:
                raise ValueError(
                    f"shared_vocabulary=True needs every categorical column's levels among "
                    f"the response's {list(est.classes_)}; column {c!r} has {extra}")
            est.levels_[c] = list(est.classes_)
        est.offsets_ = dict.fromkeys(cats, 0)
        start = len(est.classes_)
    else:
        for c in cats:
            est.offsets_[c], start = start, start + len(est.levels_[c])
    est.vocab_size_ = start
    est.lookup_ = {c: lookup(est.levels_[c]) for c in est.offsets_}
    est.lookup_[est._target] = lookup(est.classes_)


def _unit(x: np.ndarray) -> np.ndarray:
    """Each column of ``x`` divided by its largest size (r is scale-free; no square of a
    1e200 overflows, none of a 1e-200 underflows)."""
    top = np.nanmax(np.abs(x), 0, initial=0)
    return x / np.where(np.isfinite(top) & (top > 0), top, 1.0)


def warn_collinear(floats: pd.DataFrame) -> None:
    """Warn of two float columns that are exact linear functions of each other (an absolute
    correlation above 1 − 1e-9 over the rows where both are present).

    With ``numeric="gaussian"`` each then predicts the other exactly: their σ falls to the
    family's floor, their cells' likelihood grows without bound and crowds out the
    response's (a larger floor on σ does not undo it). Dropping one loses nothing;
    ``numeric="quantile"`` is not affected.

    Parameters
    ----------
    floats : pandas.DataFrame
        The training table's float columns (NaN: missing).
    """
    v = floats.apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float)
    # Candidates on at most 1,000 rows (a wide table's m² correlations stay cheap), each pair
    # over the rows where both are present (a sparse column must not hide the others' pairs),
    # then confirmed on every such row of the table. A constant column has no r.
    rows = np.linspace(0, len(v) - 1, min(len(v), 1000)).astype(int)
    with np.errstate(all="ignore"):
        r = pd.DataFrame(_unit(v[rows])).corr(min_periods=3).to_numpy()  # NaN: < 3 shared rows
        a, b = np.nonzero(np.triu(np.abs(r) > 1 - 1e-9, 1))
        found = [(i, j) for i, j in zip(a, b, strict=True)
                 if abs(pd.Series(_unit(v[:, i])).corr(pd.Series(_unit(v[:, j])))) > 1 - 1e-9]
    if found:
        pairs = ", ".join(f"{floats.columns[i]!r} ~ {floats.columns[j]!r}" for i, j in found[:5])
        warnings.warn(f"float column(s) that are exact linear functions of another ({pairs}): "
                      "with numeric='gaussian' each predicts the other to the σ floor and its "
                      "unbounded likelihood crowds out the response's; drop one of each pair "
                      "or use numeric='quantile'", UserWarning, stacklevel=4)


def check_rules(est: AttentionTableClassifier) -> None:
    """Refuse parameters of ``est`` that contradict each other (each alone was validated).

    Parameters
    ----------
    est : AttentionTableClassifier
        The estimator about to fit.

    Raises
    ------
    ValueError
        Naming the parameters and what to give instead.
    """
    if est.additive == "ordinal" and est.response == "ordinal":
        raise ValueError("additive='ordinal' orders the GLM term of a categorical response; "
                         "with response='ordinal' use additive=True")
    if est.init == "glm" and not est.additive:
        raise ValueError("init='glm' fits the GLM term first: it needs additive=True "
                         "or 'ordinal'")
    if (est.init == "glm" and est.glm_solver == "lbfgs" and est.glm_C == "auto"
            and not est.early_stopping):
        raise ValueError("glm_C='auto' chooses the GLM stage's penalty on the validation "
                         "split, which early_stopping=False does not hold out: give "
                         "glm_C a number (math.inf: no penalty)")
    if est.calibration in ("temperature", "soften") and not est.early_stopping:
        raise ValueError(f"calibration={est.calibration!r} chooses the temperature on the "
                         "validation split, which early_stopping=False does not hold out")


def response_codes(est: AttentionTableClassifier, y: npt.ArrayLike | None,
                   n: int) -> np.ndarray | None:
    """The labels' codes: each label's position in ``classes_``, −1 where it is missing.

    Parameters
    ----------
    est : AttentionTableClassifier
        The fitted estimator.
    y : array-like of shape (n,), optional
        The labels (NaN/None: missing).
    n : int
        The number of rows of the table ``y`` belongs to.

    Returns
    -------
    numpy.ndarray of shape (n,) or None
        The codes; None when ``y`` is None.

    Raises
    ------
    ValueError
        If ``y`` does not have ``n`` labels, or has a label that fit never saw.
    """
    if y is None:
        return None
    y = as_1d(y)
    if len(y) != n:
        raise ValueError(f"X has {n} rows but y has {len(y)} labels")
    lookup = est.lookup_[est._target]
    known = ~pd.isna(pd.Series(y, dtype=object)).to_numpy()
    codes = np.array([lookup.get(v, -2) if k else -1 for v, k in zip(y, known, strict=True)])
    if (codes == -2).any():
        r = int(np.flatnonzero(codes == -2)[0])
        raise ValueError(f"y has the label {y[r]!r} (row {r}) that fit never saw "
                         f"(classes: {list(est.classes_)})")
    return codes


def numeric_range(data: Sequences) -> np.ndarray | None:
    """Each position's lowest and highest observed value of the float field ``num``.

    Parameters
    ----------
    data : Sequences
        The fit table's rows.

    Returns
    -------
    numpy.ndarray of shape (2, positions) or None
        The lows and highs, in the model's (standardised) units (0 where a position has no
        float value); None without a ``num`` field.
    """
    if "num" not in data.fields:
        return None
    x, seen = data.fields["num"], data.observed["num"]
    lo = torch.where(seen, x, torch.inf).amin(0)
    hi = torch.where(seen, x, -torch.inf).amax(0)
    none = ~seen.any(0)
    return torch.stack([lo.masked_fill(none, 0.0), hi.masked_fill(none, 0.0)]).numpy()


def build_model(est: AttentionTableClassifier, cell_dropout: float | None = None) -> TableEFA:
    """The network of the fitted layout, freshly initialised: the categorical field ``cat``
    over the shared vocabulary, a Gaussian value field ``num`` for ``numeric="gaussian"`` and
    an ordinal field ``resp`` for ``response="ordinal"``, in the ``"paper"`` (post-LN) or
    ``"linear"`` (``residual_linear``) block.

    Parameters
    ----------
    est : AttentionTableClassifier
        The estimator being fitted, its layout learned (:func:`learn_layout`).
    cell_dropout : float, optional
        The model's training cell dropout (default: ``est.cell_dropout_``).

    Returns
    -------
    TableEFA
        The model, with each column's support and the response's GLM term as the
        estimator's parameters ask.
    """
    d = est.embedding_dim
    # (with Gaussian features and an ordinal response no cell is categorical: the field
    # then only carries [MASK] embeddings and has nothing to predict)
    fields: list[Field] = [Category("cat", max(est.vocab_size_, 2), dim=d, readout_bias=True,
                                    target=any(est.is_cat_))]
    mix, d_model = "none", None
    if est.has_num_:
        fields.append(Value("num", HeteroscedasticGaussian(), dim=d, encoder="linear",
                            readout="mlp", readout_hidden=(d,), loc=0.0, scale=1.0))
        # loc/scale fixed: _cells already standardised each float column on the fit data
        mix, d_model = "linear", d
    if est.response_ == "ordinal":
        k = len(est.classes_)
        fields.append(Value("resp", Ordinal(k), dim=d, encoder="table", num_values=k,
                            readout="linear", loc=0.0, scale=1.0))
        mix, d_model = "linear", d
    paper = est.backbone == "paper"
    cfg = EFAConfig(
        fields, num_layers=est.num_layers, num_heads=est.num_heads,
        head_dim=max(1, d // est.num_heads), d_model=d_model, mix=mix,
        max_len=est.n_positions_, direction="bidirectional",
        block="post_ln" if paper else "residual_linear", ffn_hidden=est.ffn_hidden,
        dropout=est.dropout if paper else 0.0, bias=paper, scale="sqrt",
    )
    support = torch.zeros(est.n_positions_, max(est.vocab_size_, 2), dtype=torch.bool)
    for pos, c in enumerate(est.columns_):
        if est.is_cat_[pos]:
            lo = est.offsets_[c]
            support[pos, lo : lo + len(est.levels_[c])] = True
    ordinal = est.response_ == "ordinal"
    ordered = est.additive == "ordinal"
    out = (1 if ordinal or ordered else len(est.classes_)) if est.additive else 0
    rate = est.cell_dropout_ if cell_dropout is None else cell_dropout
    return TableEFA(cfg, support, rate, additive=out,
                    response="resp" if ordinal else "cat",
                    ordered_classes=len(est.classes_) if ordered else 0,
                    num_range=None if est.numeric_range_ is None
                    else torch.from_numpy(est.numeric_range_))


def fit_temperature(est: AttentionTableClassifier, X: pd.DataFrame, codes: np.ndarray,
                    soften: bool = False, model: TableEFA | None = None) -> float:
    """The temperature that minimises the response's log loss on held-out rows (Guo et al.,
    2017: one scalar that divides every logit, so the most probable class, and with it the
    accuracy, is unchanged).

    Parameters
    ----------
    est : AttentionTableClassifier
        The fitted estimator (before its temperature is set).
    X : pandas.DataFrame
        The held-out rows' features.
    codes : numpy.ndarray, shape (n,)
        Their response codes; rows with −1 (no label) are left out.
    soften : bool, default False
        Keep T ≥ 1: the best temperature that does not sharpen the model's probabilities
        (max(T, 1) exactly, as the log loss is convex in 1/T).
    model : TableEFA, optional
        The fitted network whose logits are tempered (default: ``est.model_``).

    Returns
    -------
    float
        T in [e^-4, e^4] (bounded search on log T); 1.0 without a labelled row.
    """
    rows = np.flatnonzero(codes >= 0)
    if not len(rows):
        return 1.0
    p = column_proba(est, sequences(est, X.iloc[rows]), est.n_positions_ - 1, est._target,
                     model)
    seen = (np.arange(len(rows)), codes[rows])

    def loss(log_t: float) -> float:
        q = tempered(p, float(np.exp(log_t)))[seen]
        return float(-np.log(np.clip(q, 1e-300, None)).mean())

    t = float(np.exp(minimize_scalar(loss, bounds=(-4.0, 4.0), method="bounded",
                                     options={"xatol": 1e-6}).x))
    return max(t, 1.0) if soften else t


#: ``patience="auto"``'s wait, in optimiser steps, while the validation loss has not left the
#: first epoch's (an interaction can sit on a plateau that long): chosen on development tables,
#: docs/moe.md, sessions 26-27.
AUTO_PLATEAU_STEPS = 500


@dataclass
class Network:
    """One fit of the estimator's network (:func:`fit_network`).

    Parameters
    ----------
    model : TableEFA
        The fitted network, in eval mode.
    history : History
        Its training history.
    glm_history : History or None
        ``init="glm"``'s first stage (None without it).
    glm_C : float or None
        That stage's penalty (None without it or with ``glm_solver="adam"``).
    temperature : float
        The response's temperature (1.0 without calibration or validation rows).
    """

    model: TableEFA
    history: History
    glm_history: History | None
    glm_C: float | None
    temperature: float


def fit_network(est: AttentionTableClassifier, X: pd.DataFrame, data: Sequences,
                y_codes: np.ndarray, split: tuple[np.ndarray, np.ndarray], seed: int,
                cell_dropout: float) -> Network:
    """A network built from the fitted layout (seeded: the same ``seed`` gives the same fit)
    and fitted as the estimator's parameters say: ``init="glm"``'s first stage, training with
    early stopping on the validation rows, then the response's temperature on them.

    Parameters
    ----------
    est : AttentionTableClassifier
        The estimator being fitted: its layout, ``patience_``, ``stop_on_`` and
        ``numeric_range_`` learned.
    X : pandas.DataFrame
        The training table (for the temperature's validation rows).
    data : Sequences
        Its rows, encoded with the labels.
    y_codes : numpy.ndarray, shape (n,)
        The labels' codes (−1: unlabelled).
    split : tuple of numpy.ndarray
        The training and validation rows' indices (no validation rows without early
        stopping).
    seed : int
        Seeds the initialisation and the batches.
    cell_dropout : float
        The training cell dropout.

    Returns
    -------
    Network
        The fitted model (in eval mode), its histories, the GLM stage's C and the
        temperature (1.0 without calibration or validation rows).
    """
    train_idx, val_idx = split
    seed_everything(seed)
    model = build_model(est, cell_dropout)
    cfg = TrainConfig(lr=est.lr, weight_decay=est.weight_decay, batch_size=est.batch_size,
                      max_epochs=est.max_epochs, patience=est.patience_,
                      plateau_steps=AUTO_PLATEAU_STEPS if est.patience == "auto" else None,
                      schedule="constant", seed=seed, progress=False, grad_clip=1.0,
                      min_delta=1e-6,  # the stopping threshold of the committed tables
                      monitor=(model.response,) if est.stop_on_ == "response" else None)
    val = data[torch.as_tensor(val_idx)] if len(val_idx) else None
    if val is not None and est.stop_on_ == "response":  # score the response cells only
        last = torch.zeros_like(val.valid())
        last[:, -1] = True
        val = val.with_scored(last)
    train = data[torch.as_tensor(train_idx)]
    glm_history, glm_C = (fit_glm_stage(model, train, val, cfg, est.glm_solver, est.glm_C)
                          if est.init == "glm" else (None, None))
    history = fit(model, train, val, cfg)
    model.eval()
    temperature = 1.0
    if est.calibration is not None and len(val_idx):
        temperature = fit_temperature(est, X.iloc[val_idx], y_codes[val_idx],
                                      est.calibration != "temperature", model)
    return Network(model, history, glm_history, glm_C, temperature)
