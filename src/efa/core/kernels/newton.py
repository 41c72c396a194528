"""The numerics of the Fenchel dual of attention as inference (:mod:`efa.core.kernels.fenchel`,
Paper A, Eq. 8): the tilt p ∝ u exp⟨t, λ⟩ and its log-normaliser (:func:`tilted`),
covariance-vector products Cov_p[t] v (:func:`cov_times`), conjugate gradients (:func:`cg`), the
safeguarded Newton iteration for λ* (:func:`newton`) and solves with the negative Hessian
I/α + Cov_p[t] (:func:`hessian_solve`). Nothing here takes gradients: the differentiable
solutions and the objectives are in :mod:`efa.core.kernels.fenchel`.

The layout is that of the kernels: queries [..., Iq, d], templates [..., Ik, d] shared by the
queries, log prior [..., Iq, Ik]; ``own`` [..., Iq, d] (Iq = Ik) gives query q its own
template at j = q (two-stream).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch import Tensor

from efa.core.kernels.preference import template_mean, template_scores

DEFAULT_TOL = {torch.float64: 1e-10, torch.float32: 1e-5}


def _norm(x: Tensor) -> Tensor:
    return torch.linalg.vector_norm(x, dim=-1)


def tilted(lam: Tensor, t: Tensor, own: Tensor | None,
           log_u: Tensor) -> tuple[Tensor, Tensor]:
    """The tilt p_j ∝ u_j exp⟨t_j, λ⟩ of each query and its log-normaliser.

    Parameters
    ----------
    lam : torch.Tensor, shape (..., Iq, d)
        λ per query.
    t : torch.Tensor, shape (..., Ik, d)
        Templates shared by the queries.
    own : torch.Tensor, shape (..., Iq, d), or None
        Query q's own template at j = q (two-stream; Iq = Ik).
    log_u : torch.Tensor, shape (..., Iq, Ik)
        Log prior, normalised (log_softmax).

    Returns
    -------
    p : torch.Tensor, shape (..., Iq, Ik)
        The tilt.
    lse : torch.Tensor, shape (..., Iq)
        log Σ_j u_j exp⟨t_j, λ⟩.
    """
    logits = log_u + template_scores(lam, t, own)
    lse = torch.logsumexp(logits, dim=-1, keepdim=True)
    return torch.exp(logits - lse), lse[..., 0]


def cov_times(p: Tensor, h: Tensor, t: Tensor, own: Tensor | None, v: Tensor) -> Tensor:
    """Cov_p[t] v = Σ_j p_j t_j ⟨t_j, v⟩ − h⟨h, v⟩ (h = E_p[t]), per query: two template
    products, never a d×d matrix.

    Parameters
    ----------
    p : torch.Tensor, shape (..., Iq, Ik)
        Weights of each query over the templates.
    h : torch.Tensor, shape (..., Iq, d)
        Their means E_p[t].
    t : torch.Tensor, shape (..., Ik, d)
        Templates shared by the queries.
    own : torch.Tensor, shape (..., Iq, d), or None
        Query q's own template at j = q (two-stream; Iq = Ik).
    v : torch.Tensor, shape (..., Iq, d)
        One vector per query.

    Returns
    -------
    torch.Tensor, shape (..., Iq, d)
        Cov_p[t] v.
    """
    tv = template_scores(v, t, own)
    return template_mean(p * tv, t, own) - h * (h * v).sum(-1, keepdim=True)


def cg(matvec: Callable[[Tensor], Tensor], b: Tensor, rtol: Tensor, max_iter: int) -> Tensor:
    """Conjugate gradients for A x = b per query, each query stopped when ‖r‖ ≤ rtol·‖b‖.

    Parameters
    ----------
    matvec : callable
        x ↦ A x on tensors shaped like ``b``, A symmetric positive definite per query.
    b : torch.Tensor, shape (..., Iq, d)
        Right-hand sides.
    rtol : torch.Tensor, shape (..., Iq)
        Relative residual at which each query stops.
    max_iter : int
        Most iterations (CG is exact in at most d of them, in exact arithmetic).

    Returns
    -------
    torch.Tensor, shape (..., Iq, d)
        The solutions x (from x = 0).
    """
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
        # Rounding can make the Hessian indefinite (a tilt far from the prior, α large): a
        # direction without positive curvature ends that query's solve where it is.
        active = active & (dad > 0)
        a = torch.where(active, rr / dad.clamp_min(tiny), 0)
        x = x + a * d
        r = r - a * ad
        rr_new = (r * r).sum(-1, keepdim=True)
        beta = torch.where(active, rr_new / rr.clamp_min(tiny), 0)
        d = torch.where(active, r + beta * d, d)
        rr = torch.where(active, rr_new, rr)
    return x


def newton(z: Tensor, t: Tensor, log_u: Tensor, alpha: Tensor, own: Tensor | None,
           tol: float | None, max_iter: int, start: Tensor | None
           ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """λ* of Eq. 8 per query by safeguarded Newton (no gradients), with the tilt p̃ at λ*.

    The engine of :func:`efa.core.kernels.fenchel.solve_dual` (see its module for the method).

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
    own : torch.Tensor, shape (..., Iq, d), or None
        Query q's own template at j = q (two-stream; Iq = Ik).
    tol : float or None
        Stop at α‖∇F‖ ≤ tol·‖λ‖ (+ the dtype's rounding floor); None: ``DEFAULT_TOL`` of the
        dtype.
    max_iter : int
        Most Newton iterations.
    start : torch.Tensor, shape (..., Iq, d), or None
        Starting λ (None: the closed-form approximation αz).

    Returns
    -------
    lam : torch.Tensor, shape (..., Iq, d)
        λ*.
    iterations : torch.Tensor, shape (..., Iq)
        Newton iterations of each query (int64).
    converged : torch.Tensor, shape (..., Iq)
        Whether each query met the stopping rule (bool).
    p : torch.Tensor, shape (..., Iq, Ik)
        The tilt p̃ at λ*.
    h : torch.Tensor, shape (..., Iq, d)
        Its mean E_p̃[t].
    """
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
            def hessian(v: Tensor, p: Tensor = p, h: Tensor = h) -> Tensor:
                return v / alpha + cov_times(p, h, t, own, v)

            step = cg(hessian, g, rtol, cg_steps)
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


def hessian_solve(lam: Tensor, t: Tensor, own: Tensor | None, log_u: Tensor, alpha: Tensor,
                  g: Tensor, tol: float, p: Tensor | None = None,
                  h: Tensor | None = None) -> Tensor:
    """(I/α + Cov_p̃[t])⁻¹ g, the negative dual Hessian's inverse applied by CG (no gradients).

    Parameters
    ----------
    lam : torch.Tensor, shape (..., Iq, d)
        λ, at which the tilt p̃ is taken (unless ``p`` is given).
    t : torch.Tensor, shape (..., Ik, d)
        Templates shared by the queries.
    own : torch.Tensor, shape (..., Iq, d), or None
        Query q's own template at j = q (two-stream; Iq = Ik).
    log_u : torch.Tensor, shape (..., Iq, Ik)
        Log prior (need not be normalised).
    alpha : torch.Tensor
        α > 0, broadcasting to (..., Iq, 1).
    g : torch.Tensor, shape (..., Iq, d)
        Right-hand sides.
    tol : float
        CG's relative residual.
    p : torch.Tensor, shape (..., Iq, Ik), optional
        The tilt, if already computed (then with ``h``).
    h : torch.Tensor, shape (..., Iq, d), optional
        Its mean E_p[t].

    Returns
    -------
    torch.Tensor, shape (..., Iq, d)
        (I/α + Cov_p̃[t])⁻¹ g.
    """
    with torch.no_grad():
        if p is None or h is None:
            p, _ = tilted(lam, t, own, torch.log_softmax(log_u, dim=-1))
            h = template_mean(p, t, own)
        rtol = torch.full(g.shape[:-1], tol, dtype=g.dtype, device=g.device)
        steps = 2 * (min(t.shape[-1], t.shape[-2]) + 1)
        return cg(lambda v: v / alpha + cov_times(p, h, t, own, v), g, rtol, steps)


def check_finite(lam: Tensor, kernel: str, alpha: Tensor,
                 converged: Tensor | None = None) -> Tensor:
    """``lam`` if every entry is finite, else a FloatingPointError naming the kernel; a
    warning when some queries' solves did not converge (given their flags: in evaluation,
    where the outputs are used; in training the flags stay in ``last_solve``).

    Parameters
    ----------
    lam : torch.Tensor
        The dual solution λ of every query.
    kernel : str
        The kernel's name, for the message.
    alpha : torch.Tensor
        The reliabilities α, for the message.
    converged : torch.Tensor, optional
        Each query's converged flag (bool).

    Returns
    -------
    torch.Tensor
        ``lam`` itself.

    Raises
    ------
    FloatingPointError
        If an entry of ``lam`` is NaN or infinite.
    """
    if not bool(torch.isfinite(lam).all()):
        raise FloatingPointError(
            f"attention kernel {kernel!r}: the dual solution λ is not finite (α up to "
            f"{float(alpha.max()):.3g}): α is too large for {lam.dtype}; lower alpha, or solve "
            "in float64 (precision='float64')")
    if converged is not None and not bool(converged.all()):
        # One text, so that the warning filter shows it once, not at every batch.
        warnings.warn(
            f"attention kernel {kernel!r}: the dual solve did not converge for some queries "
            "(kernel.last_solve['converged'] flags them); their outputs are approximate: raise "
            "max_iter, lower alpha, or solve in float64 (precision='float64')", RuntimeWarning,
            stacklevel=2)
    return lam
