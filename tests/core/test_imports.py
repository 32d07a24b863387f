"""The import graph of ``harness``: no module imports itself back through others.

Every import counts, also those inside functions and under ``TYPE_CHECKING``: a lazy import
is still a dependency, and a circle through one is a knot a reader has to untie. Read from the
source with ``ast``, so nothing is imported to check it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[2] / "harness"


def _module_name(path: Path) -> str:
    parts = path.relative_to(HARNESS.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in HARNESS.rglob("*.py")}


def _imports(module: str) -> Iterator[str]:
    """The harness modules ``module`` imports (``from a import b`` is ``a.b`` when b is a module)."""
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        yield from (name for name in names if name in MODULES and name != module)


GRAPH = {module: set(_imports(module)) for module in MODULES}


def _circles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in GRAPH[module]:
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    return found


def test_the_graph_is_read() -> None:
    assert "harness.matrix" in GRAPH["harness.expectations"]
    assert "harness.stages" in GRAPH["harness.verdict"]


# Circles known and owned elsewhere, each with who unties it. An entry that no longer
# matches a circle fails too, so the list cannot outlive the knot it excuses.
KNOWN_CIRCLES: dict[tuple[str, ...], str] = {}


def test_no_import_circle_in_harness() -> None:
    circles = {tuple(circle) for circle in _circles()}
    assert sorted(circles - set(KNOWN_CIRCLES)) == []
    assert sorted(set(KNOWN_CIRCLES) - circles) == [], "a known circle is gone: drop it from KNOWN_CIRCLES"


def _reachable(module: str) -> set[str]:
    seen: set[str] = set()
    todo = [module]
    while todo:
        for imported in GRAPH[todo.pop()]:
            if imported not in seen:
                seen.add(imported)
                todo.append(imported)
    return seen


def test_no_lane_imports_the_runner() -> None:
    lanes = [module for module in GRAPH if module.startswith("harness.lanes.")]
    assert lanes
    for lane in lanes:
        assert not {m for m in GRAPH[lane] if m.startswith("harness.runner")}, lane


def test_the_cell_process_imports_nothing_of_the_parent() -> None:
    """A cell process loads the child side and the lane (through importlib, not seen here):
    never the journal, the expectations, the reports or the runner's parent side."""
    reached = _reachable("harness.runner.child")
    parent_only = {
        "harness.journal",
        "harness.expectations",
        "harness.result",
        "harness.pytest_plugin",
        "harness.runner.session",
        "harness.runner.supervisor",
    }
    assert not reached & parent_only
    assert not {m for m in reached if m.startswith("harness.reports")}
