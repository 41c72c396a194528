"""Attention kernels beyond softmax and linear, one module each; importing this package
registers them (``efa.attention`` does so the first time a kernel is looked up).

A kernel is a subclass of :class:`efa.attention.Kernel` decorated with
:func:`efa.attention.register_kernel`; see docs/design.md, "How to add a kernel".
"""

from efa.kernels import cme, fenchel, generalized, ot, second_order  # noqa: F401  (registers)
