"""``Sequences``: a batch of padded sequences (or sets) of tokens, one tensor per field.

Each field is a tensor of shape [N, I] (categories and values) or [N, I, size] (attributes);
``lengths`` [N] says how many leading positions of each row are real, the rest is padding.
Optional ``observed`` masks mark missing values (hidden from the model and not predicted) and
``scored`` marks which positions enter the likelihood (default: every real position), e.g. only
today's cities when yesterday's temperatures are context (which *fields* are predicted is the
fields' ``target`` flag). Checks on input: :func:`efa.core.checks.check_sequences`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from efa.core.parts import check_parts, frame_lists, pad_lists, read_parts, write_parts
from efa.deprecation import moved_out

if TYPE_CHECKING:  # for annotations only
    import pandas as pd

    from efa.core.events import Events

__getattr__ = moved_out(__name__)  # names moved out: efa.deprecation.MOVED_NAMES


@dataclass
class Sequences:
    """Padded sequences (or sets) of tokens: one tensor per field, plus the lengths.

    Build one from ragged Python lists (:meth:`from_lists`), a long table with one row per
    token (:meth:`from_frame`) or a table of events (:meth:`from_events`); index it with a
    tensor of sequence ids to split it.

    Parameters
    ----------
    fields : dict of str to Tensor
        Per field, an [N, I] tensor (categories: integer codes; values: numbers) or an
        [N, I, size] tensor (attributes).
    lengths : Tensor
        [N] integers: the leading positions of each row that are real; the rest is padding.
    observed : dict of str to Tensor, optional
        Per field, an [N, I] bool mask; False marks a missing value, hidden from the model and
        not predicted.
    scored : Tensor, optional
        [N, I] bool: the positions that enter the likelihood (default: every real position).
    """

    fields: dict[str, Tensor]
    lengths: Tensor
    observed: dict[str, Tensor] = field(default_factory=dict)
    scored: Tensor | None = None

    def __post_init__(self):
        self.lengths = check_parts(self.fields, self.lengths, self.observed, self.scored)

    def __len__(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def max_len(self) -> int:
        """I, the padded length (the longest sequence's length after indexing)."""
        return int(next(iter(self.fields.values())).shape[1])

    def valid(self) -> Tensor:
        """The real (non-padding) positions.

        Returns
        -------
        torch.Tensor of bool, shape (N, I)
            True at the first ``lengths[n]`` positions of each row n.
        """
        return torch.arange(self.max_len, device=self.lengths.device) < self.lengths[:, None]

    def predicted(self, name: str, scored: bool = True) -> Tensor:
        """The positions whose value of field ``name`` enters the likelihood: real, scored and
        observed (``scored=False``: every real observed value, the ones a context may hold).

        Parameters
        ----------
        name : str
            A field of the sequences.
        scored : bool, default True
            Require the position to be scored too.

        Returns
        -------
        torch.Tensor of bool, shape (N, I)
            The predicted positions.

        Raises
        ------
        KeyError
            If there is no field ``name``.
        """
        if name not in self.fields:
            raise KeyError(f"no field {name!r}: the sequences have {list(self.fields)}")
        m = self.valid()
        if scored and self.scored is not None:
            m = m & self.scored
        if name in self.observed:
            m = m & self.observed[name]
        return m

    def __getitem__(self, idx) -> Sequences:
        """Select sequences (an integer, index tensor or list, slice or bool mask) and trim
        extra padding."""
        n = len(self)
        if isinstance(idx, int | np.integer) and not isinstance(idx, bool):
            if not -n <= idx < n:
                raise IndexError(f"sequence {idx} is out of range: there are {n} sequences")
            idx = torch.tensor([idx % n])
        elif isinstance(idx, list | tuple | np.ndarray):
            if len(idx) == 0:
                raise ValueError("the selection is empty: Sequences must hold at least one "
                                 "sequence")
            idx = torch.as_tensor(np.asarray(idx))
        elif isinstance(idx, slice) and (idx.step or 1) < 0:  # torch slices only forwards
            idx = torch.as_tensor(range(n)[idx], dtype=torch.long)
        elif not isinstance(idx, Tensor | slice):
            raise IndexError(f"select sequences with an integer, a slice, an integer or bool "
                             f"tensor, list or array; got {type(idx).__name__} {idx!r}")
        if isinstance(idx, Tensor):
            if idx.dtype == torch.bool:
                if idx.shape != (n,):
                    raise IndexError(f"a bool mask must have shape [{n}], got {tuple(idx.shape)}")
            elif idx.is_floating_point() or idx.is_complex() or idx.dim() != 1:
                raise IndexError(f"select sequences with a 1-d integer or bool tensor, got "
                                 f"{idx.dtype} of shape {tuple(idx.shape)}")
            else:  # unsigned and short integers would wrap -n; torch reads uint8 as a mask
                idx = idx.to(torch.long)
                if len(idx) and not ((idx >= -n) & (idx < n)).all():
                    raise IndexError(f"sequence index {int(idx[(idx < -n) | (idx >= n)][0])} is "
                                     f"out of range: there are {n} sequences")
        lengths = self.lengths[idx]
        if lengths.numel() == 0:
            raise ValueError("the selection is empty: Sequences must hold at least one sequence")
        width = int(lengths.max())
        return Sequences({k: v[idx][:, :width] for k, v in self.fields.items()}, lengths,
                         {k: v[idx][:, :width] for k, v in self.observed.items()},
                         None if self.scored is None else self.scored[idx][:, :width])

    def to(self, *args: torch.device | str | int | torch.dtype,
           non_blocking: bool = False) -> Sequences:
        """Move the tensors to a device and/or cast the floating-point fields, as a new
        ``Sequences``.

        ``to(device)`` moves every tensor; ``to(dtype)`` casts the floating-point fields
        (values, attributes); ``to(device, dtype)`` does both. Categories, counts, lengths and
        masks keep their dtype.

        Parameters
        ----------
        *args : torch.device, str, int or torch.dtype
            A device (``"cuda"``, ``torch.device("cpu")``, a GPU index), a floating-point
            dtype, or both.
        non_blocking : bool
            Passed to ``Tensor.to`` for the moves.

        Returns
        -------
        Sequences
            The moved or cast sequences (tensors already in place are shared).

        Raises
        ------
        ValueError
            If the dtype is not floating point or the device does not exist on this machine.
        """
        device = dtype = None
        for a in args:
            if isinstance(a, torch.dtype):
                if not a.is_floating_point:
                    raise ValueError(
                        f"Sequences.to({a}): only a floating-point dtype can be given (it casts "
                        "the real-valued fields; categories and counts keep int64), since a cast "
                        "to an integer type would truncate the values")
                dtype = a
            else:
                try:  # an index needs an accelerator; a misspelt name is torch's RuntimeError
                    device = torch.device(a)
                except RuntimeError as err:
                    raise ValueError(f"device {a!r} does not exist here: {err}") from None
        if device is not None and device.type not in ("cpu", "meta") and \
                not _device_available(device):
            raise ValueError(f"device {device} does not exist on this machine")

        def move(t: Tensor, cast: bool = False) -> Tensor:
            if cast and dtype is not None and t.is_floating_point():
                t = t.to(dtype)
            return t if device is None else t.to(device, non_blocking=non_blocking)

        return Sequences(
            {k: move(v, cast=True) for k, v in self.fields.items()},
            move(self.lengths),
            {k: move(v) for k, v in self.observed.items()},
            None if self.scored is None else move(self.scored),
        )

    @property
    def device(self) -> torch.device:
        """The device of the tensors (that of ``lengths``)."""
        return self.lengths.device

    def save(self, path: str | os.PathLike[str], overwrite: bool = False) -> Path:
        """Write the sequences to one safetensors file (for ``efa train`` and torchrun).

        Parameters
        ----------
        path : str or os.PathLike
            The file to write.
        overwrite : bool
            Whether to replace an existing file; without it, one is refused (as
            :func:`efa.save` refuses).

        Returns
        -------
        pathlib.Path
            ``path``.

        Raises
        ------
        IsADirectoryError
            If ``path`` is a folder.
        FileExistsError
            If ``path`` exists and ``overwrite`` is False.
        """
        return write_parts(path, self.fields, self.lengths, self.observed, self.scored,
                           overwrite)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Sequences:
        """Read sequences written by :meth:`save` (checked like any other input).

        Parameters
        ----------
        path : str or os.PathLike
            The file.

        Returns
        -------
        Sequences
            The sequences, their fields in the order they were saved in.

        Raises
        ------
        ValueError
            If the file cannot be read, was not written by :meth:`save`, or was altered after.
        """
        return cls(*read_parts(path))

    def with_scored(self, scored: Tensor | None) -> Sequences:
        """The same sequences with another likelihood mask (the tensors are shared).

        Parameters
        ----------
        scored : torch.Tensor of bool, shape (N, I), or None
            The positions that enter the likelihood (None: every real position).

        Returns
        -------
        Sequences
            The sequences with ``scored`` replaced.
        """
        return Sequences(self.fields, self.lengths, self.observed, scored)

    def scored_positions(self) -> Tensor:
        """The real positions that may be scored (before missing values are taken out).

        Returns
        -------
        torch.Tensor of bool, shape (N, I)
            Real and, if ``scored`` is set, scored.
        """
        m = self.valid()
        return m & self.scored if self.scored is not None else m

    def split_scored(self, per_row: int, seed: int = 0) -> Sequences:
        """The same likelihood terms, spread over more rows: each sequence's scored positions
        are shuffled (seeded) and cut into rows of at most ``per_row``; every row keeps the
        whole sequence as context. The masked copies cost one pass per scored position either
        way, but small batches of such rows mix many sequences per gradient step while still
        sharing each row's token encoding among its positions.

        Parameters
        ----------
        per_row : int
            The most scored positions in a row (≥ 1).
        seed : int
            Seed of the shuffles (of the positions, and of the rows).

        Returns
        -------
        Sequences
            The rows, in shuffled order, with the same likelihood terms as ``self`` in all.

        Raises
        ------
        ValueError
            If ``per_row`` is not a positive integer, or no position is scored.
        """
        _check_per_row(per_row)
        slots = self.scored_positions()
        g = torch.Generator().manual_seed(seed)
        rows, masks = [], []
        for n in range(len(self)):
            idx = slots[n].nonzero().flatten()
            idx = idx[torch.randperm(len(idx), generator=g)]
            for start in range(0, len(idx), per_row):
                m = torch.zeros(self.max_len, dtype=torch.bool)
                m[idx[start : start + per_row]] = True
                rows.append(n)
                masks.append(m)
        if not rows:
            raise ValueError("split_scored: no position is scored, so there is nothing to split")
        order = torch.randperm(len(rows), generator=g)
        picked = self[torch.tensor(rows)[order]]  # trimmed to its own longest row
        return picked.with_scored(torch.stack(masks)[order][:, : picked.max_len])

    def thin_scored(self, per_row: int, seed: int = 0) -> Sequences:
        """Keep at most ``per_row`` random scored positions per sequence (a cheaper, fixed
        subset, e.g. of a validation set used for early stopping).

        Parameters
        ----------
        per_row : int
            The most scored positions kept per sequence (≥ 1).
        seed : int
            Seed of the choice.

        Returns
        -------
        Sequences
            The same sequences with the thinned ``scored`` mask.

        Raises
        ------
        ValueError
            If ``per_row`` is not a positive integer.
        """
        _check_per_row(per_row)
        slots = self.scored_positions()
        g = torch.Generator().manual_seed(seed)
        keep = torch.zeros_like(slots)
        for n in range(len(self)):
            idx = slots[n].nonzero().flatten()
            keep[n, idx[torch.randperm(len(idx), generator=g)[:per_row]]] = True
        return self.with_scored(keep)

    @classmethod
    def from_frame(
        cls, frame: pd.DataFrame, by: str, fields: Mapping, order: str | None = None,
        missing: bool = False
    ) -> Sequences:
        """One sequence per value of column ``by`` (rows sorted by ``order``) from a long table.

        Integer columns stay integers; use pandas' nullable ``Int64`` for counts with gaps.
        Pandas categoricals become their codes; other non-numeric columns are refused (see
        :meth:`from_events`, which codes them).

        Parameters
        ----------
        frame : pandas.DataFrame
            The table, one row per token.
        by : str
            The column of the sequence key; the sequences follow the sorted keys.
        fields : mapping of str to str or list of str
            Field name → its column, or its list of columns for an attribute.
        order : str, optional
            The column that orders the rows within a sequence (default: the table's order).
        missing : bool
            Whether NaN marks a value unobserved (hidden from the model and not predicted);
            otherwise NaN is an error.

        Returns
        -------
        Sequences

        Raises
        ------
        ValueError
            If the table is empty, or a key, order or (without ``missing``) field value is
            missing.
        KeyError
            If a column is not in the table.
        TypeError
            If a field's column does not hold numbers.
        """
        return cls.from_lists(*frame_lists(frame, by, fields, order, missing))

    @classmethod
    def from_events(cls, frame: pd.DataFrame, sequence: str, order: str, fields: Mapping,
                    max_len: int | None = None, long: str = "last",
                    categories: Sequence[str] | Mapping[str, Sequence] = (),
                    missing: bool = False) -> Events:
        """One sequence per ``sequence`` key of a long table of events, in ``order``.

        A column that is not numeric (or named in ``categories``) is coded 0..K−1, and its
        vocabulary is returned; :func:`efa.core.events.split_by_sequence` splits the result.

        Parameters
        ----------
        frame : pandas.DataFrame
            The events, one per row (user, timestamp, item, rating, ...).
        sequence : str
            The column of the sequence key (e.g. the user).
        order : str
            The column that orders the events within a sequence (e.g. the timestamp).
        fields : mapping of str to str or list of str
            Field name → its column, or its list of columns for an attribute.
        max_len : int, optional
            The longest sequence kept as one (default: no limit).
        long : {"last", "first", "windows", "error"}
            A sequence longer than ``max_len`` keeps its latest events, its earliest, is cut
            into consecutive windows of ``max_len``, or is refused.
        categories : sequence of str, or mapping of str to sequence
            Fields to code 0..K−1 even though their column is numeric; a mapping gives their
            vocabularies too (another table's ``vocabularies``: the same codes; others refused).
        missing : bool
            Whether NaN in a value column marks it unobserved; otherwise NaN is an error.

        Returns
        -------
        Events
            The sequences, each coded field's vocabulary, each sequence's key and the number
            of events left out (:class:`efa.core.events.Events`).

        Raises
        ------
        ValueError
            If the table is empty, an argument is invalid, a key, order or category value is
            missing or outside its vocabulary, or one exceeds ``max_len`` (``long="error"``).
        KeyError
            If a column is not in the table or ``categories`` names no field.
        TypeError
            If ``categories`` is a string or names an attribute field.

        Warns
        -----
        UserWarning
            If two events of a sequence share their ``order`` (the table's row order decides).
        """
        from efa.core.events import Events, prepare

        out, key, columns, vocab, keys, dropped = prepare(frame, sequence, order, fields,
                                                          max_len, long, categories)
        return Events(cls.from_frame(out, key, columns, missing=missing), vocab, keys, dropped)

    @classmethod
    def from_lists(
        cls,
        fields: Mapping[str, Sequence],
        observed: Mapping[str, Sequence] | None = None,
        scored: Sequence | None = None,
    ) -> Sequences:
        """Pad ragged per-sequence lists into tensors.

        Parameters
        ----------
        fields : mapping of str to sequence
            ``fields[name][n]`` is the list of values of sequence n (a list of vectors for an
            attribute). Integer values become int64 tensors, so categories and counts keep
            their integer type; real values keep NumPy's precision (float64 stays float64,
            float16/float32 become float32). A model casts values to its own dtype and refuses
            one that does not fit it.
        observed : mapping of str to sequence, optional
            Per field, lists of booleans: False marks a missing value.
        scored : sequence, optional
            Lists of booleans: the positions that enter the likelihood.

        Returns
        -------
        Sequences

        Examples
        --------
        >>> efa.Sequences.from_lists({"item": [[0, 3, 1], [2, 1]]}).lengths
        tensor([3, 2])
        """
        return cls(*pad_lists(fields, observed, scored))


def _device_available(device: torch.device) -> bool:
    backend = getattr(torch, device.type, None)
    if backend is None or not hasattr(backend, "is_available") or not backend.is_available():
        return False
    count = backend.device_count() if hasattr(backend, "device_count") else 1
    return device.index is None or device.index < count


def _check_per_row(per_row) -> None:
    if isinstance(per_row, bool) or not isinstance(per_row, int) or per_row < 1:
        raise ValueError(f"per_row must be a positive integer, got {per_row!r}")
