"""The parts of a ``Sequences`` (the fields' tensors, the lengths, the masks ``observed`` and
``scored``): checked (:func:`check_parts`), padded from ragged Python lists
(:func:`pad_lists`), read from a long pandas table with one row per token
(:func:`frame_lists`), and written to and read from one safetensors file (:func:`write_parts`,
:func:`read_parts`). The functions take and return the parts; ``core/data.py`` builds the
``Sequences`` (this module imports nothing of efa, so that it can call them)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

if TYPE_CHECKING:  # for annotations only
    import pandas as pd


def check_parts(fields: dict[str, Tensor], lengths: Tensor | Sequence[int],
                observed: dict[str, Tensor], scored: Tensor | None) -> Tensor:
    """Check that the parts make a ``Sequences`` (what its constructor runs).

    Parameters
    ----------
    fields : dict of str to torch.Tensor
        Per field, an (N, I) or (N, I, size) tensor; at least one field.
    lengths : torch.Tensor or array-like
        (N,) integers in 1..I.
    observed : dict of str to torch.Tensor
        Per field, an (N, I) bool mask.
    scored : torch.Tensor or None
        An (N, I) bool mask.

    Returns
    -------
    torch.Tensor
        ``lengths`` as a tensor.

    Raises
    ------
    TypeError
        If a field is not a tensor (ragged lists go through :func:`pad_lists`).
    KeyError
        If ``observed`` names no field.
    ValueError
        If the shapes, dtypes or lengths do not agree.
    """
    if not isinstance(fields, Mapping) or not fields:
        raise ValueError("Sequences needs at least one field (a dict name -> tensor)")
    for name, t in fields.items():
        if not isinstance(t, Tensor):
            raise TypeError(
                f"field {name!r}: expected a torch.Tensor of shape [N, I], got "
                f"{type(t).__name__}; ragged Python lists go through Sequences.from_lists, "
                "which pads them"
            )
    if not isinstance(lengths, Tensor):
        lengths = torch.as_tensor(lengths)
    shapes = {name: tuple(t.shape[:2]) for name, t in fields.items()}
    if len(set(shapes.values())) != 1 or any(t.dim() < 2 for t in fields.values()):
        raise ValueError(f"all fields must have the same [N, I] leading shape, got {shapes}")
    n, i = next(iter(shapes.values()))
    if n == 0 or i == 0:
        raise ValueError(f"empty data: {n} sequences of length {i}")
    if lengths.shape != (n,) or lengths.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"lengths must be an integer tensor of shape [{n}]")
    if (lengths < 1).any() or (lengths > i).any():
        bad = int(((lengths < 1) | (lengths > i)).nonzero()[0, 0])
        raise ValueError(f"sequence {bad} has length {int(lengths[bad])}, expected 1..{i}")
    for name, m in observed.items():
        if name not in fields:
            raise KeyError(f"observed[{name!r}] names no field (fields: {list(fields)})")
        if not isinstance(m, Tensor) or m.shape != (n, i) or m.dtype != torch.bool:
            raise ValueError(f"observed[{name!r}] must be a bool tensor of shape [{n}, {i}]")
    if scored is not None and (
        not isinstance(scored, Tensor) or scored.shape != (n, i)
        or scored.dtype != torch.bool
    ):
        raise ValueError(f"scored must be a bool tensor of shape [{n}, {i}]")
    return lengths


def pad_lists(
    fields: Mapping[str, Sequence],
    observed: Mapping[str, Sequence] | None = None,
    scored: Sequence | None = None,
) -> tuple[dict[str, Tensor], Tensor, dict[str, Tensor], Tensor | None]:
    """Pad ragged per-sequence lists into tensors: the parts of a ``Sequences``, checked for
    consistent lengths.

    Parameters
    ----------
    fields : mapping of str to sequence
        ``fields[name][n]`` is the list of values of sequence n (a list of vectors for an
        attribute). Integer values become int64 tensors; real values keep NumPy's precision
        (float64 stays float64, float16/float32 become float32). Padding is 0.
    observed : mapping of str to sequence, optional
        Per field, lists of booleans: False marks a missing value.
    scored : sequence, optional
        Lists of booleans: the positions that enter the likelihood.

    Returns
    -------
    fields : dict of str to torch.Tensor
        Per field, an (N, I) or (N, I, size) tensor, I the longest sequence.
    lengths : torch.Tensor
        (N,) int64 lengths.
    observed : dict of str to torch.Tensor
        Per field given, an (N, I) bool mask (False in the padding).
    scored : torch.Tensor or None
        (N, I) bool (False in the padding), or None if not given.

    Raises
    ------
    ValueError
        If there is no field or sequence, a sequence is empty, or the fields and masks do
        not agree on the number and the lengths of the sequences.
    KeyError
        If ``observed`` names no field.
    TypeError
        If values are not numbers.
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
        name: _pad([_flags(x, f"observed[{name!r}]", s) for s, x in enumerate(m)], width,
                   name).bool()
        for name, m in (observed or {}).items()
    }
    tgt = None
    if scored is not None:
        tgt = _pad([_flags(x, "scored", s) for s, x in enumerate(scored)], width,
                   "scored").bool()
    return out, torch.tensor(lengths), obs, tgt


def _flags(x: Sequence, what: str, s: int) -> np.ndarray:
    """One sequence's mask as booleans: True/False or 1/0 only (``np.asarray(..., bool)``
    would read the string "False" and NaN as True)."""
    a = np.asarray(x)
    if a.dtype == bool and a.ndim == 1:
        return a
    if a.dtype.kind in "iuf":
        good = (a == 0) | (a == 1)
    else:
        good = np.array([isinstance(v, bool) or (isinstance(v, int | float) and v in (0, 1))
                         for v in a.ravel().tolist()], dtype=bool).reshape(a.shape)
    if a.ndim != 1:
        raise TypeError(f"{what}, sequence {s}: a mask is one flag per position, got an "
                        f"array of shape {a.shape}")
    if not good.all():
        k = int(np.argmin(good))
        bad = a[k].item() if isinstance(a[k], np.generic) else a[k]
        raise TypeError(f"{what}, sequence {s}, position {k}: masks hold True/False (or 1/0), "
                        f"got {bad!r}")
    return a.astype(bool)


def frame_lists(frame: pd.DataFrame, by: str, fields: Mapping, order: str | None = None,
                missing: bool = False) -> tuple[dict[str, list], dict[str, list] | None]:
    """Read a long table with one row per token into per-sequence lists, one sequence per
    value of column ``by`` (in sorted order of the keys), for :func:`pad_lists`.

    Parameters
    ----------
    frame : pandas.DataFrame
        The table, one row per token.
    by : str
        The column of the sequence key.
    fields : mapping of str to str or list of str
        Field name → its column, or its list of columns for an attribute.
    order : str, optional
        The column that orders the rows within a sequence (default: the table's order).
    missing : bool
        Whether NaN marks a value as unobserved; otherwise NaN is an error.

    Returns
    -------
    fields : dict of str to list
        Per field, one array of values per sequence (int64 when all its columns are integer,
        boolean or pandas' nullable integer; float otherwise).
    observed : dict of str to list, or None
        Per field with a NaN, one bool array per sequence (False where NaN); None if there
        is none.

    Raises
    ------
    ValueError
        If the table is empty, or a key, order or (without ``missing``) field value is
        missing.
    KeyError
        If a column is not in the table.
    TypeError
        If a field's column does not hold numbers (pandas categoricals become their codes).
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
        if integer:  # through float, integers beyond 2**53 would change
            for c in cs:
                if frame[c].dtype.kind == "u" and len(frame) and \
                        int(frame[c].max()) > np.iinfo(np.int64).max:
                    raise ValueError(f"field {name!r}: column {c!r} holds {int(frame[c].max())}, "
                                     "which does not fit int64")
            values = [g[cs].to_numpy(dtype=np.int64, na_value=0) for g in groups]
            nan = [g[cs].isna().to_numpy().any(1) for g in groups]
        else:
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
    return lists, observed or None


def write_parts(path: str | os.PathLike[str], fields: dict[str, Tensor], lengths: Tensor,
                observed: dict[str, Tensor], scored: Tensor | None,
                overwrite: bool = False) -> Path:
    """Write the parts of a ``Sequences`` to one safetensors file (moved to the CPU).

    Parameters
    ----------
    path : str or os.PathLike
        The file to write.
    fields : dict of str to torch.Tensor
        The fields' tensors, in their order.
    lengths : torch.Tensor
        The sequences' lengths.
    observed : dict of str to torch.Tensor
        The fields' masks of observed values.
    scored : torch.Tensor or None
        The likelihood mask.
    overwrite : bool
        Whether to replace an existing file.

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
    from safetensors.torch import save_file

    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder: Sequences.save writes one file")
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True to replace it")
    tensors = {"lengths": lengths}
    tensors |= {f"field/{k}": v for k, v in fields.items()}
    tensors |= {f"observed/{k}": v for k, v in observed.items()}
    if scored is not None:
        tensors["scored"] = scored
    save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(path),
              metadata={"efa": "sequences", "order": json.dumps(list(fields))})
    return path


def read_parts(path: str | os.PathLike[str]
               ) -> tuple[dict[str, Tensor], Tensor, dict[str, Tensor], Tensor | None]:
    """Read the parts of a ``Sequences`` from a file that :func:`write_parts` wrote.

    Parameters
    ----------
    path : str or os.PathLike
        The file.

    Returns
    -------
    fields : dict of str to torch.Tensor
        The fields' tensors, in the order they were written in.
    lengths : torch.Tensor
        The sequences' lengths.
    observed : dict of str to torch.Tensor
        The fields' masks of observed values.
    scored : torch.Tensor or None
        The likelihood mask, if one was written.

    Raises
    ------
    ValueError
        If the file cannot be read, was not written by :func:`write_parts`, or was altered
        after.
    """
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
    return ({k: t[f"field/{k}"] for k in order}, t["lengths"],
            {k[9:]: v for k, v in t.items() if k.startswith("observed/")}, t.get("scored"))


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
