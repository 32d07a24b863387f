"""The ``dflash-matrix`` command line.

Each subcommand is a module exposing ``add_arguments(parser)`` and ``run(args) -> int``,
with its help text as the first line of its docstring; adding one is adding a module and
a line to ``COMMANDS``. Bad input is one line on stderr and exit status 2, never a traceback.
Ctrl-C and SIGTERM are one line too, and exit 130 and 143 (128 + the signal, as a shell reports
it): the command's children end with it (harness/releases/processes.py) and every file it writes
is whole or absent (harness/atomic.py).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from types import FrameType, ModuleType

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
    ("site", "harness.commands.site"),
    ("report", "harness.commands.report"),
    ("merge", "harness.commands.merge"),
    ("diff", "harness.commands.diff"),
    ("drift", "harness.commands.drift"),
)


_STOPPED = "its child processes were ended; no file is left half-written"


class Terminated(BaseException):
    """SIGTERM, raised where the command is, so its ``finally`` blocks end its children and its temporaries."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise Terminated


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
        with _sigterm_raises():
            status: int = args.handler(args)
    except InputError as error:
        print(f"{PROG}: {error.line()}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted (Ctrl-C): {_STOPPED}", file=sys.stderr)
        return 128 + signal.SIGINT
    except Terminated:
        print(f"{PROG}: terminated (SIGTERM): {_STOPPED}", file=sys.stderr)
        return 128 + signal.SIGTERM
    except BrokenPipeError:
        # `dflash-matrix cells ... | head` closed the pipe: not an error worth a traceback.
        sys.stderr.close()
        return 0
    return status


if __name__ == "__main__":
    sys.exit(main())
