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
    """(mean, sd) [B, I] of y_i given y_<i for y ~ N(0, cov), padding (``valid`` False, at the
    end of each row) replaced by independent unit variables; NaN at padding."""
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
    """Predictive (mean, sd) [B, T] of targets given context values ``y_c`` [B, C] for a
    zero-mean GP: ``k_cc`` [B, C, C] (noise included), ``k_ct`` [B, C, T], ``k_tt`` [B, T]
    (the targets' prior variances, noise included); padded context positions are ignored."""
    pair = valid_c[:, :, None] & valid_c[:, None, :]
    eye = torch.eye(k_cc.shape[-1], dtype=k_cc.dtype).expand_as(k_cc)
    chol = torch.linalg.cholesky(torch.where(pair, k_cc, eye))
    a = torch.linalg.solve_triangular(chol, k_ct * valid_c[..., None], upper=False)
    w = torch.linalg.solve_triangular(chol, torch.where(valid_c, y_c, 0.0)[..., None],
                                      upper=False)
    mean = (a * w).sum(-2)
    var = (k_tt - (a**2).sum(-2)).clamp_min(1e-300)
    return mean, var.sqrt()


class GPOracle(ConditionalModel):
    """The exact GP predictive with the data's true kernel (the Bayes oracle)."""

    direction = "unidirectional"

    def __init__(self, spec: NoteGP, fields: list):
        super().__init__()
        self.spec, self.fields = spec, fields

    def predict_mean_sd(self, data: Sequences) -> tuple[Tensor, Tensor]:
        """Predictive mean and standard deviation of every scored point of ``data``."""
        x, k = data.fields["x"][..., 0].double(), data.fields["channel"]
        return causal_gaussian(covariance(self.spec, x, k), data.fields["y"].double(),
                               data.valid())

    def natural_params(self, data: Sequences) -> dict[str, Tensor]:
        return {"y": _natural(*self.predict_mean_sd(data))}

    def predict(self, context: Sequences, x: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """(mean, sd) [B, T] at points ``x``, ``k`` [B, T] given each context."""
        xc, kc = context.fields["x"][..., 0].double(), context.fields["channel"]
        k_cc = covariance(self.spec, xc, kc)
        k_ct = cross_covariance(self.spec, xc, kc, x.double(), k)
        k_tt = torch.full(x.shape, self.spec.variance + self.spec.offset_var
                          + self.spec.noise**2 + self.spec.jitter, dtype=torch.float64)
        return posterior(k_cc, k_ct, k_tt, context.fields["y"].double(), context.valid())


REFITS = (4, 8, 16, 32, 64, 128, 256)


def note_kernel(variance: float = 1.0, length_scale: float = 1.0, offset_var: float = 1.0,
                noise_level: float = 0.1) -> Kernel:
    """scikit-learn kernel on X = [x, channel]: variance·RBF(x; length_scale) + offset_var ·
    [same channel] + noise_level·[same point] (a ``WhiteKernel``)."""
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
    (tested against it), without its per-call overhead."""
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
    log-uniform draws within the bounds (scikit-learn's procedure); the best optimum."""
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
    likelihood on the preceding points, refitted at :data:`REFITS`."""

    direction = "unidirectional"

    def __init__(self, fields: list, restarts: int = 2, seed: int = 0):
        super().__init__()
        self.fields, self.restarts, self.seed = fields, restarts, seed
        self.fits: list[list[dict]] = []  # per sequence: fitted hyper-parameters per refit

    def predict_mean_sd(self, data: Sequences) -> tuple[Tensor, Tensor]:
        """Predictive mean and standard deviation of every scored point of ``data``."""
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
        return {"y": _natural(*self.predict_mean_sd(data))}


__all__ = ["FittedGP", "GPOracle", "causal_gaussian", "fit_marginal", "neg_log_marginal",
           "note_kernel", "posterior"]
