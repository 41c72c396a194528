"""One configurable location for the real data sets, and helpers to find files in it.

The data are never shipped with the package (their licences allow research use, not
redistribution), so every loader reads them from a data root that lives outside the repository:

1. an explicit ``override`` argument, else
2. the environment variable ``EFA_DATA``, else
3. ``Path.cwd()/'../shared/data'`` (the layout of a checkout run from its root).

An override or ``EFA_DATA`` that points nowhere is an error rather than a silent fall-back to the
defaults: a typo in the variable should not quietly load some other copy of the data. So is an
empty one (``EFA_DATA=""`` is set, to nothing; ``Path("")`` would be the current directory):
unset the variable to use the default.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for annotations only
    import pandas as pd

__all__ = ["ENV_VAR", "data_root", "require_file", "resolve_file"]

ENV_VAR = "EFA_DATA"

def _default_candidates() -> list[Path]:
    # The installed library knows no repository: the default is relative to where it runs.
    return [Path.cwd() / ".." / "shared" / "data"]


def _refuse_empty(path: str | os.PathLike[str], what: str, fix: str) -> None:
    # Path("") is the current directory: an empty setting would quietly read whatever is there
    if not str(os.fspath(path)).strip():
        raise ValueError(f"{what} is empty ({os.fspath(path)!r}): {fix}")


def data_root(override: str | os.PathLike[str] | None = None) -> Path:
    """Return the directory that holds the real data sets.

    The root is ``override`` if given, else the environment variable ``EFA_DATA`` if set, else
    ``Path.cwd()/'../shared/data'``. Only that one candidate is tried: a given override or
    ``EFA_DATA`` that points nowhere is an error, not a fall-back to the default.

    Parameters
    ----------
    override : str or os.PathLike or None, default None
        An explicit data root; when given, neither ``EFA_DATA`` nor the default is tried.

    Returns
    -------
    pathlib.Path
        The resolved (absolute) data root directory.

    Raises
    ------
    ValueError
        When ``override`` or ``EFA_DATA`` is empty (or only spaces): set, but to no folder.
    FileNotFoundError
        When the candidate is not a directory; the message names the path that was tried and
        where it came from.
    """
    if override is not None:
        _refuse_empty(override, "the data root argument", "pass the data folder, or None "
                      f"for ${ENV_VAR} or the default")
        tried = [("override argument", Path(override))]
    elif ENV_VAR in os.environ:
        _refuse_empty(os.environ[ENV_VAR], f"the environment variable {ENV_VAR}",
                      "set it to the folder that holds the data sets, or unset it for the "
                      "default ../shared/data")
        tried = [(f"${ENV_VAR}", Path(os.environ[ENV_VAR]))]
    else:
        tried = [("default", p) for p in _default_candidates()]
    for _, path in tried:
        if path.is_dir():
            return path.resolve()
    listing = "\n".join(f"  - {path} ({source})" for source, path in tried)
    raise FileNotFoundError(
        "EFA data root not found. Tried:\n"
        f"{listing}\n"
        f"Set the environment variable {ENV_VAR} to the directory that holds the data sets "
        "(movielens-100k/, instacart/, temperature/), or pass the path explicitly."
    )


def require_file(path: str | os.PathLike[str], what: str) -> Path:
    """Return ``path`` as a ``Path`` if it is an existing file, else raise a clear error.

    Parameters
    ----------
    path : str or os.PathLike
        The file that should exist.
    what : str
        A description of the expected content for the error message, e.g.
        ``"MovieLens-100K ratings (u.data)"``.

    Returns
    -------
    pathlib.Path
        ``path`` as a ``Path`` (not resolved).

    Raises
    ------
    FileNotFoundError
        When ``path`` is not an existing file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"Missing data file {path}: expected {what}. "
            f"Check the data root (environment variable {ENV_VAR}) or the path you passed."
        )
    return path


def resolve_file(
    path_or_dir: str | os.PathLike[str] | None, filename: str, subdir: str, what: str
) -> Path:
    """Find ``filename`` from a file path, a data-set directory or the data root.

    Users who downloaded an original archive can point at wherever they unpacked it.

    Parameters
    ----------
    path_or_dir : str or os.PathLike or None
        The file itself, the directory holding it (e.g. ``.../ml-100k``), the data root holding
        ``subdir/filename``, or ``None`` for ``data_root()/subdir/filename``. A directory is
        searched for ``filename`` first, then for ``subdir/filename``.
    filename : str
        The file's name, e.g. ``"u.data"``.
    subdir : str
        The data set's folder under the data root, e.g. ``"movielens-100k"``.
    what : str
        A description of the expected content, for the error message.

    Returns
    -------
    pathlib.Path
        The path of the existing file.

    Raises
    ------
    ValueError
        When ``path_or_dir`` is an empty string (it would search the current directory), or
        (for ``None``) when ``EFA_DATA`` is empty.
    FileNotFoundError
        When no candidate is an existing file, or (for ``None``) when there is no data root.
    """
    if path_or_dir is None:
        return require_file(data_root() / subdir / filename, what)
    _refuse_empty(path_or_dir, f"the path of the {what}", "pass the file, its folder or the "
                  "data root, or None for the data root")
    path = Path(path_or_dir)
    if path.is_dir():
        for candidate in (path / filename, path / subdir / filename):
            if candidate.is_file():
                return candidate
        return require_file(path / filename, what)
    return require_file(path, what)


def read_csv(path: str | os.PathLike[str], **kwargs: Any) -> pd.DataFrame:
    """Read a CSV file with ``pandas.read_csv``, with failures that name the file and the cause.

    A truncated ``.gz`` otherwise surfaces as a bare ``EOFError``.

    Parameters
    ----------
    path : str or os.PathLike
        The file to read.
    **kwargs
        Passed on to ``pandas.read_csv``.

    Returns
    -------
    pandas.DataFrame
        The file's contents.

    Raises
    ------
    ValueError
        When the file cannot be decompressed, decoded or parsed, or is empty; the message names
        the file and the underlying error.
    """
    import zlib

    import pandas as pd

    try:
        return pd.read_csv(path, **kwargs)
    except (EOFError, OSError, zlib.error, UnicodeDecodeError, pd.errors.ParserError,
            pd.errors.EmptyDataError) as err:
        raise ValueError(
            f"{path} cannot be read ({type(err).__name__}: {err}); is the file complete and in "
            "the expected format?"
        ) from None


def warn_row_count(path: str | os.PathLike[str], rows: int, expected: int, what: str) -> None:
    """Warn when a file with a documented size has another number of rows (cut short?).

    Parameters
    ----------
    path : str or os.PathLike
        The file, named in the warning.
    rows : int
        The number of data rows read.
    expected : int
        The documented number of data rows.
    what : str
        What the documented size belongs to, e.g. ``"official MovieLens-100K u.data"``.
    """
    import warnings

    if rows != expected:
        warnings.warn(
            f"{path} has {rows:,} data rows; the {what} has {expected:,}: is the file complete?",
            stacklevel=3,
        )
