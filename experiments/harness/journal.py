"""A full run's job journal (``OUT/.NAME.jobs/``): one entry per finished job, so that an
interrupted run resumes and a long one can be carried to another machine.

An entry is ``KEY.json`` and, when the result holds arrays, ``KEY.safetensors`` beside it.
Nothing is ever unpickled: a journal is meant to travel between machines, and a planted
pickle would run code. JSON cannot hold tuples, non-finite floats, non-string keys or arrays,
so those are written as tagged objects (``{"__tuple__": [...]}``, ``{"__float__": "nan"}``,
``{"__items__": [[k, v], ...]}``, ``{"__array__": name, ...}``) and read back as they were.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

TAGS = ("__tuple__", "__float__", "__items__", "__array__")


class Unjournalable(TypeError):
    """A result holds a value the journal cannot store (kept in memory only)."""


def _encode(obj, arrays: dict):
    import numpy as np
    import torch

    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, (int, np.integer)) and not isinstance(obj, np.bool_):
        return int(obj) if isinstance(obj, int) else {"__array__": _put(arrays, np.asarray(obj))}
    if isinstance(obj, (float, np.floating, np.bool_)):
        if isinstance(obj, float) and math.isfinite(obj):
            return obj
        if isinstance(obj, float):
            return {"__float__": repr(obj)}
        return {"__array__": _put(arrays, np.asarray(obj))}
    if isinstance(obj, np.ndarray):
        return {"__array__": _put(arrays, obj)}
    if isinstance(obj, torch.Tensor):
        return {"__array__": _put(arrays, obj.detach().cpu()), "torch": True}
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode(v, arrays) for v in obj]}
    if isinstance(obj, list):
        return [_encode(v, arrays) for v in obj]
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj) and not any(k in TAGS for k in obj):
            return {k: _encode(v, arrays) for k, v in obj.items()}
        return {"__items__": [[_encode(k, arrays), _encode(v, arrays)] for k, v in obj.items()]}
    raise Unjournalable(f"a job result holds a {type(obj).__name__}, which the journal does "
                        "not store (JSON values, tuples, NumPy arrays and scalars, tensors)")


def _put(arrays: dict, a) -> str:
    import numpy as np
    import torch

    name = f"a{len(arrays)}"
    if isinstance(a, np.ndarray):
        try:
            a = torch.from_numpy(np.ascontiguousarray(a).copy())
        except TypeError as err:
            raise Unjournalable(f"a job result holds a NumPy array of dtype {a.dtype}") from err
    arrays[name] = a.contiguous()
    return name


def _decode(obj, arrays: dict):
    if isinstance(obj, list):
        return [_decode(v, arrays) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if "__tuple__" in obj:
        return tuple(_decode(v, arrays) for v in obj["__tuple__"])
    if "__float__" in obj:
        return float(obj["__float__"])
    if "__items__" in obj:
        return {_hashable(_decode(k, arrays)): _decode(v, arrays) for k, v in obj["__items__"]}
    if "__array__" in obj:
        t = arrays[obj["__array__"]]
        if obj.get("torch"):
            return t
        a = t.numpy()
        return a[()] if a.ndim == 0 else a
    return {k: _decode(v, arrays) for k, v in obj.items()}


def _hashable(k):
    return tuple(_hashable(v) for v in k) if isinstance(k, list) else k


def save(journal: Path, key: str, result) -> bool:
    """Write ``result`` as the entry of job ``key``; False (nothing written) if it holds a
    value the journal cannot store."""
    from safetensors.torch import save_file

    journal = Path(journal)
    journal.mkdir(parents=True, exist_ok=True)
    arrays: dict = {}
    try:
        text = json.dumps(_encode(result, arrays), allow_nan=False)
    except Unjournalable:
        return False
    tmp = journal / f".{key}.tmp-{os.getpid()}"
    if arrays:  # the arrays first: the JSON file's arrival marks the entry complete
        save_file(arrays, str(tmp))
        os.replace(tmp, journal / f"{key}.safetensors")
    tmp.write_text(text)
    os.replace(tmp, journal / f"{key}.json")
    return True


def entry(journal: Path, key: str) -> Path | None:
    """The entry of job ``key``, if the journal has one. A pickle there is refused."""
    pickled = Path(journal) / f"{key}.pkl"
    if pickled.exists():
        raise ValueError(
            f"{pickled} is a pickle. efa never loads pickles from a journal (a journal may come "
            "from another machine, and unpickling runs code); entries are JSON and safetensors. "
            "Delete the file to run that job again.")
    path = Path(journal) / f"{key}.json"
    return path if path.exists() else None


def load(journal: Path, key: str):
    """The result saved for job ``key``, or None if there is none or it is torn."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = entry(journal, key)
    if path is None:
        return None
    try:
        doc = json.loads(path.read_text())
        tensors = path.with_suffix(".safetensors")
        arrays = load_file(str(tensors)) if tensors.exists() else {}
        return _decode(doc, arrays)
    except (ValueError, KeyError, TypeError, OSError, SafetensorError):
        return None  # a torn, stale or altered entry: run the job again
