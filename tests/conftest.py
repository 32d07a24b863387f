"""Test tiers: every test module declares exactly one, as ``pytestmark`` (pyproject.toml lists them).

- ``pure``: no vLLM, no subprocess, milliseconds a test (``pytest -m pure``).
- ``process``: starts processes (cell processes, pytest, tox, gcc) but needs no vLLM.
- ``vllm``: needs a lane's vLLM, so it runs in that lane's tox env, whose folder it lives in.

A module's tier is read from its source, not by importing it: where ``-m`` rules a module out,
it is not imported either, so ``pytest -m pure`` and ``tox -e unit`` (pure and process) run in
an env without vLLM or torch although the lane folders' modules import them at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression  # what `-m` itself evaluates; pytest has no public API for it

TIERS = ("pure", "process", "vllm")


def module_marks(path: Path) -> frozenset[str]:
    """The names of the marks in the module's top-level ``pytestmark`` (one mark or a list)."""
    # Only the assignment is parsed, not the module: collection asks this of every test module in
    # the controller and in each xdist worker, and parsing whole modules was a second of the pure tier.
    lines = path.read_text().splitlines()
    for start, line in enumerate(lines):
        if not line.startswith("pytestmark"):
            continue
        for end in range(start + 1, len(lines) + 1):  # the shortest run of lines that parses: one statement
            try:
                body = ast.parse("\n".join(lines[start:end])).body
            except SyntaxError:
                continue
            node = body[0]
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
                values = node.value.elts if isinstance(node.value, ast.List | ast.Tuple) else [node.value]
                return frozenset(_mark_name(value) for value in values) - {""}
            break
    return frozenset()


def _mark_name(node: ast.expr) -> str:
    """``pytest.mark.NAME`` or ``pytest.mark.NAME(...)`` -> NAME."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "mark":
        return node.attr
    return ""


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    expression = config.option.markexpr
    if not expression or collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    marks = module_marks(collection_path)
    if not marks & set(TIERS):
        return None  # collected, so the missing tier fails loudly below rather than hiding the module

    def has(name: str, /, **_: str | int | bool | None) -> bool:
        return name in marks

    try:
        wanted = Expression.compile(expression).evaluate(has)
    except Exception:  # a malformed -m (SyntaxError, ParseError before pytest 9): pytest's own check names it
        return None
    return True if not wanted else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if isinstance(item, pytest.Function):
            tiers = [mark.name for mark in item.iter_markers() if mark.name in TIERS]
            if len(tiers) != 1:
                raise pytest.UsageError(f"{item.nodeid}: a test needs exactly one tier of {TIERS}, has {tiers}")
