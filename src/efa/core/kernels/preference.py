"""Attention as inference (the Fenchel-duality paper, "Paper A" of
docs/fenchel.md): a query's output is the mean of a distribution p over *templates* t_j, kept
close to a *preference prior* u and tilted towards the query's *evidence* z with reliability α.

This module holds what the kernels of that family share:

- the preference prior log u_qj of query q over the templates j it may see: the attention mask
  (−inf outside), optionally T5's relative-position buckets (bucketed as T5 does: both ways in
  the encoder, causally in the decoder) and the paper's Sec. 7 context-dependent preference
  network (log u_qj from template j and a pooled context of query q);
- the reliability α, one learned positive scalar per head (its log held in float32);
- :class:`PreferenceKernel`, the base class of ``generalized``, ``fenchel``, ``second_order``
  and ``ot``: it builds log u (with the two-stream "own template" of query q at j = q) and
  leaves the tilt to the subclass.

The paper's mapping to dot-product attention: templates t_j = scale·k_j, evidence z_q = q_q,
so that the closed-form approximation λ* ≈ αz gives p ∝ u_j exp(α·scale·⟨q, k_j⟩): with u
uniform over the allowed keys and α = 1 that is softmax attention, bit for bit.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, TypeVar

import torch
from torch import Tensor, nn

from efa.core.kernels.base import Kernel

RELATIVE = ("none", "auto", "bidirectional", "causal")
_Number = TypeVar("_Number", bound=float | Tensor)


def relative_position_bucket(relative_position: Tensor, bidirectional: bool,
                             num_buckets: int = 32, max_distance: int = 128) -> Tensor:
    """T5's bucket of ``relative_position`` = key position − query position (Raffel et al.
    2020, Mesh TensorFlow / transformers' ``T5Attention._relative_position_bucket``).

    Bidirectional (encoder): half the buckets for keys after the query. Causal (decoder):
    every key after the query falls into bucket 0. Of the remaining buckets, half are exact
    distances 0..max_exact−1, the other half logarithmically wider up to ``max_distance``
    (computed in float32, as T5 does, so that the bucket boundaries agree exactly).

    Parameters
    ----------
    relative_position : torch.Tensor
        Key position minus query position, any shape (integers).
    bidirectional : bool
        True: encoder bucketing (keys on both sides); False: causal (decoder) bucketing.
    num_buckets : int, default 32
        Number of buckets.
    max_distance : int, default 128
        Distance from which on every key falls into the last bucket (of its side).

    Returns
    -------
    torch.Tensor
        The bucket index in 0..num_buckets−1 of each entry (int64, the shape of
        ``relative_position``).
    """
    rel = relative_position.long()
    buckets = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (rel > 0).long() * num_buckets
        rel = rel.abs()
    else:
        rel = -torch.clamp(rel, max=0)
    max_exact = num_buckets // 2
    small = rel < max_exact
    large = max_exact + (
        torch.log(rel.float() / max_exact) / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).long()
    large = torch.clamp(large, max=num_buckets - 1)
    return buckets + torch.where(small, rel, large)


def with_own(s: Tensor, own_diag: Tensor | None) -> Tensor:
    """``s`` with entry (q, q) replaced by ``own_diag`` (two-stream: q holds its own template).

    Parameters
    ----------
    s : torch.Tensor, shape (..., Iq, Ik)
        A matrix per query and template (Iq = Ik).
    own_diag : torch.Tensor, shape (..., Iq), or None
        The entries for the queries' own templates; None returns ``s`` unchanged.

    Returns
    -------
    torch.Tensor, shape (..., Iq, Ik)
        ``s`` with its diagonal replaced (a new tensor), or ``s`` itself.
    """
    if own_diag is None:
        return s
    eye = torch.eye(s.shape[-1], dtype=torch.bool, device=s.device)
    return torch.where(eye, own_diag[..., None], s)


def template_scores(lam: Tensor, t: Tensor, own: Tensor | None = None) -> Tensor:
    """⟨t_j, λ_q⟩ for every query q and template j.

    Parameters
    ----------
    lam : torch.Tensor, shape (..., Iq, d)
        One vector λ_q per query (the evidence z, or the dual variable).
    t : torch.Tensor, shape (..., Ik, d)
        Templates shared by the queries.
    own : torch.Tensor, shape (..., Iq, d), optional
        Query q's own template, which replaces t_q for it (two-stream; Iq = Ik).

    Returns
    -------
    torch.Tensor, shape (..., Iq, Ik)
        The scores.
    """
    s = lam @ t.transpose(-1, -2)
    if own is not None:  # in place: s is a fresh tensor (cheaper than a masked copy)
        torch.diagonal(s, dim1=-2, dim2=-1).copy_((lam * own).sum(-1))
    return s


def template_mean(w: Tensor, t: Tensor, own: Tensor | None = None) -> Tensor:
    """Σ_j w_qj t_j for every query q (with query q's own template at j = q).

    Parameters
    ----------
    w : torch.Tensor, shape (..., Iq, Ik)
        Weights of each query over the templates.
    t : torch.Tensor, shape (..., Ik, d)
        Templates shared by the queries.
    own : torch.Tensor, shape (..., Iq, d), optional
        Query q's own template, which replaces t_q for it (two-stream; Iq = Ik).

    Returns
    -------
    torch.Tensor, shape (..., Iq, d)
        The weighted means.
    """
    m = w @ t
    if own is not None:
        m = m + torch.diagonal(w, dim1=-2, dim2=-1)[..., None] * (own - t)
    return m


def check_prior(log_u: Tensor, where: str = "") -> None:
    """Refuse a prior that leaves a query no template (its tilt would be 0/0 = NaN).

    Parameters
    ----------
    log_u : torch.Tensor, shape (..., Iq, Ik)
        Log prior of each query over the templates (−inf: masked).
    where : str, default ""
        Words inserted into the error after "the preference prior" (e.g. which kernel).

    Raises
    ------
    ValueError
        If some query's row of ``log_u`` is −inf throughout, naming its index.
    """
    empty = torch.isneginf(log_u).all(-1)
    if bool(empty.any()):
        idx = [int(i) for i in empty.nonzero()[0]]
        at = ", ".join(f"{n} {i}" for n, i in zip(("sequence", "head", "query"), idx[-3:],
                                                    strict=False))
        raise ValueError(
            f"the preference prior{where} masks every template of {at or 'a query'} "
            f"(index {tuple(idx)}): each query needs at least one allowed template with finite "
            "log u"
        )


def generalized_weights(t: Tensor, z: Tensor, log_u: Tensor, alpha: float | Tensor) -> Tensor:
    """Eq. 17: p_j ∝ u_j exp(α⟨t_j, z⟩), attention as inference's closed-form approximation.

    Parameters
    ----------
    t : torch.Tensor, shape (..., n, d)
        Templates.
    z : torch.Tensor, shape (..., d)
        Evidence.
    log_u : torch.Tensor, shape (..., n)
        Log prior over the templates (−inf: masked; need not be normalised).
    alpha : float or torch.Tensor
        Reliability α > 0 (a tensor broadcasting against (..., n)).

    Returns
    -------
    torch.Tensor, shape (..., n)
        The weights p, summing to 1.

    Raises
    ------
    ValueError
        If α is not finite and > 0, or the prior masks every template.
    """
    alpha = positive(alpha, "alpha")
    check_prior(log_u)
    return torch.softmax(log_u + alpha * (t @ z[..., None])[..., 0], dim=-1)


def log_parameter(x: float, name: str) -> float:
    """``x`` if exp(log x) stays finite and non-zero in float32, where its log is held.

    Parameters
    ----------
    x : float
        The option's value.
    name : str
        The option's name, for the error.

    Returns
    -------
    float
        ``x`` itself.

    Raises
    ------
    ValueError
        If ``x`` is not a number > 0 within float32's normal range.
    """
    positive(x, name)
    f32 = torch.finfo(torch.float32)
    if not f32.tiny <= x <= f32.max:
        raise ValueError(f"{name} must lie in [{f32.tiny:.3g}, {f32.max:.3g}] (its log is a "
                         f"float32 parameter), got {x!r}")
    return x


def positive(x: _Number, name: str) -> _Number:
    """``x`` if every entry is a finite number > 0, else a ValueError naming ``name``.

    Parameters
    ----------
    x : float or torch.Tensor
        The number(s) to check (a bool is not a number here).
    name : str
        The name the error gives them.

    Returns
    -------
    float or torch.Tensor
        ``x`` itself.

    Raises
    ------
    ValueError
        If an entry is ≤ 0, infinite or NaN (or ``x`` is not a number).
    """
    bad = (x <= 0) | ~torch.isfinite(x) if torch.is_tensor(x) else not (
        isinstance(x, int | float) and not isinstance(x, bool) and 0 < x < math.inf)
    if (bool(bad.any()) if torch.is_tensor(bad) else bad):
        raise ValueError(f"{name} must be > 0 (and finite), got {x}")
    return x


class PreferenceKernel(Kernel):
    """Base of the attention-as-inference kernels: it builds the preference prior log u and
    leaves the tilt (``tilt``) to the subclass.

    Parameters
    ----------
    num_heads : int
        Number of heads H.
    head_dim : int
        Width d of each head's queries and keys.
    scale : float
        Factor on the keys: the templates are t = scale·k.
    causal : bool
        Whether the model is unidirectional (decides ``relative="auto"``).
    **options
        The options (all JSON), each optional:

        - ``alpha`` (1.0): initial reliability α > 0 of every head; ``learn_alpha`` (True):
          learn log α per head.
        - ``relative`` ("none"): T5 relative-position buckets in log u: "auto" (causal
          for unidirectional models, else bidirectional), "bidirectional", "causal";
          ``num_buckets`` (32), ``max_distance`` (128) as in T5. The biases start at 0.
        - ``context`` (0): rank r of the context-dependent preference network, 0 = off:
          log u_qj += a(k_j) + ⟨b(k_j), C c_q⟩, a and b a small MLP (``context_hidden``
          units, 16) of the key, c_q the mean key over query q's templates. Its output layer
          starts at 0, so every kernel starts as its uniform-prior form.

        Subclasses add their own (``DEFAULTS``).

    Raises
    ------
    ValueError
        If an option is unknown or out of its range.
    """

    DEFAULTS: ClassVar[dict[str, Any]] = {
        "alpha": 1.0, "learn_alpha": True, "relative": "none", "num_buckets": 32,
        "max_distance": 128, "context": 0, "context_hidden": 16,
    }

    def __init__(self, num_heads: int, head_dim: int, scale: float, causal: bool,
                 **options: Any):
        super().__init__(num_heads, head_dim, scale, causal, **options)
        o = {**self.DEFAULTS, **options}
        self.opts = o
        log_alpha = torch.full((num_heads,), math.log(o["alpha"]))
        if o["learn_alpha"]:
            self.log_alpha = nn.Parameter(log_alpha)
        else:
            self.register_buffer("log_alpha", log_alpha)
        relative = o["relative"]
        if relative == "auto":
            relative = "causal" if causal else "bidirectional"
        self.relative = relative
        if relative != "none":
            self.rel_bias = nn.Parameter(torch.zeros(o["num_buckets"], num_heads))
        self.rank = o["context"]
        if self.rank:
            hid = o["context_hidden"]
            self.pref_w1 = nn.Parameter(torch.randn(num_heads, head_dim, hid) / math.sqrt(head_dim))
            self.pref_b1 = nn.Parameter(torch.zeros(num_heads, 1, hid))
            self.pref_w2 = nn.Parameter(torch.zeros(num_heads, hid, 1 + self.rank))
            self.pref_wc = nn.Parameter(torch.randn(num_heads, head_dim, self.rank)
                                        / math.sqrt(head_dim))

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> None:
        unknown = set(options) - set(cls.DEFAULTS)
        if unknown:
            raise ValueError(f"attention kernel {cls.name!r} has no option(s) {sorted(unknown)}; "
                             f"its options are {sorted(cls.DEFAULTS)}")
        o = {**cls.DEFAULTS, **options}
        where = f"attention kernel {cls.name!r}: "
        try:
            log_parameter(o["alpha"], "alpha")
        except ValueError as err:
            raise ValueError(where + str(err)) from None
        if o["relative"] not in RELATIVE:
            raise ValueError(f"{where}relative must be one of {RELATIVE}, got {o['relative']!r}")
        for key in ("learn_alpha",):
            if not isinstance(o[key], bool):
                raise ValueError(f"{where}{key} must be true or false, got {o[key]!r}")
        for key, low in (("num_buckets", 2), ("max_distance", 1), ("context", 0),
                         ("context_hidden", 1)):
            v = o[key]
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ValueError(f"{where}{key} must be an integer >= {low}, got {v!r}")
        if o["relative"] != "none":
            exact = o["num_buckets"] // 4 if o["relative"] != "causal" else o["num_buckets"] // 2
            if o["relative"] != "causal" and o["num_buckets"] < 4:
                raise ValueError(f"{where}bidirectional buckets need num_buckets >= 4")
            if o["max_distance"] <= max(exact, 1):
                raise ValueError(f"{where}max_distance must exceed the exact buckets ({exact})")

    # -- the preference prior ------------------------------------------------------------------
    def alpha(self) -> Tensor:
        """The reliability α of each head.

        Returns
        -------
        torch.Tensor, shape (H,)
            α = exp(log α) > 0.
        """
        return self.log_alpha.exp()

    def log_preference(self, k: Tensor, allowed: Tensor, q_pos: Tensor, k_pos: Tensor,
                       k_own: Tensor | None = None) -> Tensor:
        """The preference prior log u of every query over the keys it may see.

        Parameters
        ----------
        k : torch.Tensor, shape (B, H, Ik, d)
            Keys (the context-dependent network reads them).
        allowed : torch.Tensor, shape (B, 1 or H, Iq, Ik)
            Which key each query may see (bool).
        q_pos : torch.Tensor, shape (B or 1, Iq)
            Positions of the queries (for the relative-position buckets).
        k_pos : torch.Tensor, shape (B or 1, Ik)
            Positions of the keys.
        k_own : torch.Tensor, shape (B, H, I, d), optional
            Query i's own key at position i (two-stream).

        Returns
        -------
        torch.Tensor, shape (B, H, Iq, Ik)
            log u, not normalised; −inf where ``allowed`` is False.

        Raises
        ------
        ValueError
            If a query may see no key.
        """
        b, h, ik, _ = k.shape
        iq = q_pos.shape[-1]
        lp = k.new_zeros(1, 1, 1, 1)
        if self.relative != "none":
            rel = k_pos[..., None, :] - q_pos[..., :, None]  # [B|1, Iq, Ik]
            buckets = relative_position_bucket(rel, self.relative == "bidirectional",
                                               self.opts["num_buckets"],
                                               self.opts["max_distance"])
            lp = lp + self.rel_bias[buckets].permute(0, 3, 1, 2)
        if self.rank:
            lp = lp + self._context_preference(k, allowed, k_own)
        log_u = lp.expand(b, h, iq, ik).masked_fill(~allowed, float("-inf"))
        check_prior(log_u, f" of attention kernel {self.name!r}")
        return log_u

    def _context_preference(self, k, allowed, k_own):
        """a(k_j) + ⟨b(k_j), C c_q⟩ with c_q the mean of the keys query q may see."""
        w = allowed.to(k.dtype)
        ctx = template_mean(w / w.sum(-1, keepdim=True), k, k_own)  # [B, H, Iq, d]
        c = ctx @ self.pref_wc  # [B, H, Iq, r]

        def net(x):  # per head: [B, H, n, d] -> [B, H, n, 1 + r]
            return torch.relu(x @ self.pref_w1 + self.pref_b1) @ self.pref_w2

        g = net(k)
        pref = g[..., None, :, 0] + c @ g[..., 1:].transpose(-1, -2)  # [B, H, Iq, Ik]
        if k_own is None:
            return pref
        go = net(k_own)
        return with_own(pref, go[..., 0] + (c * go[..., 1:]).sum(-1))

    # -- the kernel -----------------------------------------------------------------------
    def tilt(self, q: Tensor, k: Tensor, log_u: Tensor, k_own: Tensor | None,
             q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Weights over the templates t = scale·k for evidence z = q (each subclass's own).

        Parameters
        ----------
        q : torch.Tensor, shape (B, H, Iq, d)
            Queries (the evidence).
        k : torch.Tensor, shape (B, H, Ik, d)
            Keys (the templates before scaling).
        log_u : torch.Tensor, shape (B, H, Iq, Ik)
            The preference prior (from ``log_preference``).
        k_own : torch.Tensor, shape (B, H, I, d), or None
            Query i's own key at position i (two-stream).
        q_pos : torch.Tensor, shape (B or 1, Iq)
            Positions of the queries.
        k_pos : torch.Tensor, shape (B or 1, Ik)
            Positions of the keys.

        Returns
        -------
        torch.Tensor, shape (B, H, Iq, Ik)
            The weights, 0 where log u = −inf.
        """
        raise NotImplementedError

    def forward(self, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor,
                own: tuple[Tensor, Tensor] | None = None, q_pos: Tensor | None = None,
                k_pos: Tensor | None = None, need_weights: bool = True) -> tuple[Tensor, Tensor]:
        """Attend: the values weighted by the tilt of the preference prior.

        Parameters
        ----------
        q : torch.Tensor, shape (B, H, Iq, d)
            Queries.
        k : torch.Tensor, shape (B, H, Ik, d)
            Keys.
        v : torch.Tensor, shape (B, H, Ik, dv)
            Values.
        allowed : torch.Tensor, shape (B, 1 or H, Iq, Ik)
            Which key each query may see (bool).
        own : tuple of torch.Tensor, optional
            ``(k_own, v_own)``, each of shape (B, H, I, d): query i's own key and value at
            position i (two-stream; Iq == Ik).
        q_pos : torch.Tensor, shape (B or 1, Iq), optional
            Positions of the queries (default 0, 1, ...).
        k_pos : torch.Tensor, shape (B or 1, Ik), optional
            Positions of the keys (default 0, 1, ...).
        need_weights : bool, default True
            Ignored: the weights are always returned.

        Returns
        -------
        out : torch.Tensor, shape (B, H, Iq, dv)
            The attended values.
        weights : torch.Tensor, shape (B, H, Iq, Ik)
            The weights.
        """
        if q_pos is None:
            q_pos = torch.arange(q.shape[-2], device=q.device)[None]
        if k_pos is None:
            k_pos = torch.arange(k.shape[-2], device=k.device)[None]
        k_own = None if own is None else own[0]
        log_u = self.log_preference(k, allowed, q_pos, k_pos, k_own)
        w = self.tilt(q, k, log_u, k_own, q_pos, k_pos)
        out = w @ v
        if own is not None:
            out = out + torch.diagonal(w, dim1=-2, dim2=-1)[..., None] * (own[1] - v)
        return out, w

    def options(self) -> dict[str, Any]:
        """The kernel's options, defaults filled in, as a JSON-ready dict.

        Returns
        -------
        dict
            Every option of ``DEFAULTS`` with its value.
        """
        return dict(self.opts)
