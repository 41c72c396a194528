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
    """p ∝ u exp(α⟨t, z⟩) (Eq. 17) with t = scale·k, z = q."""

    name = "generalized"

    def tilt(self, q: Tensor, k: Tensor, log_u: Tensor, k_own: Tensor | None,
             q_pos: Tensor, k_pos: Tensor) -> Tensor:
        s = template_scores(q, k, k_own)
        a = self.alpha().to(q.dtype)[None, :, None, None]
        return torch.softmax(log_u + a * (s * self.scale), dim=-1)
