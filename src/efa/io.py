"""Save and load fitted models: weights as safetensors, architecture as JSON."""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import load_file, save_file

from efa.model import EFA, EFAConfig

FORMAT_VERSION = 1


def save(model: EFA, path: str | Path, overwrite: bool = False) -> Path:
    """Write ``path/config.json`` and ``path/model.safetensors``.

    Refuses to replace an existing model unless ``overwrite=True``.
    """
    if not isinstance(model, EFA):
        raise TypeError(f"save() writes EFA models, got {type(model).__name__}")
    path = Path(path)
    if (path / "model.safetensors").exists() and not overwrite:
        raise FileExistsError(f"{path} already holds a model; pass overwrite=True to replace it")
    path.mkdir(parents=True, exist_ok=True)
    config = {"format": FORMAT_VERSION, "class": "EFA", "config": model.config.to_dict()}
    (path / "config.json").write_text(json.dumps(config, indent=2))
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(path / "model.safetensors"))
    return path


def load(path: str | Path) -> EFA:
    path = Path(path)
    for name in ("config.json", "model.safetensors"):
        if not (path / name).exists():
            raise FileNotFoundError(
                f"{path / name} not found; is {path} a model saved by efa.save?"
            )
    meta = json.loads((path / "config.json").read_text())
    if meta.get("format") != FORMAT_VERSION or meta.get("class") != "EFA":
        raise ValueError(f"{path}/config.json is not an efa model (format {meta.get('format')})")
    model = EFA(EFAConfig.from_dict(meta["config"]))
    state = load_file(str(path / "model.safetensors"))
    model.load_state_dict(state)
    model.eval()
    return model
