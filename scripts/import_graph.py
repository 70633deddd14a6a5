"""The import graph of ``clbench/``: which core module imports which, and the circles among them.

    python scripts/import_graph.py [--edges] [--check]

An edge A → B is any import of clbench module B by module A, of one of three kinds: ``module`` (at import time),
``function`` (inside a function: it runs later, but it is still a dependency), ``by-name`` (a module named in a
string that is imported later: ``CORE_PLUGINS``, ``importlib.import_module``), and ``typing`` (under
``if TYPE_CHECKING:``, never at runtime). A circle is a strongly connected component of two modules or more;
they are counted for the runtime edges (module, function, by-name) and for all of them. networkx finds them.

The layers, lowest first (README "Architecture"): 0 the contract (``clbench`` and its top-level modules), 1 the
harness core (``clbench._core``), 2 execution (``clbench._exec``), 3 tools (``clbench._tools``), 4 the command line
(``clbench._cli``), 5 the testing kit (``clbench.testing``), which drives the layers below it and which none of
them may import. ``clbench.leaderboard`` and ``clbench.__main__`` are the public names of command-line code and
count as layer 4. An upward edge imports a higher layer, of any kind (typing too). ``--check`` exits 1 on a runtime
circle or an upward edge.
"""

from __future__ import annotations

import argparse
import ast
from collections.abc import Iterator
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "clbench"
RUNTIME = ("module", "function", "by-name")
LAYERS = {"_core": 1, "_exec": 2, "_tools": 3, "_cli": 4, "testing": 5}
NAMES = {0: "contract", 1: "core", 2: "execution", 3: "tools", 4: "cli", 5: "testing"}
FACADES = {"clbench.leaderboard": 4, "clbench.__main__": 4}


def layer(module: str) -> int:
    """The layer ``module`` belongs to (see the module's docstring)."""
    if module in FACADES:
        return FACADES[module]
    parts = module.split(".")
    return LAYERS.get(parts[1], 0) if len(parts) > 1 else 0


def modules() -> dict[str, Path]:
    """``clbench.x.y`` → its file, for every module of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The clbench module ``name`` is, or is inside (``clbench._core.plan.Cell`` → ``clbench._core.plan``)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(module: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, str]]:
    """``(target, kind)`` for every clbench module ``module`` imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def visit(node: ast.AST, kind: str) -> Iterator[tuple[str, str]]:
        for child in ast.iter_child_nodes(node):
            here = kind
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and kind == "module":
                here = "function"
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    yield from visit_stmt(stmt, "typing")
                for stmt in child.orelse:
                    yield from visit_stmt(stmt, here)
                continue
            yield from visit_stmt(child, here)

    def visit_stmt(node: ast.AST, kind: str) -> Iterator[tuple[str, str]]:
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("clbench."):
            target = _resolve(node.value.split(":")[0], known)
            if target and target not in (module, "clbench"):  # "clbench.local" names a plugin, not a module
                yield target, "by-name"
        for name in names:
            target = _resolve(name, known)
            if target and target != module:
                yield target, kind
        yield from visit(node, kind)

    yield from visit(tree, "module")


def graph() -> nx.MultiDiGraph:
    known = modules()
    g = nx.MultiDiGraph()
    g.add_nodes_from(known)
    for module, path in known.items():
        for target, kind in set(imports(module, path, known)):
            g.add_edge(module, target, kind=kind)
    return g


def circles(g: nx.MultiDiGraph, kinds: tuple[str, ...]) -> list[list[str]]:
    """The strongly connected components of two modules or more over the edges of ``kinds``."""
    sub = nx.DiGraph()
    sub.add_nodes_from(g.nodes)
    sub.add_edges_from((a, b) for a, b, k in g.edges(data="kind") if k in kinds)
    return sorted(sorted(c) for c in nx.strongly_connected_components(sub) if len(c) > 1)


def upward(g: nx.MultiDiGraph) -> list[tuple[str, str, str]]:
    """Every edge (of any kind) from a module to one of a higher layer."""
    return sorted((a, b, k) for a, b, k in g.edges(data="kind") if layer(b) > layer(a))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--edges", action="store_true", help="Also list every edge and its kind.")
    parser.add_argument("--check", action="store_true", help="Exit 1 on a runtime circle or an upward edge.")
    args = parser.parse_args()
    g = graph()
    counts = {k: sum(1 for *_, kind in g.edges(data="kind") if kind == k) for k in (*RUNTIME, "typing")}
    print(f"{g.number_of_nodes()} modules; edges: " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    for label, kinds in (
        ("module-level", ("module",)),
        ("runtime", RUNTIME),
        ("all, typing too", (*RUNTIME, "typing")),
    ):
        found = circles(g, kinds)
        print(f"circles ({label}): {len(found)}" + "".join(f"\n  {len(c)}: {', '.join(c)}" for c in found))
    up = upward(g)
    per_layer = {NAMES[n]: sum(1 for m in g.nodes if layer(m) == n) for n in NAMES}
    print("layers (modules): " + ", ".join(f"{k} {v}" for k, v in per_layer.items()))
    print(f"upward edges: {len(up)}" + "".join(f"\n  {a} -> {b} ({k})" for a, b, k in up))
    if args.edges:
        for a, b, kind in sorted(g.edges(data="kind")):
            print(f"{a} -> {b} ({kind})")
    if args.check and (up or circles(g, RUNTIME)):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
