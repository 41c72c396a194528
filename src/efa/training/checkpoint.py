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
from typing import TYPE_CHECKING, TypeVar

import torch

if TYPE_CHECKING:  # for annotations only
    from torch import nn
    from torch.optim import Optimizer
    from torch.optim.lr_scheduler import LRScheduler

    from efa.core.data import Sequences

_History = TypeVar("_History")

FILE = "checkpoint.safetensors"
LEGACY = "checkpoint.pt"  # efa 0.1 pickled its checkpoints: never unpickled again
KEY = "efa_checkpoint"


def data_fingerprint(*datasets: Sequences | None) -> str:
    """Hash every tensor of the given ``Sequences`` with sha256, in a fixed order.

    Lengths, fields, observed masks and the scored mask all count, with their names, dtypes
    and shapes.

    Parameters
    ----------
    *datasets : Sequences or None
        The data (e.g. training and validation); None stands for a missing one.

    Returns
    -------
    str
        The hexadecimal digest.
    """
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
        # reshape(-1): a 0-dim tensor (a scalar parameter, e.g. a learned σ) has no byte view
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")


def weights_fingerprint(state: dict[str, torch.Tensor]) -> str:
    """Hash a state dict's tensors with sha256.

    Ties a checkpoint to the weights its fit started from, so a run with another
    initialisation (another seed) never resumes it.

    Parameters
    ----------
    state : dict of str to torch.Tensor
        A ``state_dict``.

    Returns
    -------
    str
        The hexadecimal digest.
    """
    h = hashlib.sha256()
    _hash_tensors(h, sorted(state.items()))
    return h.hexdigest()


def model_fingerprint(model: nn.Module) -> dict:
    """Describe what makes a model the same model: its class, config (if any) and shapes.

    Parameters
    ----------
    model : torch.nn.Module
        The model; a ``config`` attribute with ``to_dict()`` is included when present.

    Returns
    -------
    dict
        JSON-ready: ``class`` (the class name), ``config`` (the config as JSON, or None) and
        ``shapes`` (each state-dict entry's shape).
    """
    config = getattr(model, "config", None)
    return {
        "class": type(model).__name__,
        "config": json.loads(json.dumps(config.to_dict(), default=str)) if config else None,
        "shapes": {k: list(v.shape) for k, v in model.state_dict().items()},
    }


def save(folder: Path, tensors: dict[str, torch.Tensor], meta: dict) -> Path:
    """Write a training state to ``folder`` (safetensors + JSON; never a pickle).

    The file is written next to its final name and then moved into place, so a kill while
    writing leaves the previous checkpoint intact.

    Parameters
    ----------
    folder : pathlib.Path
        The checkpoint directory, created if needed.
    tensors : dict of str to torch.Tensor
        The tensors, stored on the CPU.
    meta : dict
        Everything else, JSON-serialisable; stored in the file's metadata.

    Returns
    -------
    pathlib.Path
        The path of ``checkpoint.safetensors``.
    """
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
    """Read the checkpoint in ``folder``.

    Parameters
    ----------
    folder : pathlib.Path
        The checkpoint directory.

    Returns
    -------
    tuple of (dict of str to torch.Tensor, dict) or None
        ``(tensors, meta)`` as written by :func:`save`, or None when there is no checkpoint.

    Raises
    ------
    ValueError
        When the folder holds only a pickled checkpoint of efa 0.1 (never unpickled), or the
        file cannot be read.
    """
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
    """List, readably, the keys whose values differ between two JSON-like dicts.

    Nested dicts are compared key by key.

    Parameters
    ----------
    saved : dict
        The values in the checkpoint.
    current : dict
        The values now.
    prefix : str, default ""
        Put before each key (the path of a nested dict, e.g. ``"config."``).

    Returns
    -------
    list of str
        One line per differing key, ``"key: <saved> in the checkpoint, <current> now"``, with
        long values shortened; ``"<absent>"`` for a key on one side only.
    """
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


def save_state(folder: Path, model: nn.Module, opt: Optimizer, sched: LRScheduler,
               gen: torch.Generator, sampler: torch.Generator, history: dict,
               best_state: dict[str, torch.Tensor] | None, bad: int, fingerprint: dict,
               negatives: torch.Generator | None = None) -> None:
    """Save a fit's whole state after an epoch, tied to ``fingerprint``.

    Also writes ``history.json`` next to the checkpoint.

    Parameters
    ----------
    folder : pathlib.Path
        The checkpoint directory.
    model : torch.nn.Module
        The model; its current weights.
    opt : torch.optim.Optimizer
        The optimizer; its moments and parameter groups.
    sched : torch.optim.lr_scheduler.LRScheduler
        The learning-rate scheduler.
    gen : torch.Generator
        The fit's random generator.
    sampler : torch.Generator
        The batch sampler's random generator.
    history : dict
        The history so far, JSON-serialisable.
    best_state : dict of str to torch.Tensor or None
        The best weights so far, if any.
    bad : int
        Epochs since the last improvement.
    fingerprint : dict
        The fingerprints of data, model, settings and initial weights that a resumed fit
        must match.
    negatives : torch.Generator, optional
        The sampled softmax's generator of negatives, when the fit has one.
    """
    tensors = {f"model/{k}": v for k, v in model.state_dict().items()}
    if best_state is not None:
        tensors |= {f"best/{k}": v for k, v in best_state.items()}
    opt_state = opt.state_dict()
    scalars = {}
    for i, st in opt_state["state"].items():
        for k, v in st.items():
            if torch.is_tensor(v):
                tensors[f"optimizer/{i}/{k}"] = v
            else:
                scalars[f"{i}/{k}"] = v
    tensors["rng/generator"] = gen.get_state()
    tensors["rng/sampler"] = sampler.get_state()
    tensors["rng/torch"] = torch.get_rng_state()
    if negatives is not None:
        tensors["rng/negatives"] = negatives.get_state()
    accelerator = device_rng_state(model)
    if accelerator is not None:
        tensors["rng/cuda"] = accelerator
    meta = {
        "format": 1,
        "fingerprint": fingerprint,
        "history": history,
        "bad": bad,
        "has_best": best_state is not None,
        "optimizer": {"param_groups": opt_state["param_groups"], "scalars": scalars},
        "scheduler": sched.state_dict(),
    }
    save(folder, tensors, meta)
    (folder / "history.json").write_text(json.dumps(history))


def restore_state(state: tuple[dict[str, torch.Tensor], dict], folder: Path, fingerprint: dict,
                  model: nn.Module, opt: Optimizer, sched: LRScheduler, gen: torch.Generator,
                  sampler: torch.Generator, history: type[_History],
                  negatives: torch.Generator | None = None
                  ) -> tuple[_History, dict[str, torch.Tensor] | None, int]:
    """Put a fit's state back, after checking that it was written for this ``fingerprint``.

    Everything is read and checked before anything changes, so a damaged file leaves the model,
    optimizer, scheduler and random states as they were.

    Parameters
    ----------
    state : tuple of (dict of str to torch.Tensor, dict)
        What :func:`load` read.
    folder : pathlib.Path
        The checkpoint directory (for the messages).
    fingerprint : dict
        The current fingerprints: ``data``, ``model``, ``settings`` and ``initial``.
    model : torch.nn.Module
        Receives the saved weights.
    opt : torch.optim.Optimizer
        Receives the saved optimizer state.
    sched : torch.optim.lr_scheduler.LRScheduler
        Receives the saved scheduler state.
    gen : torch.Generator
        Receives the fit's saved random state.
    sampler : torch.Generator
        Receives the batch sampler's saved random state.
    history : type
        The history class, called with the saved history's entries as keywords.
    negatives : torch.Generator, optional
        Receives the sampled softmax's saved random state (a checkpoint written before it was
        saved leaves it as it is).

    Returns
    -------
    history : object
        ``history(**saved history)``.
    best : dict of str to torch.Tensor or None
        The best weights so far, or None.
    bad : int
        Epochs since the last improvement.

    Raises
    ------
    ValueError
        When the checkpoint was written for other data, another model, other settings or
        another initialisation (the message lists the differences), or it is damaged.
    """
    tensors, meta = state
    path = folder / FILE
    if not isinstance(meta, dict):
        raise ValueError(f"{path} is damaged: its metadata is not a JSON object")
    saved = meta.get("fingerprint", {})
    # Data first: fit standardises unset Value loc/scale on the training data, so other data
    # also make another model config; the data are the cause to report.
    for part, what in (("data", "data (training or validation)"), ("model", "model"),
                       ("settings", "training settings"),
                       ("initial", "initialisation (the weights this fit starts from)")):
        if not isinstance(saved, dict) or saved.get(part) != fingerprint[part]:
            old = saved.get(part) if isinstance(saved, dict) else None
            diff = (differences(old or {}, fingerprint[part])
                    if isinstance(fingerprint[part], dict) and isinstance(old, dict | None) else
                    [f"the {'contents' if part == 'data' else 'weights'} differ"
                     + ("" if part == "data" else " (another seed or dtype, or a model already "
                        "fitted since: build it afresh as the fit that wrote it did)")])
            raise ValueError(
                f"{path} was written for another {what}: "
                + "; ".join(diff[:5])
                + ". Use another checkpoint_dir, or resume=False to start over"
            )
    # Read everything before changing anything: a damaged file leaves the model as it was.
    try:
        weights = {k[6:]: v for k, v in tensors.items() if k.startswith("model/")}
        best = ({k[5:]: v for k, v in tensors.items() if k.startswith("best/")}
                if meta["has_best"] else None)
        opt_state = {"state": {}, "param_groups": meta["optimizer"]["param_groups"]}
        for k, v in tensors.items():
            if k.startswith("optimizer/"):
                _, i, name = k.split("/", 2)
                opt_state["state"].setdefault(int(i), {})[name] = v
        for k, v in meta["optimizer"]["scalars"].items():
            i, name = k.split("/", 1)
            opt_state["state"].setdefault(int(i), {})[name] = v
        sched_state = dict(meta["scheduler"])
        sched_state.pop("_scale_fn_ref", None)
        rngs = [tensors[f"rng/{k}"] for k in ("generator", "sampler", "torch")]
        extra = tensors.get("rng/negatives") if negatives is not None else None
        hist, bad = history(**meta["history"]), int(meta["bad"])
        current = model.state_dict()
        if set(weights) != set(current):
            raise KeyError("the model's weights")
        for k, v in weights.items():
            if v.shape != current[k].shape:
                raise ValueError(f"weight {k!r} of shape {list(v.shape)}, the model's is "
                                 f"{list(current[k].shape)}")
        for name, r, now in zip(("generator", "sampler", "torch"), rngs,
                                (gen.get_state(), sampler.get_state(), torch.get_rng_state()),
                                strict=True):
            if r.dtype != now.dtype or r.shape != now.shape:
                raise ValueError(f"random state rng/{name} of {r.dtype} {list(r.shape)}, "
                                 f"expected {now.dtype} {list(now.shape)}")
        if extra is not None and (extra.dtype != rngs[0].dtype or extra.shape != rngs[0].shape):
            raise ValueError(f"random state rng/negatives of {extra.dtype} {list(extra.shape)}")
        device_state = tensors.get("rng/cuda")
        if device_state is not None and (device_state.dtype != torch.uint8
                                         or device_state.dim() != 1):
            raise ValueError(f"random state rng/cuda of {device_state.dtype} "
                             f"{list(device_state.shape)}")
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ValueError(f"{path} is damaged (missing or malformed {err}); delete it, or pass "
                         "resume=False to start over") from None
    model.load_state_dict(weights)
    opt.load_state_dict(opt_state)
    sched.load_state_dict(sched_state)
    gen.set_state(rngs[0])
    sampler.set_state(rngs[1])
    torch.set_rng_state(rngs[2])
    if negatives is not None and extra is not None:
        negatives.set_state(extra)
    if device_state is not None:
        set_device_rng_state(model, device_state)
    return hist, best, bad


def _cuda_device(model: nn.Module) -> torch.device | None:
    """The CUDA device the model's parameters are on, or None (CPU, no parameters)."""
    p = next(model.parameters(), None)
    return p.device if p is not None and p.device.type == "cuda" else None


def device_rng_state(model: nn.Module) -> torch.Tensor | None:
    """The random state of the CUDA device the model is on (dropout draws there), or None.

    ``torch.get_rng_state`` is the CPU generator's only: a fit on a GPU resumed without its
    device's state would draw other dropout masks than the uninterrupted fit.

    Parameters
    ----------
    model : torch.nn.Module
        The model being fitted.

    Returns
    -------
    torch.Tensor or None
        The device generator's state (uint8), None for a model that is not on a CUDA device.
    """
    device = _cuda_device(model)
    return None if device is None else torch.cuda.get_rng_state(device)


def set_device_rng_state(model: nn.Module, state: torch.Tensor) -> None:
    """Restore what :func:`device_rng_state` saved, on the CUDA device the model is on now.

    A checkpoint written on a GPU and resumed on the CPU has no device generator to restore
    (the CPU's is restored apart); nothing is done then.

    Parameters
    ----------
    model : torch.nn.Module
        The model being resumed (already on its device).
    state : torch.Tensor
        The saved state (uint8).
    """
    device = _cuda_device(model)
    if device is not None:
        torch.cuda.set_rng_state(state, device)
