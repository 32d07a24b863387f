"""The import graph of ``harness``: no module imports itself back through others.

Every import counts, also those inside functions and under ``TYPE_CHECKING``: a lazy import
is still a dependency, and a circle through one is a knot a reader has to untie. Read from the
source with ``ast``, so nothing is imported to check it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure

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
        "harness.plugins.matrix",
        "harness.runner.session",
        "harness.runner.supervisor",
    }
    assert not reached & parent_only
    assert not {m for m in reached if m.startswith("harness.reports")}


# The layout's boundaries (issue 28): each rule names a package family and what it may not reach.
def _family(prefix: str) -> list[str]:
    return [m for m in GRAPH if m == prefix or m.startswith(prefix + ".")]


def _imports_outside(module: str, allowed: tuple[str, ...]) -> set[str]:
    return {m for m in GRAPH[module] if not any(m == a or m.startswith(a + ".") for a in allowed)}


OFF_PATH = ("harness.cuda", "harness.releases")
CHILD_SIDE = ("harness.lanes", "harness.attention", "harness.runner")
EDGES = ("harness.plugins", "harness.commands", "harness.cli")


def test_off_path_packages_import_nothing_of_the_harness_above_them() -> None:
    for package in OFF_PATH:
        for module in _family(package):
            assert _imports_outside(module, (package,)) == set(), module


def test_the_core_reaches_no_lane_runner_cuda_release_or_edge() -> None:
    """The matrix, contracts, verdicts, journal and reports can be loaded on a machine that merges
    reports: nothing of theirs reaches child-side code, a GPU, a release env or a command."""
    core = [
        m
        for m in GRAPH
        if not any(m == p or m.startswith(p + ".") for p in (*OFF_PATH, *CHILD_SIDE, *EDGES)) and m != "harness"
    ]
    assert "harness.matrix" in core and "harness.reports.junit" in core and "harness.contracts.lanes" in core
    for module in core:
        reached = {m for m in _reachable(module) if m.startswith((*OFF_PATH, *CHILD_SIDE, *EDGES))}
        assert reached == set(), module


def test_no_lane_imports_another() -> None:
    lanes = {m.split(".")[2] for m in _family("harness.lanes") if m.count(".") >= 2} - {"protocol"}
    assert {"cpu", "gpu", "selection", "fake"} <= lanes
    for module in _family("harness.lanes"):
        own = module.split(".")[2] if module.count(".") >= 2 else None
        lanes_imported = {m for m in GRAPH[module] if m.startswith("harness.lanes.")}
        others = {m for m in lanes_imported if m.split(".")[2] not in (own, "protocol")}
        assert others == set(), module


def test_shared_lane_code_imports_no_lane_and_nothing_imports_an_edge() -> None:
    for module in _family("harness.attention"):
        assert {m for m in GRAPH[module] if m.startswith(("harness.lanes.", "harness.runner"))} == set(), module
    for module, imported in GRAPH.items():
        if module.startswith(EDGES):
            continue
        assert {m for m in imported if m.startswith(EDGES)} == set(), module


def test_the_root_lists_the_data_path() -> None:
    """``ls harness/``: the spine's modules and the packages, nothing about GPUs or releases."""
    root = sorted(p.name for p in HARNESS.iterdir() if p.name != "__pycache__" and not p.name.startswith("."))
    off_path_words = ("cuda", "gpu", "vllm", "release", "bisect", "stub", "flashinfer", "kernels")
    strays = [name for name in root if name.endswith(".py") and any(w in name for w in off_path_words)]
    assert strays == []


# The deployment a cell stands for (issue 37): read by the lanes, the finding pages and repro alike.
DEPLOYMENT = "harness.deployment"
NOT_BELOW_THE_DEPLOYMENT = ("harness.attention", "harness.lanes", "harness.runner", "harness.cuda", "harness.releases")


def test_the_deployment_reaches_nothing_child_side_nor_torch_or_vllm() -> None:
    modules = _family(DEPLOYMENT)
    assert {f"{DEPLOYMENT}.arguments", f"{DEPLOYMENT}.settings", f"{DEPLOYMENT}.models"} <= set(modules)
    for module in modules:
        assert {m for m in _reachable(module) if m.startswith(NOT_BELOW_THE_DEPLOYMENT)} == set(), module
        imported = {
            name.split(".")[0]
            for node in ast.walk(ast.parse(MODULES[module].read_text()))
            for name in (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
        }
        assert not imported & {"torch", "vllm"}, module


# vLLM's engine-argument keys the harness builds, spelled only where the arguments are built.
ENGINE_ARGUMENT_KEYS = ("speculative_config", "attention_config")
ARGUMENTS_HOME = "harness.deployment.arguments"


def _spellings(tree: ast.AST) -> list[str]:
    """Where ``tree`` spells an engine-argument key as data: a string or a keyword argument."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in ENGINE_ARGUMENT_KEYS:
            found.append(f"line {node.lineno}: {node.value!r}")
        elif isinstance(node, ast.keyword) and node.arg in ENGINE_ARGUMENT_KEYS:
            found.append(f"line {node.lineno}: {node.arg}=")
    return found


def test_the_engine_argument_keys_are_spelled_in_the_deployment_only() -> None:
    """A lane, a page or a repro script that built its own ``speculative_config`` would drift from
    the lanes' (the finding pages once printed ``attention_backend=`` where the lanes set the
    attention config's backend). Reading vLLM's config (``config.speculative_config``) is no spelling."""
    assert _spellings(ast.parse(MODULES[ARGUMENTS_HOME].read_text()))
    sources = {module: path for module, path in MODULES.items() if module != ARGUMENTS_HOME}
    # The repro templates are Python (their markers are names): their scripts carry the arguments as data.
    sources.update({path.name: path for path in (HARNESS / "repro").glob("*.tmpl")})
    assert len(sources) > len(MODULES)
    spelled = {name: found for name, path in sources.items() if (found := _spellings(ast.parse(path.read_text())))}
    assert spelled == {}


def test_every_module_a_lane_reaches_in_the_deployment_is_in_its_build_path() -> None:
    """A lane's build fingerprint (Contract.build_path) must move when its engine arguments do."""
    from harness.contracts.lanes import CONTRACTS

    fingerprinted = [contract for contract in CONTRACTS.values() if contract.build_path]
    assert {"cpu", "selection", "gpu_emulated"} <= {contract.name for contract in fingerprinted}
    for contract in fingerprinted:  # the gpu lane records no measured release: no build path
        reached = {m for m in _reachable(contract.module) if m.startswith(DEPLOYMENT)}
        files = {path for pattern in contract.build_path for path in HARNESS.glob(pattern)}
        assert {m for m in reached if MODULES[m] not in files} == set(), contract.name


# The report's views (issue 37): each reads the model (and the inputs, and the small modules below
# every view: text escaping, JSON text, run pairing, device grids), never another view, as pytest's
# junitxml.py is imported by nobody. ``build`` assembles them, the commands call them.
REPORT_VIEWS = {
    # the report's own files and the job summary
    "junit",
    "matrix_json",
    "markdown",
    "html",
    "step_summary",
    # comparisons of two reports, or of a report with vLLM's docs
    "diff",
    "exact",
    "drift",
    # the commands' pages
    "history",
    "finding_pages",
    "release_delta",
}


def test_no_view_of_the_report_imports_another_view() -> None:
    views = {f"harness.reports.{name}" for name in REPORT_VIEWS}
    assert views <= set(MODULES)
    imported = {view: sorted(GRAPH[view] & views) for view in views}
    assert {view: others for view, others in imported.items() if others} == {}
    assemblers = ("harness.reports", "harness.reports.build")  # the package re-exports build
    below = {m for m in _family("harness.reports") if m not in views and m not in assemblers}
    for module in below:  # nothing under the views reaches up to one
        assert _reachable(module) & views == set(), module


# Names read all over the harness, each imported from the one module that defines it (issue 37: they
# were re-exported from two places).
HOMES = {
    "STAGES": "harness.stages",
    "Stage": "harness.stages",
    "StageLog": "harness.stages",
    "DraftSpec": "harness.deployment.models",
    "DraftTruth": "harness.deployment.models",
    "ModelShape": "harness.deployment.models",
    "EngineSettings": "harness.deployment.settings",
    "Deployment": "harness.deployment.arguments",
}


def test_shared_names_are_imported_from_their_one_home() -> None:
    strays = []
    roots = [HARNESS, HARNESS.parent / "tests", HARNESS.parent / "benchmarks"]
    for path in (file for root in roots for file in root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("harness"):
                strays += [
                    f"{path.name}: {alias.name} from {node.module}"
                    for alias in node.names
                    if alias.name in HOMES and node.module != HOMES[alias.name]
                ]
    assert strays == []
