"""Errors a user can cause: one clear line, exit status 2, no traceback."""

from __future__ import annotations

from collections.abc import Iterable

EXIT_BAD_INPUT = 2


class InputError(Exception):
    """Bad input from a user: a file, the key in it, and what would have been valid."""

    def __init__(self, path: object, key: str, problem: str, choices: Iterable[object] | None = None):
        self.path = str(path)
        self.key = key
        self.problem = problem
        self.choices = tuple(str(c) for c in choices) if choices is not None else ()
        super().__init__(self.line())

    def line(self) -> str:
        where = f"{self.path}: {self.key}" if self.key else self.path
        text = f"{where}: {self.problem}"
        if self.choices:
            text += f" (valid: {', '.join(self.choices)})"
        # One line, always: a multi-line message from a parser must not spill over.
        return " ".join(text.split())
