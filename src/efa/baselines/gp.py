"""Gaussian-process peers of in-context regression (``efa reproduce in-context-regression``).

- :class:`GPOracle`: the Bayes oracle. With the true kernel (RBF + per-channel offset + noise,
  :func:`efa.generators.gp.covariance`) the predictive of y_i given y_<i is exact: with K = LLᵀ
  and z = L⁻¹y, y_i = Σ_{j≤i} L_ij z_j and z ~ N(0, I), so y_i | y_<i ~ N(y_i − L_ii z_i,
  L_ii²). One Cholesky factor gives every causal predictive, and by the chain rule their
  log-densities add up to log N(y; 0, K) (tested against scipy, and the kernel against
  scikit-learn's GaussianProcessRegressor).
- :class:`FittedGP`: the same kernel family with hyper-parameters (RBF variance and
  length-scale, offset variance, noise) fitted by marginal likelihood per sequence as
  scikit-learn's ``GaussianProcessRegressor`` does (L-BFGS-B from a warm start and random
  restarts; the objective and its gradient are tested against scikit-learn's, and evaluated
  here without its per-call overhead, which made the peer 20× slower), on the points *before* the
  predicted one only: refitted at context sizes 4, 8, 16, 32, 64, … and used until the next
  refit (each fit starts from the previous one, plus random restarts); below 4 points (four
  hyper-parameters) the initial kernel (variance 1, length-scale 1, offset variance 1, noise
  0.1) is used as is. Bounds: length-scale [0.05, 50], variances [1e-3, 100], noise variance
  [1e-4, 10] (a lower noise bound keeps a fit to a few points from explaining them exactly).
- :func:`posterior`: predictive of targets given a context set, for any kernel matrices.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from efa.core.conditional import ConditionalModel
from efa.core.data import Sequences
from efa.generators.gp import NoteGP, covariance, cross_covariance

if TYPE_CHECKING:  # for annotations only
    from sklearn.gaussian_process.kernels import Kernel


def _natural(mean: Tensor, sd: Tensor) -> Tensor:
    var = sd**2
    return torch.stack([mean / var, -0.5 / var], dim=-1)


def causal_gaussian(cov: Tensor, y: Tensor, valid: Tensor) -> tuple[Tensor, Tensor]:
    """The causal predictives of a zero-mean Gaussian vector: y_i given y_<i for y ~ N(0, cov).

    One Cholesky factor L of the covariance gives them all: with z = L⁻¹y,
    y_i | y_<i ~ N(y_i − L_ii z_i, L_ii²).

    Parameters
    ----------
    cov : torch.Tensor, shape (B, I, I)
        The covariance of each row's values (noise included).
    y : torch.Tensor, shape (B, I)
        The values.
    valid : torch.Tensor, shape (B, I)
        Bool, False at padding (at the end of each row); padding is replaced by independent
        unit variables.

    Returns
    -------
    mean : torch.Tensor, shape (B, I)
        The predictive means, NaN at padding.
    sd : torch.Tensor, shape (B, I)
        The predictive standard deviations, NaN at padding.
    """
    pair = valid[:, :, None] & valid[:, None, :]
    eye = torch.eye(cov.shape[-1], dtype=cov.dtype).expand_as(cov)
    cov = torch.where(pair, cov, eye)
    y = torch.where(valid, y, 0.0)
    chol = torch.linalg.cholesky(cov)
    z = torch.linalg.solve_triangular(chol, y[..., None], upper=False)[..., 0]
    sd = torch.diagonal(chol, dim1=-2, dim2=-1)
    mean = y - sd * z
    nan = torch.tensor(float("nan"), dtype=cov.dtype)
    return torch.where(valid, mean, nan), torch.where(valid, sd, nan)


def posterior(k_cc: Tensor, k_ct: Tensor, k_tt: Tensor, y_c: Tensor,
              valid_c: Tensor) -> tuple[Tensor, Tensor]:
    """The predictive of targets given context values for a zero-mean GP.

    Parameters
    ----------
    k_cc : torch.Tensor, shape (B, C, C)
        The context's covariance, noise included.
    k_ct : torch.Tensor, shape (B, C, T)
        The covariance between the context and the targets.
    k_tt : torch.Tensor, shape (B, T)
        The targets' prior variances, noise included.
    y_c : torch.Tensor, shape (B, C)
        The context values.
    valid_c : torch.Tensor, shape (B, C)
        Bool, False at padded context positions, which are ignored (they may hold anything,
        NaN included).

    Returns
    -------
    mean : torch.Tensor, shape (B, T)
        The predictive means.
    sd : torch.Tensor, shape (B, T)
        The predictive standard deviations (the variance floored at 1e-300).
    """
    pair = valid_c[:, :, None] & valid_c[:, None, :]
    eye = torch.eye(k_cc.shape[-1], dtype=k_cc.dtype).expand_as(k_cc)
    chol = torch.linalg.cholesky(torch.where(pair, k_cc, eye))
    # where, not a product: NaN · 0 is NaN, and padding may hold NaN.
    a = torch.linalg.solve_triangular(chol, torch.where(valid_c[..., None], k_ct, 0.0),
                                      upper=False)
    w = torch.linalg.solve_triangular(chol, torch.where(valid_c, y_c, 0.0)[..., None],
                                      upper=False)
    mean = (a * w).sum(-2)
    var = (k_tt - (a**2).sum(-2)).clamp_min(1e-300)
    return mean, var.sqrt()


def _check_points(what: str, x: Tensor, k: Tensor, real: Tensor, y: Tensor | None = None):
    """Refuse a non-finite x or y, or a channel other than the process's 0 and 1, at a real
    point (padding may hold anything): either would give NaN or a meaningless predictive."""
    named = {"x": (x, ~torch.isfinite(x)), "channel": (k, (k != 0) & (k != 1))}
    if y is not None:
        named["y"] = (y, ~torch.isfinite(y))
    for name, (values, bad) in named.items():
        if (bad & real).any():
            b, i = (int(v) for v in (bad & real).nonzero()[0])
            raise ValueError(f"GPOracle: {what} {b}, position {i} has {name} = "
                             f"{values[b, i].item()!r}; a real point needs finite x and y "
                             "and a channel of the process (0 or 1)")


class GPOracle(ConditionalModel):
    """The exact GP predictive with the data's true kernel (the Bayes oracle).

    Each point is predicted from the points before it (``direction="unidirectional"``), by
    :func:`causal_gaussian` with the covariance of :func:`efa.generators.gp.covariance`.

    Parameters
    ----------
    spec : NoteGP
        The data-generating process, whose kernel is the truth.
    fields : list of Field
        The model's fields: those of the regression EFA (``x``, the target ``y`` with a
        heteroscedastic Gaussian, ``channel``); the data are read by these names.
    """

    direction = "unidirectional"

    def __init__(self, spec: NoteGP, fields: list):
        super().__init__()
        self.spec, self.fields = spec, fields

    def predict_mean_sd(self, data: Sequences) -> tuple[Tensor, Tensor]:
        """Predictive mean and standard deviation of every point of ``data`` given the points
        before it.

        Parameters
        ----------
        data : Sequences
            Sequences with the fields ``x`` (shape (B, I, 1)), ``channel`` and ``y``.

        Returns
        -------
        mean : torch.Tensor, shape (B, I)
            float64, NaN at padding.
        sd : torch.Tensor, shape (B, I)
            float64, NaN at padding.

        Raises
        ------
        ValueError
            If a real point (not padding) has a non-finite x or y or a channel other than 0
            and 1; the message names its sequence and position.
        """
        x, k = data.fields["x"][..., 0].double(), data.fields["channel"]
        _check_points("sequence", x, k, data.valid(), data.fields["y"])
        return causal_gaussian(covariance(self.spec, x, k), data.fields["y"].double(),
                               data.valid())

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        """The Gaussian's natural parameters of every point given the points before it.

        Parameters
        ----------
        data : Sequences
            As for :meth:`predict_mean_sd`.

        Returns
        -------
        dict of str to torch.Tensor
            ``"y"`` → (μ/σ², −1/(2σ²)), shape (B, I, 2).
        """
        return {"y": _natural(*self.predict_mean_sd(data))}

    def predict(self, context: Sequences, x: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """The predictive at new points given each context (the GP's posterior).

        Parameters
        ----------
        context : Sequences
            The context points, with the fields ``x``, ``channel`` and ``y``.
        x : torch.Tensor, shape (B, T) or (B, T, 1)
            The targets' inputs (the second: the layout of a Sequences' ``x``).
        k : torch.Tensor, shape (B, T)
            The targets' channels.

        Returns
        -------
        mean : torch.Tensor, shape (B, T)
            The predictive means (float64).
        sd : torch.Tensor, shape (B, T)
            The predictive standard deviations, noise included.

        Raises
        ------
        ValueError
            If ``x`` and ``k`` are not one (B, T) grid of targets for the B contexts, or a
            real context point (not padding) or a target has a non-finite x or y or a
            channel other than 0 and 1 (named by its sequence and position).
        """
        x = x[..., 0] if x.dim() == 3 and x.shape[-1] == 1 else x
        if x.dim() != 2 or k.shape != x.shape or len(x) != len(context):
            raise ValueError(f"x and k must both be (B, T) = ({len(context)}, T): a row of "
                             f"targets per context; got x {list(x.shape)}, k {list(k.shape)}")
        xc, kc = context.fields["x"][..., 0].double(), context.fields["channel"]
        _check_points("context sequence", xc, kc, context.valid(), context.fields["y"])
        _check_points("target row", x, k, torch.ones(x.shape, dtype=torch.bool))
        k_cc = covariance(self.spec, xc, kc)
        k_ct = cross_covariance(self.spec, xc, kc, x.double(), k)
        k_tt = torch.full(x.shape, self.spec.variance + self.spec.offset_var
                          + self.spec.noise**2 + self.spec.jitter, dtype=torch.float64)
        return posterior(k_cc, k_ct, k_tt, context.fields["y"].double(), context.valid())


REFITS = (4, 8, 16, 32, 64, 128, 256)


def note_kernel(variance: float = 1.0, length_scale: float = 1.0, offset_var: float = 1.0,
                noise_level: float = 0.1) -> Kernel:
    """scikit-learn kernel on X = [x, channel]: variance·RBF(x; length_scale) + offset_var ·
    [same channel] + noise_level·[same point] (a ``WhiteKernel``).

    Parameters
    ----------
    variance : float, default 1.0
        The RBF's variance (bounds [1e-3, 100] when fitted).
    length_scale : float, default 1.0
        The RBF's length-scale (bounds [0.05, 50]).
    offset_var : float, default 1.0
        The variance of the per-channel offset (bounds [1e-3, 100]).
    noise_level : float, default 0.1
        The noise variance (bounds [1e-4, 10]: the floor keeps a fit to a few points from
        explaining them exactly).

    Returns
    -------
    sklearn.gaussian_process.kernels.Kernel
        The sum kernel, for ``GaussianProcessRegressor``.
    """
    from sklearn.gaussian_process.kernels import WhiteKernel

    # The noise floor (sd 0.01) keeps a fit on a few points from explaining them exactly.
    return _RBFOffset(variance, length_scale, offset_var) + WhiteKernel(noise_level, (1e-4, 10.0))


def _sk_kernel_class():
    from sklearn.gaussian_process.kernels import Hyperparameter, Kernel

    class RBFOffset(Kernel):
        """variance·exp(−(x − x')²/2ℓ²) on column 0 + offset_var·[k = k'] on column 1."""

        def __init__(self, variance=1.0, length_scale=1.0, offset_var=1.0,
                     variance_bounds=(1e-3, 1e2), length_scale_bounds=(0.05, 50.0),
                     offset_var_bounds=(1e-3, 1e2)):
            self.variance, self.length_scale, self.offset_var = variance, length_scale, offset_var
            self.variance_bounds = variance_bounds
            self.length_scale_bounds = length_scale_bounds
            self.offset_var_bounds = offset_var_bounds

        @property
        def hyperparameter_variance(self):
            return Hyperparameter("variance", "numeric", self.variance_bounds)

        @property
        def hyperparameter_length_scale(self):
            return Hyperparameter("length_scale", "numeric", self.length_scale_bounds)

        @property
        def hyperparameter_offset_var(self):
            return Hyperparameter("offset_var", "numeric", self.offset_var_bounds)

        def __call__(self, X, Y=None, eval_gradient=False):
            X = np.atleast_2d(X)
            Yv = X if Y is None else np.atleast_2d(Y)
            d2 = (X[:, None, 0] - Yv[None, :, 0]) ** 2
            r = np.exp(-0.5 * d2 / self.length_scale**2)
            same = (X[:, None, 1] == Yv[None, :, 1]).astype(float)
            K = self.variance * r + self.offset_var * same
            if not eval_gradient:
                return K
            if Y is not None:
                raise ValueError("gradient only for Y=None")
            # Gradients with respect to the log of each hyper-parameter, in the order of
            # sklearn's θ (hyper-parameters sorted by name: length_scale, offset_var, variance).
            grads = [self.variance * r * d2 / self.length_scale**2, self.offset_var * same,
                     self.variance * r]
            return K, np.stack(grads, axis=-1)

        def diag(self, X):
            return np.full(np.atleast_2d(X).shape[0], self.variance + self.offset_var)

        def is_stationary(self):
            return False

    return RBFOffset


class _Lazy:
    cls = None


def _RBFOffset(*args):
    if _Lazy.cls is None:
        _Lazy.cls = _sk_kernel_class()
    return _Lazy.cls(*args)


# log-bounds of θ = log(length_scale, offset_var, variance, noise) (scikit-learn's order).
BOUNDS = np.log([(0.05, 50.0), (1e-3, 1e2), (1e-3, 1e2), (1e-4, 10.0)])
THETA0 = np.log([1.0, 1.0, 1.0, 0.1])
ALPHA = 1e-10  # scikit-learn's default jitter


def neg_log_marginal(theta: np.ndarray, X: np.ndarray,
                     y: np.ndarray) -> tuple[float, np.ndarray]:
    """(−log p(y | θ), gradient in θ) of the kernel :func:`note_kernel` — the quantity and
    parametrisation of scikit-learn's ``GaussianProcessRegressor.log_marginal_likelihood``
    (tested against it), without its per-call overhead.

    Parameters
    ----------
    theta : numpy.ndarray, shape (4,)
        θ = log(length_scale, offset_var, variance, noise), scikit-learn's order.
    X : numpy.ndarray, shape (n, 2)
        The points' [x, channel].
    y : numpy.ndarray, shape (n,)
        The values.

    Returns
    -------
    nll : float
        −log p(y | θ) (``inf`` where the covariance is not positive definite).
    grad : numpy.ndarray, shape (4,)
        Its gradient in θ (zeros where the covariance is not positive definite).
    """
    from scipy.linalg import cho_solve, cholesky

    ell, c, v, noise = np.exp(theta)
    d2 = (X[:, None, 0] - X[None, :, 0]) ** 2
    r = np.exp(-0.5 * d2 / ell**2)
    same = (X[:, None, 1] == X[None, :, 1]).astype(float)
    n = len(y)
    K = v * r + c * same + (noise + ALPHA) * np.eye(n)
    try:
        L = cholesky(K, lower=True)
    except np.linalg.LinAlgError:
        return np.inf, np.zeros_like(theta)
    a = cho_solve((L, True), y)
    nll = 0.5 * y @ a + np.log(np.diag(L)).sum() + 0.5 * n * np.log(2 * np.pi)
    inner = np.outer(a, a) - cho_solve((L, True), np.eye(n))
    grads = (v * r * d2 / ell**2, c * same, v * r, noise * np.eye(n))
    return nll, np.array([-0.5 * (inner * g).sum() for g in grads])


def fit_marginal(X: np.ndarray, y: np.ndarray, theta0: np.ndarray, restarts: int,
                 rng: np.random.Generator) -> np.ndarray:
    """θ maximising the marginal likelihood: L-BFGS-B from ``theta0`` and from ``restarts``
    log-uniform draws within the bounds (scikit-learn's procedure); the best optimum.

    Parameters
    ----------
    X : numpy.ndarray, shape (n, 2)
        The points' [x, channel].
    y : numpy.ndarray, shape (n,)
        The values.
    theta0 : numpy.ndarray, shape (4,)
        The first start, log(length_scale, offset_var, variance, noise).
    restarts : int
        The number of further starts, drawn uniformly within the log-bounds.
    rng : numpy.random.Generator
        Draws the restarts.

    Returns
    -------
    numpy.ndarray, shape (4,)
        The θ of the least −log p(y | θ) over all starts (``theta0`` if none improved on
        ``inf``).
    """
    from scipy.optimize import minimize

    starts = [theta0] + [rng.uniform(BOUNDS[:, 0], BOUNDS[:, 1]) for _ in range(restarts)]
    best, best_f = theta0, np.inf
    for t0 in starts:
        res = minimize(neg_log_marginal, t0, args=(X, y), jac=True, method="L-BFGS-B",
                       bounds=BOUNDS)
        if res.fun < best_f:
            best, best_f = res.x, res.fun
    return best


class FittedGP(ConditionalModel):
    """The note's kernel family with hyper-parameters fitted per sequence by marginal
    likelihood on the preceding points, refitted at context sizes ``REFITS`` (4, 8, 16, …).

    See the module's docstring for the procedure; the fitted hyper-parameters of the last
    :meth:`predict_mean_sd` are kept in ``fits`` (per sequence, one dict per refit).

    Parameters
    ----------
    fields : list of Field
        The model's fields: those of the regression EFA (``x``, the target ``y`` with a
        heteroscedastic Gaussian, ``channel``); the data are read by these names.
    restarts : int, default 2
        Random restarts of each fit, besides the warm start.
    seed : int, default 0
        Seeds the restarts (with the sequence's index).
    """

    direction = "unidirectional"

    def __init__(self, fields: list, restarts: int = 2, seed: int = 0):
        super().__init__()
        self.fields, self.restarts, self.seed = fields, restarts, seed
        self.fits: list[list[dict]] = []  # per sequence: fitted hyper-parameters per refit

    def predict_mean_sd(self, data: Sequences) -> tuple[Tensor, Tensor]:
        """Predictive mean and standard deviation of every point of ``data`` given the points
        before it, refitting the kernel on the way (slow: scipy optimisations per sequence).

        Parameters
        ----------
        data : Sequences
            Sequences with the fields ``x`` (shape (B, I, 1)), ``channel`` and ``y``.

        Returns
        -------
        mean : torch.Tensor, shape (B, I)
            float64, NaN at padding.
        sd : torch.Tensor, shape (B, I)
            float64, NaN at padding.
        """
        x = data.fields["x"][..., 0].double().numpy()
        k = data.fields["channel"].double().numpy()
        y = data.fields["y"].double().numpy()
        mean = np.full(x.shape, np.nan)
        sd = np.full(x.shape, np.nan)
        self.fits = []
        for b, n in enumerate(data.lengths.tolist()):
            rng = np.random.default_rng([self.seed, b])
            X = np.stack([x[b, :n], k[b, :n]], axis=1)
            theta, fits = THETA0, []
            starts = [m for m in REFITS if m < n]
            for lo, hi in zip([0, *starts], [*starts, n], strict=True):
                if lo > 0:
                    theta = fit_marginal(X[:lo], y[b, :lo], theta, self.restarts, rng)
                    fits.append({"context": lo, **dict(zip(
                        ("length_scale", "offset_var", "variance", "noise"),
                        np.exp(theta).tolist(), strict=True))})
                # Causal predictives of positions lo..hi−1 with this kernel: one Cholesky.
                ell, c, v, noise = np.exp(theta)
                kernel = note_kernel(v, ell, c, noise)
                cov = torch.from_numpy(kernel(X[:hi]) + ALPHA * np.eye(hi))[None]
                mu, s = causal_gaussian(cov, torch.from_numpy(y[b, :hi])[None],
                                        torch.ones(1, hi, dtype=torch.bool))
                mean[b, lo:hi], sd[b, lo:hi] = mu[0, lo:].numpy(), s[0, lo:].numpy()
            self.fits.append(fits)
        return torch.from_numpy(mean), torch.from_numpy(sd)

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        """The Gaussian's natural parameters of every point given the points before it.

        Parameters
        ----------
        data : Sequences
            As for :meth:`predict_mean_sd`.

        Returns
        -------
        dict of str to torch.Tensor
            ``"y"`` → (μ/σ², −1/(2σ²)), shape (B, I, 2).
        """
        return {"y": _natural(*self.predict_mean_sd(data))}


__all__ = ["FittedGP", "GPOracle", "causal_gaussian", "fit_marginal", "neg_log_marginal",
           "note_kernel", "posterior"]
