"""Random functions from Gaussian processes, as ``Sequences`` ready for ``efa.fit``.

**The UNN note's data** (``../shared/seeds/unn-in-context-regression-note.txt``, Eq. 1): sequence
j holds N points (x, y, k) of one random function,

    y_{j,t} = f_j(x_{j,t}) + e_{j,k_{j,t}} (+ ε_{j,t}),   f_j ~ GP(0, RBF),   x ~ U[5, 15],
    e_{j,0}, e_{j,1} ~ N(0, 2) per sequence,   k ∈ {0, 1} the point's channel,

in random order (the x are i.i.d., so the order of the draws is already random). What the note
leaves open, and what :class:`NoteGP` chooses (each a field, so every choice can be changed):

- the RBF kernel's length-scale and variance: 1 and 1 (scikit-learn's ``RBF()`` default, which
  the note's "RBF(X_j)" reads like); k(x, x') = variance · exp(−(x − x')² / (2 ℓ²));
- "N(0, 2)": variance 2 (standard deviation √2), as in the usual N(μ, σ²) notation;
- the channel of each point: 0 or 1 with probability ½, independently;
- N = 50 points per sequence;
- observation noise: none in the note (``noise=0``, the literal version); ``NOISY`` adds
  per-point noise ε ~ N(0, 0.1²), independently;
- numerically, f is drawn through the Cholesky factor of K + 1e-8·I (``jitter``): a noise-free
  RBF sample at 50 points is singular in float64 otherwise. The nugget is part of the data's
  exact covariance (:func:`covariance`), so the Bayes oracle stays exact.

The likelihood starts at the second point (the note's Eq. 3: "beforehand we have no
history"): ``Sequences.scored`` is False at the first position.

**The TNP benchmark's data** (tung-nd/TNP-pytorch, ``regression/data/gp.py``, RBF kernel):
batches of 16 functions on x ~ U[−2, 2] with a per-function length-scale ~ U[0.1, 0.6] and
scale ~ U[0.1, 1] (k = scale² · exp(−d² / (2 ℓ²))), noise sd 0.02 inside the covariance; per
batch, ``num_ctx`` ~ U{3, …, 46} context points and ``num_tar`` ~ U{3, …, 49 − num_ctx}
targets. :func:`sample_tnp` follows its order of draws on the CPU (the published evaluation
set itself was drawn on a GPU, so the functions differ; the distribution is the same).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from efa.core.data import Sequences
from efa.generators.latent import positive_int


@dataclass(frozen=True)
class NoteGP:
    """The UNN note's data-generating process, with documented choices (module docstring)."""

    length: int = 50
    lengthscale: float = 1.0
    variance: float = 1.0
    offset_var: float = 2.0
    noise: float = 0.0
    x_low: float = 5.0
    x_high: float = 15.0
    p_channel: float = 0.5
    jitter: float = 1e-8

    def __post_init__(self):
        if not isinstance(self.length, int) or self.length < 2:
            raise ValueError(f"length must be an integer >= 2, got {self.length!r}")
        for name in ("lengthscale", "variance"):
            if not 0 < getattr(self, name) < math.inf:
                raise ValueError(f"{name} must be positive and finite, got "
                                 f"{getattr(self, name)!r}")
        for name in ("offset_var", "noise", "jitter"):
            if not 0 <= getattr(self, name) < math.inf:
                raise ValueError(f"{name} must be >= 0 and finite, got {getattr(self, name)!r}")
        if not -math.inf < self.x_low < self.x_high < math.inf or not 0 <= self.p_channel <= 1:
            raise ValueError("need finite x_low < x_high and 0 <= p_channel <= 1")


LITERAL = NoteGP()  # the note as written: no observation noise
NOISY = NoteGP(noise=0.1)  # the per-point-noise variant


def rbf(x1: Tensor, x2: Tensor, lengthscale: float | Tensor,
        variance: float | Tensor) -> Tensor:
    """variance · exp(−(x1_i − x2_j)² / (2 ℓ²)), [..., I, J] from [..., I] and [..., J];
    ``lengthscale``/``variance`` scalars or [...] tensors (one per function)."""
    ell = torch.as_tensor(lengthscale, dtype=x1.dtype)
    var = torch.as_tensor(variance, dtype=x1.dtype)
    if not bool((ell > 0).all()) or not bool(torch.isfinite(ell).all()):
        raise ValueError(f"lengthscale must be positive and finite, got {lengthscale!r}")
    if ell.dim():
        ell, var = ell[..., None, None], var[..., None, None]
    d = (x1[..., :, None] - x2[..., None, :]) / ell
    return var * torch.exp(-0.5 * d**2)


def cross_covariance(spec: NoteGP, x1: Tensor, k1: Tensor, x2: Tensor, k2: Tensor) -> Tensor:
    """Cov(y1, y2) between distinct points, [..., I, J]: RBF + the shared channel offset."""
    same = (k1[..., :, None] == k2[..., None, :]).to(x1.dtype)
    return rbf(x1, x2, spec.lengthscale, spec.variance) + spec.offset_var * same


def covariance(spec: NoteGP, x: Tensor, k: Tensor) -> Tensor:
    """The exact covariance of y [..., N, N] (float64): RBF + channel offsets + (noise² +
    jitter)·I. ``x`` [..., N] (or [..., N, 1]), ``k`` [..., N]."""
    x = _flat_x(x).double()
    if tuple(k.shape) != tuple(x.shape):
        raise ValueError(f"k (the channels) has shape {list(k.shape)}, x has {list(x.shape)}: "
                         "one channel per point")
    cov = cross_covariance(spec, x, k, x, k)
    eye = torch.eye(x.shape[-1], dtype=torch.float64)
    return cov + (spec.noise**2 + spec.jitter) * eye


def sample_note(spec: NoteGP, num: int, seed: int) -> Sequences:
    """``num`` sequences of ``spec.length`` points: fields ``x`` [num, N, 1] (an attribute),
    ``y`` [num, N] and ``channel`` [num, N] (0/1); the first position is not scored."""
    if not isinstance(spec, NoteGP):
        raise TypeError(f"spec must be an efa.generators.NoteGP, got {type(spec).__name__}")
    positive_int("num", num)
    g = torch.Generator().manual_seed(seed)
    n = spec.length
    x = spec.x_low + (spec.x_high - spec.x_low) * torch.rand(num, n, generator=g,
                                                              dtype=torch.float64)
    k = (torch.rand(num, n, generator=g, dtype=torch.float64) < spec.p_channel).long()
    offsets = spec.offset_var**0.5 * torch.randn(num, 2, generator=g, dtype=torch.float64)
    chol = torch.linalg.cholesky(rbf(x, x, spec.lengthscale, spec.variance)
                                 + spec.jitter * torch.eye(n, dtype=torch.float64))
    f = (chol @ torch.randn(num, n, 1, generator=g, dtype=torch.float64))[..., 0]
    y = f + offsets.gather(1, k) + spec.noise * torch.randn(num, n, generator=g,
                                                             dtype=torch.float64)
    scored = torch.ones(num, n, dtype=torch.bool)
    scored[:, 0] = False
    return Sequences({"x": x[..., None].float(), "y": y.float(), "channel": k},
                     torch.full((num,), n), scored=scored)


@dataclass(frozen=True)
class TNPGP:
    """The TNP benchmark's RBF prior (``regression/data/gp.py`` of tung-nd/TNP-pytorch)."""

    max_num_points: int = 50
    batch_size: int = 16
    x_low: float = -2.0
    x_high: float = 2.0
    max_length: float = 0.6
    max_scale: float = 1.0
    noise: float = 0.02

    def __post_init__(self):
        positive_int("batch_size", self.batch_size)
        if positive_int("max_num_points", self.max_num_points) < 7:
            # sizes are drawn as randint(3, m - 3) context and randint(3, m - nc) targets
            raise ValueError(f"max_num_points must be >= 7, got {self.max_num_points}")
        if not -math.inf < self.x_low < self.x_high < math.inf:
            raise ValueError(f"need finite x_low < x_high, got {self.x_low}, {self.x_high}")
        for name in ("max_length", "max_scale"):
            if not 0 < getattr(self, name) < math.inf:
                raise ValueError(f"{name} must be positive and finite, got "
                                 f"{getattr(self, name)!r}")
        if not 0 <= self.noise < math.inf:
            raise ValueError(f"noise must be >= 0 and finite, got {self.noise!r}")


@dataclass
class TNPData:
    """Functions of the TNP prior: ``data`` holds each function's context points first, then
    its targets (fields ``x`` [num, N, 1], ``y`` [num, N]); ``num_context`` [num];
    ``lengthscale``/``scale`` [num]: the kernel each function was drawn from."""

    data: Sequences
    num_context: Tensor
    lengthscale: Tensor
    scale: Tensor
    noise: float

    def context(self) -> Tensor:
        """[num, N] bool: the context positions."""
        return torch.arange(self.data.max_len) < self.num_context[:, None]

    def targets(self) -> Tensor:
        """[num, N] bool: the target positions."""
        return self.data.valid() & ~self.context()


def sample_tnp(spec: TNPGP, num_batches: int, seed: int,
               sizes: tuple[int, int] | None = None) -> TNPData:
    """``num_batches`` batches of ``spec.batch_size`` functions, drawn as the reference's
    ``GPSampler(RBFKernel()).sample`` does (sizes per batch, then x, then the kernel, then y);
    ``sizes`` = (context, targets) fixes the sizes instead (e.g. training functions)."""
    positive_int("num_batches", num_batches)
    if sizes is not None:
        if len(sizes) != 2:
            raise ValueError(f"sizes must be (context, targets), got {sizes!r}")
        positive_int("sizes[0] (context points)", sizes[0])
        positive_int("sizes[1] (target points)", sizes[1])
    g = torch.Generator().manual_seed(seed)
    m, b = spec.max_num_points, spec.batch_size
    xs, ys, n_ctx, ells, scales = [], [], [], [], []
    for _ in range(num_batches):
        if sizes is None:
            nc = int(torch.randint(3, m - 3, (1,), generator=g))
            nt = int(torch.randint(3, m - nc, (1,), generator=g))
        else:
            nc, nt = sizes
        x = spec.x_low + (spec.x_high - spec.x_low) * torch.rand(b, nc + nt, generator=g)
        ell = 0.1 + (spec.max_length - 0.1) * torch.rand(b, generator=g)
        scale = 0.1 + (spec.max_scale - 0.1) * torch.rand(b, generator=g)
        cov = rbf(x.double(), x.double(), ell.double(), scale.double() ** 2)
        cov = cov + spec.noise**2 * torch.eye(nc + nt, dtype=torch.float64)
        y = (torch.linalg.cholesky(cov) @ torch.randn(b, nc + nt, 1, generator=g,
                                                      dtype=torch.float64))[..., 0]
        xs += list(x)
        ys += list(y.float())
        n_ctx += [nc] * b
        ells.append(ell)
        scales.append(scale)
    data = Sequences.from_lists({"x": [x[:, None].numpy() for x in xs],
                                 "y": [y.numpy() for y in ys]})
    scored = data.valid().clone()
    scored[:, 0] = False
    return TNPData(data.with_scored(scored), torch.tensor(n_ctx), torch.cat(ells),
                   torch.cat(scales), spec.noise)


def _flat_x(x: Tensor) -> Tensor:
    return x[..., 0] if x.dim() >= 3 else x
