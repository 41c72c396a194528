"""``Sequences``: a batch of padded sequences (or sets) of tokens, one tensor per field.

Each field is a tensor of shape [N, I] (categories and values) or [N, I, size] (attributes);
``lengths`` [N] says how many leading positions of each row are real, the rest is padding.
Optional ``observed`` masks mark missing values (hidden from the model and not predicted) and
``scored`` marks which positions enter the likelihood (default: every real position), e.g. only
today's cities when yesterday's temperatures are context. (Which *fields* are predicted is the
fields' ``target`` flag.)

Every check on what a user passes in lives in :func:`efa.core.checks.check_sequences`, called
by the model.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

if TYPE_CHECKING:  # for annotations only
    import pandas as pd

    from efa.core.events import Events


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
        if not isinstance(self.fields, Mapping) or not self.fields:
            raise ValueError("Sequences needs at least one field (a dict name -> tensor)")
        for name, t in self.fields.items():
            if not isinstance(t, Tensor):
                raise TypeError(
                    f"field {name!r}: expected a torch.Tensor of shape [N, I], got "
                    f"{type(t).__name__}; ragged Python lists go through Sequences.from_lists, "
                    "which pads them"
                )
        if not isinstance(self.lengths, Tensor):
            self.lengths = torch.as_tensor(self.lengths)
        shapes = {name: tuple(t.shape[:2]) for name, t in self.fields.items()}
        if len(set(shapes.values())) != 1 or any(t.dim() < 2 for t in self.fields.values()):
            raise ValueError(f"all fields must have the same [N, I] leading shape, got {shapes}")
        n, i = next(iter(shapes.values()))
        if n == 0 or i == 0:
            raise ValueError(f"empty data: {n} sequences of length {i}")
        if self.lengths.shape != (n,) or self.lengths.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"lengths must be an integer tensor of shape [{n}]")
        if (self.lengths < 1).any() or (self.lengths > i).any():
            bad = int(((self.lengths < 1) | (self.lengths > i)).nonzero()[0, 0])
            raise ValueError(f"sequence {bad} has length {int(self.lengths[bad])}, expected 1..{i}")
        for name, m in self.observed.items():
            if not isinstance(m, Tensor) or name not in self.fields or m.shape != (n, i) \
                    or m.dtype != torch.bool:
                raise ValueError(f"observed[{name!r}] must be a bool tensor of shape [{n}, {i}]")
        if self.scored is not None and (
            not isinstance(self.scored, Tensor) or self.scored.shape != (n, i)
            or self.scored.dtype != torch.bool
        ):
            raise ValueError(f"scored must be a bool tensor of shape [{n}, {i}]")

    def __len__(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def max_len(self) -> int:
        return int(next(iter(self.fields.values())).shape[1])

    def valid(self) -> Tensor:
        """[N, I] bool: the real (non-padding) positions."""
        return torch.arange(self.max_len, device=self.lengths.device) < self.lengths[:, None]

    def predicted(self, name: str) -> Tensor:
        """[N, I] bool: the positions whose ``name`` value enters the likelihood."""
        if name not in self.fields:
            raise KeyError(f"no field {name!r}: the sequences have {list(self.fields)}")
        m = self.valid()
        if self.scored is not None:
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
        elif not isinstance(idx, Tensor | slice):
            raise IndexError(f"select sequences with an integer, a slice, an integer or bool "
                             f"tensor, list or array; got {type(idx).__name__} {idx!r}")
        if isinstance(idx, Tensor):
            if idx.dtype == torch.bool:
                if idx.shape != (n,):
                    raise IndexError(f"a bool mask must have shape [{n}], got {tuple(idx.shape)}")
            elif idx.is_floating_point() or idx.dim() != 1:
                raise IndexError(f"select sequences with a 1-d integer or bool tensor, got "
                                 f"{idx.dtype} of shape {tuple(idx.shape)}")
            elif len(idx) and not ((idx >= -n) & (idx < n)).all():
                raise IndexError(f"sequence index {int(idx[(idx < -n) | (idx >= n)][0])} is out "
                                 f"of range: there are {n} sequences")
        lengths = self.lengths[idx]
        if lengths.numel() == 0:
            raise ValueError("the selection is empty: Sequences must hold at least one sequence")
        width = int(lengths.max())
        return Sequences(
            {k: v[idx][:, :width] for k, v in self.fields.items()},
            lengths,
            {k: v[idx][:, :width] for k, v in self.observed.items()},
            None if self.scored is None else self.scored[idx][:, :width],
        )

    def to(self, *args: torch.device | str | int | torch.dtype,
           non_blocking: bool = False) -> Sequences:
        """``to(device)`` moves every tensor; ``to(dtype)`` casts the floating-point fields
        (values, attributes); ``to(device, dtype)`` does both."""
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
                device = torch.device(a)
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
        return self.lengths.device

    def save(self, path: str | os.PathLike[str], overwrite: bool = False) -> Path:
        """Write the sequences to one safetensors file (for ``efa train`` and torchrun). An
        existing file is refused unless ``overwrite`` (as :func:`efa.save` refuses)."""
        from safetensors.torch import save_file

        path = Path(path)
        if path.is_dir():
            raise IsADirectoryError(f"{path} is a folder: Sequences.save writes one file")
        if path.exists() and not overwrite:
            raise FileExistsError(f"{path} exists; pass overwrite=True to replace it")
        tensors = {"lengths": self.lengths}
        tensors |= {f"field/{k}": v for k, v in self.fields.items()}
        tensors |= {f"observed/{k}": v for k, v in self.observed.items()}
        if self.scored is not None:
            tensors["scored"] = self.scored
        save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(path),
                  metadata={"efa": "sequences", "order": json.dumps(list(self.fields))})
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Sequences:
        """Read sequences written by :meth:`save` (checked like any other input)."""
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="pt") as f:
                meta = f.metadata() or {}
                t = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
        except Exception as err:  # safetensors raises its own error types
            raise ValueError(f"{path} is not a readable sequences file: {err}") from None
        if meta.get("efa") != "sequences":
            raise ValueError(f"{path} was not written by Sequences.save")
        try:
            order = json.loads(meta.get("order", ""))
        except json.JSONDecodeError:
            order = None
        if not isinstance(order, list) or not all(isinstance(k, str) for k in order):
            raise ValueError(f"{path}: its metadata 'order' must be a JSON list of field names, "
                             f"got {meta.get('order')!r}; the file was altered after "
                             "Sequences.save")
        absent = [f"field/{k}" for k in order if f"field/{k}" not in t] + [
            k for k in ("lengths",) if k not in t]
        if absent:
            raise ValueError(f"{path} lacks the tensors {absent} (it holds {sorted(t)}); the "
                             "file was altered after Sequences.save")
        return cls({k: t[f"field/{k}"] for k in order}, t["lengths"],
                   {k[9:]: v for k, v in t.items() if k.startswith("observed/")},
                   t.get("scored"))

    def with_scored(self, scored: Tensor | None) -> Sequences:
        """The same sequences with another likelihood mask."""
        return Sequences(self.fields, self.lengths, self.observed, scored)

    def scored_positions(self) -> Tensor:
        """[N, I] bool: real positions that may be scored (before missing values)."""
        m = self.valid()
        return m & self.scored if self.scored is not None else m

    def split_scored(self, per_row: int, seed: int = 0) -> Sequences:
        """The same likelihood terms, spread over more rows: each sequence's scored positions
        are shuffled (seeded) and cut into rows of at most ``per_row``; every row keeps the
        whole sequence as context. The masked copies cost one pass per scored position either
        way, but small batches of such rows mix many sequences per gradient step while still
        sharing each row's token encoding among its positions."""
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
        order = torch.randperm(len(rows), generator=g)
        return self[torch.tensor(rows)[order]].with_scored(torch.stack(masks)[order])

    def thin_scored(self, per_row: int, seed: int = 0) -> Sequences:
        """Keep at most ``per_row`` random scored positions per sequence (a cheaper, fixed
        subset, e.g. of a validation set used for early stopping)."""
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

        ``fields`` maps a field name to a column, or to a list of columns for an attribute.
        Integer columns stay integers; use pandas' nullable ``Int64`` for counts with gaps.
        NaN is an error unless ``missing=True``, which marks it unobserved (hidden from the
        model and not predicted).
        """
        import pandas as pd

        if not isinstance(frame, pd.DataFrame) or frame.empty:
            raise ValueError("from_frame needs a non-empty pandas DataFrame")
        cols = {name: list(c) if isinstance(c, list | tuple) else [c]
                for name, c in fields.items()}
        absent = [c for c in [by, order, *sum(cols.values(), [])]
                  if c is not None and c not in frame]
        if absent:
            raise KeyError(f"columns {absent} are not in the frame (it has {list(frame)})")
        if frame[by].isna().any():
            raise ValueError(
                f"column {by!r} (the sequence key) is missing in {int(frame[by].isna().sum())} "
                "rows; those rows belong to no sequence: drop or fill them first"
            )
        if order:
            if frame[order].isna().any():
                row = frame.index[frame[order].isna().to_numpy()][0]
                key = frame.loc[row, by]
                key = key.item() if isinstance(key, np.generic) else key
                raise ValueError(
                    f"column {order!r} (the order within a sequence) is missing in "
                    f"{int(frame[order].isna().sum())} rows (first: row {row!r}, {by}={key!r}); "
                    "their position is unknown: drop or fill them")
            frame = frame.sort_values([by, order], kind="stable")
        frame = frame.copy()
        for c in {c for cs in cols.values() for c in cs}:
            frame[c] = _numeric_column(frame[c], c)
        groups = [g for _, g in frame.groupby(by, sort=True)]
        lists, observed = {}, {}
        for name, cs in cols.items():
            integer = all(frame[c].dtype.kind in "biu" or str(frame[c].dtype) in (
                "Int64", "Int32", "boolean") for c in cs)  # True/False are the counts 1/0
            values = [g[cs].to_numpy(dtype=float, na_value=np.nan) for g in groups]
            nan = [np.isnan(v).any(1) for v in values]
            if any(n.any() for n in nan):
                if not missing:
                    s = next(k for k, n in enumerate(nan) if n.any())
                    i = int(np.flatnonzero(nan[s])[0])
                    raise ValueError(
                        f"field {name!r}: NaN in sequence {s} ({by}={groups[s][by].iloc[0]!r}), "
                        f"position {i}; pass missing=True to treat NaN as unobserved"
                    )
                observed[name] = [~n for n in nan]
            values = [np.nan_to_num(v, nan=0.0) for v in values]
            values = [v.astype(np.int64) if integer else v for v in values]
            lists[name] = [v[:, 0] if len(cs) == 1 else v for v in values]
        return cls.from_lists(lists, observed or None)

    @classmethod
    def from_events(cls, frame: pd.DataFrame, sequence: str, order: str, fields: Mapping,
                    max_len: int | None = None, long: str = "last",
                    categories: Sequence[str] = (), missing: bool = False) -> Events:
        """One sequence per ``sequence`` key of a long table of events, in ``order``; a column
        that is not numeric (or named in ``categories``) is coded 0..K−1. Longer than
        ``max_len``: ``long="last"`` keeps the latest events, ``"first"`` the earliest,
        ``"windows"`` cuts consecutive windows, ``"error"`` refuses. Returns
        :class:`efa.core.events.Events`; :func:`efa.core.events.split_by_sequence` splits."""
        from efa.core.events import Events, prepare

        out, key, vocab, keys, dropped = prepare(frame, sequence, order, fields, max_len, long,
                                                 categories)
        return Events(cls.from_frame(out, key, fields, missing=missing), vocab, keys, dropped)

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
        if not fields:
            raise ValueError("from_lists needs at least one field")
        names = list(fields)
        n = len(fields[names[0]])
        if n == 0:
            raise ValueError("empty data: no sequences given")
        for name in names:
            if len(fields[name]) != n:
                raise ValueError(
                    f"field {name!r} has {len(fields[name])} sequences, field {names[0]!r} has {n}"
                )
        lengths = []
        for s in range(n):
            ls = {name: len(fields[name][s]) for name in names}
            if len(set(ls.values())) != 1:
                raise ValueError(f"sequence {s}: fields have different lengths {ls}")
            lengths.append(ls[names[0]])
        if min(lengths) == 0:
            raise ValueError(f"sequence {lengths.index(0)} is empty")
        masks = {f"observed[{k!r}]": m for k, m in (observed or {}).items()}
        for k in observed or {}:
            if k not in fields:
                raise KeyError(f"observed[{k!r}] names no field (fields: {names})")
        if scored is not None:
            masks["scored"] = scored
        for what, m in masks.items():
            if len(m) != n:
                raise ValueError(f"{what} has {len(m)} sequences, the data have {n}")
            for s in range(n):
                if len(m[s]) != lengths[s]:
                    raise ValueError(f"{what}, sequence {s}: {len(m[s])} entries for a sequence "
                                     f"of length {lengths[s]}")
        width = max(lengths)
        out = {name: _pad([_array(x, name, s) for s, x in enumerate(fields[name])], width, name)
               for name in names}
        obs = {
            name: _pad([np.asarray(x, dtype=bool) for x in m], width, name).bool()
            for name, m in (observed or {}).items()
        }
        tgt = None
        if scored is not None:
            tgt = _pad([np.asarray(x, dtype=bool) for x in scored], width, "scored").bool()
        return cls(out, torch.tensor(lengths), obs, tgt)


def _device_available(device: torch.device) -> bool:
    backend = getattr(torch, device.type, None)
    if backend is None or not hasattr(backend, "is_available") or not backend.is_available():
        return False
    count = backend.device_count() if hasattr(backend, "device_count") else 1
    return device.index is None or device.index < count


def _numeric_column(col, name: str):
    """A column as numbers: pandas categoricals become their integer codes (NaN where
    missing); strings are refused with the way to map them."""
    import pandas as pd

    if isinstance(col.dtype, pd.CategoricalDtype):
        codes = col.cat.codes.astype("Int64")
        return codes.mask(codes < 0)
    if col.dtype.kind in "biuf" or str(col.dtype) in ("Int64", "Int32", "Float64", "boolean"):
        return col
    raise TypeError(
        f"column {name!r} holds {col.dtype} values (e.g. {col.dropna().iloc[0]!r}), not numbers; "
        f"map them to integer codes first, e.g. df[{name!r}] = df[{name!r}].astype('category') "
        f"(from_frame then uses the codes; df[{name!r}].cat.categories maps them back)"
    )


def _array(values, name: str, s: int) -> np.ndarray:
    """One sequence's values as an array, or an error naming the field and sequence."""
    try:
        return np.asarray(values)
    except ValueError as err:  # ragged vectors: numpy's "inhomogeneous shape"
        raise ValueError(f"field {name!r}, sequence {s}: the items are not all vectors of one "
                         f"size ({err})") from None


def _pad(arrays: list[np.ndarray], width: int, name: str) -> Tensor:
    kinds = {a.dtype.kind for a in arrays if a.size}
    if kinds - set("biuf"):
        raise TypeError(f"field {name!r}: values must be numbers, got dtype kinds {sorted(kinds)}")
    dtype = (
        np.dtype(np.int64) if kinds <= set("biu") else np.result_type(*[a.dtype for a in arrays])
    )
    if dtype.kind == "f" and dtype != np.float64:
        dtype = np.dtype(np.float32)
    for s, a in enumerate(arrays):  # uint64 above int64's range would wrap to negatives
        if a.dtype.kind == "u" and a.size and a.max() > np.iinfo(np.int64).max:
            i = int(np.unravel_index(np.argmax(a > np.iinfo(np.int64).max), a.shape)[0])
            raise ValueError(f"field {name!r}, sequence {s}, position {i}: value "
                             f"{int(a.reshape(len(a), -1)[i].max())} does not fit int64")
    tail = arrays[0].shape[1:]
    out = np.zeros((len(arrays), width, *tail), dtype=dtype)
    for s, a in enumerate(arrays):
        if a.shape[1:] != tail:
            raise ValueError(f"field {name!r}, sequence {s}: item shape {a.shape[1:]} != {tail}")
        out[s, : len(a)] = a
    return torch.from_numpy(out)


def _check_per_row(per_row) -> None:
    if isinstance(per_row, bool) or not isinstance(per_row, int) or per_row < 1:
        raise ValueError(f"per_row must be a positive integer, got {per_row!r}")
