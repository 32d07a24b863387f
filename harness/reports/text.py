"""Plain text for the Markdown views and pages: one line, shortened, every markup character escaped.

Messages come from exceptions, so every piece of test output a view prints goes through ``md``: no
table is broken and no markup injected by a stray `|`, `<` or `*`. Below every view, so that no view
imports another for it.
"""

from __future__ import annotations

import re

MAX_MESSAGE = 300
MAX_LISTED = 100  # rows per list; the rest is in matrix.json (step summaries are capped at 1 MiB)
# Every character GitHub Markdown may read as markup inside a table or list item.
_MARKUP = re.compile(r"[\\`*_\[\]<>|~#&!]")
# Terminal escapes and NULs from exception messages (invisible at best, garbage at worst), and
# lone surrogates, which a JSON journal can carry but UTF-8 cannot.
_CONTROL = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")


def md(text: object, limit: int | None = MAX_MESSAGE) -> str:
    """One line of plain text, shortened, with every markup character backslash-escaped."""
    line = " ".join(_CONTROL.sub(" ", str(text)).split())
    if limit is not None and len(line) > limit:
        line = line[: limit - 1] + "\u2026"
    return _MARKUP.sub(lambda match: "\\" + match.group(0), line)
