"""Attention kernels, one module each, and their contract (:mod:`efa.core.kernels.base`).

A kernel is a subclass of :class:`Kernel` decorated with :func:`register_kernel`; importing
this package registers every built-in one (see docs/design.md, "How to add a kernel").
"""

from efa.core.kernels import cme, dot, fenchel, generalized, ot, second_order  # noqa: F401,E402,I001
from efa.core.kernels.base import KERNELS, Kernel, head_width, kernel_spec, register_kernel

__all__ = ["KERNELS", "Kernel", "head_width", "kernel_spec", "register_kernel"]
