"""One GitHub issue per watched vLLM release, opened once and then updated in place: pure.

The watch's last workflow job has the deltas (delta.json, delta.md per lane and release). Each
release gets one issue, found again by its label and exact title, so a re-run (the next day's,
or a re-run of the job) edits that issue instead of opening another, and leaves it alone when
nothing changed. What to do is decided here from the deltas and the issues that exist; the
command (``dflash-matrix watch-issues``) only runs ``gh``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

LABEL = "vllm-watch"
BODY_LIMIT = 60_000  # GitHub refuses an issue body over 65,536 characters; room for the footer
MARKER = "<!-- dflash-matrix watch -->"  # the body's first line: the issue is the watch's own


def title(release: str) -> str:
    return f"vLLM {release}: what dflash-matrix watch saw change"


@dataclass(frozen=True)
class DeltaText:
    lane: str
    release: str
    markdown: str  # delta.md (groups, repro, proposed patch), or the no-delta note


def body(release: str, deltas: Sequence[DeltaText], run_url: str) -> str:
    """The issue's body: each lane's delta, cut to fit (the full ones are in the run's artifacts)."""
    head = [
        MARKER,
        f"dflash-matrix watch ran {', '.join(delta.lane for delta in deltas)} on vLLM {release}"
        f" ([workflow run]({run_url})). Each lane's cells that changed from the newest recorded",
        "release, grouped by cause, with a repro per group and a proposed expectations patch",
        "(review it, then `dflash-matrix expectations record DELTA`). Updated in place by later runs.",
    ]
    share = (BODY_LIMIT - sum(len(line) + 1 for line in head)) // max(1, len(deltas))
    parts = []
    for delta in deltas:
        text = delta.markdown.strip()
        if len(text) > share:
            text = text[: share - 200].rsplit("\n", 1)[0] + f"\n\n... cut to fit; the whole delta: {run_url}"
        parts.append(text)
    return "\n".join(head) + "\n\n" + "\n\n---\n\n".join(parts) + "\n"


@dataclass(frozen=True)
class Action:
    kind: str  # "create", "edit" or "unchanged"
    release: str
    title: str
    body: str
    number: int | None = None


def actions(deltas: Sequence[DeltaText], existing: Sequence[Mapping[str, object]], run_url: str) -> tuple[Action, ...]:
    """What to do per release, given the issues carrying ``LABEL`` (``gh issue list --json number,title,body``)."""
    by_release: dict[str, list[DeltaText]] = {}
    for delta in deltas:
        by_release.setdefault(delta.release, []).append(delta)
    by_title = {str(issue.get("title")): issue for issue in existing}
    found = []
    for release, items in by_release.items():
        name = title(release)
        text = body(release, sorted(items, key=lambda item: item.lane), run_url)
        issue = by_title.get(name)
        if issue is None:
            found.append(Action("create", release, name, text))
            continue
        number = int(str(issue["number"]))
        # The run link differs every run; the deltas are what matter.
        same = _without_run(str(issue.get("body") or "")) == _without_run(text)
        found.append(Action("unchanged" if same else "edit", release, name, text, number))
    return tuple(found)


def _without_run(text: str) -> str:
    return "\n".join(
        line for line in text.strip().splitlines() if "workflow run" not in line and "cut to fit" not in line
    )
