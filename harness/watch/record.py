"""Recording a new release in a lane's expectations from a reviewed watch patch: pure text and judgement.

A patch (``watch``'s patch.toml, reviewed) holds ``[[expect]]`` tables, then, after the
``FINDINGS_MARKER`` line, ``[[finding]]`` stubs for the faults it records. Recording appends the
rules to the expectations file as written (a reviewer's edits and comments kept), the findings to
the findings file, and the release to ``releases``. The rules it proposes hold from the new release
on (``vllm = ">=X"``), so no recorded release should be judged differently afterwards:
``moved_judgements`` checks exactly that, per recorded release and cell, from the rules alone.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from harness.expectations import Expectation, ExpectationSet
from harness.matrix import Cell

FINDINGS_MARKER = "# findings (for the findings file the expectations name)"
_RELEASES = re.compile(r"^releases\s*=\s*\[(?P<items>[^\]]*)\]", re.MULTILINE)
_MEASURED = re.compile(r"^measured\s*=\s*\{[^}]*\}\n", re.MULTILINE)
_STUB = "TODO"


@dataclass(frozen=True)
class Patch:
    rules: str  # the [[expect]] tables' text
    findings: str  # the [[finding]] tables' text ("" when none)


class PatchError(ValueError):
    """A patch that cannot be recorded: the key, and why (the command names the file)."""

    def __init__(self, key: str, problem: str):
        self.key, self.problem = key, problem
        super().__init__(f"{key}: {problem}")


def read_patch(text: str) -> Patch:
    """The patch's two parts, each checked to be TOML of the right tables with no stub left."""
    rules, _, findings = text.partition(FINDINGS_MARKER)
    for part, key, allowed in ((rules, "expect", "expect"), (findings, "finding", "finding")):
        try:
            data = tomllib.loads(part)
        except tomllib.TOMLDecodeError as error:
            raise PatchError(key, f"not TOML: {error}") from None
        unknown = sorted(set(data) - {allowed})
        if unknown:
            raise PatchError(unknown[0], f"is not a table this part of a patch holds ([[{allowed}]])")
        for index, table in enumerate(data.get(allowed, [])):
            for field, value in table.items():
                if isinstance(value, str) and _STUB in value:
                    raise PatchError(f"{key}[{index}].{field}", f"still holds a {_STUB} stub: review it first")
    if not tomllib.loads(rules).get("expect"):
        raise PatchError("expect", "the patch proposes no rule (an empty delta records only the release)")
    return Patch(rules.strip() + "\n", findings.strip() + "\n" if findings.strip() else "")


def with_release(text: str, release: str) -> str:
    """The expectations text with ``release`` added to ``releases`` (kept in order, once)."""
    match = _RELEASES.search(text)
    if match is None:
        raise PatchError("expectations.releases", "the file records no releases list to add the release to")
    items = tomllib.loads(f"releases = [{match['items']}]")["releases"]
    ordered = sorted({*items, release}, key=Version)
    line = "releases = [" + ", ".join(f'"{item}"' for item in ordered) + "]"
    return text[: match.start()] + line + text[match.end() :]


def appended(text: str, addition: str, heading: str) -> str:
    return f"{text.rstrip()}\n\n{heading}\n\n{addition.strip()}\n"


def _judgement(expectation: Expectation) -> tuple[str, str | None, str | None]:
    return (expectation.verdict.value, expectation.message, expectation.finding.id if expectation.finding else None)


def moved_judgements(
    before: ExpectationSet, after: ExpectationSet, cells: Sequence[Cell], releases: Sequence[Version]
) -> dict[str, list[str]]:
    """Per release, the cells whose expected verdict, message or finding the new rules change."""
    moved: dict[str, list[str]] = {}
    for release in releases:
        old, new = before.for_release(release), after.for_release(release)
        changed = [cell.id for cell in cells if _judgement(old.for_cell(cell)) != _judgement(new.for_cell(cell))]
        if changed:
            moved[str(release)] = changed
    return moved


def report_release(document: Mapping[str, Any]) -> str | None:
    runs = document.get("runs") or [document.get("run") or {}]
    versions = {str(run.get("vllm_version")) for run in runs if isinstance(run, dict) and run.get("vllm_version")}
    return versions.pop() if len(versions) == 1 else None


def stale_releases(expectations: ExpectationSet, fingerprint: str, older_than: Version | None = None) -> list[str]:
    """The recorded releases (older than ``older_than``) not measured with ``fingerprint``. A file
    that keeps no ``measured`` table at all is not guarded (one written before the table existed)."""
    if not expectations.measured:
        return []
    return [
        str(release)
        for release in expectations.releases
        if (older_than is None or release < older_than) and expectations.measured.get(release) != fingerprint
    ]


def with_measured(text: str, measured: Mapping[str, str]) -> str:
    """The expectations text with its ``measured`` table replaced (or added after ``releases``)."""
    ordered = sorted(measured.items(), key=lambda item: Version(item[0]))
    line = "measured = { " + ", ".join(f'"{release}" = "{value}"' for release, value in ordered) + " }\n"
    if _MEASURED.search(text):
        return _MEASURED.sub(lambda _: line, text, count=1)
    match = _RELEASES.search(text)
    if match is None:
        raise PatchError("expectations.releases", "the file records no releases list to put measured beside")
    end = text.index("\n", match.end()) + 1
    return text[:end] + line + text[end:]
