"""What changed between two reports (last night's and tonight's, before and after a vLLM bump).

Runs are paired by their slot (lane, platform, device) when each side has exactly one
run there, so a nightly vLLM or torch version change still compares the same machine;
when a side holds several runs for one slot (a report comparing vLLM versions side by
side), runs are paired by their full key (versions included) instead.

A cell regressed when it matched its expectation before and does not now (including
a cell planned now but never run), or when its verdict got worse (verdict.py's order:
pass < substituted < unsupported/unavailable < wrong-backend/mismatch < crash/timeout).
Cells that appear are listed. Cells that disappear are listed and count as regressions unless
allowed (``allow_missing``, after editing a matrix that dropped cells): a CI gate must not pass on
an empty CURRENT, or on a report of another lane, which lack every cell the BASELINE has (issue 36).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from harness.errors import InputError
from harness.reports.inputs import read_matrix_json
from harness.reports.model import Run, RunResults
from harness.reports.pairing import pair_runs
from harness.reports.text import md
from harness.result import CellResult
from harness.verdict import Outcome, outcome

DIFF_SCHEMA = "dflash-matrix-diff/1"
MAX_LISTED = 200


class Change(StrEnum):
    NEW_FAILURE = "new-failure"  # matched its expectation before, does not now
    NOT_RUN = "not-run"  # matched before, planned now but never ran
    WORSE = "worse"  # verdict got worse (whatever the expectations say)
    FIXED = "fixed"  # did not match before, matches now
    BETTER = "better"  # verdict got better
    CHANGED = "changed"  # verdict changed to one neither better nor worse
    APPEARED = "appeared"
    DISAPPEARED = "disappeared"


REGRESSIONS = (Change.NEW_FAILURE, Change.NOT_RUN, Change.WORSE)
_SECTIONS = (
    (Change.NEW_FAILURE, "New failures: matched their expectation before, do not now"),
    (Change.NOT_RUN, "Not run now: matched before, planned now but never finished"),
    (Change.WORSE, "Verdict got worse"),
    (Change.FIXED, "Fixed: match their expectation now"),
    (Change.BETTER, "Verdict got better"),
    (Change.CHANGED, "Verdict changed (neither better nor worse)"),
    (Change.APPEARED, "Cells that appeared"),
    (Change.DISAPPEARED, "Cells that disappeared"),
)


@dataclass(frozen=True)
class CellChange:
    kind: Change
    run: str  # the current run's key (the baseline's for a cell that disappeared)
    cell_id: str
    before: CellResult | None
    after: CellResult | None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "run": self.run,
            "id": self.cell_id,
            "before": _state(self.before),
            "after": _state(self.after) if self.kind != Change.NOT_RUN else {"verdict": None, "not_run": True},
            "regressed": self.kind in REGRESSIONS,
        }


def _state(cell: CellResult | None) -> dict[str, Any] | None:
    if cell is None:
        return None
    return {
        "verdict": cell.verdict.value,
        "expected": cell.expected.value,
        "outcome": cell.outcome.value,
        "stage": cell.stage.value if cell.stage else None,
        "message": cell.message,
    }


@dataclass(frozen=True)
class RunPair:
    baseline: Run | None
    current: Run | None


@dataclass(frozen=True)
class MatrixDiff:
    baseline: str
    current: str
    pairs: tuple[RunPair, ...]
    changes: tuple[CellChange, ...]
    unchanged: int
    still_failing: int
    allow_missing: bool = False

    @property
    def regressions(self) -> tuple[CellChange, ...]:
        gating = REGRESSIONS + (() if self.allow_missing else (Change.DISAPPEARED,))
        return tuple(change for change in self.changes if change.kind in gating)

    @property
    def regressed(self) -> bool:
        return bool(self.regressions)

    def counts(self) -> dict[str, int]:
        counts = {kind.value: 0 for kind in Change}
        for change in self.changes:
            counts[change.kind.value] += 1
        return {**counts, "unchanged": self.unchanged, "still-failing": self.still_failing}

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": DIFF_SCHEMA,
            "baseline": self.baseline,
            "current": self.current,
            "regressed": self.regressed,
            "counts": self.counts(),
            "runs": [
                {
                    "baseline": pair.baseline.key if pair.baseline else None,
                    "current": pair.current.key if pair.current else None,
                }
                for pair in self.pairs
            ],
            "changes": [change.to_json() for change in self.changes],
        }


def load_report(path: str | Path) -> list[RunResults]:
    """A matrix.json (single-run or merged), or a report directory holding one."""
    path = Path(path)
    if path.is_dir():
        if not (path / "matrix.json").is_file():
            raise InputError(path, "", "report directory holds no matrix.json", ("a matrix.json", "a report directory"))
        path = path / "matrix.json"
    elif not path.exists():
        raise InputError(path, "", "no such file or directory")
    elif path.suffix != ".json":
        raise InputError(path, "", "not a matrix report", ("a matrix.json", "a report directory"))
    return read_matrix_json(path)


def diff_reports(
    baseline: Sequence[RunResults],
    current: Sequence[RunResults],
    *,
    baseline_name: str = "baseline",
    current_name: str = "current",
    allow_missing: bool = False,
) -> MatrixDiff:
    changes: list[CellChange] = []
    unchanged = still_failing = 0
    pairs = []
    for old, new in pair_runs(baseline, current):
        pairs.append(RunPair(old.run if old else None, new.run if new else None))
        before = {cell.id: cell for cell in old.cells} if old else {}
        after = {cell.id: cell for cell in new.cells} if new else {}
        missing_now = set(new.not_run) if new else set()
        run_key = new.run.key if new else old.run.key if old else ""
        for ident, was in before.items():
            now = after.get(ident)
            if now is None:
                if ident in missing_now and was.outcome == Outcome.MATCH:
                    changes.append(CellChange(Change.NOT_RUN, run_key, ident, was, None))
                elif ident not in missing_now:
                    changes.append(CellChange(Change.DISAPPEARED, old.run.key if old else run_key, ident, was, None))
                else:
                    still_failing += 1  # failed before, did not even run now: still not a pass
                continue
            kind = _classify(was, now)
            if kind is None:
                if now.outcome == Outcome.MATCH:
                    unchanged += 1
                else:
                    still_failing += 1
            else:
                changes.append(CellChange(kind, run_key, ident, was, now))
        for ident, now in after.items():
            if ident not in before:
                changes.append(CellChange(Change.APPEARED, run_key, ident, None, now))
    order = {kind: index for index, kind in enumerate(Change)}
    changes.sort(key=lambda change: (order[change.kind], change.run, change.cell_id))
    return MatrixDiff(
        baseline_name, current_name, tuple(pairs), tuple(changes), unchanged, still_failing, allow_missing
    )


def _classify(was: CellResult, now: CellResult) -> Change | None:
    matched_before, matches_now = was.outcome == Outcome.MATCH, now.outcome == Outcome.MATCH
    direction = outcome(now.verdict, was.verdict)  # now measured against before
    if matched_before and not matches_now:
        return Change.NEW_FAILURE
    if direction == Outcome.REGRESSION:
        return Change.WORSE
    if matches_now and not matched_before:
        return Change.FIXED
    if direction == Outcome.UNEXPECTED_PASS:
        return Change.BETTER
    if direction == Outcome.CHANGED:
        return Change.CHANGED
    return None


def render_diff_markdown(diff: MatrixDiff) -> str:
    counts = diff.counts()
    verdict = "**regressed**" if diff.regressed else "no regressions"
    lines = [
        "# DFlash matrix diff",
        "",
        f"{md(diff.baseline)} → {md(diff.current)}: {verdict}. "
        + ", ".join(f"{counts[kind.value]} {kind.value}" for kind in Change if counts[kind.value])
        + (", " if any(counts[kind.value] for kind in Change) else "")
        + f"{diff.unchanged} unchanged, {diff.still_failing} still not as expected.",
        "",
        "| baseline run | current run |",
        "|---|---|",
    ]
    lines += [
        f"| {md(pair.baseline.key) if pair.baseline else '(none)'} "
        f"| {md(pair.current.key) if pair.current else '(none)'} |"
        for pair in diff.pairs
    ]
    for kind, title in _SECTIONS:
        items = [change for change in diff.changes if change.kind == kind]
        if not items:
            continue
        lines += ["", f"## {title} ({len(items)})", ""]
        lines += ["| run | cell | before | now | message now |", "|---|---|---|---|---|"]
        for change in items[:MAX_LISTED]:
            lines.append(
                f"| {md(change.run)} | {md(change.cell_id)} | {_md_state(change.before)} "
                f"| {_md_state(change.after) if kind != Change.NOT_RUN else 'not run'} "
                f"| {md(change.after.message) if change.after else ''} |"
            )
        if len(items) > MAX_LISTED:
            lines.append(f"\n… and {len(items) - MAX_LISTED} more in the JSON diff")
    return "\n".join(lines) + "\n"


def _md_state(cell: CellResult | None) -> str:
    if cell is None:
        return "—"
    mark = "" if cell.outcome == Outcome.MATCH else f" (expected {cell.expected.value})"
    return f"{cell.verdict.value}{mark}"
