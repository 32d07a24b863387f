"""`.ci/run` broken down by env: install (tox's setup) against tests (its commands), from CI logs.

tox ends each env with one line, `cpu: OK (686.29=setup[117.11]+cmd[2.59,566.59] seconds)`:
setup is the env's creation and installs, cmd the commands (commands_pre included). Given
one log, it prints the table; given two (before, after), each env's times side by side and
the ratio of the totals. `.ci/run`'s own line `tox ready in N s` is tox's bootstrap.

    python benchmarks/ci_breakdown.py BEFORE.log [AFTER.log] [--md FILE]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

_ENV_LINE = re.compile(
    r"^\s*(?P<env>[\w.-]+): (?P<outcome>OK|FAIL code \d+) "
    r"\((?P<total>[\d.]+)=setup\[(?P<setup>[\d.]+)\]\+cmd\[(?P<cmd>[\d.,]*)\] seconds\)"
)
_BOOTSTRAP = re.compile(r"^\.ci/run: tox ready in (?P<seconds>\d+) s")


@dataclass(frozen=True)
class EnvTime:
    env: str
    ok: bool
    total_s: float
    install_s: float
    tests_s: float


def parse(text: str) -> tuple[list[EnvTime], float | None]:
    envs: list[EnvTime] = []
    bootstrap = None
    for line in text.splitlines():
        if found := _ENV_LINE.match(line):
            tests = sum(float(x) for x in found["cmd"].split(",") if x)
            ok = found["outcome"] == "OK"
            envs.append(EnvTime(found["env"], ok, float(found["total"]), float(found["setup"]), tests))
        elif found := _BOOTSTRAP.match(line):
            bootstrap = float(found["seconds"])
    return envs, bootstrap


def table(runs: Sequence[tuple[str, list[EnvTime], float | None]]) -> str:
    names = list(dict.fromkeys(env.env for _, envs, _ in runs for env in envs))
    header = "| env | " + " | ".join(f"{label}: install / tests / total (s)" for label, _, _ in runs) + " |"
    lines = [header, "|---|" + "---|" * len(runs)]
    lines.append("| tox bootstrap | " + " | ".join("-" if b is None else f"{b:.0f}" for _, _, b in runs) + " |")
    for name in names:
        cells = []
        for _, envs, _ in runs:
            env = next((e for e in envs if e.env == name), None)
            mark = "" if env is None or env.ok else " (failed)"
            cells.append("-" if env is None else f"{env.install_s:.1f} / {env.tests_s:.1f} / {env.total_s:.1f}{mark}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    totals = [sum(e.total_s for e in envs) + (b or 0) for _, envs, b in runs]
    installs = [sum(e.install_s for e in envs) for _, envs, _ in runs]
    summed = (f"{i:.0f} / - / {t:.0f}" for i, t in zip(installs, totals, strict=True))
    lines.append("| all envs | " + " | ".join(summed) + " |")
    if len(runs) == 2 and totals[0] and installs[0]:
        ratio, install_ratio = totals[1] / totals[0], installs[1] / installs[0]
        lines += ["", f"after / before, all envs: {ratio:.2f}x (install {install_ratio:.2f}x)"]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="+", type=Path)
    parser.add_argument("--md", type=Path)
    args = parser.parse_args(argv)
    runs = [(path.name, *parse(path.read_text(errors="replace"))) for path in args.logs]
    text = table(runs)
    print(text)
    if args.md:
        args.md.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
