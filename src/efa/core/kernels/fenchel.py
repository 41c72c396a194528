"""``fenchel``: exact attention as inference (Paper A, Eqs. 3, 8-11).

Query q's output is ĥ = E_p̃[t] for the minimiser p̃ of (α/2)‖μ + z − E_p[t]‖² + KL(p ‖ u)
(Eq. 3), found through its Fenchel dual (Eq. 8), a smooth strongly concave problem in λ ∈ R^d:

    F(λ) = ⟨λ, μ + z⟩ − ‖λ‖²/(2α) − log Σ_j u_j exp⟨t_j, λ⟩,     p̃_j ∝ u_j exp⟨t_j, λ*⟩,

with μ = E_u[t]. ∇F = μ + z − λ/α − E_p[t] and −∇²F = I/α + Cov_p[t] ⪰ I/α.

- :func:`solve_dual`: λ* per query by a safeguarded Newton method: Newton directions from
  conjugate gradients on Hessian-vector products (Cov_p v costs two template products, never a
  d×d matrix; CG is exact in at most min(d, n) + 1 steps and is stopped at a relative
  residual that shrinks with the gradient, so the iteration stays quadratic), an Armijo
  backtracking line search on F (robust for any α, however far λ* is from αz), and a
  stopping rule α‖∇F‖ ≤ tol·‖λ‖ (+ the rounding floor of the dtype). Per-query iteration
  counts and a converged flag are returned. (The numerics: :mod:`efa.core.kernels.newton`.)
- :func:`fenchel_lambda`: λ* with gradients by the implicit function theorem (a custom
  autograd Function: one more CG solve with the Hessian at λ* in the backward pass, no
  unrolling). Optionally solved in float64 for float32 inputs.
- :func:`second_order_lambda`: Eq. 14, λ = α(I + αΣ_u)⁻¹z, i.e. the first Newton step from
  λ = 0, also with implicit gradients.
- :func:`dual_objective`, :func:`primal_objective`: Eqs. 8 and 3, for tests of strong duality.
- the ``fenchel`` kernel: t_j = scale·k_j, z_q = q (the paper's mapping), p̃ from λ*.

The layout is that of the kernels: queries [..., Iq, d], templates [..., Ik, d] shared by the
queries, log prior [..., Iq, Ik]; ``own`` [..., Iq, d] (Iq = Ik) gives query q its own
template at j = q (two-stream).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from efa.core.kernels.base import register_kernel
from efa.core.kernels.newton import (
    DEFAULT_TOL,
    check_finite,
    cov_times,
    hessian_solve,
    newton,
    tilted,
)
from efa.core.kernels.preference import (
    PreferenceKernel,
    check_prior,
    positive,
    template_mean,
    template_scores,
)
from efa.deprecation import moved_out

__getattr__ = moved_out(__name__)  # names moved out: efa.deprecation.MOVED_NAMES

# --------------------------------------------------------------------------- the dual problem


def _alpha(alpha, like: Tensor) -> Tensor:
    """α as a tensor with a trailing axis of 1, broadcasting against [..., Iq, d]."""
    a = positive(torch.as_tensor(alpha, dtype=like.dtype, device=like.device), "alpha")
    return a.reshape(*a.shape, 1) if a.dim() else a.reshape(1)


def dual_objective(lam: Tensor, z: Tensor, t: Tensor, log_u: Tensor, alpha: float | Tensor,
                   own: Tensor | None = None) -> Tensor:
    """F(λ) of Eq. 8 per query, the dual objective.

    Parameters
    ----------
    lam : torch.Tensor, shape (..., Iq, d)
        λ per query.
    z : torch.Tensor, shape (..., Iq, d)
        Evidence.
    t : torch.Tensor, shape (..., Ik, d)
        Templates shared by the queries.
    log_u : torch.Tensor, shape (..., Iq, Ik)
        Log prior (−inf: masked; need not be normalised).
    alpha : float or torch.Tensor
        α > 0, a number or a tensor broadcasting to (..., Iq).
    own : torch.Tensor, shape (..., Iq, d), optional
        Query q's own template at j = q (two-stream; Iq = Ik).

    Returns
    -------
    torch.Tensor, shape (..., Iq)
        F(λ).
    """
    alpha = _alpha(alpha, z)
    log_u = torch.log_softmax(log_u, dim=-1)
    mu = template_mean(log_u.exp(), t, own)
    _, lse = tilted(lam, t, own, log_u)
    return (lam * (mu + z)).sum(-1) - (lam * lam).sum(-1) / (2 * alpha[..., 0]) - lse


def primal_objective(p: Tensor, z: Tensor, t: Tensor, log_u: Tensor, alpha: float | Tensor,
                     own: Tensor | None = None) -> Tensor:
    """Eq. 3 at p: (α/2)‖μ + z − E_p[t]‖² + KL(p ‖ u), per query, the primal objective.

    Parameters
    ----------
    p : torch.Tensor, shape (..., Iq, Ik)
        A distribution of each query over the templates.
    z : torch.Tensor, shape (..., Iq, d)
        Evidence.
    t : torch.Tensor, shape (..., Ik, d)
        Templates shared by the queries.
    log_u : torch.Tensor, shape (..., Iq, Ik)
        Log prior (−inf: masked; need not be normalised).
    alpha : float or torch.Tensor
        α > 0, a number or a tensor broadcasting to (..., Iq).
    own : torch.Tensor, shape (..., Iq, d), optional
        Query q's own template at j = q (two-stream; Iq = Ik).

    Returns
    -------
    torch.Tensor, shape (..., Iq)
        The objective at p.
    """
    alpha = _alpha(alpha, z)
    log_u = torch.log_softmax(log_u, dim=-1)
    mu = template_mean(log_u.exp(), t, own)
    fit = ((mu + z - template_mean(p, t, own)) ** 2).sum(-1)
    kl = torch.where(p > 0, p * (torch.log(p) - log_u), torch.zeros_like(p)).sum(-1)
    return alpha[..., 0] / 2 * fit + kl


def solve_dual(z: Tensor, t: Tensor, log_u: Tensor, alpha: Tensor, own: Tensor | None = None,
               tol: float | None = None, max_iter: int = 50,
               start: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """λ* of Eq. 8 per query by safeguarded Newton (no gradients).

    Parameters
    ----------
    z : torch.Tensor, shape (..., Iq, d)
        Evidence.
    t : torch.Tensor, shape (..., Ik, d)
        Templates shared by the queries.
    log_u : torch.Tensor, shape (..., Iq, Ik)
        Log prior (−inf: masked; need not be normalised).
    alpha : torch.Tensor
        α > 0, broadcasting to (..., Iq, 1).
    own : torch.Tensor, shape (..., Iq, d), optional
        Query q's own template at j = q (two-stream; Iq = Ik).
    tol : float, optional
        Stop at α‖∇F‖ ≤ tol·‖λ‖ (+ the dtype's rounding floor); default 1e-5 in float32,
        1e-10 in float64.
    max_iter : int, default 50
        Most Newton iterations.
    start : torch.Tensor, shape (..., Iq, d), optional
        Starting λ (default: the closed-form approximation αz).

    Returns
    -------
    lam : torch.Tensor, shape (..., Iq, d)
        λ*.
    iterations : torch.Tensor, shape (..., Iq)
        Newton iterations of each query.
    converged : torch.Tensor, shape (..., Iq)
        Whether each query met the stopping rule (bool).
    """
    return newton(z, t, log_u, alpha, own, tol, max_iter, start)[:3]


def stationarity(lam: Tensor, z: Tensor, t: Tensor, own: Tensor | None, log_u: Tensor,
                 alpha: Tensor) -> Tensor:
    """∇F(λ) = μ + z − λ/α − E_p[t] (zero at λ*), differentiable in everything but λ's
    role as the solution.

    Parameters
    ----------
    lam : torch.Tensor, shape (..., Iq, d)
        λ per query.
    z : torch.Tensor, shape (..., Iq, d)
        Evidence.
    t : torch.Tensor, shape (..., Ik, d)
        Templates shared by the queries.
    own : torch.Tensor, shape (..., Iq, d), or None
        Query q's own template at j = q (two-stream; Iq = Ik).
    log_u : torch.Tensor, shape (..., Iq, Ik)
        Log prior (need not be normalised).
    alpha : torch.Tensor
        α > 0, broadcasting to (..., Iq, 1).

    Returns
    -------
    torch.Tensor, shape (..., Iq, d)
        ∇F(λ).
    """
    log_u = torch.log_softmax(log_u, dim=-1)
    mu = template_mean(log_u.exp(), t, own)
    p, _ = tilted(lam, t, own, log_u)
    return mu + z - lam / alpha - template_mean(p, t, own)


def _implicit_grads(inputs, needs, fn, w):
    """Gradients of ⟨w, fn(*inputs)⟩ with respect to the inputs that need them."""
    leaves = [x.detach().requires_grad_(n) if x is not None else None
              for x, n in zip(inputs, needs, strict=True)]
    with torch.enable_grad():
        out = fn(*leaves)
        wanted = [x for x, n in zip(leaves, needs, strict=True) if n]
        grads = iter(torch.autograd.grad(out, wanted, grad_outputs=w, allow_unused=True))
    return [next(grads) if n else None for n in needs]


class _DualSolve(torch.autograd.Function):
    """λ*(z, t, own, log u, α) with the implicit-function-theorem gradient: ∇F(λ*, θ) = 0
    gives dλ*/dθ = H⁻¹ ∂∇F/∂θ with H = I/α + Cov_p̃[t], so the vector-Jacobian product is
    ⟨H⁻¹ ḡ, ∂∇F/∂θ⟩: one CG solve and one backward pass through ∇F."""

    @staticmethod
    def forward(ctx, z, t, own, log_u, alpha, tol, max_iter, info):
        lam, iters, done, p, h = newton(z, t, log_u, alpha, own, tol, max_iter, None)
        if info is not None:
            info["iterations"], info["converged"] = iters, done
        ctx.save_for_backward(lam, z, t, own, log_u, alpha, p, h)
        ctx.tol = DEFAULT_TOL.get(z.dtype, 1e-5) if tol is None else tol
        return lam

    @staticmethod
    def backward(ctx, g_lam):
        lam, z, t, own, log_u, alpha, p, h = ctx.saved_tensors
        w = hessian_solve(lam, t, own, log_u, alpha, g_lam, min(ctx.tol, 1e-6), p, h)
        needs = list(ctx.needs_input_grad[:5])
        grads = _implicit_grads((z, t, own, log_u, alpha), needs,
                                lambda z_, t_, o_, l_, a_: stationarity(lam, z_, t_, o_, l_, a_), w)
        if needs[4] and grads[4] is not None:
            grads[4] = grads[4].sum_to_size(alpha.shape)
        return (*grads, None, None, None)


class _SecondOrder(torch.autograd.Function):
    """λ = (I/α + Σ_u)⁻¹ z = α(I + αΣ_u)⁻¹ z (Eq. 14) with implicit gradients: for
    A(θ)λ = z, dL/dz = A⁻¹ḡ and dL/dθ = −⟨A⁻¹ḡ, ∂(A(θ)λ)/∂θ⟩."""

    @staticmethod
    def forward(ctx, z, t, own, log_u, alpha, tol):
        lam = hessian_solve(torch.zeros_like(z), t, own, log_u, alpha, z, tol)
        ctx.save_for_backward(lam, t, own, log_u, alpha)
        ctx.tol = tol
        return lam

    @staticmethod
    def backward(ctx, g_lam):
        lam, t, own, log_u, alpha = ctx.saved_tensors
        w = hessian_solve(torch.zeros_like(lam), t, own, log_u, alpha, g_lam, ctx.tol)
        needs = [False, *ctx.needs_input_grad[1:5]]

        def a_times_lam(z_, t_, o_, l_, a_):
            u = torch.softmax(l_, dim=-1)
            return lam / a_ + cov_times(u, template_mean(u, t_, o_), t_, o_, lam)

        grads = _implicit_grads((lam, t, own, log_u, alpha), needs, a_times_lam, -w)
        if needs[4] and grads[4] is not None:
            grads[4] = grads[4].sum_to_size(alpha.shape)
        return (w if ctx.needs_input_grad[0] else None, *grads[1:], None)


def _prepare(z, t, log_u, alpha, own, dtype):
    alpha = _alpha(alpha, z)
    check_prior(log_u)
    dtype = dtype or z.dtype
    cast = [None if x is None else x.to(dtype) for x in (z, t, own, log_u, alpha)]
    return cast


def fenchel_lambda(z: Tensor, t: Tensor, log_u: Tensor, alpha: float | Tensor,
                   own: Tensor | None = None, tol: float | None = None, max_iter: int = 50,
                   dtype: torch.dtype | None = None, info: dict | None = None) -> Tensor:
    """λ* of Eq. 8 per query, differentiable (implicit gradients).

    Parameters
    ----------
    z : torch.Tensor, shape (..., Iq, d)
        Evidence.
    t : torch.Tensor, shape (..., Ik, d)
        Templates shared by the queries.
    log_u : torch.Tensor, shape (..., Iq, Ik)
        Log prior (−inf: masked; need not be normalised).
    alpha : float or torch.Tensor
        α > 0, a number or a tensor broadcasting to (..., Iq) (e.g. [1, H, 1] per head).
    own : torch.Tensor, shape (..., Iq, d), optional
        Query q's own template at j = q (two-stream; Iq = Ik).
    tol : float, optional
        Newton's stopping tolerance (default 1e-5 in float32, 1e-10 in float64, of the
        solve's dtype; see :func:`solve_dual`).
    max_iter : int, default 50
        Most Newton iterations.
    dtype : torch.dtype, optional
        Solve in this precision (e.g. ``torch.float64``) and return λ* in z's.
    info : dict, optional
        Receives the Newton iteration counts (``"iterations"``) and converged flags
        (``"converged"``).

    Returns
    -------
    torch.Tensor, shape (..., Iq, d)
        λ*, in z's dtype.

    Raises
    ------
    ValueError
        If α is not finite and > 0, or the prior masks every template of a query.
    """
    z_, t_, own_, log_u_, a_ = _prepare(z, t, log_u, alpha, own, dtype)
    lam = _DualSolve.apply(z_, t_, own_, log_u_, a_, tol, max_iter, info)
    return lam.to(z.dtype)


def second_order_lambda(z: Tensor, t: Tensor, log_u: Tensor, alpha: float | Tensor,
                        own: Tensor | None = None, tol: float | None = None,
                        dtype: torch.dtype | None = None) -> Tensor:
    """Eq. 14: λ = α(I + αΣ_u)⁻¹z with Σ_u = Cov_u[t] per query, differentiable.

    Parameters
    ----------
    z : torch.Tensor, shape (..., Iq, d)
        Evidence.
    t : torch.Tensor, shape (..., Ik, d)
        Templates shared by the queries.
    log_u : torch.Tensor, shape (..., Iq, Ik)
        Log prior (−inf: masked; need not be normalised).
    alpha : float or torch.Tensor
        α > 0, a number or a tensor broadcasting to (..., Iq).
    own : torch.Tensor, shape (..., Iq, d), optional
        Query q's own template at j = q (two-stream; Iq = Ik).
    tol : float, optional
        The conjugate gradients' relative residual (default 1e-5 in float32, 1e-10 in
        float64, of the solve's dtype).
    dtype : torch.dtype, optional
        Solve in this precision and return λ in z's.

    Returns
    -------
    torch.Tensor, shape (..., Iq, d)
        λ, in z's dtype.

    Raises
    ------
    ValueError
        If α is not finite and > 0, or the prior masks every template of a query.
    """
    z_, t_, own_, log_u_, a_ = _prepare(z, t, log_u, alpha, own, dtype)
    tol = DEFAULT_TOL.get(z_.dtype, 1e-5) if tol is None else tol
    return _SecondOrder.apply(z_, t_, own_, log_u_, a_, tol).to(z.dtype)


def tilt_weights(lam: Tensor, t: Tensor, log_u: Tensor, own: Tensor | None = None) -> Tensor:
    """p̃ ∝ u exp⟨t, λ⟩ (Eq. 10), the tilt of the prior at λ.

    Parameters
    ----------
    lam : torch.Tensor, shape (..., Iq, d)
        λ per query.
    t : torch.Tensor, shape (..., Ik, d)
        Templates shared by the queries.
    log_u : torch.Tensor, shape (..., Iq, Ik)
        Log prior (−inf: masked; need not be normalised).
    own : torch.Tensor, shape (..., Iq, d), optional
        Query q's own template at j = q (two-stream; Iq = Ik).

    Returns
    -------
    torch.Tensor, shape (..., Iq, Ik)
        The weights p̃, summing to 1.
    """
    return torch.softmax(log_u + template_scores(lam, t, own), dim=-1)


# --------------------------------------------------------------------------- the kernel


def check_tol(tol: object, where: str) -> None:
    """Check a solver tolerance: None, or a number in (0, 1).

    Parameters
    ----------
    tol : object
        The tolerance.
    where : str
        Words that start the error message (e.g. which kernel).

    Raises
    ------
    ValueError
        If ``tol`` is neither None nor a number (not a bool) in (0, 1).
    """
    if tol is not None and not (isinstance(tol, int | float) and not isinstance(tol, bool)
                                and 0 < tol < 1):
        raise ValueError(f"{where}tol must be a number in (0, 1) or null, got {tol!r}")


@register_kernel
class Fenchel(PreferenceKernel):
    """Exact attention as inference: p̃ ∝ u exp⟨t, λ*⟩ with λ* from the dual (Eq. 8),
    t = scale·k, z = q.

    The last solve's Newton iteration counts and converged flags are kept in ``last_solve``.

    Parameters
    ----------
    num_heads : int
        Number of heads H (one α per head).
    head_dim : int
        Width d of each head's queries and keys.
    scale : float
        Factor on the keys: the templates are t = scale·k.
    causal : bool
        Whether the model is unidirectional.
    **options
        Those of :class:`~efa.core.kernels.preference.PreferenceKernel` (the preference
        prior and α), and ``tol`` (None: 1e-5 in float32, 1e-10 in float64), ``max_iter``
        (50) and ``precision`` ("float64" to solve in double precision whatever the model's
        dtype; "float32"; None: the model's).

    Raises
    ------
    ValueError
        If an option is unknown or invalid.
    """

    name = "fenchel"
    DEFAULTS: ClassVar[dict[str, Any]] = {**PreferenceKernel.DEFAULTS, "tol": None,
                                          "max_iter": 50, "precision": None}

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> None:
        super().check_options(options)
        o = {**cls.DEFAULTS, **options}
        where = f"attention kernel {cls.name!r}: "
        check_tol(o["tol"], where)
        if not isinstance(o["max_iter"], int) or isinstance(o["max_iter"], bool) \
                or o["max_iter"] < 1:
            raise ValueError(f"{where}max_iter must be a positive integer, got {o['max_iter']!r}")
        if o["precision"] not in (None, "float32", "float64"):
            raise ValueError(f"{where}precision must be null, 'float32' or 'float64', got "
                             f"{o['precision']!r}")

    def __init__(self, num_heads: int, head_dim: int, scale: float, causal: bool,
                 **options: Any):
        super().__init__(num_heads, head_dim, scale, causal, **options)
        self.last_solve: dict = {}

    def templates(self, q: Tensor, k: Tensor,
                  k_own: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """The templates t the dual is solved over (the scaled keys).

        Parameters
        ----------
        q : torch.Tensor, shape (B, H, Iq, d)
            Queries (unused here).
        k : torch.Tensor, shape (B, H, Ik, d)
            Keys.
        k_own : torch.Tensor, shape (B, H, I, d), or None
            Query i's own key at position i (two-stream).

        Returns
        -------
        t : torch.Tensor, shape (B, H, Ik, d)
            scale·k.
        own : torch.Tensor, shape (B, H, I, d), or None
            scale·k_own.
        """
        return k * self.scale, None if k_own is None else k_own * self.scale

    def tilt(self, q: Tensor, k: Tensor, log_u: Tensor, k_own: Tensor | None,
             q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """p̃ ∝ u exp⟨t, λ*⟩ with λ* solved per query (:func:`fenchel_lambda`).

        Parameters
        ----------
        q : torch.Tensor, shape (B, H, Iq, d)
            Queries (the evidence z).
        k : torch.Tensor, shape (B, H, Ik, d)
            Keys (the templates are t = scale·k).
        log_u : torch.Tensor, shape (B, H, Iq, Ik)
            The preference prior.
        k_own : torch.Tensor, shape (B, H, I, d), or None
            Query i's own key at position i (two-stream).
        q_pos : torch.Tensor, shape (B or 1, Iq)
            Positions of the queries (unused).
        k_pos : torch.Tensor, shape (B or 1, Ik)
            Positions of the keys (unused).

        Returns
        -------
        torch.Tensor, shape (B, H, Iq, Ik)
            The weights p̃, summing to 1 over the allowed keys.
        """
        t, own = self.templates(q, k, k_own)
        a = self.alpha().to(q.dtype)[None, :, None]
        precision = self.opts["precision"]
        info: dict = {}
        lam = fenchel_lambda(q, t, log_u, a, own, self.opts["tol"], self.opts["max_iter"],
                             dtype=getattr(torch, precision) if precision else None, info=info)
        self.last_solve = info
        done = None if self.training else info.get("converged")
        return tilt_weights(check_finite(lam, self.name, a, done), t, log_u, own)
