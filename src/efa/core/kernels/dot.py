"""The dot-product kernels: ``softmax`` (Vaswani et al.) and ``linear`` (the softmax-free form
of the EFA paper's Props 2–3)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from efa.core.kernels.base import Kernel, register_kernel


class DotProduct(Kernel):
    def scores(self, q: Tensor, k: Tensor) -> Tensor:
        return (q @ k.transpose(-1, -2)) * self.scale

    def own_scores(self, q: Tensor, k: Tensor) -> Tensor:
        return (q * k).sum(-1, keepdim=True) * self.scale


@register_kernel
class Softmax(DotProduct):
    """w_ij ∝ exp(q_i·k_j · scale) over the allowed j (Vaswani et al.). Without the weights
    and without the two-stream ``own`` form, PyTorch's fused
    ``scaled_dot_product_attention`` computes the same output faster."""

    name = "softmax"

    def weights(self, s: Tensor, allowed: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return torch.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor,
                own: tuple[Tensor, Tensor] | None = None, q_pos: Tensor | None = None,
                k_pos: Tensor | None = None,
                need_weights: bool = True) -> tuple[Tensor, Tensor | None]:
        if need_weights:
            return super().forward(q, k, v, allowed, own, q_pos, k_pos)
        if own is not None:
            # Two-stream as one fused call: the keys are the context's and, in extra columns,
            # each query's own; query i sees context j ≠ i and its own column i where allowed.
            eye = torch.eye(q.shape[-2], dtype=torch.bool, device=q.device)
            allowed = torch.cat([allowed & ~eye, allowed & eye], dim=-1)
            k, v = torch.cat([k, own[0]], dim=-2), torch.cat([v, own[1]], dim=-2)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=self.scale), None


@register_kernel
class Linear(DotProduct):
    """w_ij = q_i·k_j · scale on the allowed j, unnormalised (the softmax-free form of the EFA
    paper's Props 2–3)."""

    name = "linear"

    def weights(self, s: Tensor, allowed: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return s * allowed
