"""The import graph of a package, read from its source with ``ast``, and its cycles.

Every import counts: at module level, inside functions (lazy imports) and under
``if TYPE_CHECKING:`` (a type-only import still ties two modules together: one
cannot be read, moved or type-checked without the other). ``from P import N``
is an edge to the module ``P.N`` when there is one, else to ``P``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path


def modules(package: Path) -> dict[str, Path]:
    """{dotted name: file} of every module of ``package`` (a directory)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def import_graph(package: Path) -> dict[str, set[str]]:
    """{module: the modules of ``package`` it imports}."""
    names = modules(package)
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        edges = set()
        for imported in _imports(name, path):
            while imported and imported not in names:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                edges.add(imported)
        graph[name] = edges
    return graph


def _imports(name: str, path: Path) -> Iterator[str]:
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if is_package else name.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join([*here, base] if base else here)
            for alias in node.names:
                yield f"{base}.{alias.name}"  # resolved to P.N, or to P when N is no module


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found
