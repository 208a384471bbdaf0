"""The package's import graph, read from the source (nothing is imported): it must have no cycle.

A cycle means a type lives in one of its consumers; the fix is a leaf module below both (as
errors.py, atomic.py, data/prepared.py), not an import moved into a function. Imports inside
functions count too, for that reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import trainperf

SRC = Path(trainperf.__file__).parent


def module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _imported(node: ast.AST, here: str, is_package: bool) -> list[str]:
    """Fully qualified names an import statement may refer to (a module, or a name inside one)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:  # relative: resolve against this module's package
        pkg = here.split(".") if is_package else here.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join(pkg + ([base] if base else []))
    return [base] + [f"{base}.{a.name}" for a in node.names]


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the package modules it imports anywhere in its file (the root package itself, which
    every module may import for its version, is left out)."""
    files = {module_name(f, root): f for f in root.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, f in files.items():
        tree = ast.parse(f.read_text(encoding="utf-8"), filename=str(f))
        for node in ast.walk(tree):
            for target in _imported(node, mod, f.name == "__init__.py"):
                while target and target not in files:  # `from a.b import name` -> module a.b
                    target = target.rpartition(".")[0]
                if target and target != mod and target != root.name:
                    graph[mod].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_package_has_no_import_cycle():
    graph = import_graph(SRC)
    assert "trainperf.errors" in graph["trainperf.cli.main"]  # the walk does see the package's imports
    found = cycles(graph)
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_leaf_modules_import_nothing_of_the_package():
    graph = import_graph(SRC)
    assert graph["trainperf.errors"] == set()
    # atomic sits on errors alone: its refusals and OS-error lines are errors' classes
    assert graph["trainperf.atomic"] == {"trainperf.errors"}


def test_finds_a_cycle_through_a_function_level_import(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub.b import f\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import g\n")  # relative, inside a function
    (pkg / "c.py").write_text("import pkg.a\n")
    graph = import_graph(pkg)
    assert graph["pkg.sub.b"] == {"pkg.a"}
    assert cycles(graph) == [["pkg.a", "pkg.sub.b"]]
