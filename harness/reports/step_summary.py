"""Appending the Markdown matrix to a GitHub Actions job summary.

GitHub shows `$GITHUB_STEP_SUMMARY` on the run page and refuses a step's summary
above 1 MiB, so a larger matrix is cut at a line boundary with a note pointing to
the full report instead of making the whole summary vanish.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

SUMMARY_LIMIT_BYTES = 1024 * 1024
_ROOM_FOR_NOTE = 512
TRUNCATED_NOTE = (
    "\n\n… summary cut to fit GitHub's 1 MiB limit: the full matrix is in the report artifact"
    " (matrix.md, matrix.html).\n"
)


def fit_summary(markdown: str, limit: int = SUMMARY_LIMIT_BYTES) -> str:
    data = markdown.encode("utf-8")
    if len(data) <= limit:
        return markdown
    head = data[: limit - _ROOM_FOR_NOTE].decode("utf-8", errors="ignore")
    return head[: head.rfind("\n") + 1] + TRUNCATED_NOTE


def append_step_summary(markdown: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """Append to the job summary when running under GitHub Actions; do nothing elsewhere."""
    target = (os.environ if environ is None else environ).get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    path = Path(target)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(fit_summary(markdown))
        handle.write("\n")
    return path
