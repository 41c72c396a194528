"""Gaussian models of the values of a set of sites observed over time (one sequence per time
step, the same sites in every sequence): the statistician's peers of spatial EFA.

- ``Climatology``: each site (× lag slot) predicted by its training mean.
- ``GaussianConditional``: a multivariate normal of the stacked site vector with a shrunk
  covariance; each site's conditional mean given all the others (simple kriging with the
  empirical covariance). ``select_shrinkage`` picks the shrinkage on validation data.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from efa.core.data import Sequences


def sequence_matrix(data: Sequences, name: str) -> tuple[np.ndarray, np.ndarray]:
    """The stacked vector of every time step, for the matrix-based peers.

    P = I for the ``tokens`` layout (lag tokens are columns that are never predicted); for the
    ``fields`` layout the lag fields ``{name}_lag1``, … are appended as further columns.

    Parameters
    ----------
    data : Sequences
        One sequence per time step, all of the same length (the same sites), as
        :func:`efa.spatial.sites_to_sequences` makes them.
    name : str
        The value field.

    Returns
    -------
    values : numpy.ndarray, shape (N, P)
        float64, NaN where a value is not observed.
    predicted : numpy.ndarray, shape (N, P)
        Bool, True where ``name`` is predicted (never in a lag column).

    Raises
    ------
    KeyError
        If ``data`` has no field ``name``.
    ValueError
        If the sequences are not all of the same length.
    """
    if name not in data.fields:
        raise KeyError(f"no field {name!r}: the sequences have {list(data.fields)}")
    if (data.lengths != data.max_len).any():
        raise ValueError("the matrix peers need sequences of equal length (one per time step)")
    prefix = f"{name}_lag"
    lag_names = sorted(
        (k for k in data.fields if k.startswith(prefix)), key=lambda k: int(k[len(prefix) :])
    )
    ys, preds = [], []
    for k in [name, *lag_names]:
        y = data.fields[k].double().numpy().copy()
        if k in data.observed:
            y[~data.observed[k].numpy()] = np.nan
        ys.append(y)
        preds.append(data.predicted(name).numpy() if k == name else np.zeros(y.shape, bool))
    return np.concatenate(ys, axis=1), np.concatenate(preds, axis=1)


class Climatology:
    """Predict each token (site × lag slot) by its training mean; one number per site."""

    def fit(self, train: Sequences, name: str) -> Climatology:
        """Learn each site's mean of the field ``name`` from ``train``.

        Parameters
        ----------
        train : Sequences
            The training time steps (see :func:`sequence_matrix`).
        name : str
            The value field.

        Returns
        -------
        Climatology
            ``self``, with ``mean_`` the mean of every column over its observed values.

        Raises
        ------
        ValueError
            If a site that can be predicted (a scored token of ``name``) has no observed
            training value: it would have no mean, and a NaN prediction.
        """
        y, _ = sequence_matrix(train, name)
        # Lag tokens and lag fields are never predicted: only the scored sites need a mean.
        scored = np.zeros(y.shape[1], dtype=bool)
        scored[:train.max_len] = train.scored_positions().any(0).numpy()
        empty = np.flatnonzero(scored & ~np.isfinite(y).any(0))
        if len(empty):
            raise ValueError(f"site {int(empty[0])} has no observed training value of {name!r} "
                             f"({len(empty)} such sites): every site needs at least one "
                             "observed training value")
        self.name, self.mean_ = name, np.nanmean(y, axis=0)
        return self

    def predict(self, data: Sequences) -> np.ndarray:
        """Each site's training mean at every position of ``data``.

        Parameters
        ----------
        data : Sequences
            The time steps to predict.

        Returns
        -------
        numpy.ndarray, shape (N, P)
            ``mean_`` repeated for each of the N time steps.

        Raises
        ------
        ValueError
            If ``data`` has another number of sites (columns) than the training data.
        """
        _check_width(sequence_matrix(data, self.name)[0], len(self.mean_))
        return np.broadcast_to(self.mean_, (len(data), len(self.mean_))).copy()

    def mse(self, data: Sequences) -> float:
        """Mean squared error of the site means on the predicted positions of ``data``.

        Parameters
        ----------
        data : Sequences
            The time steps to score.

        Returns
        -------
        float
            The mean over the predicted entries of the squared error.
        """
        return _mse(self.predict(data), data, self.name)


class GaussianConditional:
    """y (all tokens of a time step, stacked) ~ N(μ, Σ_α), Σ_α = (1 − α) S + α (tr S / p) I.

    μ and S are the mean and (maximum-likelihood) covariance of the training rows without
    missing values; α shrinks S towards a scaled identity (``sklearn.covariance
    .ShrunkCovariance``). A target token i is predicted by its conditional mean given the other
    *observed* tokens O of its row, with P = (Σ_α)_{OO}⁻¹:

        E[y_i | y_{O∖i}] = μ_i − (1 / P_ii) Σ_{j ∈ O, j ≠ i} P_ij (y_j − μ_j).

    Parameters
    ----------
    alpha : float, default 0.0
        The shrinkage α, in [0, 1] (0: the empirical covariance; :func:`select_shrinkage`
        picks it on validation data).

    Raises
    ------
    ValueError
        If ``alpha`` is not in [0, 1].
    """

    def __init__(self, alpha: float = 0.0):
        if not 0 <= alpha <= 1:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        self.alpha = alpha

    def fit(self, train: Sequences, name: str) -> GaussianConditional:
        """Estimate the mean and the covariance of the stacked vector from ``train``.

        Parameters
        ----------
        train : Sequences
            The training time steps (see :func:`sequence_matrix`); only those without a
            missing value are used.
        name : str
            The value field.

        Returns
        -------
        GaussianConditional
            ``self``, with ``mean_`` and ``cov_emp_`` (the maximum-likelihood covariance, before
            shrinkage).

        Raises
        ------
        ValueError
            If fewer than two time steps have no missing value.
        """
        y, _ = sequence_matrix(train, name)
        complete = y[np.isfinite(y).all(axis=1)]
        if len(complete) < 2:
            raise ValueError("need at least two time steps without missing values")
        self.name = name
        self.mean_ = complete.mean(0)
        self.cov_emp_ = np.cov(complete, rowvar=False, bias=True)
        return self

    @property
    def covariance_(self) -> np.ndarray:
        s, p = self.cov_emp_, len(self.cov_emp_)
        return (1 - self.alpha) * s + self.alpha * np.trace(s) / p * np.eye(p)

    def predict(self, data: Sequences) -> np.ndarray:
        """The conditional mean of each entry of the stacked vector given the other observed ones.

        Parameters
        ----------
        data : Sequences
            The time steps to predict.

        Returns
        -------
        numpy.ndarray, shape (N, P)
            The conditional means, NaN at missing entries.
        """
        return self.predict_mean_sd(data)[0]

    def predict_mean_sd(self, data: Sequences) -> tuple[np.ndarray, np.ndarray]:
        """Conditional means and standard deviations of each entry given the other observed ones:
        the normal's own conditional, with variance 1 / P_ii.

        Parameters
        ----------
        data : Sequences
            The time steps to predict.

        Returns
        -------
        mean : numpy.ndarray, shape (N, P)
            The conditional means, NaN at missing entries.
        sd : numpy.ndarray, shape (N, P)
            The conditional standard deviations, NaN at missing entries.

        Raises
        ------
        ValueError
            If ``data`` has another number of sites (columns) than the training data, or the
            covariance of a row's observed sites is singular.
        """
        y, _ = sequence_matrix(data, self.name)
        _check_width(y, len(self.mean_))
        sigma = self.covariance_
        out, sd = np.full_like(y, np.nan), np.full_like(y, np.nan)
        obs = np.isfinite(y)
        patterns, inverse = np.unique(obs, axis=0, return_inverse=True)
        for p, pattern in enumerate(patterns):
            rows = np.flatnonzero(inverse.reshape(-1) == p)
            o = np.flatnonzero(pattern)
            try:
                prec = np.linalg.inv(sigma[np.ix_(o, o)])
            except np.linalg.LinAlgError:
                raise ValueError(f"the covariance of {self.name!r} over the observed sites "
                                 f"{o.tolist()[:10]} is singular at alpha={self.alpha} (a "
                                 "constant site, or more sites than training time steps): "
                                 "shrink it (alpha > 0)") from None
            d = y[np.ix_(rows, o)] - self.mean_[o]
            # μ_i − (1/P_ii) Σ_{j≠i} P_ij d_j = μ_i + d_i − (P d)_i / P_ii
            out[np.ix_(rows, o)] = self.mean_[o] + d - (d @ prec) / np.diag(prec)
            sd[np.ix_(rows, o)] = 1 / np.sqrt(np.diag(prec))
        return out, sd

    def mse(self, data: Sequences) -> float:
        """Mean squared error of the conditional means on the predicted positions of ``data``.

        Parameters
        ----------
        data : Sequences
            The time steps to score.

        Returns
        -------
        float
            The mean over the predicted entries of the squared error.
        """
        return _mse(self.predict(data), data, self.name)


SHRINKAGE_GRID = (0.0, 0.001, 0.003, 0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15, 0.2, 0.3, 0.5)


def select_shrinkage(
    train: Sequences, val: Sequences, name: str, grid: Iterable[float] = SHRINKAGE_GRID
) -> tuple[GaussianConditional, dict[float, float]]:
    """Fit a :class:`GaussianConditional` on ``train`` and pick α on the validation MSE.

    Parameters
    ----------
    train : Sequences
        The training time steps.
    val : Sequences
        The validation time steps.
    name : str
        The value field.
    grid : iterable of float, default SHRINKAGE_GRID
        The α tried, each in [0, 1] (the default runs from 0 to 0.5).

    Returns
    -------
    model : GaussianConditional
        The model fitted on ``train``, with the α of the least validation MSE.
    curve : dict of float to float
        α → validation MSE (inf where the shrunk covariance is singular).

    Raises
    ------
    ValueError
        If ``val`` has no observed value of ``name``, or every α leaves the covariance
        singular.
    """
    model = GaussianConditional().fit(train, name)
    curve = {}
    for a in grid:
        model.alpha = a
        try:
            curve[a] = model.mse(val)
        except ValueError as err:
            if "singular" not in str(err):
                raise
            curve[a] = math.inf  # this α cannot condition; a larger one may
    if all(math.isinf(v) for v in curve.values()):
        raise ValueError(f"every alpha in {list(curve)} leaves the covariance of {name!r} "
                         "singular: try larger ones")
    model.alpha = min(curve, key=lambda a: curve[a])
    return model, curve


def _mse(pred: np.ndarray, data: Sequences, name: str) -> float:
    y, m = sequence_matrix(data, name)
    if not m.any():  # a mean of nothing is NaN, and min() would "choose" by it
        raise ValueError(f"the data have no predicted value of {name!r} to score")
    return float(((pred[m] - y[m]) ** 2).mean())


def _check_width(y: np.ndarray, fitted: int) -> None:
    # The peers know sites by their column: another number of sites cannot be lined up.
    if y.shape[1] != fitted:
        raise ValueError(f"fit had {fitted} sites (columns of the stacked vector, lags "
                         f"included), the data have {y.shape[1]}: predict the same sites, in "
                         "the same layout")
