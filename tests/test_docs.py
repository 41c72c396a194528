"""The API reference's promise: every public name of the documented modules has a docstring,
and every documented module is in the reference (docs/api/index.rst)."""

import importlib
import inspect
import pkgutil
import warnings
from pathlib import Path

import efa

ROOT = Path(__file__).resolve().parents[1]
UNDOCUMENTED_MODULES = {"efa.cli", "efa.deprecation"}  # the command line (its --help) and the
# old-path shim: not API


def _modules():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for info in pkgutil.walk_packages(efa.__path__, "efa."):
            parts = info.name.split(".")
            if any(p.startswith("_") for p in parts) or any(
                    info.name == m or info.name.startswith(m + ".") for m in UNDOCUMENTED_MODULES):
                continue
            yield importlib.import_module(info.name)


def _public(module):
    for name, obj in vars(module).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isclass(obj) or inspect.isfunction(obj):
            yield name, obj
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if not attr.startswith("_") and inspect.isfunction(member):
                        yield f"{name}.{attr}", getattr(obj, attr)


def _documented(obj) -> bool:
    """A docstring of its own or inherited (an override inherits its base's), not the
    signature that ``dataclass`` writes when a class has none."""
    doc = (inspect.getdoc(obj) or "").strip()
    return bool(doc) and not (inspect.isclass(obj) and doc.startswith(obj.__name__ + "("))


def test_every_public_name_has_a_docstring():
    missing = [f"{m.__name__}.{name}" for m in _modules() for name, obj in _public(m)
               if not _documented(obj)]
    assert not missing, f"public names without a docstring: {missing}"


# numpydoc's own validator (numpydoc.validate), on the checks that make a docstring a reference
# page: a summary line, every parameter of the signature in a Parameters section and none that
# is not, a Returns (or Yields) section where the function returns a value.
NUMPYDOC_CHECKS = {"GL08", "SS01", "PR01", "PR02", "RT01"}


def numpydoc_problems(prefix: str = "efa") -> list[str]:
    """Each public name under ``prefix`` that fails :data:`NUMPYDOC_CHECKS`, with its codes
    (``numpydoc_problems("efa.core")`` lists a folder's while its docstrings are written)."""
    from numpydoc.validate import validate

    out = []
    for module in _modules():
        if not (module.__name__ == prefix or module.__name__.startswith(prefix + ".")):
            continue
        for name, _ in _public(module):
            errors = validate(f"{module.__name__}.{name}")["errors"]
            codes = sorted({code for code, _ in errors if code in NUMPYDOC_CHECKS})
            if codes:
                out.append(f"{module.__name__}.{name}: {', '.join(codes)}")
    return out


def test_every_public_name_follows_numpydoc():
    problems = numpydoc_problems()
    assert not problems, "docstrings that numpydoc finds incomplete:\n" + "\n".join(problems)


def test_every_module_is_in_the_reference():
    reference = (ROOT / "docs" / "api" / "index.rst").read_text()
    tops = {m.__name__.split(".")[1] for m in _modules() if m.__name__.count(".") >= 1}
    listed = {line.strip() for line in reference.splitlines()}
    assert tops <= listed, f"modules missing from docs/api/index.rst: {sorted(tops - listed)}"


def test_the_site_check_sees_missing_images_and_network_mathjax(tmp_path):
    """docs/check_site.py's static part fails a page whose image is missing or whose MathJax
    comes from the network, and a gallery example that drew no figure (the browser part runs
    in ``make docs``)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("check_site", ROOT / "docs" / "check_site.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    site = tmp_path / "html"
    (site / "auto_examples").mkdir(parents=True)
    (site / "ok.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"0" * 10)
    (site / "index.html").write_text(
        '<img src="ok.png"><img src="gone.png">'
        '<script src="https://cdn.example.org/mathjax/tex-mml-chtml.js"></script>')
    problems = check.static_checks(site)
    assert any("gone.png is missing" in p for p in problems)
    assert any("MathJax from the network" in p for p in problems)
    assert not any("ok.png" in p for p in problems)
    assert any("no page for plot_01" in p for p in problems)
