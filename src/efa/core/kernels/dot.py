"""The dot-product kernels: ``softmax`` (Vaswani et al.) and ``linear`` (the softmax-free form
of the EFA paper's Props 2–3)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from efa.core.kernels.base import Kernel, register_kernel


class DotProduct(Kernel):
    """The scaled dot-product score q_i·k_j · scale shared by ``softmax`` and ``linear``
    (not registered itself: the subclasses say how scores become weights).

    Parameters
    ----------
    num_heads : int
        Number of heads H.
    head_dim : int
        Width d of each head's queries and keys.
    scale : float
        Factor on the scores q·k.
    causal : bool
        Whether the model is unidirectional (the mask comes with each call).
    **options
        None are taken: any option is refused (ValueError).
    """

    def scores(self, q: Tensor, k: Tensor) -> Tensor:
        """Scaled dot products q_i·k_j · scale.

        Parameters
        ----------
        q : torch.Tensor, shape (B, H, Iq, d)
            Queries.
        k : torch.Tensor, shape (B, H, Ik, d)
            Keys.

        Returns
        -------
        torch.Tensor, shape (B, H, Iq, Ik)
            The scores.
        """
        return (q @ k.transpose(-1, -2)) * self.scale

    def own_scores(self, q: Tensor, k: Tensor) -> Tensor:
        """Scaled dot product q_i·k_i · scale of each query with its own key.

        Parameters
        ----------
        q : torch.Tensor, shape (B, H, I, d)
            Queries.
        k : torch.Tensor, shape (B, H, I, d)
            Keys, one per query.

        Returns
        -------
        torch.Tensor, shape (B, H, I, 1)
            The scores.
        """
        return (q * k).sum(-1, keepdim=True) * self.scale


@register_kernel
class Softmax(DotProduct):
    """Softmax attention: w_ij ∝ exp(q_i·k_j · scale) over the allowed j (Vaswani et al.).

    Without the weights (``need_weights=False``), PyTorch's fused
    ``scaled_dot_product_attention`` computes the same output faster, the two-stream ``own``
    form included (as extra key columns).

    Parameters
    ----------
    num_heads : int
        Number of heads H.
    head_dim : int
        Width d of each head's queries and keys.
    scale : float
        Factor on the scores q·k.
    causal : bool
        Whether the model is unidirectional (the mask comes with each call).
    **options
        None are taken: any option is refused (ValueError).
    """

    name = "softmax"

    def weights(self, s: Tensor, allowed: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """The softmax of the scores over the allowed keys.

        Parameters
        ----------
        s : torch.Tensor, shape (B, H, Iq, Ik)
            Scores.
        allowed : torch.Tensor, shape (B, 1 or H, Iq, Ik)
            Which key each query may see (bool).
        q_pos : torch.Tensor, shape (B or 1, Iq)
            Positions of the queries (unused).
        k_pos : torch.Tensor, shape (B or 1, Ik)
            Positions of the keys (unused).

        Returns
        -------
        torch.Tensor, shape (B, H, Iq, Ik)
            Weights summing to 1 over the allowed keys, 0 elsewhere.
        """
        return torch.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor,
                own: tuple[Tensor, Tensor] | None = None, q_pos: Tensor | None = None,
                k_pos: Tensor | None = None,
                need_weights: bool = True) -> tuple[Tensor, Tensor | None]:
        """Softmax attention; the fused kernel when the weights are not needed.

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
            False: compute the output by ``torch.nn.functional.scaled_dot_product_attention``
            and return None for the weights.

        Returns
        -------
        out : torch.Tensor, shape (B, H, Iq, dv)
            The attended values.
        weights : torch.Tensor, shape (B, H, Iq, Ik), or None
            The weights, None when ``need_weights`` is False.
        """
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
    """Linear attention: w_ij = q_i·k_j · scale on the allowed j, unnormalised (the
    softmax-free form of the EFA paper's Props 2–3).

    Parameters
    ----------
    num_heads : int
        Number of heads H.
    head_dim : int
        Width d of each head's queries and keys.
    scale : float
        Factor on the scores q·k.
    causal : bool
        Whether the model is unidirectional (the mask comes with each call).
    **options
        None are taken: any option is refused (ValueError).
    """

    name = "linear"

    def weights(self, s: Tensor, allowed: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """The scores themselves on the allowed keys, 0 elsewhere.

        Parameters
        ----------
        s : torch.Tensor, shape (B, H, Iq, Ik)
            Scores.
        allowed : torch.Tensor, shape (B, 1 or H, Iq, Ik)
            Which key each query may see (bool).
        q_pos : torch.Tensor, shape (B or 1, Iq)
            Positions of the queries (unused).
        k_pos : torch.Tensor, shape (B or 1, Ik)
            Positions of the keys (unused).

        Returns
        -------
        torch.Tensor, shape (B, H, Iq, Ik)
            ``s`` where allowed, 0 elsewhere.
        """
        return s * allowed
