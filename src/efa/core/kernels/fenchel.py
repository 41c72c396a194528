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
  counts and a converged flag are returned.
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

from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import Tensor

from efa.core.kernels.base import register_kernel
from efa.core.kernels.preference import (
    PreferenceKernel,
    check_prior,
    positive,
    template_mean,
    template_scores,
)

DEFAULT_TOL = {torch.float64: 1e-10, torch.float32: 1e-5}


# --------------------------------------------------------------------------- the dual problem


def _norm(x: Tensor) -> Tensor:
    return torch.linalg.vector_norm(x, dim=-1)


def tilted(lam: Tensor, t: Tensor, own: Tensor | None,
           log_u: Tensor) -> tuple[Tensor, Tensor]:
    """(p [..., Iq, Ik], log Σ_j u_j e^{⟨t_j, λ⟩} [..., Iq]) for a normalised log prior."""
    logits = log_u + template_scores(lam, t, own)
    lse = torch.logsumexp(logits, dim=-1, keepdim=True)
    return torch.exp(logits - lse), lse[..., 0]


def cov_times(p: Tensor, h: Tensor, t: Tensor, own: Tensor | None, v: Tensor) -> Tensor:
    """Cov_p[t] v = Σ_j p_j t_j ⟨t_j, v⟩ − h⟨h, v⟩ (h = E_p[t]), per query."""
    tv = template_scores(v, t, own)
    return template_mean(p * tv, t, own) - h * (h * v).sum(-1, keepdim=True)


def _alpha(alpha, like: Tensor) -> Tensor:
    """α as a tensor with a trailing axis of 1, broadcasting against [..., Iq, d]."""
    a = positive(torch.as_tensor(alpha, dtype=like.dtype, device=like.device), "alpha")
    return a.reshape(*a.shape, 1) if a.dim() else a.reshape(1)


def dual_objective(lam: Tensor, z: Tensor, t: Tensor, log_u: Tensor, alpha: float | Tensor,
                   own: Tensor | None = None) -> Tensor:
    """F(λ) of Eq. 8 per query [..., Iq] (log_u need not be normalised; α a number or a
    tensor broadcasting to [..., Iq])."""
    alpha = _alpha(alpha, z)
    log_u = torch.log_softmax(log_u, dim=-1)
    mu = template_mean(log_u.exp(), t, own)
    _, lse = tilted(lam, t, own, log_u)
    return (lam * (mu + z)).sum(-1) - (lam * lam).sum(-1) / (2 * alpha[..., 0]) - lse


def primal_objective(p: Tensor, z: Tensor, t: Tensor, log_u: Tensor, alpha: float | Tensor,
                     own: Tensor | None = None) -> Tensor:
    """Eq. 3 at p [..., Iq, Ik]: (α/2)‖μ + z − E_p[t]‖² + KL(p ‖ u), per query."""
    alpha = _alpha(alpha, z)
    log_u = torch.log_softmax(log_u, dim=-1)
    mu = template_mean(log_u.exp(), t, own)
    fit = ((mu + z - template_mean(p, t, own)) ** 2).sum(-1)
    kl = torch.where(p > 0, p * (torch.log(p) - log_u), torch.zeros_like(p)).sum(-1)
    return alpha[..., 0] / 2 * fit + kl


def cg(matvec: Callable[[Tensor], Tensor], b: Tensor, rtol: Tensor, max_iter: int) -> Tensor:
    """Conjugate gradients for A x = b per query (A symmetric positive definite, given by
    ``matvec``), each query stopped when ‖r‖ ≤ rtol·‖b‖."""
    x = torch.zeros_like(b)
    r = b.clone()
    d = r.clone()
    rr = (r * r).sum(-1, keepdim=True)
    stop = (rtol * _norm(b))[..., None] ** 2
    tiny = torch.finfo(b.dtype).tiny
    for _ in range(max_iter):
        active = rr > stop
        if not bool(active.any()):
            break
        ad = matvec(d)
        dad = (d * ad).sum(-1, keepdim=True)
        a = torch.where(active, rr / dad.clamp_min(tiny), 0)
        x = x + a * d
        r = r - a * ad
        rr_new = (r * r).sum(-1, keepdim=True)
        beta = torch.where(active, rr_new / rr.clamp_min(tiny), 0)
        d = torch.where(active, r + beta * d, d)
        rr = torch.where(active, rr_new, rr)
    return x


def solve_dual(z: Tensor, t: Tensor, log_u: Tensor, alpha: Tensor, own: Tensor | None = None,
               tol: float | None = None, max_iter: int = 50,
               start: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """λ* of Eq. 8 per query by safeguarded Newton (no gradients). ``alpha`` broadcasts to
    [..., Iq, 1]. Returns (λ* [..., Iq, d], Newton iterations [..., Iq], converged [..., Iq])."""
    return _newton(z, t, log_u, alpha, own, tol, max_iter, start)[:3]


def _newton(z, t, log_u, alpha, own, tol, max_iter, start):
    """solve_dual, also returning the tilt p̃ and its mean at λ*."""
    with torch.no_grad():
        dtype = z.dtype
        tol = DEFAULT_TOL.get(dtype, 1e-5) if tol is None else tol
        eps = torch.finfo(dtype).eps
        log_u = torch.log_softmax(log_u, dim=-1)
        mu = template_mean(log_u.exp(), t, own)
        b = mu + z
        lam = alpha * z if start is None else start.clone()
        iters = torch.zeros(lam.shape[:-1], dtype=torch.long, device=lam.device)
        cg_steps = min(t.shape[-1], t.shape[-2]) + 1

        finite = torch.isfinite(log_u)

        def objective(lam):
            """(p, F, the magnitude of F's terms (its rounding scale), h, ∇F)."""
            logits = log_u + template_scores(lam, t, own)
            lse = torch.logsumexp(logits, dim=-1, keepdim=True)
            p = torch.exp(logits - lse)
            lb, ll = (lam * b).sum(-1), (lam * lam).sum(-1) / (2 * alpha[..., 0])
            h = template_mean(p, t, own)
            biggest = torch.where(finite, logits.abs(), 0).amax(-1)  # log-sum-exp's rounding
            return (p, lb - ll - lse[..., 0], lb.abs() + ll + biggest, h,
                    b - lam / alpha - h)

        p, f, mag, h, g = objective(lam)
        for it in range(max_iter + 1):
            res = alpha[..., 0] * _norm(g)
            size = _norm(lam)
            floor = 8 * eps * (alpha[..., 0] * (_norm(b) + _norm(h)) + size)
            done = res <= tol * size + floor
            if bool(done.all()) or it == max_iter:
                break
            iters += ~done
            # Inexact Newton: CG to a relative residual ~ (relative gradient)² (quadratic; CG
            # steps are cheap next to the exponentials of the tilt).
            rel = res / size.clamp_min(torch.finfo(dtype).tiny)
            rtol = (rel * rel).clamp(min=eps, max=0.1)
            step = cg(lambda v, p=p, h=h: v / alpha + cov_times(p, h, t, own, v), g, rtol,
                      cg_steps)
            step = torch.where(done[..., None], 0, step)
            # Backtracking: Armijo on F, or (near the optimum, where F's change drowns in its
            # rounding) a smaller gradient.
            slope = (g * step).sum(-1)
            gnorm = _norm(g)
            eta = torch.ones_like(f)
            for _ in range(60):
                new = lam + eta[..., None] * step
                p_new, f_new, mag_new, h_new, g_new = objective(new)
                ok = done | (f_new >= f + 1e-4 * eta * slope - 16 * eps * (mag + mag_new))
                ok |= (_norm(g_new) <= (1 - 1e-4 * eta) * gnorm) & (f_new >= f - 16 * eps * (
                    mag + mag_new))
                if bool(ok.all()):
                    break
                eta = torch.where(ok, eta, eta / 2)
            lam, p, f, mag, h, g = new, p_new, f_new, mag_new, h_new, g_new
        return lam, iters, done, p, h


def stationarity(lam: Tensor, z: Tensor, t: Tensor, own: Tensor | None, log_u: Tensor,
                 alpha: Tensor) -> Tensor:
    """∇F(λ) = μ + z − λ/α − E_p[t] (zero at λ*), differentiable in everything but λ's
    role as the solution."""
    log_u = torch.log_softmax(log_u, dim=-1)
    mu = template_mean(log_u.exp(), t, own)
    p, _ = tilted(lam, t, own, log_u)
    return mu + z - lam / alpha - template_mean(p, t, own)


def _hessian_solve(lam, t, own, log_u, alpha, g, tol, p=None, h=None):
    """(I/α + Cov_p̃[t])⁻¹ g with p̃ the tilt at λ (or ``p``, with mean ``h``; no gradients)."""
    with torch.no_grad():
        if p is None:
            p, _ = tilted(lam, t, own, torch.log_softmax(log_u, dim=-1))
            h = template_mean(p, t, own)
        rtol = torch.full(g.shape[:-1], tol, dtype=g.dtype, device=g.device)
        steps = 2 * (min(t.shape[-1], t.shape[-2]) + 1)
        return cg(lambda v: v / alpha + cov_times(p, h, t, own, v), g, rtol, steps)


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
        lam, iters, done, p, h = _newton(z, t, log_u, alpha, own, tol, max_iter, None)
        if info is not None:
            info["iterations"], info["converged"] = iters, done
        ctx.save_for_backward(lam, z, t, own, log_u, alpha, p, h)
        ctx.tol = DEFAULT_TOL.get(z.dtype, 1e-5) if tol is None else tol
        return lam

    @staticmethod
    def backward(ctx, g_lam):
        lam, z, t, own, log_u, alpha, p, h = ctx.saved_tensors
        w = _hessian_solve(lam, t, own, log_u, alpha, g_lam, min(ctx.tol, 1e-6), p, h)
        needs = list(ctx.needs_input_grad[:5])
        grads = _implicit_grads(
            (z, t, own, log_u, alpha), needs,
            lambda z_, t_, o_, l_, a_: stationarity(lam, z_, t_, o_, l_, a_), w)
        if needs[4] and grads[4] is not None:
            grads[4] = grads[4].sum_to_size(alpha.shape)
        return (*grads, None, None, None)


class _SecondOrder(torch.autograd.Function):
    """λ = (I/α + Σ_u)⁻¹ z = α(I + αΣ_u)⁻¹ z (Eq. 14) with implicit gradients: for
    A(θ)λ = z, dL/dz = A⁻¹ḡ and dL/dθ = −⟨A⁻¹ḡ, ∂(A(θ)λ)/∂θ⟩."""

    @staticmethod
    def forward(ctx, z, t, own, log_u, alpha, tol):
        lam = _hessian_solve(torch.zeros_like(z), t, own, log_u, alpha, z, tol)
        ctx.save_for_backward(lam, t, own, log_u, alpha)
        ctx.tol = tol
        return lam

    @staticmethod
    def backward(ctx, g_lam):
        lam, t, own, log_u, alpha = ctx.saved_tensors
        w = _hessian_solve(torch.zeros_like(lam), t, own, log_u, alpha, g_lam, ctx.tol)
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
                   dtype: torch.dtype | None = None,
                   info: dict | None = None) -> Tensor:
    """λ* of Eq. 8 per query, differentiable (implicit gradients). ``alpha``: a number or a
    tensor broadcasting to [..., Iq] (e.g. [1, H, 1] per head); ``dtype``: solve in this
    precision (e.g. torch.float64) and return λ* in z's; ``info`` (a dict) receives the
    Newton iteration counts and converged flags."""
    z_, t_, own_, log_u_, a_ = _prepare(z, t, log_u, alpha, own, dtype)
    lam = _DualSolve.apply(z_, t_, own_, log_u_, a_, tol, max_iter, info)
    return lam.to(z.dtype)


def second_order_lambda(z: Tensor, t: Tensor, log_u: Tensor, alpha: float | Tensor,
                        own: Tensor | None = None, tol: float | None = None,
                        dtype: torch.dtype | None = None) -> Tensor:
    """Eq. 14: λ = α(I + αΣ_u)⁻¹z with Σ_u = Cov_u[t] per query, differentiable."""
    z_, t_, own_, log_u_, a_ = _prepare(z, t, log_u, alpha, own, dtype)
    tol = DEFAULT_TOL.get(z_.dtype, 1e-5) if tol is None else tol
    return _SecondOrder.apply(z_, t_, own_, log_u_, a_, tol).to(z.dtype)


def tilt_weights(lam: Tensor, t: Tensor, log_u: Tensor, own: Tensor | None = None) -> Tensor:
    """p̃ ∝ u exp⟨t, λ⟩ (Eq. 10) [..., Iq, Ik]."""
    return torch.softmax(log_u + template_scores(lam, t, own), dim=-1)


# --------------------------------------------------------------------------- the kernel


def check_tol(tol: object, where: str) -> None:
    """Check a solver tolerance: a finite float > 0."""
    if tol is not None and not (isinstance(tol, int | float) and not isinstance(tol, bool)
                                and 0 < tol < 1):
        raise ValueError(f"{where}tol must be a number in (0, 1) or null, got {tol!r}")


@register_kernel
class Fenchel(PreferenceKernel):
    """Exact attention as inference: p̃ ∝ u exp⟨t, λ*⟩ with λ* from the dual (Eq. 8),
    t = scale·k, z = q. Options beyond the preference prior's: ``tol`` (None: 1e-5 in
    float32, 1e-10 in float64), ``max_iter`` (50) and ``precision`` ("float64" to solve in
    double precision whatever the model's dtype; None: the model's). The last solve's Newton
    iteration counts are kept in ``last_solve``."""

    name = "fenchel"
    DEFAULTS: ClassVar[dict[str, Any]] = {
        **PreferenceKernel.DEFAULTS, "tol": None, "max_iter": 50, "precision": None,
    }

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
        """The templates t the dual is solved over (the scaled keys)."""
        return k * self.scale, None if k_own is None else k_own * self.scale

    def tilt(self, q: Tensor, k: Tensor, log_u: Tensor, k_own: Tensor | None,
             q_pos: Tensor, k_pos: Tensor) -> Tensor:
        t, own = self.templates(q, k, k_own)
        a = self.alpha().to(q.dtype)[None, :, None]
        precision = self.opts["precision"]
        info: dict = {}
        lam = fenchel_lambda(q, t, log_u, a, own, self.opts["tol"], self.opts["max_iter"],
                             dtype=getattr(torch, precision) if precision else None, info=info)
        self.last_solve = info
        return tilt_weights(lam, t, log_u, own)
