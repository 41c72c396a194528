"""The fitting room of the table estimator: the labels' classes and codes, the layout of the
internal table (the response's column, which positions are categorical, the categorical cells'
shared vocabulary), the :class:`~efa.tabular.model.TableEFA` built from that fitted state, and
the first stage of ``init="glm"``. Like :mod:`efa.tabular.encoding`, the functions read and
write the estimator's fitted state, the scikit-learn way."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pandas as pd
import torch
from scipy.optimize import minimize_scalar
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import validate_data

from efa.core.families import HeteroscedasticGaussian, Ordinal
from efa.core.fields import Category, Field, Value
from efa.core.model import EFAConfig
from efa.tabular.encoding import as_1d, as_frame, learn_columns, lookup, sequences
from efa.tabular.model import GLM_STAGE, TableEFA
from efa.tabular.prediction import column_proba, tempered
from efa.training.lbfgs import fit_lbfgs
from efa.training.train import fit

if TYPE_CHECKING:  # for annotations only
    from efa.core.data import Sequences
    from efa.tabular.estimator import AttentionTableClassifier
    from efa.training.train import History, TrainConfig


def learn_classes(est: AttentionTableClassifier, X: pd.DataFrame | npt.ArrayLike,
                  y: npt.ArrayLike) -> tuple[pd.DataFrame, np.ndarray]:
    """Check the training table and its labels, and learn the classes (``classes_``).

    The classes are the sorted labels; with an ordered response (``response="ordinal"`` or
    ``additive="ordinal"``) and a pandas Categorical ``y``, its categories' order instead.
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
        If ``y`` is None, is not a classification target, or has no label or one class
        only, ``X`` has no row or no column, or their lengths differ.
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
    y = as_1d(y)
    if len(y) != len(X):
        raise ValueError(f"X has {len(X)} rows but y has {len(y)} labels")
    labelled = ~pd.isna(pd.Series(y, dtype=object)).to_numpy()
    if not labelled.any():
        raise ValueError("y has no label (every entry is missing)")
    check_classification_targets(y[labelled])
    est.classes_ = np.unique(y[labelled])
    if order is not None and (est.response == "ordinal" or est.additive == "ordinal"):
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
    est.is_cat_ = ([k == "cat" or est.numeric == "quantile" for k in est.kinds_]
                   + [est.response == "categorical"])
    est.columns_ = [*est.feature_columns_, est._target]
    est.n_positions_ = len(est.columns_)
    if est.response == "categorical":
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
    if est.additive == "ordinal" and est.response != "categorical":
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


def build_model(est: AttentionTableClassifier) -> TableEFA:
    """The network of the fitted layout, freshly initialised: the categorical field ``cat``
    over the shared vocabulary, a Gaussian value field ``num`` for ``numeric="gaussian"`` and
    an ordinal field ``resp`` for ``response="ordinal"``, in the ``"paper"`` (post-LN) or
    ``"linear"`` (``residual_linear``) block.

    Parameters
    ----------
    est : AttentionTableClassifier
        The estimator being fitted, its layout learned (:func:`learn_layout`).

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
    if est.response == "ordinal":
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
    ordinal = est.response == "ordinal"
    ordered = est.additive == "ordinal"
    out = (1 if ordinal or ordered else len(est.classes_)) if est.additive else 0
    return TableEFA(cfg, support, est.cell_dropout_, additive=out,
                    response="resp" if ordinal else "cat",
                    ordered_classes=len(est.classes_) if ordered else 0,
                    num_range=None if est.numeric_range_ is None
                    else torch.from_numpy(est.numeric_range_))


# The GLM stage's penalties tried with glm_C="auto": scikit-learn's C (the inverse strength of
# ½‖effects, slopes‖² against the response's summed log loss), walked from strong to weak.
GLM_C_GRID = tuple(10.0**k for k in range(-3, 4))


def fit_glm_stage(model: TableEFA, train: Sequences, val: Sequences | None,
                  cfg: TrainConfig, solver: str = "adam",
                  C: float | str = "auto") -> tuple[History, float | None]:
    """The first stage of ``init="glm"``: only the GLM's parameters move, with the network's
    read-outs (weights) at 0, so the model is the plain GLM on the response (the features'
    cells keep a context-free prediction meanwhile).

    The read-outs' weights are set to 0 and every parameter but the GLM's and the read-outs'
    biases is frozen for the stage (and released after it).

    Parameters
    ----------
    model : TableEFA
        The model, with a GLM term.
    train : Sequences
        The training rows.
    val : Sequences or None
        The validation rows: for early stopping (``solver="adam"``) or for choosing ``C``.
    cfg : TrainConfig
        The training settings (:func:`efa.fit`'s; ``solver="lbfgs"`` reads only
        ``threads``).
    solver : {"adam", "lbfgs"}, default "adam"
        ``"adam"``: :func:`efa.fit` with ``cfg``, stopped early on ``val``. ``"lbfgs"``: the
        GLM's (penalised) maximum-likelihood fit, by full-batch L-BFGS in float64 to
        convergence (:func:`efa.training.lbfgs.fit_lbfgs`); with a penalty the ordinal
        scores are held at s_k = k, so that the stage is a convex GLM (the ridge
        adjacent-categories logit).
    C : float or "auto", default "auto"
        ``solver="lbfgs"`` only: scikit-learn's C, the inverse strength of the penalty
        ½‖effects, slopes‖² / C on the response's summed log loss (``math.inf``: none);
        ``"auto"``: each of :data:`GLM_C_GRID` from the strongest, warm-started, the one with
        the best response log loss on ``val`` kept (the walk stops once it has worsened
        twice in a row).

    Returns
    -------
    History
        The stage's training history; with ``solver="lbfgs"``, ``epochs_run`` counts the
        iterations of every fit on the path, ``val_loss`` holds the path's validation log
        losses and ``best_val`` the kept fit's.
    float or None
        The penalty's C (None with ``solver="adam"``).

    Raises
    ------
    ValueError
        If ``C="auto"`` and there are no validation rows.
    """
    with torch.no_grad():
        for readout in model.readouts.values():
            for name, p in readout.named_parameters():
                if not name.endswith("bias"):
                    p.zero_()
    glm = {id(p) for p in model.glm_parameters()}
    for readout in model.readouts.values():  # the features' intercepts too
        glm |= {id(p) for n, p in readout.named_parameters() if n.endswith("bias")}
    if solver == "lbfgs" and C != math.inf:  # a penalty: the scores held at s_k = k, so the
        # stage is a convex GLM and C is well posed (free scores would absorb the effects'
        # scale and escape the penalty); unpenalised, they stay free (the stereotype model)
        for family in (m for m in model.modules() if isinstance(m, Ordinal)):
            with torch.no_grad():  # (the loop above zeroed the response's)
                family.raw_steps.fill_(math.log(math.expm1(1.0)))
            glm.discard(id(family.raw_steps))
    frozen = [p for p in model.parameters() if id(p) not in glm]
    for p in frozen:
        p.requires_grad_(False)
    token = GLM_STAGE.set(model)
    try:
        if solver == "lbfgs":
            return glm_path(model, train, val, cfg.threads, C)
        return fit(model, train, val, cfg), None
    finally:
        GLM_STAGE.reset(token)
        for p in frozen:
            p.requires_grad_(True)


def glm_path(model: TableEFA, train: Sequences, val: Sequences | None, threads: int | None,
             C: float | str) -> tuple[History, float]:
    """The L-BFGS GLM stage of :func:`fit_glm_stage` (its parameters frozen as it set them),
    at one C or along :data:`GLM_C_GRID` with the C chosen on ``val``.

    Parameters
    ----------
    model : TableEFA
        The model, in its GLM stage.
    train, val : Sequences
        The training and validation rows (``val`` may be None for a numeric ``C``).
    threads : int or None
        Torch CPU threads.
    C : float or "auto"
        As in :func:`fit_glm_stage`.

    Returns
    -------
    History
        As :func:`fit_glm_stage` says.
    float
        The kept fit's C.

    Raises
    ------
    ValueError
        If ``C="auto"`` and ``val`` is None or has no labelled row.
    """
    n = int(train.predicted(model.response).sum())  # C's penalty is on the summed log loss
    weights = [model.level_effect, model.slope]

    def penalty_at(c: float) -> Callable[[], torch.Tensor] | None:
        if math.isinf(c):
            return None
        return lambda: sum((w.square().sum() for w in weights),
                           torch.zeros((), dtype=weights[0].dtype)) / (2 * c * max(n, 1))

    if C != "auto":
        return fit_lbfgs(model, train, threads, penalty_at(float(C))), float(C)
    if val is not None:
        last = torch.zeros_like(val.valid())
        last[:, -1] = True  # the response's column
        val = val.with_scored(last)
    if val is None or not bool(val.predicted(model.response).any()):
        raise ValueError("glm_C='auto' chooses the GLM stage's penalty on the validation "
                         "rows' labels, and there are none: give glm_C a number")
    params = [p for p in model.parameters() if p.requires_grad]
    best: tuple[float, float, list[torch.Tensor], History] | None = None
    path: list[float] = []
    iterations, worse = 0, 0
    for c in GLM_C_GRID:
        with warnings.catch_warnings():  # only the kept fit's limit is worth a warning
            warnings.simplefilter("ignore", ConvergenceWarning)
            history = fit_lbfgs(model, train, threads, penalty_at(c))
        iterations += history.epochs_run
        was_training = model.training
        with torch.no_grad():  # scored without cell dropout, as fit_lbfgs fits
            s, m = model.eval().log_likelihood_sums(val)[model.response]
        model.train(was_training)
        path.append(-float(s) / m)
        if best is None or path[-1] < best[0]:
            best, worse = (path[-1], c, [p.detach().clone() for p in params], history), 0
        else:
            worse += 1
            if worse == 2:
                break
    assert best is not None
    score, c, state, history = best
    with torch.no_grad():
        for p, v in zip(params, state, strict=True):
            p.copy_(v)
    if history.stopped == "max_iter":
        warnings.warn(f"the GLM stage's fit at the chosen C = {c:g} stopped at the L-BFGS "
                      "limits without reaching the gradient tolerance; its parameters stay "
                      "where it stopped", ConvergenceWarning, stacklevel=4)
    history.epochs_run, history.val_loss, history.best_val = iterations, path, score
    return history, c


def fit_temperature(est: AttentionTableClassifier, X: pd.DataFrame, codes: np.ndarray,
                    soften: bool = False) -> float:
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

    Returns
    -------
    float
        T in [e^-4, e^4] (bounded search on log T); 1.0 without a labelled row.
    """
    rows = np.flatnonzero(codes >= 0)
    if not len(rows):
        return 1.0
    p = column_proba(est, sequences(est, X.iloc[rows]), est.n_positions_ - 1, est._target)
    seen = (np.arange(len(rows)), codes[rows])

    def loss(log_t: float) -> float:
        q = tempered(p, float(np.exp(log_t)))[seen]
        return float(-np.log(np.clip(q, 1e-300, None)).mean())

    t = float(np.exp(minimize_scalar(loss, bounds=(-4.0, 4.0), method="bounded",
                                     options={"xatol": 1e-6}).x))
    return max(t, 1.0) if soften else t
