"""How CME attention (:mod:`efa.core.kernels.cme`) solves its kernel systems under an
attention mask.

The key set of query i is its row of ``allowed``; different rows mean different kernel
matrices. :func:`mask_pattern` recognises the masks the model produces, and
:func:`structured_weights` solves them with one Cholesky factorisation per (sequence, head): a
key set shared by every query (with padding), a causal prefix (leading sub-blocks of the
factor), and the query's own position added to or removed from either (a Schur-complement
step: a downdate through the inverse's column and a bordering update). Any other mask falls
back to one factorisation per query (:func:`per_query_weights`).
"""

from __future__ import annotations

from typing import Protocol, cast

import torch
from torch import Tensor


class _System(Protocol):
    """What the solvers read of one CME call (``_Context`` in :mod:`efa.core.kernels.cme`):
    k(K, K) ``g``, k(K, q) ``kq``, the ridge ``lam``, the queries ``q``, the own keys and
    values ``own`` (two-stream), and the kernel values the solvers ask for."""

    g: Tensor
    kq: Tensor
    lam: Tensor
    q: Tensor
    own: tuple[Tensor, Tensor] | None

    def new_keys(self) -> Tensor: ...

    def cross_new(self) -> Tensor: ...

    def pair(self, a: Tensor, b: Tensor) -> Tensor: ...


def cholesky(m: Tensor, ridge_zero: bool) -> Tensor:
    """The Cholesky factor of kernel matrices k(K, K) + λI, or an error saying how to mend one
    that is singular.

    Parameters
    ----------
    m : torch.Tensor, shape (..., n, n)
        Symmetric positive definite matrices.
    ridge_zero : bool
        Whether the ridge λ may be 0 (the error then suggests a ridge > 0; otherwise a larger
        ``min_ridge``).

    Returns
    -------
    torch.Tensor, shape (..., n, n)
        The lower-triangular factors.

    Raises
    ------
    ValueError
        If some matrix is not positive definite (numerically).
    """
    chol, info = torch.linalg.cholesky_ex(m)
    if (info > 0).any():
        hint = ("duplicate or linearly dependent keys with ridge 0: use a ridge > 0"
                if ridge_zero else "increase the ridge (min_ridge)")
        raise ValueError(f"CME attention: the kernel matrix k(K, K) + λI is singular ({hint})")
    return chol


def mask_pattern(a: Tensor) -> tuple[str, Tensor, Tensor | None] | None:
    """Recognise the masks that one factorisation per (sequence, head) can solve.

    Parameters
    ----------
    a : torch.Tensor, shape (B, Hm, Iq, Ik)
        The ``allowed`` mask (bool).

    Returns
    -------
    tuple of (str, torch.Tensor, torch.Tensor or None), or None
        ``("shared", m, None)`` when every query has the same key set m, shape (B, Hm, Ik);
        for square masks, with d, shape (B, Hm, I), the diagonal: ``("full", m, d)`` when
        query i sees m plus/minus itself, ``("causal", m, d)`` when it sees {j < i} ∩ m
        plus/minus itself; None for any other mask.
    """
    iq, ik = a.shape[-2:]
    if iq != ik:
        if bool((a == a[..., :1, :]).all()):
            return "shared", a[..., 0, :], None
        return None
    n = ik
    d = torch.diagonal(a, dim1=-2, dim2=-1)
    if n == 1:
        return "full", d, d
    eye = torch.eye(n, dtype=torch.bool, device=a.device)
    off = a & ~eye
    cols = torch.arange(n, device=a.device)
    m = off[..., (cols + 1) % n, cols]  # m_j from a row other than j
    if bool((off == (m[..., None, :] & ~eye)).all()):
        return "full", m, d
    lower = torch.ones(n, n, dtype=torch.bool, device=a.device).tril(-1)  # [i, j]: j < i
    m = torch.cat([off[..., n - 1, : n - 1], torch.zeros_like(d[..., :1])], -1)
    if bool((off == (m[..., None, :] & lower)).all()):
        return "causal", m, d
    return None


def structured_weights(ctx: _System, kind: str, m: Tensor, d: Tensor | None) -> Tensor | None:
    """CME weights for a mask recognised by :func:`mask_pattern`, from one Cholesky factor per
    (sequence, head) of M = k(K_m, K_m) + λI (keys outside m decoupled).

    A causal prefix is a leading block of the factor; the query's own position added to or
    removed from its key set is a Schur-complement step (a downdate through the inverse's
    column, a bordering update).

    Parameters
    ----------
    ctx : object
        The kernel values of one call (the ``_Context`` of :mod:`efa.core.kernels.cme`):
        k(K, K) [B, H, Ik, Ik], k(K, q) [B, H, Ik, Iq], λ, queries and the own keys.
    kind : {"shared", "full", "causal"}
        The pattern.
    m : torch.Tensor, shape (B, Hm, Ik)
        The shared key set (bool).
    d : torch.Tensor, shape (B, Hm, I), or None
        The mask's diagonal (None for "shared").

    Returns
    -------
    torch.Tensor, shape (B, H, Iq, Ik), or None
        The weights α = (k(K_i, K_i) + λI)⁻¹ k(K_i, q_i) of each query over its key set K_i,
        0 elsewhere; None where removing a key from M would lose too many digits (solve per
        query instead: :func:`per_query_weights`).

    Raises
    ------
    ValueError
        If a kernel matrix is singular.
    """
    g, lam = ctx.g, ctx.lam
    n = g.shape[-1]
    mf = m.to(g.dtype)
    eye = torch.eye(n, dtype=g.dtype, device=g.device)
    mat = g * mf[..., :, None] * mf[..., None, :] + lam * eye + torch.diag_embed(1 - mf)
    chol = cholesky(mat, False)
    if kind == "shared":
        alpha = torch.cholesky_solve(ctx.kq * mf[..., :, None], chol)
        return (alpha * mf[..., :, None]).transpose(-1, -2)
    d = cast(Tensor, d)  # the square masks ("full", "causal") come with their diagonal

    own = ctx.own is not None
    cols = torch.eye(n, dtype=torch.bool, device=g.device)  # [j, i]: j == i
    if kind == "full":
        # Query i's base set R_i: m, without i when i's own key replaces it (two-stream) or
        # when i may not see itself; key i is then added back (own key, or k_i where i ∉ m).
        drop = m if own else m & ~d
        add = d if own else d & ~m
        base = m[..., :, None] & ~(cols & drop[..., None, :])
        u = torch.cholesky_inverse(chol) if bool(drop.any()) else None
        if u is not None:
            # The downdate's relative error grows as κ²·eps, κ_i = (M⁻¹)_ii M_ii (a key that
            # others nearly repeat): past 1e-3, the caller solves per query instead.
            kappa = torch.diagonal(u, dim1=-2, dim2=-1) * torch.diagonal(mat, dim1=-2, dim2=-1)
            worst = float(torch.where(drop, kappa, 0).detach().max())
            if worst**2 * torch.finfo(g.dtype).eps > 1e-3:
                return None
    else:
        drop = torch.zeros_like(d)
        add = d
        base = m[..., :, None] & cols.new_ones(n, n).triu(1)  # [j, i]: j < i

    def solve(x: Tensor) -> Tensor:
        """The base-set solve (M restricted to R_i)⁻¹ x_i, column by column (x [.., n, c·n],
        c blocks of n columns, zero outside R_i)."""
        if kind == "full":
            y = torch.cholesky_solve(x, chol)
            if u is not None:
                # Removing key i: (M_{-i})⁻¹ x = [M⁻¹x − u_i (M⁻¹x)_i / u_ii] with u_i = M⁻¹e_i.
                blocks = []
                for y_c in y.split(n, dim=-1):
                    coef = torch.diagonal(y_c, dim1=-2, dim2=-1) / torch.diagonal(
                        u, dim1=-2, dim2=-1)
                    blocks.append(y_c - u * torch.where(drop, coef, 0)[..., None, :])
                y = torch.cat(blocks, -1)
            return y
        # Causal: the leading block of the factor is the factor of the leading block, so a
        # prefix system is two triangular solves with the rhs and the middle masked.
        p = base.to(x.dtype).repeat(*([1] * (base.dim() - 1)), x.shape[-1] // n)
        y = torch.linalg.solve_triangular(chol, x * p, upper=False) * p
        return torch.linalg.solve_triangular(chol.mT, y, upper=True)

    basef = base.to(g.dtype)
    kq = ctx.kq * basef
    if not bool(add.any()):
        return (solve(kq) * basef).transpose(-1, -2)
    newk = ctx.new_keys()
    bm = ctx.cross_new() * basef
    y = solve(torch.cat([bm, kq], -1))
    sb, sk = y[..., :n] * basef, y[..., n:] * basef
    lam_i = lam[..., 0]
    # Bordering: the Schur complement of the added key is ≥ λ in exact arithmetic.
    schur = (ctx.pair(newk, newk) + lam_i - (bm * sb).sum(-2)).clamp_min(lam_i)
    a_new = (ctx.pair(newk, ctx.q) - (bm * sk).sum(-2)) / schur * add
    alpha = sk - sb * a_new[..., None, :]
    return alpha.transpose(-1, -2) + torch.diag_embed(a_new)


def per_query_weights(ctx: _System, a: Tensor) -> Tensor:
    """CME weights for any mask: one factorisation per query of its own kernel matrix (with
    the query's own key at position i in the two-stream form).

    Parameters
    ----------
    ctx : object
        The kernel values of one call (as in :func:`structured_weights`).
    a : torch.Tensor, shape (B, Hm, Iq, Ik)
        The ``allowed`` mask (bool).

    Returns
    -------
    torch.Tensor, shape (B, H, Iq, Ik)
        The weights of each query over the keys it may see, 0 elsewhere.

    Raises
    ------
    ValueError
        If a kernel matrix is singular.
    """
    g, kq, lam = ctx.g, ctx.kq.transpose(-1, -2), ctx.lam  # kq [B, H, Iq, Ik]
    b, h = g.shape[:2]
    iq, ik = a.shape[-2:]
    af = a.to(g.dtype).expand(b, h, iq, ik)
    gi = g[..., None, :, :].expand(b, h, iq, ik, ik)
    if ctx.own is not None:
        e = torch.eye(iq, dtype=torch.bool, device=g.device)
        bown = ctx.cross_new().transpose(-1, -2)  # [B, H, I(query), Ik]: k(own_i, k_j)
        c = ctx.pair(ctx.own[0], ctx.own[0])
        gi = torch.where(e[:, :, None], bown[..., :, None, :], gi)
        gi = torch.where(e[:, None, :], bown[..., :, :, None], gi)
        gi = torch.where(e[:, :, None] & e[:, None, :], c[..., :, None, None], gi)
        kq = torch.where(e, ctx.pair(ctx.own[0], ctx.q)[..., None], kq)
    eye = torch.eye(ik, dtype=g.dtype, device=g.device)
    mat = gi * af[..., :, None] * af[..., None, :] + lam[..., None] * eye \
        + torch.diag_embed(1 - af)
    chol = cholesky(mat, False)
    alpha = torch.cholesky_solve((kq * af)[..., None], chol)[..., 0]
    return alpha * af
