"""Data generators: synthetic tasks drawn from a known process, as ``Sequences``.

- :mod:`efa.generators.gp`: random functions from Gaussian processes (the UNN note's in-context
  regression data, the TNP benchmark's prior).
"""

from efa.generators.gp import (
    LITERAL,
    NOISY,
    TNPGP,
    NoteGP,
    TNPData,
    covariance,
    cross_covariance,
    rbf,
    sample_note,
    sample_tnp,
)

__all__ = ["LITERAL", "NOISY", "NoteGP", "TNPData", "TNPGP", "covariance", "cross_covariance",
           "rbf", "sample_note", "sample_tnp"]
