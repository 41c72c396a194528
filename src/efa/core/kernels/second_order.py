"""``second_order``: the second-order closed form of attention as inference (Paper A, Eq. 14
plugged into the tilt of Eq. 10): λ = α(I + αΣ_u)⁻¹z with Σ_u = Cov_u[t] the preference-
weighted covariance of the query's templates, p ∝ u exp⟨t, λ⟩. It is the first Newton step of
the exact dual solve from λ = 0, and exact for a Gaussian u; the paper derives it on the way to
Eq. 17 but never uses it. The linear solve is conjugate gradients on Σ_u-vector products (no
d×d matrix), with implicit gradients (:func:`efa.core.kernels.fenchel.second_order_lambda`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor

from efa.core.kernels.base import register_kernel
from efa.core.kernels.fenchel import check_tol, second_order_lambda, tilt_weights
from efa.core.kernels.newton import check_finite
from efa.core.kernels.preference import PreferenceKernel


@register_kernel
class SecondOrder(PreferenceKernel):
    """p ∝ u exp⟨t, α(I + αΣ_u)⁻¹z⟩ with t = scale·k, z = q.

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
        prior and α), and ``tol`` (None: 1e-5 in float32, 1e-10 in float64), the relative
        tolerance of the linear solve.
    """

    name = "second_order"
    DEFAULTS: ClassVar[dict[str, Any]] = {**PreferenceKernel.DEFAULTS, "tol": None}

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> None:
        super().check_options(options)
        check_tol(options.get("tol"), f"attention kernel {cls.name!r}: ")

    def tilt(self, q: Tensor, k: Tensor, log_u: Tensor, k_own: Tensor | None,
             q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """p ∝ u exp⟨t, λ⟩ with λ = α(I + αΣ_u)⁻¹z (Eq. 14).

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
            The weights p, summing to 1 over the allowed keys.
        """
        t = k * self.scale
        own = None if k_own is None else k_own * self.scale
        a = self.alpha().to(q.dtype)[None, :, None]
        lam = second_order_lambda(q, t, log_u, a, own, self.opts["tol"])
        return tilt_weights(check_finite(lam, self.name, a), t, log_u, own)
