"""The prediction room of the table estimator: a table checked against the fitted columns, the
probabilities of one column given the others, and the imputation of missing cells, read from
the fitted estimator's state."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, cast

import numpy as np
import numpy.typing as npt
import pandas as pd
import torch
from sklearn.utils.validation import check_is_fitted, validate_data

from efa.core.data import Sequences
from efa.tabular.encoding import as_frame, sequences

if TYPE_CHECKING:  # for annotations only
    from efa.core.families import Ordinal
    from efa.core.fields import Value
    from efa.tabular.estimator import AttentionTableClassifier
    from efa.tabular.model import TableEFA


def check_table(est: AttentionTableClassifier, X: pd.DataFrame | npt.ArrayLike) -> pd.DataFrame:
    """``X`` checked against the columns seen in fit, as a DataFrame with the fitted columns'
    names.

    Parameters
    ----------
    est : AttentionTableClassifier
        The fitted estimator.
    X : pandas.DataFrame or array-like of shape (n, n_features)
        The table.

    Returns
    -------
    pandas.DataFrame
        ``X`` itself when its columns are the fitted names, else a copy renamed to them.

    Raises
    ------
    sklearn.exceptions.NotFittedError
        If the estimator is not fitted.
    ValueError
        If ``X`` has no row, or not the columns seen in fit: their number, or (a DataFrame's)
        their labels and order.
    """
    check_is_fitted(est, "model_")
    frame = as_frame(X)
    validate_data(est, X, reset=False, skip_check_array=True)
    if len(frame) == 0:
        raise ValueError("Found array with 0 sample(s) while a minimum of 1 is required.")
    if list(frame.columns) == list(est.feature_columns_):
        return frame
    if isinstance(X, pd.DataFrame) and not hasattr(est, "feature_names_in_") and not all(
            isinstance(c, str) for c in X.columns):
        # scikit-learn checks string names only: labels such as 0, 1 would otherwise be
        # read by position, a swapped or renamed column silently as another
        raise label_error(list(X.columns), list(est.feature_columns_))
    X = frame.copy()
    X.columns = est.feature_columns_
    return X


def label_error(given: list, seen: list) -> ValueError:
    """The error for a DataFrame whose column labels are not those of fit, in fit's order.

    Parameters
    ----------
    given : list
        ``X``'s column labels.
    seen : list
        The labels seen in fit (``feature_columns_``).

    Returns
    -------
    ValueError
        The error to raise, naming the labels that differ or, if only their order does, both
        orders.
    """
    unexpected = [c for c in given if c not in seen]
    absent = [c for c in seen if c not in given]
    what = (f"unseen at fit: {unexpected[:10]}; missing: {absent[:10]}" if unexpected or absent
            else f"the same labels in another order: {given[:20]} where fit had {seen[:20]}")
    return ValueError(f"X's column labels are not those seen in fit ({what}); the columns "
                      "must have the labels and the order they had in fit")


@torch.no_grad()
def column_proba(est: AttentionTableClassifier, data: Sequences, pos: int,
                 column: Hashable, model: TableEFA | None = None) -> np.ndarray:
    """p(column = level | the other cells) of every row, the column masked (in batches of
    4096 rows).

    Parameters
    ----------
    est : AttentionTableClassifier
        The fitted estimator.
    data : Sequences
        The rows, encoded (:func:`efa.tabular.encoding.sequences`).
    pos : int
        The column's position (the response's is the last).
    column : hashable
        The column's name in the internal table.
    model : TableEFA, optional
        The fitted network to read (default: ``est.model_``).

    Returns
    -------
    numpy.ndarray, shape (n, levels)
        The probabilities over the column's levels (for the response, its classes).
    """
    model = est.model_ if model is None else model
    at = torch.zeros(len(data), est.n_positions_, dtype=torch.bool)
    at[:, pos] = True
    ordinal = column == est._target and est.response_ == "ordinal"
    out = []
    for s in range(0, len(data), 4096):
        batch = data[torch.arange(s, min(s + 4096, len(data)))]
        here = at[s : s + len(batch)]
        if ordinal:
            eta = model.natural_params_at(batch, {"resp": here})["resp"]
            family = cast("Ordinal", cast("Value", model.field("resp")).family)
            out.append(family.probabilities(eta))
        else:
            out.append(model.predict_mean(batch, at=here)["cat"][:, pos])
    p = torch.cat(out).double().numpy()
    if ordinal:
        return p
    lo = est.offsets_[column]
    p = p[:, lo : lo + len(est.levels_[column])]
    return p / p.sum(1, keepdims=True)


def response_proba(est: AttentionTableClassifier, X: pd.DataFrame) -> np.ndarray:
    """p(y = class | the row's features) of every row of ``X``, at the fitted temperature; a
    row holding a level that fit never saw is read from the unseen-level fit
    (``unseen_model_``, at ``unseen_temperature_``) where there is one.

    Parameters
    ----------
    est : AttentionTableClassifier
        The fitted estimator.
    X : pandas.DataFrame
        The table, checked (:func:`check_table`).

    Returns
    -------
    numpy.ndarray, shape (n, n_classes)
        The probabilities, in the order of ``classes_``.
    """
    data, pos = sequences(est, X), est.n_positions_ - 1
    p = tempered(column_proba(est, data, pos, est._target), est.temperature_)
    if est.unseen_model_ is not None:
        # a categorical cell the encoding left unobserved that is not missing holds an
        # unseen level (a binned number is unobserved only where it is missing)
        hidden = ~data.observed["cat"][:, :-1].numpy() & np.array(est.is_cat_[:-1])
        rows = np.flatnonzero((hidden & ~X.isna().to_numpy()).any(1))
        if len(rows):
            p[rows] = tempered(column_proba(est, data[torch.as_tensor(rows)], pos, est._target,
                                            est.unseen_model_), est.unseen_temperature_)
    return p


def fill_missing(est: AttentionTableClassifier, X: pd.DataFrame,
                 data: Sequences) -> pd.DataFrame:
    """``X`` with each missing cell replaced by its most probable level (categorical), the
    training median of its most probable bin (binned) or its conditional mean (Gaussian),
    given the row's observed cells.

    Parameters
    ----------
    est : AttentionTableClassifier
        The fitted estimator.
    X : pandas.DataFrame
        The table, checked (:func:`check_table`).
    data : Sequences
        Its rows, encoded; the unobserved feature cells are the ones filled.

    Returns
    -------
    pandas.DataFrame
        A copy of ``X``; a column whose dtype cannot hold its imputed values becomes
        ``object``.
    """
    hole = ~(data.observed["cat"] | data.observed.get("num", torch.zeros_like(
        data.observed["cat"])))
    hole[:, -1] = False
    # A level fit never saw is hidden from the model too (handle_unknown="unk"), but it is the
    # user's value, not a missing one: only missing cells are filled.
    for pos in range(est.n_positions_ - 1):
        hole[:, pos] &= torch.as_tensor(X[est.columns_[pos]].isna().to_numpy(copy=True))
    out = X.copy()
    if not hole.any():
        return out
    with torch.no_grad():
        mean = est.model_.predict_mean(data, at=hole)
    for pos in range(est.n_positions_ - 1):
        rows = hole[:, pos].numpy()
        if not rows.any():
            continue
        c = est.columns_[pos]
        if est.is_cat_[pos]:
            p = mean["cat"][rows, pos].double().numpy()
            lo = est.offsets_[c]
            best = p[:, lo : lo + len(est.levels_[c])].argmax(1)
            values = (est.bin_values_[c] if c in est.bin_values_ else est.levels_[c])
            filled = [values[b] for b in best]
        else:
            mu, sd = est.stats_[c]
            filled = mu + sd * mean["num"][rows, pos].double().numpy()
        col = out[c].copy()
        try:
            col.iloc[np.flatnonzero(rows)] = filled
        except (TypeError, ValueError):  # e.g. a level the column's dtype cannot hold
            col = col.astype(object)
            col.iloc[np.flatnonzero(rows)] = filled
        out[c] = col
    return out


def tempered(p: np.ndarray, temperature: float) -> np.ndarray:
    """Probabilities ``p`` (rows) at ``temperature``: p^(1/T), renormalised per row, i.e. each
    row's logits divided by T; ``p`` itself at T = 1.

    Parameters
    ----------
    p : numpy.ndarray, shape (n, classes)
        Probabilities.
    temperature : float
        T > 0.

    Returns
    -------
    numpy.ndarray, shape (n, classes)
        The tempered probabilities (float64).
    """
    if temperature == 1.0:
        return p
    z = np.log(np.clip(p.astype(np.float64), 1e-300, None)) / temperature
    z = np.exp(z - z.max(1, keepdims=True))
    return z / z.sum(1, keepdims=True)


@torch.no_grad()
def attention_gates(est: AttentionTableClassifier, X: pd.DataFrame, column: Hashable | None,
                    layer: int) -> np.ndarray:
    """The body of :meth:`AttentionTableClassifier.gates`.

    Parameters
    ----------
    est : AttentionTableClassifier
        The fitted estimator.
    X : pandas.DataFrame
        The table, checked (:func:`check_table`).
    column : hashable or None
        The masked column (None: the response).
    layer : int
        The layer whose attention is read.

    Returns
    -------
    numpy.ndarray, shape (n, heads, columns + 1)
        The weights of every row and head.
    """
    pos = est.n_positions_ - 1 if column is None else est._position(column)
    at = torch.zeros(len(X), est.n_positions_, dtype=torch.bool)
    at[:, pos] = True
    target = ("cat" if est.is_cat_[pos] else
              "resp" if pos == est.n_positions_ - 1 else "num")
    w = est.model_.attention_weights(sequences(est, X), target, at=at)  # [L, B, H, I, I]
    return w[layer, :, :, pos].double().numpy()


@torch.no_grad()
def moe_experts(est: AttentionTableClassifier, X: pd.DataFrame,
                column: Hashable | None) -> tuple[np.ndarray, np.ndarray]:
    """The body of :meth:`AttentionTableClassifier.experts`.

    Parameters
    ----------
    est : AttentionTableClassifier
        The fitted estimator.
    X : pandas.DataFrame
        The table, checked (:func:`check_table`).
    column : hashable or None
        The masked column (None: the response); it must be categorical.

    Returns
    -------
    gates : numpy.ndarray, shape (n, heads, columns + 1)
        π of every row and head.
    experts : numpy.ndarray, shape (n, heads, columns + 1, levels)
        Each expert's logits over the column's levels.

    Raises
    ------
    ValueError
        Unless the backbone is the linear one-layer block with a categorical response, or if
        ``column`` is a Gaussian value field.
    """
    from efa.moe import mixture

    if est.backbone != "linear" or est.num_layers != 1 or est.response_ != "categorical":
        raise ValueError("experts() needs backbone='linear', num_layers=1 and a categorical "
                         "response (the block whose logits are a mixture of CBOW experts); "
                         f"this fit has backbone={est.backbone!r}, num_layers="
                         f"{est.num_layers}, response_={est.response_!r} (response='auto' "
                         "reads an ordered Categorical y as ordinal: give "
                         "response='categorical')")
    pos = est.n_positions_ - 1 if column is None else est._position(column)
    if not est.is_cat_[pos]:
        raise ValueError(f"column {column!r} is a Gaussian value field, not categorical")
    pi, f = mixture(est.model_, sequences(est, X), "cat")
    name = est.columns_[pos]
    lo = est.offsets_[name]
    f = cast(torch.Tensor, f)[:, pos, ..., lo : lo + len(est.levels_[name])]  # experts
    return pi[:, pos].double().numpy(), f.double().numpy()
