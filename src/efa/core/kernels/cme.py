"""Kernel conditional-mean-embedding (CME) attention (Zhang et al., "An analysis of attention
via the lens of exchangeability and latent variable models", eqs. 4.4-4.5):

    attn_CME(q, K, V) = Vᵀ (k(K, K) + λ I)⁻¹ k(K, q),

the posterior mean of a Gaussian process with covariance k and noise variance λ fitted to the
(key, value) pairs of the context and evaluated at the query. Softmax attention is the
kernel-density (Nadaraya-Watson) approximation of the same conditional mean.

Two ways in:

- :func:`cme` / :func:`cme_weights`: the formula on tensors, for a fixed kernel (oracles,
  Bayes predictors of :mod:`efa.generators`, the theorem experiments).
- :class:`CME`: the attention kernel of the core, ``EFAConfig(attention={"kernel": "cme",
  "similarity": "rbf"})``, with a learned bandwidth γ and ridge λ per head, both positive by
  parameterisation (γ = exp(β), λ = λ_min + exp(ρ)).

Similarities (``scale`` is the model's 1/√d_head; 1 in :func:`cme`):

- ``rbf``: exp(−scale·‖q − k‖² / (2γ)) = exp(scale·(q·k − ‖q‖²/2 − ‖k‖²/2)/γ), softmax's
  score with the norms taken out;
- ``exponential``: exp(scale·q·k/γ), softmax's own kernel (positive definite as the exponential
  of one; it may overflow, which is an error, never an inf or NaN passed on);
- ``linear``: scale·q·k/γ (with it CME attention is Bayesian linear regression, Sec. 3.1);
- ``rbf+linear``: the RBF on the first ``rbf_dims`` features plus scale·q·k on the rest (no γ):
  an *additive* kernel, e.g. a smooth function of x plus a per-channel offset, which a product
  kernel on [x; channel] cannot represent (the GP of the in-context regression data).

``posterior_variance=True`` appends to each head's output the GP's posterior variance at the
query, k(q, q) − k(K, q)ᵀ (k(K, K) + λI)⁻¹ k(K, q) (a column after the values'), so that a
read-out can turn the attention into the GP's predictive distribution (mean and variance), not
the mean alone.

Attention masks. The key set of query i is its row of ``allowed``; :class:`CME` recognises
the masks the model produces (a key set shared by every query, a causal prefix, either with
the query's own position added or removed) and solves them with one Cholesky factorisation per
(sequence, head), any other mask with one per query (:mod:`efa.core.kernels.cmesolve`). The
two-stream "own" form (query i sees its own key and value at position i) is the masked copy i
exactly, so :func:`efa.core.strategies.copies` computes a one-layer CME model's copies with one
factorisation per sequence (``own_is_copy``).

Degenerate input: an empty key set gives output 0 (the prior mean) and zero weights; a singular
kernel matrix (duplicate keys with λ = 0 in :func:`cme`; :class:`CME` keeps λ ≥ λ_min > 0) and
non-finite inputs or kernel values raise a ValueError. No NaN is returned.
"""

from __future__ import annotations

import math
from typing import Any, cast

import torch
from torch import Tensor, nn

from efa.core.kernels.base import Kernel, register_kernel
from efa.core.kernels.cmesolve import cholesky, mask_pattern, per_query_weights, structured_weights

SIMILARITIES = ("rbf", "exponential", "linear", "rbf+linear")


# --------------------------------------------------------------------------- similarities


def similarity(a: Tensor, b: Tensor, kind: str, bandwidth: float | Tensor, scale: float = 1.0,
               rbf_dims: int | None = None) -> Tensor:
    """The similarity k(a_i, b_j) of every pair of rows (the module's ``similarity`` kinds).

    Parameters
    ----------
    a : torch.Tensor, shape (..., Ia, d)
        First points.
    b : torch.Tensor, shape (..., Ib, d)
        Second points.
    kind : {"rbf", "exponential", "linear", "rbf+linear"}
        The similarity.
    bandwidth : float or torch.Tensor
        γ > 0, a number or a tensor broadcasting against (..., 1, 1) (the ``rbf+linear``
        kernel's linear part has none).
    scale : float, default 1.0
        Factor on the squared distances and dot products.
    rbf_dims : int, optional
        ``rbf+linear`` only: the RBF's leading features (between 1 and d − 1).

    Returns
    -------
    torch.Tensor, shape (..., Ia, Ib)
        k(a_i, b_j).

    Raises
    ------
    ValueError
        If ``kind`` is unknown, or ``rbf_dims`` is out of range for ``rbf+linear``.
    """
    if kind == "rbf+linear":
        r = _rbf_dims(rbf_dims, a.shape[-1])
        return (similarity(a[..., :r], b[..., :r], "rbf", bandwidth, scale)
                + similarity(a[..., r:], b[..., r:], "linear", 1.0, scale))
    dot = a @ b.transpose(-1, -2)
    if kind == "linear":
        return dot * scale / bandwidth
    if kind == "exponential":
        return torch.exp(dot * scale / bandwidth)
    if kind == "rbf":
        sq = (a * a).sum(-1)[..., :, None] / 2 + (b * b).sum(-1)[..., None, :] / 2
        # Clamp the rounding of ‖a‖² + ‖b‖² − 2a·b at 0: k ≤ 1 exactly.
        return torch.exp(-(sq - dot).clamp_min(0) * scale / bandwidth)
    raise ValueError(f"similarity must be one of {SIMILARITIES}, got {kind!r}")


def pair_similarity(a: Tensor, b: Tensor, kind: str, bandwidth: float | Tensor, scale: float = 1.0,
                    rbf_dims: int | None = None) -> Tensor:
    """The similarity k(a_i, b_i) row by row: the diagonal of :func:`similarity` alone.

    Parameters
    ----------
    a : torch.Tensor, shape (..., I, d)
        First points.
    b : torch.Tensor, shape (..., I, d)
        Second points, one per row of ``a``.
    kind : {"rbf", "exponential", "linear", "rbf+linear"}
        The similarity.
    bandwidth : float or torch.Tensor
        γ > 0, a number or a tensor broadcasting against (..., 1, 1) (as in
        :func:`similarity`).
    scale : float, default 1.0
        Factor on the squared distances and dot products.
    rbf_dims : int, optional
        ``rbf+linear`` only: the RBF's leading features.

    Returns
    -------
    torch.Tensor, shape (..., I)
        k(a_i, b_i).

    Raises
    ------
    ValueError
        If ``kind`` is unknown, or ``rbf_dims`` is out of range for ``rbf+linear``.
    """
    if kind == "rbf+linear":
        r = _rbf_dims(rbf_dims, a.shape[-1])
        return (pair_similarity(a[..., :r], b[..., :r], "rbf", bandwidth, scale)
                + pair_similarity(a[..., r:], b[..., r:], "linear", 1.0, scale))
    bw = bandwidth[..., 0] if isinstance(bandwidth, Tensor) and bandwidth.dim() > 0 else bandwidth
    if kind == "linear":
        return (a * b).sum(-1) * scale / bw
    if kind == "exponential":
        return torch.exp((a * b).sum(-1) * scale / bw)
    if kind == "rbf":
        return torch.exp(-((a - b) ** 2).sum(-1) * scale / (2 * bw))
    raise ValueError(f"similarity must be one of {SIMILARITIES}, got {kind!r}")


def _rbf_dims(rbf_dims, d: int) -> int:
    if not isinstance(rbf_dims, int) or isinstance(rbf_dims, bool) or not 0 < rbf_dims < d:
        raise ValueError(f"similarity 'rbf+linear' needs rbf_dims between 1 and {d - 1} (the "
                         f"features' width is {d}), got {rbf_dims!r}")
    return rbf_dims


def _finite(t: Tensor, what: str) -> Tensor:
    if not torch.isfinite(t).all():
        hint = (" (the exponential similarity overflows for large q·k/γ: use 'rbf', a larger "
                "bandwidth or smaller queries/keys)" if "kernel" in what else "")
        raise ValueError(f"CME attention: non-finite {what}{hint}")
    return t


# --------------------------------------------------------------------------- the formula


def cme_weights(q: Tensor, k: Tensor, ridge: float | Tensor, similarity_kind: str = "rbf",
                bandwidth: float | Tensor = 1.0, scale: float = 1.0, key_mask: Tensor | None = None,
                rbf_dims: int | None = None) -> Tensor:
    """α = (k(K, K) + λI)⁻¹ k(K, q) as attention weights (0 on masked keys).

    Parameters
    ----------
    q : torch.Tensor, shape (..., Iq, d)
        Queries.
    k : torch.Tensor, shape (..., Ik, d)
        Keys.
    ridge : float or torch.Tensor
        λ ≥ 0, a number or a tensor broadcasting against (..., 1, 1).
    similarity_kind : {"rbf", "exponential", "linear", "rbf+linear"}, default "rbf"
        The similarity k (:func:`similarity`).
    bandwidth : float or torch.Tensor, default 1.0
        γ > 0, a number or a tensor broadcasting against (..., 1, 1).
    scale : float, default 1.0
        Factor on the squared distances and dot products.
    key_mask : torch.Tensor, shape (..., Ik), optional
        Which keys are in the set (bool; default: all).
    rbf_dims : int, optional
        ``rbf+linear`` only: the RBF's leading features.

    Returns
    -------
    torch.Tensor, shape (..., Iq, Ik)
        The weights; shape (..., Iq, 0) when there are no keys.

    Raises
    ------
    ValueError
        If the similarity is unknown, λ < 0, γ ≤ 0 (or either not finite), an input or kernel
        value is not finite, or the kernel matrix is singular.
    """
    if similarity_kind not in SIMILARITIES:
        raise ValueError(f"similarity must be one of {SIMILARITIES}, got {similarity_kind!r}")
    lam = torch.as_tensor(ridge, dtype=q.dtype, device=q.device)
    if (lam < 0).any() or not torch.isfinite(lam).all():
        raise ValueError(f"ridge must be finite and >= 0, got {ridge}")
    bw = torch.as_tensor(bandwidth, dtype=q.dtype, device=q.device)
    if (bw <= 0).any() or not torch.isfinite(bw).all():
        raise ValueError(f"bandwidth must be finite and > 0, got {bandwidth}")
    _finite(q, "queries")
    _finite(k, "keys")
    ik = k.shape[-2]
    if ik == 0:
        return q.new_zeros(*q.shape[:-1], 0)
    m = (torch.ones(k.shape[:-1], dtype=torch.bool, device=k.device) if key_mask is None
         else key_mask.expand(k.shape[:-1]))
    g = _finite(similarity(k, k, similarity_kind, bw, scale, rbf_dims), "kernel values k(K, K)")
    kq = _finite(similarity(k, q, similarity_kind, bw, scale, rbf_dims), "kernel values k(K, q)")
    mf = m.to(q.dtype)
    eye = torch.eye(ik, dtype=q.dtype, device=q.device)
    # Masked keys are decoupled: their rows and columns are the identity's, their rhs is 0.
    mat = g * mf[..., :, None] * mf[..., None, :] + lam * eye + torch.diag_embed(1 - mf)
    chol = cholesky(mat, bool((lam == 0).any()))
    alpha = torch.cholesky_solve(kq * mf[..., :, None], chol)
    return (alpha * mf[..., :, None]).transpose(-1, -2)


def cme(q: Tensor, k: Tensor, v: Tensor, ridge: float | Tensor, similarity_kind: str = "rbf",
        bandwidth: float | Tensor = 1.0, scale: float = 1.0,
        key_mask: Tensor | None = None) -> Tensor:
    """CME attention Vᵀ (k(K, K) + λI)⁻¹ k(K, q), the GP posterior mean at the queries.

    With no keys the output is 0, the GP's prior mean.

    Parameters
    ----------
    q : torch.Tensor, shape (..., Iq, d)
        Queries.
    k : torch.Tensor, shape (..., Ik, d)
        Keys.
    v : torch.Tensor, shape (..., Ik, dv)
        Values.
    ridge : float or torch.Tensor
        λ ≥ 0 (the GP's noise variance), a number or a tensor broadcasting against
        (..., 1, 1).
    similarity_kind : {"rbf", "exponential", "linear", "rbf+linear"}, default "rbf"
        The similarity k (the GP's covariance).
    bandwidth : float or torch.Tensor, default 1.0
        γ > 0.
    scale : float, default 1.0
        Factor on the squared distances and dot products.
    key_mask : torch.Tensor, shape (..., Ik), optional
        Which keys are in the set (bool; default: all).

    Returns
    -------
    torch.Tensor, shape (..., Iq, dv)
        The attended values.

    Raises
    ------
    ValueError
        As :func:`cme_weights`, and if a value is not finite.
    """
    _finite(v, "values")
    return cme_weights(q, k, ridge, similarity_kind, bandwidth, scale, key_mask) @ v


# --------------------------------------------------------------------------- the kernel


@register_kernel
class CME(Kernel):
    """CME attention with a learned bandwidth γ and ridge λ per head (see the module's
    docstring).

    Parameters
    ----------
    num_heads : int
        Number of heads H (one γ and one λ per head).
    head_dim : int
        Width d of each head's queries and keys.
    scale : float
        Factor on the squared distances and dot products of the similarity.
    causal : bool
        Whether the model is unidirectional (the mask comes with each call).
    **options
        Each optional:

        - ``similarity`` ("rbf"): one of ``SIMILARITIES``;
        - ``bandwidth`` (1.0) and ``ridge`` (1.0): the initial γ and λ, > 0;
        - ``min_ridge`` (1e-4): λ's floor, > 0 and below ``ridge``: λ = min_ridge + exp(ρ);
        - ``learn`` (True): False keeps γ and λ fixed buffers;
        - ``rbf_dims`` (None): the RBF's leading features of ``rbf+linear`` (with it only);
        - ``posterior_variance`` (False): append the GP posterior variance to each head's
          output, one more column per head (``extra_outputs``).

    Raises
    ------
    ValueError
        If an option is unknown or invalid.
    """

    name = "cme"
    # Query i's weights depend on every key of its context jointly (a kernel matrix solve).
    row_local = False
    # ... but its two-stream ("own") form is the masked copy i exactly: efa.core.strategies.copies
    # computes a one-layer model's copies from one factorisation per sequence.
    own_is_copy = True
    DEFAULTS = {"similarity": "rbf", "bandwidth": 1.0, "ridge": 1.0, "min_ridge": 1e-4,
                "learn": True, "rbf_dims": None, "posterior_variance": False}

    def __init__(self, num_heads: int, head_dim: int, scale: float, causal: bool,
                 **options: Any):
        super().__init__(num_heads, head_dim, scale, causal, **options)
        opts = {**self.DEFAULTS, **options}
        self.similarity = opts["similarity"]
        self.rbf_dims = opts["rbf_dims"]
        if self.similarity == "rbf+linear":
            _rbf_dims(self.rbf_dims, head_dim)
        self.posterior_variance = bool(opts["posterior_variance"])
        self.min_ridge = float(opts["min_ridge"])
        self.learn = bool(opts["learn"])
        log_bw = torch.full((num_heads,), math.log(opts["bandwidth"]))
        log_ridge = torch.full((num_heads,), math.log(opts["ridge"] - self.min_ridge))
        if self.learn:
            self.log_bandwidth = nn.Parameter(log_bw)
            self.log_ridge = nn.Parameter(log_ridge)
        else:
            self.register_buffer("log_bandwidth", log_bw)
            self.register_buffer("log_ridge", log_ridge)
        self._init = opts

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> None:
        unknown = set(options) - set(cls.DEFAULTS)
        if unknown:
            raise ValueError(
                f"attention kernel 'cme' takes options {sorted(cls.DEFAULTS)}, got "
                f"{sorted(unknown)}"
            )
        opts = {**cls.DEFAULTS, **options}
        if opts["similarity"] not in SIMILARITIES:
            raise ValueError(f"cme: similarity must be one of {SIMILARITIES}, got "
                             f"{opts['similarity']!r}")
        for key in ("bandwidth", "ridge", "min_ridge"):
            v = opts[key]
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) \
                    or v <= 0:
                raise ValueError(f"cme: {key} must be a positive finite number, got {v!r}")
        if opts["ridge"] <= opts["min_ridge"]:
            raise ValueError(f"cme: ridge ({opts['ridge']}) must exceed min_ridge "
                             f"({opts['min_ridge']}): λ = min_ridge + exp(ρ)")
        for key in ("learn", "posterior_variance"):
            if not isinstance(opts[key], bool):
                raise ValueError(f"cme: {key} must be True or False, got {opts[key]!r}")
        r = opts["rbf_dims"]
        if (opts["similarity"] == "rbf+linear") != (r is not None):
            raise ValueError("cme: rbf_dims (a positive integer) goes with similarity "
                             f"'rbf+linear' and only with it, got rbf_dims={r!r} and similarity="
                             f"{opts['similarity']!r}")
        if r is not None and (isinstance(r, bool) or not isinstance(r, int) or r < 1):
            raise ValueError(f"cme: rbf_dims must be a positive integer, got {r!r}")

    @classmethod
    def extra_outputs(cls, options: dict[str, Any]) -> int:
        return int(bool(options.get("posterior_variance", False)))

    def options(self) -> dict[str, Any]:
        """The kernel's options as it was built (initial γ and λ, not the learned ones).

        Returns
        -------
        dict
            Every option of ``DEFAULTS`` with its value.
        """
        return {k: self._init[k] for k in self.DEFAULTS}

    def bandwidth(self) -> Tensor:
        """The bandwidth γ of each head.

        Returns
        -------
        torch.Tensor, shape (H,)
            γ = exp(β) > 0.
        """
        return self.log_bandwidth.exp()

    def ridge(self) -> Tensor:
        """The ridge λ of each head.

        Returns
        -------
        torch.Tensor, shape (H,)
            λ = min_ridge + exp(ρ) > min_ridge > 0.
        """
        return self.min_ridge + self.log_ridge.exp()

    def forward(self, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor,
                own: tuple[Tensor, Tensor] | None = None, q_pos: Tensor | None = None,
                k_pos: Tensor | None = None, need_weights: bool = True,
                structured: bool = True) -> tuple[Tensor, Tensor]:
        """CME attention under the mask: each query's GP posterior mean given its key set.

        Parameters
        ----------
        q : torch.Tensor, shape (B, H, Iq, d)
            Queries.
        k : torch.Tensor, shape (B, H, Ik, d)
            Keys.
        v : torch.Tensor, shape (B, H, Ik, dv)
            Values.
        allowed : torch.Tensor, shape (B, 1 or H, Iq, Ik)
            Which key each query may see (bool): its key set.
        own : tuple of torch.Tensor, optional
            ``(k_own, v_own)``, each of shape (B, H, I, d): query i's own key and value at
            position i (two-stream; Iq == Ik).
        q_pos : torch.Tensor, shape (B or 1, Iq), optional
            Unused (CME attention has no positions).
        k_pos : torch.Tensor, shape (B or 1, Ik), optional
            Unused.
        need_weights : bool, default True
            Ignored: the weights are always returned.
        structured : bool, default True
            False forces one factorisation per query (the general path, used by the tests as
            a second computation).

        Returns
        -------
        out : torch.Tensor, shape (B, H, Iq, dv) or (B, H, Iq, dv + 1)
            The attended values, and with ``posterior_variance`` the GP's posterior variance
            at the query in a last column.
        weights : torch.Tensor, shape (B, H, Iq, Ik)
            The weights α (not normalised; 0 outside the key set).

        Raises
        ------
        ValueError
            If an input or kernel value is not finite (the exponential similarity may
            overflow).
        """
        kind, s, r = self.similarity, self.scale, self.rbf_dims
        bw = self.bandwidth().to(q.dtype)[None, :, None, None]
        lam = self.ridge().to(q.dtype)[None, :, None, None]
        _finite(q, "queries")
        _finite(k, "keys")
        b, _, iq, _ = q.shape
        ik = k.shape[-2]
        a = allowed.expand(b, allowed.shape[1], iq, ik)
        g = _finite(similarity(k, k, kind, bw, s, r), "kernel values k(K, K)")
        kq = _finite(similarity(k, q, kind, bw, s, r), "kernel values k(K, q)")
        ctx = _Context(kind, s, bw, lam, q, k, g, kq, own, r)
        pattern = mask_pattern(a) if structured else None
        w = None if pattern is None else structured_weights(ctx, *pattern)
        w = per_query_weights(ctx, a) if w is None else w
        out = w @ v
        diag = torch.diagonal(w, dim1=-2, dim2=-1) if own is not None else None
        if own is not None:
            out = out + cast(Tensor, diag)[..., None] * (own[1] - v)
        if self.posterior_variance:
            # k(q, q) − Σ_j α_j k(key_j, q), with query i's own key in column i (two-stream).
            explained = (w * kq.transpose(-1, -2)).sum(-1)
            if own is not None:
                explained = explained + cast(Tensor, diag) * (ctx.pair(own[0], q)
                                                              - ctx.pair(k, q))
            var = (ctx.pair(q, q) - explained).clamp_min(0)
            out = torch.cat([out, var[..., None]], -1)
        return out, w


class _Context:
    """What the solvers share: similarity, γ, λ, queries, keys, k(K, K), k(K, q), own."""

    def __init__(self, kind, scale, bw, lam, q, k, g, kq, own, rbf_dims=None):
        self.kind, self.scale, self.bw, self.lam = kind, scale, bw, lam
        self.q, self.k, self.g, self.kq, self.own = q, k, g, kq, own
        self.rbf_dims = rbf_dims

    def new_keys(self) -> Tensor:
        """The key that position i adds to query i's set: its own (two-stream) or k_i."""
        return self.k if self.own is None else self.own[0]

    def cross_new(self) -> Tensor:
        """k(k_j, new_i) [B, H, Ik, Iq]."""
        if self.own is None:
            return self.g
        return _finite(similarity(self.k, self.own[0], self.kind, self.bw, self.scale,
                                  self.rbf_dims), "kernel values k(K, own keys)")

    def pair(self, a: Tensor, b: Tensor) -> Tensor:
        return _finite(pair_similarity(a, b, self.kind, self.bw, self.scale, self.rbf_dims),
                       "kernel values")
