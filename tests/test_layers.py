"""The library's layering (docs/design.md): no import circle, and no import running up the
layers that the folders tell (core/ → training/ → the rest). Imports are read from the source
(module level and inside functions alike)."""

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


def layer(module: str) -> int:
    """A module's layer, read from its path alone (docs/design.md, "Layers")."""
    if module in ("efa.core.registry", "efa.deprecation"):  # they import nothing of efa
        return 0
    if module.startswith("efa.core.kernels") or module == "efa.core.mlp":
        return 1
    if module.startswith("efa.core"):
        return 2
    if module.startswith("efa.training"):
        return 3
    return 4  # everything else in efa/: peers, estimators, applications, data, the CLI


def test_no_import_runs_up_the_layers():
    """A module imports only its own layer or those below it: the folder tells which."""
    graph = _graph()
    up = {m: sorted(d for d in deps if d != "efa" and layer(d) > layer(m))
          for m, deps in graph.items() if m != "efa"}
    assert {m: d for m, d in up.items() if d} == {}


def test_layers_are_read_from_folders():
    assert [layer(m) for m in ("efa.core.registry", "efa.core.kernels.cme", "efa.core.mlp",
                               "efa.core.fields", "efa.core.families.base", "efa.training.train",
                               "efa.spatial", "efa.baselines.fm", "efa.cli")] == [
        0, 1, 1, 2, 2, 3, 4, 4, 4]
    assert not any(m == "efa.training" or m.startswith("efa.training.") for m in _graph()
                   if layer(m) == 2)
    # the layer test would see an import running up: fields importing training
    graph = _graph() | {"efa.core.fields": {"efa.training.train"}}
    assert any(layer(d) > layer(m) for m, deps in graph.items() for d in deps if d != "efa")


def test_fields_need_an_mlp_not_attention():
    assert "efa.core.attention" not in _graph()["efa.core.fields"]


def test_the_registry_imports_nothing_of_efa():
    assert _graph()["efa.core.registry"] <= {"efa"}


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


def test_no_library_module_is_over_500_lines():
    long = {p.relative_to(ROOT).as_posix(): n for p in ROOT.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 500}
    assert long == {}


def test_no_exported_name_is_also_a_module_of_efa():
    """``efa.recommend`` was both a function and the module ``efa/recommend.py``: once anything
    imported the module, the attribute became the module and ``efa.recommend(...)`` failed with
    "'module' object is not callable". Exported names and module names stay apart."""
    import efa

    modules = {p.stem for p in ROOT.glob("*.py")} | {p.name for p in ROOT.iterdir() if p.is_dir()}
    assert set(efa._EXPORTS) & modules == set()
