"""The attention kernel contract: the base class :class:`Kernel`, the registry ``KERNELS``
filled by :func:`register_kernel`, and :func:`kernel_spec` that checks a config's choice.

A *kernel* maps queries q [B, H, Iq, d], keys k [B, H, Ik, d], values v [B, H, Ik, dv] and an
``allowed`` mask [B, 1|H, Iq, Ik] to an output [B, H, Iq, dv] and the weights [B, H, Iq, Ik].
Kernels are plug-ins: subclass :class:`Kernel`, decorate with :func:`register_kernel`, and
``EFAConfig(attention="name")`` (or ``{"kernel": "name", **options}``) selects it.

A kernel declares ``row_local``: True when query i's weights depend on the context only through
the keys i may see, one query at a time (softmax, linear, generalized), so a query may bring its
own key and value for position i (the two-stream algorithm, :mod:`efa.core.strategies`); False when
they depend on the whole context jointly (kernel ridge), and only the masked copies are exact.

Score-based kernels implement ``scores`` and ``weights``; the base class does the rest,
including the two-stream "own key at the diagonal" form.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from efa.core.registry import Registry

KERNELS: Registry[type[Kernel]] = Registry("attention kernel")


def register_kernel(cls: type[Kernel]) -> type[Kernel]:
    """Class decorator: make ``cls`` selectable as ``EFAConfig(attention=cls.name)``.

    ``cls`` is a subclass of :class:`Kernel`; its class attribute ``name`` is the name it is
    registered under. A name already taken by another kernel is refused
    (:class:`efa.core.registry.Registry`).

    Returns
    -------
    type of Kernel
        ``cls`` itself, registered in ``KERNELS``.

    Raises
    ------
    TypeError
        If ``cls`` is not a subclass of :class:`Kernel` or has no (non-empty) ``name``.
    """
    if not (isinstance(cls, type) and issubclass(cls, Kernel)):
        raise TypeError(f"{getattr(cls, '__name__', cls)!r} must be a subclass of efa.Kernel "
                        "(its interface: options, weights or forward)")
    if not getattr(cls, "name", None):
        raise TypeError(f"{cls.__name__} needs a class attribute `name`")
    return KERNELS.register(cls, name=cls.name)


def kernel_spec(attention: str | dict) -> dict:
    """Normalise ``EFAConfig.attention`` to ``{"kernel": name, **options}`` and check it.

    Parameters
    ----------
    attention : str or dict
        A registered kernel's name, or ``{"kernel": name, **options}``.

    Returns
    -------
    dict
        ``{"kernel": name, **options}`` (a new dict), its options checked by the kernel's
        ``check_options``.

    Raises
    ------
    TypeError
        If ``attention`` is neither a string nor a dict.
    ValueError
        If the kernel is not registered or refuses the options.
    """
    if not isinstance(attention, str | dict):
        raise TypeError(f"attention must be a kernel name or a dict, got {attention!r}")
    spec = {"kernel": attention} if isinstance(attention, str) else dict(attention)
    options = {k: v for k, v in spec.items() if k != "kernel"}
    KERNELS.lookup(spec.get("kernel")).check_options(options)
    return spec


class Kernel(nn.Module):
    """Base class of attention kernels.

    Options are keyword arguments of ``__init__`` beyond the standard ones (``num_heads``,
    ``head_dim``, ``scale``, ``causal``) and must be JSON-serialisable: they are saved with the
    model's config. The base class takes none.

    Parameters
    ----------
    num_heads : int
        Number of heads H.
    head_dim : int
        Width d of each head's queries and keys.
    scale : float
        Factor on the scores (1/√d, 1/d or 1, from ``EFAConfig.scale``).
    causal : bool
        Whether the model is unidirectional (the mask itself comes with each call).
    **options
        The kernel's options, checked by ``check_options``.

    Raises
    ------
    ValueError
        If ``check_options`` refuses the options.
    """

    name: ClassVar[str] = ""
    row_local: ClassVar[bool] = True

    def __init__(self, num_heads: int, head_dim: int, scale: float, causal: bool,
                 **options: Any) -> None:
        super().__init__()
        self.check_options(options)
        self.num_heads, self.head_dim, self.scale, self.causal = num_heads, head_dim, scale, causal

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> None:
        """Check the kernel's options before it is built (``EFAConfig`` checks them at once).

        Parameters
        ----------
        options : dict
            The options beyond the standard arguments.

        Raises
        ------
        ValueError
            If an option is unknown or invalid (the base class takes none).
        """
        if options:
            raise ValueError(f"attention kernel {cls.name!r} takes no options, got {options}")

    # -- score-based kernels implement these --------------------------------------------------
    def scores(self, q: Tensor, k: Tensor) -> Tensor:
        """Pairwise scores of the queries against the keys.

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
        raise NotImplementedError

    def own_scores(self, q: Tensor, k: Tensor) -> Tensor:
        """Score of query i against key i alone (the two-stream diagonal).

        Parameters
        ----------
        q : torch.Tensor, shape (B, H, I, d)
            Queries.
        k : torch.Tensor, shape (B, H, I, d)
            Keys, one per query.

        Returns
        -------
        torch.Tensor, shape (B, H, I, 1)
            The score of each query against its own key.
        """
        return self.scores(q[..., None, :], k[..., None, :])[..., 0, :]

    def weights(self, s: Tensor, allowed: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Attention weights from the scores; exactly 0 where ``allowed`` is False.

        Parameters
        ----------
        s : torch.Tensor, shape (B, H, Iq, Ik)
            Scores (from ``scores``, with the own-key diagonal in the two-stream form).
        allowed : torch.Tensor, shape (B, 1 or H, Iq, Ik)
            Which key each query may see (bool).
        q_pos : torch.Tensor, shape (B or 1, Iq)
            Positions of the queries in the sequence.
        k_pos : torch.Tensor, shape (B or 1, Ik)
            Positions of the keys.

        Returns
        -------
        torch.Tensor, shape (B, H, Iq, Ik)
            The weights.
        """
        raise NotImplementedError

    # -- the kernel -----------------------------------------------------------------------
    def forward(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        allowed: Tensor,
        own: tuple[Tensor, Tensor] | None = None,
        q_pos: Tensor | None = None,
        k_pos: Tensor | None = None,
        need_weights: bool = True,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend: each query's weighted combination of the values it may see.

        The base class computes ``weights(scores(q, k), ...) @ v``; score-based kernels
        only implement ``scores`` and ``weights``.

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
            ``(k_own, v_own)``, each of shape (B, H, I, d): query i sees its own key and value
            at position i instead of k_i, v_i (the two-stream form; needs Iq == Ik).
        q_pos : torch.Tensor, shape (B or 1, Iq), optional
            Positions of the queries in the sequence (default 0, 1, ...).
        k_pos : torch.Tensor, shape (B or 1, Ik), optional
            Positions of the keys (default 0, 1, ...).
        need_weights : bool, default True
            False lets a kernel skip returning the weights (and use a fused implementation);
            it then returns None for them. The base class always returns them.

        Returns
        -------
        out : torch.Tensor, shape (B, H, Iq, dv + extra)
            The attended values, with the kernel's ``extra_outputs`` columns appended.
        weights : torch.Tensor, shape (B, H, Iq, Ik), or None
            The attention weights (None only where ``need_weights`` is False and the kernel
            skips them).
        """
        if q_pos is None:
            q_pos = torch.arange(q.shape[-2], device=q.device)[None]
        if k_pos is None:
            k_pos = torch.arange(k.shape[-2], device=k.device)[None]
        s = self.scores(q, k)
        if own is not None:
            eye = torch.eye(s.shape[-1], dtype=torch.bool, device=s.device)
            s = torch.where(eye, self.own_scores(q, own[0]), s)
        w = self.weights(s, allowed, q_pos, k_pos)
        out = w @ v
        if own is not None:
            # The diagonal weight multiplies the query's own value, the others the context's.
            out = out + torch.diagonal(w, dim1=-2, dim2=-1)[..., None] * (own[1] - v)
        return out, w

    def options(self) -> dict[str, Any]:
        """The kernel's settings as a JSON-ready dict (its config round-trip).

        Returns
        -------
        dict
            The options that rebuild this kernel (none for the base class).
        """
        return {}

    @classmethod
    def extra_outputs(cls, options: dict[str, Any]) -> int:
        """Columns the kernel appends to each head's output after the values' (e.g. CME
        attention's posterior variance), for these options.

        Parameters
        ----------
        options : dict
            The kernel's options.

        Returns
        -------
        int
            The number of extra columns per head (0 for the base class).
        """
        return 0


def head_width(attention: str | dict, head_dim: int) -> int:
    """Width of one head's output: the values' ``head_dim`` plus the kernel's extra columns.

    Parameters
    ----------
    attention : str or dict
        The kernel, as ``EFAConfig.attention`` (checked by :func:`kernel_spec`).
    head_dim : int
        Width of each head's values.

    Returns
    -------
    int
        ``head_dim`` plus the kernel's ``extra_outputs`` for these options.
    """
    spec = kernel_spec(attention)
    return head_dim + KERNELS[spec["kernel"]].extra_outputs(
        {k: v for k, v in spec.items() if k != "kernel"})
