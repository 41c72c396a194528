"""Resumable training state, without pickle.

One file, ``checkpoint.safetensors``: every tensor (weights, best weights, optimizer moments,
random-number-generator states) as safetensors, everything else (history, scheduler, settings
and the fingerprints of model, data and training settings) as JSON in its metadata. A file is
replaced atomically, so a kill while writing leaves the previous checkpoint intact, and nothing
in it can run code when it is read.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch

FILE = "checkpoint.safetensors"
LEGACY = "checkpoint.pt"  # efa 0.1 pickled its checkpoints: never unpickled again
KEY = "efa_checkpoint"


def data_fingerprint(*datasets) -> str:
    """sha256 over every tensor of the given ``Sequences`` (None allowed), in a fixed order."""
    h = hashlib.sha256()
    for data in datasets:
        if data is None:
            h.update(b"none")
            continue
        parts = [("lengths", data.lengths)]
        parts += [(f"field:{k}", v) for k, v in sorted(data.fields.items())]
        parts += [(f"observed:{k}", v) for k, v in sorted(data.observed.items())]
        if data.scored is not None:
            parts.append(("scored", data.scored))
        _hash_tensors(h, parts)
    return h.hexdigest()


def _hash_tensors(h, parts) -> None:
    for name, t in parts:
        t = t.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")


def weights_fingerprint(state: dict[str, torch.Tensor]) -> str:
    """sha256 over a state dict's tensors: ties a checkpoint to the weights its fit started
    from, so a run with another initialisation (another seed) never resumes it."""
    h = hashlib.sha256()
    _hash_tensors(h, sorted(state.items()))
    return h.hexdigest()


def model_fingerprint(model) -> dict:
    """What makes a model the same model: its class, config (if any) and parameter shapes."""
    config = getattr(model, "config", None)
    return {
        "class": type(model).__name__,
        "config": json.loads(json.dumps(config.to_dict(), default=str)) if config else None,
        "shapes": {k: list(v.shape) for k, v in model.state_dict().items()},
    }


def save(folder: Path, tensors: dict[str, torch.Tensor], meta: dict) -> Path:
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / FILE
    tmp = path.with_suffix(".tmp")
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    save_file(tensors, str(tmp), metadata={KEY: json.dumps(meta)})
    os.replace(tmp, path)
    return path


def load(folder: Path) -> tuple[dict[str, torch.Tensor], dict] | None:
    """(tensors, meta) of the checkpoint in ``folder``, or None if there is none."""
    from safetensors import safe_open

    folder = Path(folder)
    path = folder / FILE
    if (folder / LEGACY).exists() and not path.exists():
        raise ValueError(
            f"{folder / LEGACY} is a pickled checkpoint of efa 0.1, which is not loaded (a "
            "pickle can run arbitrary code); delete it, or pass resume=False to start over"
        )
    if not path.exists():
        return None
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = json.loads((f.metadata() or {})[KEY])
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    except Exception as err:  # safetensors raises its own error types
        raise ValueError(
            f"{path} is not a readable efa checkpoint (truncated or not written by efa?): {err}"
        ) from None
    return tensors, meta


def differences(saved: dict, current: dict, prefix: str = "") -> list[str]:
    """Human-readable list of the keys whose values differ between two JSON-like dicts."""
    out = []
    for k in sorted(set(saved) | set(current), key=str):
        a, b = saved.get(k, "<absent>"), current.get(k, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += differences(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append(f"{prefix}{k}: {_short(a)} in the checkpoint, {_short(b)} now")
    return out


def _short(v) -> str:
    s = json.dumps(v, default=str)
    return s if len(s) <= 60 else s[:57] + "..."
