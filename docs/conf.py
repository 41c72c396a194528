"""Sphinx configuration of efa's documentation site (``make docs`` → docs/_build/html)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))  # experiments.harness (the results tables)
os.environ.setdefault("MPLBACKEND", "Agg")

import efa  # noqa: E402

project = "efa"
author = "the efa developers"
copyright = "2026, the efa developers"
version = release = efa.__version__

extensions = [
    "myst_parser",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",  # MathJax copied into the build: equations render offline
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
templates_path = ["_templates"]
exclude_patterns = ["_build", "_templates"]
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3

autosummary_generate = True
autodoc_typehints = "none"  # numpydoc's Parameters sections carry the types
numpydoc_show_class_members = False

sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "abort_on_example_error": True,
    "within_subsection_order": "FileNameSortKey",
    "min_reported_time": 1,
}



def _skip(app, what, name, obj, skip, options):
    """scikit-learn's generated metadata-routing setters (``set_fit_request`` ...) are not
    efa's API, and their docstrings point into scikit-learn's own site."""
    if name.startswith("set_") and name.endswith("_request"):
        return True
    return skip


def setup(app):
    app.connect("autodoc-skip-member", _skip)


html_theme = "furo"
html_title = f"efa {release}"
