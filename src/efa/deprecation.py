"""Old names kept for one release after a rename, each warning once per call site."""

from __future__ import annotations

import functools
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

    alias.__name__ = alias.__qualname__ = old.rsplit(".", 1)[-1]
    alias.__doc__ = f"Deprecated alias of :func:`{new}` (removed in efa 0.4)."
    return alias  # type: ignore[return-value]
