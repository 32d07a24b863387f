"""The docs' generated blocks are current, and every DFLASH_* variable is declared once.

A block between ``<!-- generated: NAME -->`` and ``<!-- end generated: NAME -->`` is what
``tools/docs_blocks.py`` makes from the code and data it describes; a stale one fails here by file and
name (``python tools/docs_blocks.py --write`` rewrites it).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from harness.environment import VARIABLES

from .tool import docs_blocks

pytestmark = pytest.mark.pure

ROOT = docs_blocks.ROOT
_VARIABLE = re.compile(r"DFLASH_[A-Z][A-Z0-9_]*[A-Z0-9]")
# Folders that hold no project source: environments, caches, installed packages, run outputs.
_NOT_SOURCE = {".git", ".tox", ".venv", "node_modules", "__pycache__", "build", "reports", "out", ".mypy_cache"}
_SOURCE_SUFFIXES = {".py", ".toml", ".ini", ".yml", ".yaml", ".md", ".c", ".cfg", ".tmpl", ".sh", ""}


def test_every_generated_block_is_current() -> None:
    stale = docs_blocks.stale_blocks()
    assert not stale, "\n".join([*stale, "run: python tools/docs_blocks.py --write"])


def test_every_generator_has_a_block_in_the_docs() -> None:
    shown = {block.name for path in docs_blocks.documents() for block in docs_blocks.blocks_in(path, path.read_text())}
    assert sorted(set(docs_blocks.GENERATORS) - shown) == []


def _docs_tree(tmp_path: Path, readme: str) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(readme)
    return tmp_path


def test_a_hand_edited_block_is_named_as_stale(tmp_path: Path) -> None:
    current = docs_blocks.GENERATORS["cell-counts"]()
    cpu_count = re.search(r"\| cpu \| (\d+) \|", current)
    assert cpu_count is not None
    count = int(cpu_count.group(1))
    edited = current.replace(f"| cpu | {count} |", f"| cpu | {count - 1} |")
    assert edited != current
    root = _docs_tree(tmp_path, f"x\n<!-- generated: cell-counts -->\n{edited}\n<!-- end generated: cell-counts -->\n")
    assert docs_blocks.stale_blocks(root) == ["README.md: generated block 'cell-counts' is stale"]
    docs_blocks_written = docs_blocks.write_blocks(root)
    assert docs_blocks_written == [root / "README.md"]
    assert docs_blocks.stale_blocks(root) == []
    assert f"| cpu | {count} |" in (root / "README.md").read_text()


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("<!-- generated: cell-counts -->\nx\n", "block 'cell-counts' is never closed"),
        ("<!-- generated: counts -->\n<!-- end generated: counts -->\n", "no generator named 'counts'"),
        ("<!-- end generated: findings -->\n", "closes no open block 'findings'"),
    ],
)
def test_a_broken_marker_is_one_line_naming_the_file(tmp_path: Path, text: str, error: str) -> None:
    root = _docs_tree(tmp_path, text)
    with pytest.raises(docs_blocks.MarkerError, match=re.escape(error)) as raised:
        docs_blocks.stale_blocks(root)
    assert str(root / "README.md") in str(raised.value)


def _source_files() -> list[Path]:
    """The project's own text files; ignored folders (envs, caches, reports) are never walked."""
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in _NOT_SOURCE and not d.endswith(".egg-info")]
        for name in files:
            path = Path(folder) / name
            if path.suffix in _SOURCE_SUFFIXES and path.stat().st_size < 1_000_000:
                found.append(path)
    return found


def test_every_dflash_variable_in_the_project_is_declared() -> None:
    declared = {variable.name for variable in VARIABLES}
    used: dict[str, str] = {}
    for path in _source_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for name in _VARIABLE.findall(text):
            used.setdefault(name, str(path.relative_to(ROOT)))
    undeclared = {name: where for name, where in used.items() if name not in declared}
    assert undeclared == {}, "declare them in harness/environment.py"
    assert sorted(declared - set(used)) == [], "declared but read nowhere"


def test_each_variable_is_named_by_the_files_said_to_read_it() -> None:
    wrong = [
        f"{variable.name}: {reader}"
        for variable in VARIABLES
        for reader in variable.readers
        if variable.name not in (ROOT / reader).read_text()
    ]
    assert wrong == []


_LINK = re.compile(r"\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#+ (.+)$", re.MULTILINE)


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but hyphens dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_relative_link_in_the_docs_resolves() -> None:
    broken = []
    for path in docs_blocks.documents():
        for target in _LINK.findall(path.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            if not linked.exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
            elif anchor and anchor not in {_anchor(h) for h in _HEADING.findall(linked.read_text())}:
                broken.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def test_the_readme_is_one_screen_with_the_essentials_first() -> None:
    """Issue 28: at most 300 lines; the two commands, the CPU index, the verdict table and the red-cell
    path within the first 150."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 300
    first = "\n".join(lines[:150])
    for needed in (
        "python3 toxw.py -e cpu\n",
        "python3 toxw.py\n",
        "PIP_EXTRA_INDEX_URL",
        "| verdict | meaning |",
        "## When a cell goes red",
        "dflash-matrix diff --exact",
    ):
        assert needed in first, needed
