"""Save and load fitted models: weights as safetensors, architecture and metadata as JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from efa.core.config import EFAConfig
from efa.core.model import EFA

if TYPE_CHECKING:  # for annotations only
    from efa.training.train import History

FORMAT_VERSION = 1
FILES = ("config.json", "model.safetensors")


def save(model: EFA, path: str | Path, overwrite: bool = False,
         history: History | None = None) -> Path:
    """Write ``path/config.json`` and ``path/model.safetensors`` (never a pickle).

    Parameters
    ----------
    model : EFA
        The model to save.
    path : str or Path
        A folder (created if needed).
    overwrite : bool
        Replace a model (or any other ``config.json``) already there; refused otherwise.
    history : History, optional
        What ``fit`` returned: its torch thread count is recorded (results depend on it).

    Returns
    -------
    Path
        The folder. Files are written whole (temporary file, then rename) with the permissions
        of any new file under the user's umask; the metadata (:func:`metadata`) records the efa
        and torch versions.

    Raises
    ------
    TypeError
        If ``model`` is not an ``efa.EFA`` or its config is not JSON.
    FileExistsError
        If ``path`` holds a model and ``overwrite`` is False.
    ValueError
        If a weight is NaN or inf (nothing is written).
    """
    from safetensors.torch import save_file

    from efa import __version__

    if type(model) is not EFA:  # a subclass has weights that EFA(config) does not rebuild
        raise TypeError(
            f"save() writes efa.EFA models, which load() rebuilds from their config; got "
            f"{type(model).__name__}. For the tabular estimator, save the fitted "
            "AttentionTableClassifier itself the way scikit-learn estimators are saved "
            "(pickle or joblib, loaded only from a source you trust)")
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"{path} exists and is not a folder")
    present = [n for n in FILES if (path / n).exists()]
    if present and not overwrite:
        raise FileExistsError(
            f"{path} already holds {', '.join(present)}; pass overwrite=True to replace it"
        )
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    _refuse_non_finite(state, "the model")
    path.mkdir(parents=True, exist_ok=True)
    meta = {
        "format": FORMAT_VERSION,
        "class": "EFA",
        "config": model.config.to_dict(),
        "efa": __version__,
        "torch": torch.__version__,
        "train_threads": None if history is None else history.threads,
    }
    # Both files are written in full before either replaces what is there, so a config that
    # does not serialise (or a full disk) leaves the folder's model as it was.
    try:
        text = json.dumps(meta, indent=2, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise TypeError(f"the model's config cannot be written as JSON ({err}); nothing was "
                        f"written to {path}") from None
    mode = 0o666 & ~_umask()
    weights, config = path / "model.safetensors", path / "config.json"
    tmp_weights, tmp_config = weights.with_suffix(".tmp"), config.with_suffix(".tmp")
    try:
        save_file(state, str(tmp_weights))
        tmp_config.write_text(text)
        for tmp in (tmp_weights, tmp_config):
            os.chmod(tmp, mode)
    except BaseException:
        for tmp in (tmp_weights, tmp_config):
            tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp_weights, weights)
    os.replace(tmp_config, config)
    return path


def load(path: str | Path) -> EFA:
    """Load a model saved by :func:`efa.save` (safetensors + JSON, never unpickled).

    Parameters
    ----------
    path : str or pathlib.Path
        The folder ``save`` wrote.

    Returns
    -------
    EFA
        The model, rebuilt from its config, with the saved weights in their saved dtype
        (float32 or float64), in eval mode.

    Raises
    ------
    FileNotFoundError
        When ``config.json`` or ``model.safetensors`` is missing.
    ValueError
        When a file is not readable, the config is invalid, or the weights do not fit it
        (their names, shapes or dtypes) or are not finite.
    """
    from safetensors.torch import load_file

    path = Path(path)
    for name in FILES:
        if not (path / name).exists():
            raise FileNotFoundError(
                f"{path / name} not found; is {path} a model saved by efa.save?"
            )
    meta = _read_config(path)
    try:
        config = EFAConfig.from_dict(meta["config"])
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{path / 'config.json'}: invalid model config: {err}") from None
    model = EFA(config)
    try:
        state = load_file(str(path / "model.safetensors"))
    except Exception as err:  # safetensors raises its own error types
        raise ValueError(
            f"{path / 'model.safetensors'} is not readable (truncated?): {err}"
        ) from None
    where = str(path / "model.safetensors")
    floats = {str(v.dtype) for v in state.values() if v.is_floating_point()}
    if len(floats) > 1:
        raise ValueError(f"{where} holds tensors of several float dtypes {sorted(floats)}; "
                         "efa.save writes the model's one")
    if floats:  # a float64 model comes back in float64
        model = model.to(next(v.dtype for v in state.values() if v.is_floating_point()))
    expected = model.state_dict()
    for k, v in state.items():
        if k in expected and v.dtype != expected[k].dtype:
            raise ValueError(f"{where}: tensor {k!r} is {v.dtype}, the model's is "
                             f"{expected[k].dtype}")
    _refuse_non_finite(state, where)
    # A field's standardisation is in both files: the encoder's buffers and, for its read-out,
    # the config; they must agree (a config edited by hand would split them).
    for k, v in state.items():
        parts = k.split(".")
        if (parts[0] == "encoders" and parts[-1] in ("loc", "scale") and k in expected
                and v.shape == expected[k].shape
                and not torch.allclose(v.double(), expected[k].double(), rtol=1e-6, atol=0)):
            raise ValueError(f"field {parts[1]!r}: {parts[-1]} is {v.tolist()} in {where}, "
                             f"{expected[k].tolist()} in its config.json; a damaged or edited "
                             "file")
    try:
        model.load_state_dict(state)
    except RuntimeError as err:
        raise ValueError(f"{where} does not fit the config: {err}") from None
    model.eval()
    return model


def _refuse_non_finite(state: dict[str, torch.Tensor], where: str) -> None:
    """A ValueError naming the first float tensor of ``state`` holding NaN or inf."""
    bad = [k for k, v in state.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        raise ValueError(f"{where}: tensor {bad[0]!r} holds NaN or inf ({len(bad)} such "
                         "tensor(s)): the weights of a diverged fit, or a damaged file")


def metadata(path: str | Path) -> dict:
    """Read what ``save`` recorded beside a model's config.

    Parameters
    ----------
    path : str or pathlib.Path
        The folder ``save`` wrote.

    Returns
    -------
    dict
        ``format``, ``class``, the ``efa`` and ``torch`` versions, and the torch thread count
        it was trained with (``train_threads``, None if not given).

    Raises
    ------
    FileNotFoundError
        When there is no ``config.json``.
    ValueError
        When it is not an efa model config.
    """
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path / 'config.json'} not found; is {path} a model saved by "
                                "efa.save?")
    return {k: v for k, v in _read_config(path).items() if k != "config"}


def _read_config(path: Path) -> dict:
    """``path/config.json``, checked to be an efa model's."""
    try:
        meta = json.loads((path / "config.json").read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{path / 'config.json'} is not valid JSON (truncated?): {err}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_VERSION \
            or meta.get("class") != "EFA":
        raise ValueError(f"{path / 'config.json'} is not an efa model config")
    return meta


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
