"""The library's layering (docs/design.md): no import circle, and the kernels depend on nothing
else of efa. Imports are read from the source (module level and inside functions alike)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src" / "efa"


def _modules() -> dict[str, Path]:
    out = {}
    for p in ROOT.rglob("*.py"):
        parts = p.relative_to(ROOT.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _runtime_nodes(tree: ast.AST):
    """Every node except those under ``if TYPE_CHECKING:`` (imports for annotations only)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        deps = set()
        for node in _runtime_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("efa"):
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    deps.add(full if full in mods else node.module)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("efa")}
        graph[name] = {d for d in deps if d in mods and d != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    state, stack, found = {}, [], []

    def visit(u):
        state[u] = "open"
        stack.append(u)
        for v in sorted(graph[u]):
            if state.get(v) == "open":
                found.append(stack[stack.index(v):] + [v])
            elif v not in state:
                visit(v)
        stack.pop()
        state[u] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)
    return found


def test_the_library_has_no_import_circle():
    assert _cycles(_graph()) == []


def test_the_library_never_imports_the_experiments():
    """experiments/ (the papers' reproductions) sits above the library and is not installed;
    only the CLI hands commands over to it (by name, at run time)."""
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom) else
                     [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            if path.name != "cli.py":
                assert not any(n.split(".")[0] == "experiments" for n in names), path


def test_a_cycle_is_found_when_there_is_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_kernels_and_mlp_depend_on_no_other_layer():
    graph = _graph()
    for m, deps in graph.items():
        if m.startswith("efa.kernels") or m == "efa.mlp":
            outside = {d for d in deps if not d.startswith("efa.kernels") and d != "efa.registry"}
            assert outside == set(), (m, outside)
    assert "efa.attention" not in graph["efa.fields"]  # fields need an mlp, not attention


def test_the_registry_imports_nothing_of_efa():
    assert _graph()["efa.registry"] <= {"efa"}


def test_the_design_map_names_every_module():
    """docs/design.md's map: every module of the library, by its path or in its folder's row."""
    doc = (ROOT.parents[1] / "docs" / "design.md").read_text()
    rows = [line for line in doc.splitlines() if line.startswith("| `efa/")]
    missing = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).as_posix()  # efa/x.py, efa/dir/x.py
        folder = rel.rsplit("/", 1)[0] + "/"
        if any(f"`{rel}`" in row for row in rows):
            continue
        own = [row for row in rows if row.startswith(f"| `{folder}`")]
        if own and (path.name == "__init__.py" or any(f"`{path.name}`" in r for r in own)):
            continue
        missing.append(rel)
    assert missing == []


CORE = {"efa.families", "efa.fields", "efa.data", "efa.attention", "efa.mlp", "efa.strategies",
        "efa.conditional", "efa.encoders", "efa.registry",
        "efa.model", "efa.softmax"}


def test_the_core_imports_nothing_above_it():
    """The model's equation (encode → attend → read out → family) depends on nothing built on
    it: training, peers, estimators, data sets, the CLI."""
    graph = _graph()
    core = CORE | {m for m in graph if m.startswith(("efa.kernels", "efa.families"))}
    above = {m: sorted(d for d in graph[m] if d not in core and d != "efa") for m in core}
    assert {m: d for m, d in above.items() if d} == {}


def test_no_library_module_is_over_500_lines():
    long = {p.relative_to(ROOT).as_posix(): n for p in ROOT.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 500}
    assert long == {}
