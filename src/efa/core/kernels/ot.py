"""``ot``: entropic optimal-transport attention (Paper A, Sec. 9 and App. D).

Replacing KL(p ‖ u) in Eq. 3 by the entropic OT cost W_γ(p, u; M) (Eq. 22) lets a template
take weight from a *similar* template (small cost M) instead of only from its own prior mass.
For α and α/γ small the solution is (Eq. 24; Eq. 46 of the appendix has a typo)

    p*(t) = Σ_i u_i exp((α⟨t, z⟩ − M(t, t_i))/γ) / Z_i,
    Z_i = Σ_{t'} exp((α⟨t', z⟩ − M(t', t_i))/γ):

each prior mass u_i is spread over the templates by a softmax of evidence minus transport cost.
With no entropy cost between groups (M = ∞ across) the evidence only moves mass inside a
group; with M = 0 everywhere it is softmax attention with temperature γ/α whatever u is.

The "true preference" ũ = argmin_p W_γ(p, u; M) (Prop. 1, Eq. 39) is the same formula at α = 0,
and μ̃ (Eq. 40) its mean.

Functions take the whole template space: templates t [..., m, d], a prior log u [..., m]
(−inf where u = 0: such templates can still receive weight through M), costs M [..., m, m].
In the ``ot`` kernel the template space of query q is the set of keys it may see (the mask
removes templates from the space altogether, so they get exactly zero weight) and M is
``cost``: "sqeuclidean" (cost_scale·scale²·‖k_i − k_j‖²), "positions" (cost_scale·``|i − j|``),
or a symmetric non-negative matrix over positions given as a list of lists.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from efa.core.kernels.base import register_kernel
from efa.core.kernels.preference import (
    PreferenceKernel,
    log_parameter,
    positive,
    template_mean,
    template_scores,
    with_own,
)


def check_cost(M: Tensor | Sequence[Sequence[float]],
               where: str = "cost matrix M") -> Tensor:
    """M as a tensor if it is square, symmetric, non-negative, NaN-free and each diagonal
    entry is the smallest of its column (Paper A, footnote 11, non-strictly: its own synonym
    example has M = 0 inside a group); otherwise a ValueError saying which entry is wrong.

    Parameters
    ----------
    M : torch.Tensor or sequence of sequences of float, shape (..., m, m)
        The costs between templates (a list of lists is read as float64). Entries may be
        +inf (no transport), symmetrically.
    where : str, default "cost matrix M"
        What the errors call it.

    Returns
    -------
    torch.Tensor, shape (..., m, m)
        ``M`` as a tensor.

    Raises
    ------
    ValueError
        If ``M`` is not a square matrix of numbers, has NaN or negative entries, is not
        symmetric, or an off-diagonal entry is below its column's diagonal entry.
    """
    if not torch.is_tensor(M):
        try:
            M = torch.as_tensor(M, dtype=torch.float64)
        except (ValueError, TypeError, RuntimeError) as err:
            rows = [len(r) if hasattr(r, "__len__") else None for r in M] \
                if hasattr(M, "__iter__") else None
            raise ValueError(f"{where} must be a square matrix of numbers; got rows of lengths "
                             f"{rows} ({err})") from None
    if M.dim() < 2 or M.shape[-1] != M.shape[-2]:
        raise ValueError(f"{where} must be square, got shape {tuple(M.shape)}")
    if torch.isnan(M).any():
        raise ValueError(f"{where} has NaN at {tuple(torch.isnan(M).nonzero()[0].tolist())}")
    if (M < 0).any():
        at = tuple((M < 0).nonzero()[0].tolist())
        raise ValueError(f"{where} must be non-negative, got {float(M[at])} at {at}")
    Mt = M.transpose(-1, -2)
    finite = torch.isfinite(M) & torch.isfinite(Mt)
    asym = torch.where(finite, (M - Mt).abs(), torch.zeros_like(M)) > 1e-12 * (
        1 + torch.where(finite, M.abs(), torch.zeros_like(M)))
    asym = asym | (torch.isfinite(M) != torch.isfinite(Mt))
    if asym.any():
        i, j = asym.nonzero()[0].tolist()[-2:]
        mij, mji = float(M[..., i, j].flatten()[0]), float(M[..., j, i].flatten()[0])
        raise ValueError(f"{where} must be symmetric: M[{i}, {j}] = {mij} but M[{j}, {i}] = {mji}")
    diag = torch.diagonal(M, dim1=-2, dim2=-1)
    below = M < diag[..., None, :]
    if below.any():
        i, j = below.nonzero()[0].tolist()[-2:]
        raise ValueError(f"{where}: M[{i}, {j}] is below the diagonal entry M[{j}, {j}]; a "
                         "template must be at least as close to itself as to any other")
    return M


def ot_weights(t: Tensor, z: Tensor, log_u: Tensor, M: Tensor, alpha: float | Tensor,
               gamma: float | Tensor) -> Tensor:
    """Eq. 24: p*(t) over the template space for evidence z.

    Parameters
    ----------
    t : torch.Tensor, shape (..., m, d)
        The templates.
    z : torch.Tensor, shape (..., d)
        The evidence.
    log_u : torch.Tensor, shape (..., m)
        Log prior (−inf where u = 0; need not be normalised).
    M : torch.Tensor, shape (..., m, m)
        Transport costs, checked by :func:`check_cost`.
    alpha : float or torch.Tensor
        Reliability α > 0.
    gamma : float or torch.Tensor
        Entropic regularisation γ > 0.

    Returns
    -------
    torch.Tensor, shape (..., m)
        The weights p*, summing to 1.

    Raises
    ------
    ValueError
        If α or γ is not finite and > 0, ``M`` is not a valid cost matrix, or the prior gives
        zero mass to every template.
    """
    positive(alpha, "alpha")
    positive(gamma, "gamma")
    M = check_cost(M).to(t.dtype)
    s = alpha * (t @ z[..., None])[..., 0]  # α⟨t, z⟩ [..., m]
    return _mix(s, log_u, M, gamma)


def _mix(s: Tensor, log_u: Tensor, M: Tensor, gamma, allowed: Tensor | None = None) -> Tensor:
    """Σ_i u_i softmax_t((s_t − M(t, t_i))/γ) with u = softmax(log u): s [..., m] (or
    [..., Iq, m] with M [..., Iq | 1, m, m]); ``allowed`` [..., m] limits the template space."""
    if not bool(torch.isfinite(log_u).any(-1).all()):
        raise ValueError("the preference prior gives zero mass to every template of a query")
    logits = (s[..., None, :] - M) / gamma  # [..., i, t]
    if allowed is not None:
        logits = logits.masked_fill(~allowed[..., None, :], float("-inf"))
    spread = torch.softmax(logits, dim=-1)
    u = torch.softmax(log_u, dim=-1)
    return (u[..., None] * spread).sum(-2)


def ot_true_preference(log_u: Tensor, M: Tensor, gamma: float | Tensor) -> Tensor:
    """ũ = argmin_p W_γ(p, u; M) (Prop. 1, Eq. 39): Eq. 24 at α = 0.

    Parameters
    ----------
    log_u : torch.Tensor, shape (..., m)
        Log prior (−inf where u = 0; need not be normalised).
    M : torch.Tensor, shape (..., m, m)
        Transport costs, checked by :func:`check_cost`.
    gamma : float or torch.Tensor
        Entropic regularisation γ > 0.

    Returns
    -------
    torch.Tensor, shape (..., m)
        The true preference ũ.

    Raises
    ------
    ValueError
        If γ is not finite and > 0, ``M`` is not a valid cost matrix, or the prior gives zero
        mass to every template.
    """
    positive(gamma, "gamma")
    M = check_cost(M).to(log_u.dtype)
    return _mix(torch.zeros_like(log_u), log_u, M, gamma)


def ot_true_mean(t: Tensor, log_u: Tensor, M: Tensor, gamma: float | Tensor) -> Tensor:
    """μ̃ = E_ũ[t] (Eq. 40), the mean template under the true preference.

    Parameters
    ----------
    t : torch.Tensor, shape (..., m, d)
        The templates.
    log_u : torch.Tensor, shape (..., m)
        Log prior (−inf where u = 0; need not be normalised).
    M : torch.Tensor, shape (..., m, m)
        Transport costs.
    gamma : float or torch.Tensor
        Entropic regularisation γ > 0.

    Returns
    -------
    torch.Tensor, shape (..., d)
        μ̃.
    """
    return (ot_true_preference(log_u, M, gamma)[..., None, :] @ t)[..., 0, :]


def _mix_factorised(s, log_u, base, mine, gamma, allowed, dt=None):
    """``_mix`` in O(I³) multiply-adds instead of O(I³) exponentials: exp((s_t − M_ti)/γ) =
    E_t K_ti with E = exp(s/γ) (shifted by its maximum per query), K = exp(−M/γ), so
    Z_qi = Σ_t E_qt K_ti and p_qt = E_qt Σ_i K_ti u_qi / Z_qi are two matrix products. Query q's
    own template (``mine`` [B, H, Iq, Ik], its costs) changes row and column q of K: rank-one
    corrections. In the dtype ``dt`` (default: s's; float32 under-flows below e^-87); None if
    some Z is too small for the gradient's 1/Z² to stay finite."""
    dt = dt or s.dtype
    u = torch.softmax(log_u, dim=-1).to(dt)
    sg = (s / gamma).to(dt).masked_fill(~allowed, float("-inf"))
    e = torch.exp(sg - sg.amax(-1, keepdim=True))  # 0 where not allowed
    k = torch.exp(-base.to(dt) / gamma.to(dt))  # [B|1, H, Ik, Ik]
    z = e @ k
    if mine is not None:
        ko = torch.exp(-mine.to(dt) / gamma.to(dt))  # ko[q, q] = 1
        eq = torch.diagonal(e, dim1=-2, dim2=-1)[..., None]
        z = with_own(z + eq * (ko - k), (e * ko).sum(-1))
    # The gradient divides by Z² (through u / Z): a Z below √tiny would send inf·0 = NaN into
    # it although the forward is finite; hand such queries to the wider dtype or the log form
    # (and a NaN Z, from s/γ overflowing: "not >=" catches it).
    if bool((~(z >= torch.finfo(dt).tiny ** 0.5 * 1e4) & (u > 0)).any()):
        return None
    # Divide by 1 where u = 0: those z may under-flow to 0, and where(u > 0, u / z, 0) would
    # still send 0/0 = NaN into the gradient through the branch it does not take.
    r = u / torch.where(u > 0, z, torch.ones_like(z))
    spread = r @ k.transpose(-1, -2)
    if mine is not None:
        rq = torch.diagonal(r, dim1=-2, dim2=-1)[..., None]
        spread = with_own(spread + rq * (ko - k), (ko * r).sum(-1))
    return (e * spread).to(s.dtype)


COSTS = ("sqeuclidean", "positions")


@register_kernel
class OT(PreferenceKernel):
    """Entropic-OT attention (Eq. 24) over the keys a query may see, t = scale·k, z = q.

    Parameters
    ----------
    num_heads : int
        Number of heads H (one α and one γ per head).
    head_dim : int
        Width d of each head's queries and keys.
    scale : float
        Factor on the keys: the templates are t = scale·k.
    causal : bool
        Whether the model is unidirectional.
    **options
        Those of :class:`~efa.core.kernels.preference.PreferenceKernel` (the preference
        prior and α), and:

        - ``gamma`` (1.0, > 0) and ``learn_gamma`` (True: log γ learned per head);
        - ``cost``: "sqeuclidean" (cost_scale·‖t_i − t_j‖², the default), "positions"
          (cost_scale·``|i − j|``) or a matrix over positions (a list of lists, checked by
          :func:`check_cost`);
        - ``cost_scale`` (1.0, > 0).

    Raises
    ------
    ValueError
        If an option is unknown or invalid.
    """

    cost_matrix: Tensor  # a buffer when the cost is given as a matrix (declared for mypy)

    name = "ot"
    row_local = True
    DEFAULTS: ClassVar[dict[str, Any]] = {
        **PreferenceKernel.DEFAULTS, "gamma": 1.0, "learn_gamma": True,
        "cost": "sqeuclidean", "cost_scale": 1.0,
    }

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> None:
        super().check_options(options)
        o = {**cls.DEFAULTS, **options}
        where = f"attention kernel {cls.name!r}: "
        try:
            log_parameter(o["gamma"], "gamma")
            positive(o["cost_scale"], "cost_scale")
        except ValueError as err:
            raise ValueError(where + str(err)) from None
        if not isinstance(o["learn_gamma"], bool):
            raise ValueError(f"{where}learn_gamma must be true or false, got {o['learn_gamma']!r}")
        cost = o["cost"]
        if isinstance(cost, str):
            if cost not in COSTS:
                raise ValueError(f"{where}cost must be one of {COSTS} or a matrix, got {cost!r}")
        else:
            try:
                check_cost(cost, f"{where}cost matrix")
            except (TypeError, RuntimeError) as err:
                raise ValueError(f"{where}cost must be one of {COSTS} or a square matrix of "
                                 f"numbers (list of lists), got {cost!r}") from err

    def __init__(self, num_heads: int, head_dim: int, scale: float, causal: bool,
                 **options: Any):
        super().__init__(num_heads, head_dim, scale, causal, **options)
        log_gamma = torch.full((num_heads,), math.log(self.opts["gamma"]))
        if self.opts["learn_gamma"]:
            self.log_gamma = nn.Parameter(log_gamma)
        else:
            self.register_buffer("log_gamma", log_gamma)
        cost = self.opts["cost"]
        if not isinstance(cost, str):
            self.register_buffer("cost_matrix", torch.as_tensor(cost, dtype=torch.float32),
                                 persistent=False)

    def gamma(self) -> Tensor:
        """The entropic regularisation γ of each head (learned unless ``learn_gamma=False``).

        Returns
        -------
        torch.Tensor, shape (H,)
            γ = exp(log γ) > 0.
        """
        return self.log_gamma.exp()

    def base_costs(self, t: Tensor, k_pos: Tensor) -> Tensor:
        """The costs M between the context templates.

        Parameters
        ----------
        t : torch.Tensor, shape (B, H, Ik, d)
            Templates (scaled keys), read by the "sqeuclidean" cost.
        k_pos : torch.Tensor, shape (B or 1, Ik)
            Positions of the keys, read by the position costs.

        Returns
        -------
        torch.Tensor, shape (B or 1, H or 1, Ik, Ik)
            M, 0 on the diagonal.

        Raises
        ------
        ValueError
            If a given cost matrix covers fewer positions than the data have.
        """
        cost, c = self.opts["cost"], self.opts["cost_scale"]
        if cost == "positions":
            pos = k_pos.to(t.dtype)
            return c * (pos[..., :, None] - pos[..., None, :]).abs()[:, None]
        if not isinstance(cost, str):
            n = int(k_pos.max()) + 1
            if n > self.cost_matrix.shape[0]:
                raise ValueError(f"attention kernel 'ot': the cost matrix covers "
                                 f"{self.cost_matrix.shape[0]} positions, the data has {n}")
            m = self.cost_matrix.to(t.dtype)[k_pos[..., :, None], k_pos[..., None, :]]
            return c * m[:, None]
        sq = (t * t).sum(-1)
        base = (sq[..., :, None] + sq[..., None, :] - 2 * t @ t.transpose(-1, -2)).clamp_min(0)
        return c * base.masked_fill(torch.eye(t.shape[-2], dtype=torch.bool, device=t.device), 0)

    def own_costs(self, t: Tensor, own: Tensor, base: Tensor) -> Tensor:
        """The cost between query q's own template and template j (0 at j = q).

        Position costs do not depend on the template: row q of ``base``.

        Parameters
        ----------
        t : torch.Tensor, shape (B, H, Ik, d)
            Context templates.
        own : torch.Tensor, shape (B, H, Iq, d)
            Each query's own template (two-stream; Iq = Ik).
        base : torch.Tensor, shape (B or 1, H or 1, Ik, Ik)
            The context's costs (from ``base_costs``).

        Returns
        -------
        torch.Tensor, shape (B, H, Iq, Ik)
            The own template's costs, one row per query.
        """
        if self.opts["cost"] != "sqeuclidean":
            return base.expand(*own.shape[:-2], *base.shape[-2:])
        sq = (t * t).sum(-1)
        mine = (own * own).sum(-1)[..., :, None] + sq[..., None, :] - 2 * own @ t.transpose(-1, -2)
        eye = torch.eye(t.shape[-2], dtype=torch.bool, device=t.device)
        return self.opts["cost_scale"] * mine.clamp_min(0).masked_fill(eye, 0)

    def costs(self, t: Tensor, own: Tensor | None, k_pos: Tensor) -> Tensor:
        """The cost matrix of each query's template space.

        Query q's own template replaces template q: row and column q of its matrix.

        Parameters
        ----------
        t : torch.Tensor, shape (B, H, Ik, d)
            Context templates.
        own : torch.Tensor, shape (B, H, Iq, d), or None
            Each query's own template (two-stream; Iq = Ik); None: every query shares M.
        k_pos : torch.Tensor, shape (B or 1, Ik)
            Positions of the keys.

        Returns
        -------
        torch.Tensor, shape (B or 1, H or 1, Iq or 1, Ik, Ik)
            M between templates i and j for query q.
        """
        base = self.base_costs(t, k_pos)
        if own is None:
            return base[:, :, None]
        mine = self.own_costs(t, own, base)
        iq = torch.arange(own.shape[-2], device=t.device)
        row = (iq[:, None, None] == torch.arange(t.shape[-2], device=t.device)[None, :, None])
        m = torch.where(row, mine[..., :, None, :], base[:, :, None])
        return torch.where(row.transpose(-1, -2), mine[..., :, :, None], m)

    def tilt(self, q: Tensor, k: Tensor, log_u: Tensor, k_own: Tensor | None,
             q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Eq. 24 over the keys each query may see.

        Computed by two matrix products (exp(−M/γ) factorised), in float64 where float32
        would under-flow, and in the log domain where even that would.

        Parameters
        ----------
        q : torch.Tensor, shape (B, H, Iq, d)
            Queries (the evidence z).
        k : torch.Tensor, shape (B, H, Ik, d)
            Keys (the templates are t = scale·k).
        log_u : torch.Tensor, shape (B, H, Iq, Ik)
            The preference prior (−inf: outside the query's template space).
        k_own : torch.Tensor, shape (B, H, I, d), or None
            Query i's own key at position i (two-stream).
        q_pos : torch.Tensor, shape (B or 1, Iq)
            Positions of the queries (unused).
        k_pos : torch.Tensor, shape (B or 1, Ik)
            Positions of the keys (for the position costs).

        Returns
        -------
        torch.Tensor, shape (B, H, Iq, Ik)
            The weights p*, 0 outside each query's template space.
        """
        t = k * self.scale
        own = None if k_own is None else k_own * self.scale
        a = self.alpha().to(q.dtype)[None, :, None, None]
        g = self.gamma().to(q.dtype)[None, :, None, None]
        s = a * template_scores(q, t, own)  # α⟨t_j, z_q⟩ [B, H, Iq, Ik]
        allowed = torch.isfinite(log_u)
        base = self.base_costs(t, k_pos)
        mine = None if own is None else self.own_costs(t, own, base)
        w = _mix_factorised(s, log_u, base, mine, g, allowed)
        if w is None and s.dtype != torch.float64:  # under-flow: float64 has range e^±709
            w = _mix_factorised(s, log_u, base, mine, g, allowed, torch.float64)
        if w is None:  # still: the log-domain form, O(I³) exponentials
            w = _mix(s, log_u, self.costs(t, own, k_pos), g[..., None], allowed)
        if not bool(torch.isfinite(w).all()):  # s/γ beyond the dtype's range
            raise FloatingPointError(f"attention kernel 'ot': the weights are not finite (α up "
                                     f"to {float(a.max()):.3g}, γ down to {float(g.min()):.3g}); "
                                     "lower alpha or raise gamma, or use a float64 model")
        return w

    def true_preference(self, k: Tensor, allowed: Tensor, q_pos: Tensor | None = None,
                        k_pos: Tensor | None = None,
                        k_own: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """ũ and μ̃ of Eqs. 39–40 for every query, in template units (t = scale·k).

        Parameters
        ----------
        k : torch.Tensor, shape (B, H, Ik, d)
            Keys.
        allowed : torch.Tensor, shape (B, 1 or H, Iq, Ik)
            Which key each query may see (bool): its template space.
        q_pos : torch.Tensor, shape (B or 1, Iq), optional
            Positions of the queries (default 0, 1, ...).
        k_pos : torch.Tensor, shape (B or 1, Ik), optional
            Positions of the keys (default 0, 1, ...).
        k_own : torch.Tensor, shape (B, H, I, d), optional
            Query i's own key at position i (two-stream).

        Returns
        -------
        u : torch.Tensor, shape (B, H, Iq, Ik)
            The true preference ũ of each query.
        mean : torch.Tensor, shape (B, H, Iq, d)
            Its mean template μ̃.
        """
        if q_pos is None:
            q_pos = torch.arange(allowed.shape[-2], device=k.device)[None]
        if k_pos is None:
            k_pos = torch.arange(k.shape[-2], device=k.device)[None]
        log_u = self.log_preference(k, allowed, q_pos, k_pos, k_own)
        t = k * self.scale
        own = None if k_own is None else k_own * self.scale
        g = self.gamma().to(k.dtype)[None, :, None, None, None]
        u = _mix(torch.zeros_like(log_u), log_u, self.costs(t, own, k_pos), g,
                 torch.isfinite(log_u))
        return u, template_mean(u, t, own)
