"""``generalized``: the closed-form approximation of attention as inference (Paper A, Eq. 17),
p_qj ∝ u_qj exp(α·scale·⟨q, k_j⟩), with the preference prior u of
:class:`~efa.core.kernels.preference.PreferenceKernel` (mask, T5 relative-position buckets, a
context-dependent preference network) and a learned α per head.

With its defaults (uniform u over the allowed keys, α = 1) it is softmax attention bit for
bit; with ``relative`` it is T5's attention (Eq. 19: log u = relative-position bias + mask).
"""

from __future__ import annotations

import torch
from torch import Tensor

from efa.core.kernels.base import register_kernel
from efa.core.kernels.preference import PreferenceKernel, template_scores


@register_kernel
class Generalized(PreferenceKernel):
    """p ∝ u exp(α⟨t, z⟩) (Eq. 17) with t = scale·k, z = q.

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
        prior and α).
    """

    name = "generalized"

    def tilt(self, q: Tensor, k: Tensor, log_u: Tensor, k_own: Tensor | None,
             q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Eq. 17: p ∝ u exp(α·scale·⟨q, k_j⟩).

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
        s = template_scores(q, k, k_own)
        a = self.alpha().to(q.dtype)[None, :, None, None]
        return torch.softmax(log_u + a * (s * self.scale), dim=-1)
