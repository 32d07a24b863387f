"""The process-level caches of a vLLM source tree: every ``functools`` cache it declares, file:line.

A cell process serves many cells; an answer vLLM memoises in one cell must not reach the next
(docs/explanation/isolation.md). This lists what a release memoises, from its source (the wheel
unzipped: ``pip download vllm==X --no-deps``), so the audit can be redone for any release:

    python tools/cache_audit.py PATH/TO/vllm [--under platforms v1/attention config ...]

One line per cache: ``path:line  qualname  decorator``. Standard library only; reads, never imports.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path

_CACHES = {"cache", "lru_cache", "cached_property"}


def _decorator_name(node: ast.expr) -> str | None:
    target = node.func if isinstance(node, ast.Call) else node
    name = target.attr if isinstance(target, ast.Attribute) else target.id if isinstance(target, ast.Name) else None
    # cached_property holds per-instance state, not process state: listed apart, never cleared.
    return name if name in _CACHES else None


def caches(path: Path) -> Iterator[tuple[int, str, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"), str(path))

    def walk(body: list[ast.stmt], prefix: str) -> Iterator[tuple[int, str, str]]:
        for node in body:
            if isinstance(node, ast.ClassDef):
                yield from walk(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for decorator in node.decorator_list:
                    name = _decorator_name(decorator)
                    if name is not None:
                        yield decorator.lineno, f"{prefix}{node.name}", name

    yield from walk(tree.body, "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="a vllm package directory (the one holding __init__.py)")
    parser.add_argument("--under", nargs="*", default=[], help="only these subfolders or files of it")
    args = parser.parse_args(argv)
    if not (args.root / "__init__.py").is_file():
        print(f"{args.root}: not a package directory (no __init__.py)", file=sys.stderr)
        return 2
    found = 0
    for path in sorted(args.root.rglob("*.py")):
        relative = path.relative_to(args.root).as_posix()
        if args.under and not any(relative == u or relative.startswith(u.rstrip("/") + "/") for u in args.under):
            continue
        for line, name, decorator in caches(path):
            if decorator == "cached_property":
                continue
            print(f"{relative}:{line}  {name}  @{decorator}")
            found += 1
    print(f"{found} caches", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
