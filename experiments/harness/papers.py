"""The papers' numbers as data: each work's folder holds ``paper_numbers.toml`` (one table
per experiment, each with a comment saying where in the paper it comes from), read here."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any


def paper_numbers(module_file: str, experiment: str) -> dict[str, Any]:
    """The table ``experiment`` of the ``paper_numbers.toml`` beside ``module_file``."""
    path = Path(module_file).with_name("paper_numbers.toml")
    with path.open("rb") as f:
        doc = tomllib.load(f)
    if experiment not in doc:
        raise KeyError(f"{path} has no table [{experiment}]; it has {sorted(doc)}")
    return doc[experiment]


def by_key(table: dict[str, Any], depth: int) -> dict[tuple, Any]:
    """Nested tables ``depth`` levels deep → {(key₁, …, key_depth): value}, lists as tuples."""
    out: dict[tuple, Any] = {}
    for key, value in table.items():
        if depth > 1:
            out |= {(key, *rest): v for rest, v in by_key(value, depth - 1).items()}
        else:
            out[(key,)] = tuple(value) if isinstance(value, list) else value
    return out
