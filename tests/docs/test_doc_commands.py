"""Every ``dflash-matrix`` command the README and docs/ show runs, as shown, without vLLM.

Rule: each line that starts with ``dflash-matrix`` inside a fenced ``sh`` code block of README.md or
``docs/**/*.md`` (blocks of other languages, such as the ``text`` blocks of ``--help`` output, are not
commands) runs in-process (``harness.cli.main``) in a scratch folder that links the repository's
``matrices/``, ``docs/`` and ``tests/`` (so a command's outputs never land in the checkout). Exit status 0
or 1 (a verdict, e.g. ``diff`` finding a regression) passes; 2 (a missing option, an unknown subcommand, a
file that is not there) or a traceback fails, naming the file and line. A block whose info string carries
``needs-vllm``, ``needs-gpu``, ``needs-network`` or ``needs-reports`` (a real lane's reports) is skipped,
and pytest says which and why. ``run``, ``bisect`` and ``history`` need vLLM or the network whatever
their arguments: shown in an unmarked block they fail. The same command shown twice runs once. Every
``-e NAME`` shown (fenced or inline, upper-case placeholders aside) must name a tox.ini env.
"""

from __future__ import annotations

import configparser
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.cli import COMMANDS, main

from .tool import docs_blocks

pytestmark = pytest.mark.pure

ROOT, documents = docs_blocks.ROOT, docs_blocks.documents

NEEDS = ("needs-vllm", "needs-gpu", "needs-network", "needs-reports")
NEVER_UNMARKED = ("run", "bisect", "history")
_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_TOX_ENV = re.compile(r"(?:tox|toxw\.py)(?:\s+run)?\s+-e\s+([A-Za-z0-9_,-]+)")


@dataclass(frozen=True)
class Shown:
    where: str  # file:line
    command: str
    needs: str | None


def _shown_commands() -> list[Shown]:
    shown: list[Shown] = []
    for path in documents():
        text = path.read_text()
        for fence in _FENCE.finditer(text):
            info = fence.group(1).split()
            if not info or info[0] != "sh":
                continue
            needs = next((word for word in info if word in NEEDS), None)
            first_line = text.count("\n", 0, fence.start(2)) + 1
            for offset, line in enumerate(fence.group(2).splitlines()):
                if line.strip().startswith("dflash-matrix"):
                    where = f"{path.relative_to(ROOT)}:{first_line + offset}"
                    if all(item.command != line.strip() or item.needs != needs for item in shown):
                        shown.append(Shown(where, line.strip(), needs))
    return shown


SHOWN = _shown_commands()


def test_the_docs_show_commands_of_every_kind() -> None:
    words = {shlex.split(item.command, comments=True)[1] for item in SHOWN if item.needs is None}
    assert {"cells", "report", "merge", "diff", "drift"} <= words


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("matrices", "docs", "tests"):
        (tmp_path / name).symlink_to(ROOT / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exit_:  # argparse: --help, --version, usage errors
        return exit_.code if isinstance(exit_.code, int) else 2


@pytest.mark.parametrize("shown", SHOWN, ids=[item.where for item in SHOWN])
def test_a_shown_command_runs(shown: Shown, scratch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if shown.needs:
        pytest.skip(f"{shown.where}: block marked {shown.needs}")
    argv = shlex.split(shown.command, comments=True)[1:]
    assert argv[0] not in NEVER_UNMARKED, f"{shown.where}: mark the block with one of {', '.join(NEEDS)}"
    status = _run(argv)
    err = capsys.readouterr().err
    assert status in (0, 1), f"{shown.where}: `{shown.command}` exited {status}: {err.strip()[-500:]}"


@pytest.mark.parametrize("subcommand", [name for name, _ in COMMANDS])
def test_each_subcommand_has_help(subcommand: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run([subcommand, "--help"]) == 0
    assert f"dflash-matrix {subcommand}" in capsys.readouterr().out


def test_every_tox_env_the_docs_name_exists() -> None:
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    envs = {section.removeprefix("testenv:") for section in tox.sections() if section.startswith("testenv:")}
    missing = []
    for path in documents():
        text = path.read_text()
        for match in _TOX_ENV.finditer(text):
            for name in filter(None, match.group(1).split(",")):  # "tox -e history, ..." in prose
                if name not in envs and not name.isupper():
                    line = text.count("\n", 0, match.start()) + 1
                    missing.append(f"{path.relative_to(ROOT)}:{line}: -e {name}")
    assert missing == []


def test_a_missing_option_fails(scratch: Path) -> None:
    assert _run(["cells", "cpu", "--no-such-option"]) == 2
    assert _run(["report", "docs/examples/reports/after/journal"]) == 2  # --out is required
