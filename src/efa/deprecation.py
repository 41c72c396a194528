"""Old names kept for one release after a rename or a move, each warning with the new name."""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
import inspect
import sys
import types
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def renamed(func: F, old: str, new: str) -> F:
    """``func`` under its old name ``old``: the same call, with a FutureWarning naming
    ``new``. The alias goes in the release after next (efa 0.4)."""

    @functools.wraps(func)
    def alias(*args: Any, **kwargs: Any) -> Any:
        warnings.warn(f"{old} is renamed {new}; the old name will be removed in efa 0.4",
                      FutureWarning, stacklevel=2)
        return func(*args, **kwargs)

    # The alias lives (and is documented) where the old name was, wherever func now lives.
    alias.__module__, alias.__name__ = old.rsplit(".", 1)
    alias.__qualname__ = alias.__name__
    note = f"Deprecated alias of :func:`{new}` (removed in efa 0.4)."
    # The alias takes the same arguments, so it documents them: the note, then the new
    # name's docstring below its summary (None under python -OO).
    doc = inspect.cleandoc(func.__doc__ or "").split("\n\n", 1)
    alias.__doc__ = note + ("\n\n" + doc[1] if len(doc) > 1 else "")
    return alias  # type: ignore[return-value]


# Modules that moved into the layer folders (core/, training/) in efa 0.3: their old paths keep
# working for one release through `_MovedModules`, each import warning with the new path.
MOVED = {f"efa.{m}": f"efa.core.{m}" for m in (
    "attention", "conditional", "data", "encoders", "families", "fields", "kernels", "mlp",
    "model", "registry", "softmax", "strategies")}
MOVED |= {f"efa.{m}": f"efa.training.{m}" for m in (
    "checkpoint", "distributed", "scoring", "storage", "train")}
# discrete.py was split into categorical.py and counts.py; the package exports both.
MOVED |= {"efa.families.discrete": "efa.core.families",
          "efa.core.families.discrete": "efa.core.families"}


# Names that moved out of modules that still exist (their modules outgrew 500 lines, or the
# name found its own layer): the old module answers for them through `moved_out` for one
# release. Names that were removed, not moved, are not here (see CHANGELOG).
MOVED_NAMES: dict[str, dict[str, str]] = {
    "efa.baselines.glm": dict.fromkeys(
        ("ConvexFit", "DESIGN_RATIOS", "L2_GRID", "fit_convex", "penalty", "select_l2"),
        "efa.baselines.convex"),
    "efa.baselines.tabular": dict.fromkeys(
        ("CatBoostTable", "FTTransformerTable", "TabMTable"), "efa.baselines.tabular_tuned"),
    "efa.core.conditional": {"context_bag": "efa.core.context",
                             "context_pairs": "efa.core.context",
                             "refuse_generic_options": "efa.core.checks"},
    "efa.core.data": {"check_sequences": "efa.core.checks"},
    "efa.core.fields": {"ValueReadout": "efa.core.encoders"},
    "efa.core.kernels.fenchel": {"cg": "efa.core.kernels.newton"},
    "efa.core.model": {"DIRECTIONS": "efa.core.config", "BLOCKS": "efa.core.attention",
                       "context_items": "efa.core.context"},
    "efa.generators.latent": dict.fromkeys(("COVARIATES", "DIRECTIONS", "positive_int"),
                                           "efa.generators.draws")
    | {"ExpFamilyLatent": "efa.generators.emissions"},
    "efa.tabular.fitting": dict.fromkeys(("GRAD_TOL", "LBFGS_MAX_ITER"), "efa.training.lbfgs"),
    "efa.training.train": dict.fromkeys(("log_likelihoods", "mean_squared_error", "predictions"),
                                        "efa.training.scoring")
    | {"sample_positions": "efa.training.steps", "SCHEDULES": "efa.training.settings"},
}


def moved_out(module: str) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``module`` (PEP 562): a name in ``MOVED_NAMES[module]``
    is fetched from its new module with a FutureWarning naming it; any other is an
    AttributeError, as without the hook.

    Parameters
    ----------
    module : str
        The old module's name (``__name__``).

    Returns
    -------
    callable
        ``__getattr__(name)`` for that module.
    """
    moved = MOVED_NAMES[module]

    def __getattr__(name: str) -> Any:
        if name not in moved:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"{module}.{name} moved to {moved[name]}.{name}; the old path will be "
                      "removed in efa 0.4", FutureWarning, stacklevel=2)
        return getattr(importlib.import_module(moved[name]), name)

    return __getattr__


def _moved_to(name: str) -> str | None:
    """The new path of a module under an old one: ``efa.kernels.cme`` → ``efa.core.kernels.cme``
    (the longest old path that matches: ``efa.families.discrete`` before ``efa.families``)."""
    for old in sorted(MOVED, key=len, reverse=True):
        if name == old or name.startswith(old + "."):
            return MOVED[old] + name[len(old):]
    return None


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports of an old module path give the module itself (one object under two names, so
    registries and isinstance checks agree), with a FutureWarning naming the new path."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        new = _moved_to(name)
        return None if new is None else importlib.util.spec_from_loader(name, self)

    def create_module(self, spec: Any) -> types.ModuleType:
        new = _moved_to(spec.name)
        assert new is not None
        warnings.warn(f"the module {spec.name} moved to {new}; the old path will be removed in "
                      "efa 0.4", FutureWarning, stacklevel=2)
        module = importlib.import_module(new)
        spec.loader_state = module.__spec__  # the import machinery overwrites it; put it back
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        module.__spec__ = module.__spec__.loader_state  # type: ignore[union-attr]


def install_moved_modules() -> None:
    """First in line, so that an old path's submodule is never found a second time on disk
    (a second copy would register its kernels twice)."""
    if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedModules())
