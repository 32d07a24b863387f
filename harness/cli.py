"""The ``dflash-matrix`` command line.

Each subcommand is a module exposing ``add_arguments(parser)`` and ``run(args) -> int``,
with its help text as the first line of its docstring; adding one is adding a module and
a line to ``COMMANDS``. Bad input is one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

from harness import __version__
from harness.errors import EXIT_BAD_INPUT, InputError

PROG = "dflash-matrix"
COMMANDS: tuple[tuple[str, str], ...] = (
    ("cells", "harness.commands.cells"),
    ("run", "harness.commands.run"),
    ("bisect", "harness.commands.bisect"),
    ("history", "harness.commands.history"),
    ("watch", "harness.commands.watch"),
    ("expectations", "harness.commands.expectations"),
    ("watch-issues", "harness.commands.watch_issues"),
    ("repro", "harness.commands.repro"),
    ("findings", "harness.commands.findings"),
    ("report", "harness.commands.report"),
    ("merge", "harness.commands.merge"),
    ("diff", "harness.commands.diff"),
    ("drift", "harness.commands.drift"),
)


def _summary(module: ModuleType) -> str:
    return (module.__doc__ or "").strip().splitlines()[0] if module.__doc__ else ""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Compatibility-matrix harness for vLLM's DFlash drafter: list cells, build reports.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    subcommands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name in COMMANDS:
        module = importlib.import_module(module_name)
        summary = _summary(module)
        sub = subcommands.add_parser(
            name, help=summary, description=module.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        module.add_arguments(sub)
        sub.set_defaults(handler=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status: int = args.handler(args)
    except InputError as error:
        print(f"{PROG}: {error.line()}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        # `dflash-matrix cells ... | head` closed the pipe: not an error worth a traceback.
        sys.stderr.close()
        return 0
    return status


if __name__ == "__main__":
    sys.exit(main())
