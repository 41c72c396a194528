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
from efa.generators.draws import positive_int


@dataclass(frozen=True)
class NoteGP:
    """The UNN note's data-generating process, with documented choices (module docstring).

    Parameters
    ----------
    length : int, default 50
        N, the points per sequence, >= 2.
    lengthscale : float, default 1.0
        The RBF kernel's length-scale ℓ, > 0.
    variance : float, default 1.0
        The RBF kernel's variance, > 0.
    offset_var : float, default 2.0
        The variance of each sequence's two channel offsets e_{j,0}, e_{j,1}, >= 0.
    noise : float, default 0.0
        The standard deviation of the per-point observation noise ε, >= 0 (0: the literal
        note).
    x_low : float, default 5.0
        The lower end of x's uniform distribution.
    x_high : float, default 15.0
        Its upper end, > ``x_low``.
    p_channel : float, default 0.5
        The probability that a point is in channel 1, in [0, 1].
    jitter : float, default 1e-8
        The nugget added to the RBF covariance when f is drawn, >= 0.

    Raises
    ------
    ValueError
        For a value outside these ranges.
    """

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
    """Return the RBF kernel matrix variance · exp(−(x1_i − x2_j)² / (2 ℓ²)) of scalar inputs.

    Parameters
    ----------
    x1 : torch.Tensor, shape (..., I)
        The first inputs.
    x2 : torch.Tensor, shape (..., J)
        The second inputs.
    lengthscale : float or torch.Tensor
        ℓ > 0: a scalar, or a ``[...]`` tensor (one per function).
    variance : float or torch.Tensor
        A scalar, or a ``[...]`` tensor (one per function).

    Returns
    -------
    torch.Tensor, shape (..., I, J)
        The kernel matrix, in ``x1``'s dtype.

    Raises
    ------
    ValueError
        When a length-scale is not positive and finite.
    """
    ell = torch.as_tensor(lengthscale, dtype=x1.dtype)
    var = torch.as_tensor(variance, dtype=x1.dtype)
    if not bool((ell > 0).all()) or not bool(torch.isfinite(ell).all()):
        raise ValueError(f"lengthscale must be positive and finite, got {lengthscale!r}")
    # Each on its own: a scalar ℓ with per-function variances (or the reverse) is allowed.
    if ell.dim():
        ell = ell[..., None, None]
    if var.dim():
        var = var[..., None, None]
    d = (x1[..., :, None] - x2[..., None, :]) / ell
    return var * torch.exp(-0.5 * d**2)


def cross_covariance(spec: NoteGP, x1: Tensor, k1: Tensor, x2: Tensor, k2: Tensor) -> Tensor:
    """Return Cov(y1, y2) between distinct points: RBF + the shared channel offset.

    Parameters
    ----------
    spec : NoteGP
        The process.
    x1 : torch.Tensor, shape (..., I)
        The first points' inputs.
    k1 : torch.Tensor, shape (..., I)
        Their channels (0/1).
    x2 : torch.Tensor, shape (..., J)
        The second points' inputs.
    k2 : torch.Tensor, shape (..., J)
        Their channels.

    Returns
    -------
    torch.Tensor, shape (..., I, J)
        ``rbf(x1, x2) + offset_var · [k1_i == k2_j]`` (no noise: the points are distinct).
    """
    same = (k1[..., :, None] == k2[..., None, :]).to(x1.dtype)
    return rbf(x1, x2, spec.lengthscale, spec.variance) + spec.offset_var * same


def covariance(spec: NoteGP, x: Tensor, k: Tensor) -> Tensor:
    """Return the exact covariance of y: RBF + channel offsets + (noise² + jitter)·I.

    Parameters
    ----------
    spec : NoteGP
        The process.
    x : torch.Tensor, shape (..., N) or (..., N, 1)
        The points' inputs.
    k : torch.Tensor, shape (..., N)
        Their channels (0/1).

    Returns
    -------
    torch.Tensor, shape (..., N, N)
        The covariance, float64.

    Raises
    ------
    ValueError
        When ``k`` does not have the shape of ``x`` (without its trailing 1).
    """
    x = _flat_x(x).double()
    if tuple(k.shape) != tuple(x.shape):
        raise ValueError(f"k (the channels) has shape {list(k.shape)}, x has {list(x.shape)}: "
                         "one channel per point")
    cov = cross_covariance(spec, x, k, x, k)
    eye = torch.eye(x.shape[-1], dtype=torch.float64)
    return cov + (spec.noise**2 + spec.jitter) * eye


def sample_note(spec: NoteGP, num: int, seed: int) -> Sequences:
    """Draw ``num`` sequences of ``spec.length`` points, one random function each.

    Parameters
    ----------
    spec : NoteGP
        The process, e.g. :data:`LITERAL` or :data:`NOISY`.
    num : int
        The number of sequences, >= 1.
    seed : int
        Seed of the draws (x, channels, offsets, f, noise, in this order).

    Returns
    -------
    Sequences
        Fields ``x`` ``[num, N, 1]`` (an attribute), ``y`` ``[num, N]`` and ``channel``
        ``[num, N]`` (0/1); the first position is not scored.

    Raises
    ------
    TypeError
        When ``spec`` is not a :class:`NoteGP`.
    ValueError
        When ``num`` is not a positive integer.
    """
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
    """The TNP benchmark's RBF prior (``regression/data/gp.py`` of tung-nd/TNP-pytorch).

    Parameters
    ----------
    max_num_points : int, default 50
        m: a batch has ``num_ctx ~ U{3, …, m − 4}`` context points and
        ``num_tar ~ U{3, …, m − num_ctx − 1}`` targets; >= 7.
    batch_size : int, default 16
        Functions per batch, >= 1.
    x_low : float, default -2.0
        The lower end of x's uniform distribution.
    x_high : float, default 2.0
        Its upper end, > ``x_low``.
    max_length : float, default 0.6
        The length-scale is ~ U[0.1, ``max_length``] per function; ≥ 0.1.
    max_scale : float, default 1.0
        The scale is ~ U[0.1, ``max_scale``] per function (kernel variance scale²); ≥ 0.1.
    noise : float, default 0.02
        The noise standard deviation inside the covariance, >= 0.

    Raises
    ------
    ValueError
        For a value outside these ranges.
    """

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
        for name in ("max_length", "max_scale"):  # drawn from U[0.1, max]
            if not 0.1 <= getattr(self, name) < math.inf:
                raise ValueError(f"{name} must be finite and at least 0.1 (the draws are "
                                 f"U[0.1, {name}]), got {getattr(self, name)!r}")
        if not 0 <= self.noise < math.inf:
            raise ValueError(f"noise must be >= 0 and finite, got {self.noise!r}")


@dataclass
class TNPData:
    """Functions of the TNP prior, each with its context points first, then its targets.

    Parameters
    ----------
    data : Sequences
        Fields ``x`` ``[num, N, 1]`` and ``y`` ``[num, N]``; the first position is not scored.
    num_context : torch.Tensor, shape (num,)
        The number of context points of each function.
    lengthscale : torch.Tensor, shape (num,)
        The length-scale each function was drawn with.
    scale : torch.Tensor, shape (num,)
        The scale each function was drawn with (kernel variance scale²).
    noise : float
        The noise standard deviation of the prior.
    """

    data: Sequences
    num_context: Tensor
    lengthscale: Tensor
    scale: Tensor
    noise: float

    def context(self) -> Tensor:
        """Return the context positions.

        Returns
        -------
        torch.Tensor of bool, shape (num, N)
            True at the first ``num_context`` positions of each function.
        """
        return torch.arange(self.data.max_len) < self.num_context[:, None]

    def targets(self) -> Tensor:
        """Return the target positions.

        Returns
        -------
        torch.Tensor of bool, shape (num, N)
            True at the real positions after the context.
        """
        return self.data.valid() & ~self.context()


def sample_tnp(spec: TNPGP, num_batches: int, seed: int,
               sizes: tuple[int, int] | None = None) -> TNPData:
    """Draw ``num_batches`` batches of ``spec.batch_size`` functions from the TNP prior.

    Drawn as the reference's ``GPSampler(RBFKernel()).sample`` does: per batch the sizes, then
    x, then the kernel, then y. Functions of different batches have different numbers of
    points; shorter ones are padded.

    Parameters
    ----------
    spec : TNPGP
        The prior.
    num_batches : int
        The number of batches, >= 1.
    seed : int
        Seed of the draws.
    sizes : tuple of (int, int) or None, default None
        ``(context, targets)``: fixed sizes for every batch instead of drawn ones (e.g.
        training functions).

    Returns
    -------
    TNPData
        ``num_batches · batch_size`` functions.

    Raises
    ------
    ValueError
        When ``num_batches`` or a size is not a positive integer, or ``sizes`` is not a pair.
    """
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
