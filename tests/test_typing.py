"""Type hints on every public function of the library (issue #33): each parameter and the return
type of every public function and method, read from the source with ``ast``. (``make test``
type-checks the hints with mypy; this test makes sure there are hints to check.)"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src" / "efa"
ALWAYS = ("__init__", "__call__")  # dunders that are part of the public interface


def _missing(args: ast.arguments, returns: ast.expr | None, name: str) -> list[str]:
    """The parameters (``self``/``cls`` aside) without an annotation, and ``return``."""
    params = [a for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)
              if a.arg not in ("self", "cls")]
    out = [a.arg for a in params if a.annotation is None]
    for star, a in (("*", args.vararg), ("**", args.kwarg)):
        if a is not None and a.annotation is None:
            out.append(star + a.arg)
    if returns is None and name != "__init__":
        out.append("return")
    return out


def _unhinted(tree: ast.Module) -> list[str]:
    """``qualified.name (what lacks a hint)`` of each public function and method of a public
    class at module or class level (functions nested in functions are not an interface)."""
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for n in ast.iter_child_nodes(node):
            if isinstance(n, ast.ClassDef) and not n.name.startswith("_"):
                visit(n, f"{prefix}{n.name}.")
            elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and (
                    not n.name.startswith("_") or n.name in ALWAYS):
                lacking = _missing(n.args, n.returns, n.name)
                if lacking:
                    found.append(f"{prefix}{n.name} ({', '.join(lacking)})")

    visit(tree, "")
    return found


def test_every_public_function_has_type_hints():
    missing = [f"{path.relative_to(ROOT.parent)}: {name}"
               for path in sorted(ROOT.rglob("*.py"))
               for name in _unhinted(ast.parse(path.read_text()))]
    assert missing == [], "public functions without type hints:\n" + "\n".join(missing)


def test_the_walk_sees_what_lacks_a_hint():
    tree = ast.parse(
        "def f(a, b: int) -> int: ...\n"
        "def g(*args: int, **kw) -> None: ...\n"
        "def h(x: int): ...\n"
        "def _private(a): ...\n"
        "def ok(a: int, /, b: int = 1, *, c: int) -> None: ...\n"
        "class C:\n"
        "    def __init__(self, n): ...\n"
        "    def __call__(self, x: int) -> int: ...\n"
        "    def m(self, y): ...\n"
        "    def _m(self, y): ...\n"
        "    @classmethod\n"
        "    def k(cls, z: int) -> None: ...\n"
        "class _Hidden:\n"
        "    def m(self, y): ...\n"
        "def outer() -> None:\n"
        "    def inner(a): ...\n"
    )
    assert _unhinted(tree) == ["f (a)", "g (**kw)", "h (return)", "C.__init__ (n)",
                               "C.m (y, return)"]


def test_type_checkers_see_every_lazy_name():
    """efa/__init__.py loads names on first use; its TYPE_CHECKING imports and literal
    __all__ list the same names, so type checkers and IDEs see what users can import."""
    import efa

    init = ROOT / "__init__.py"
    tree = ast.parse(init.read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If)
                 and getattr(n.test, "id", None) == "TYPE_CHECKING")
    seen = {a.asname or a.name for n in block.body if isinstance(n, ast.ImportFrom)
            for a in n.names}
    lazy = set(efa._EXPORTS) | set(efa._MODULES)
    assert seen == lazy and set(efa.__all__) == lazy
