"""What every report shows, derived once from the journal: one lane run, its cells and gaps.

The three reports (JUnit, matrix.json, Markdown) are views of this; none of them reads
the journal or computes a verdict on its own, so they cannot disagree.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.errors import InputError
from harness.journal import JournalContents
from harness.result import CellResult
from harness.verdict import VERDICTS, ClaimGap, Outcome

# The run fields the matrix.json contract names, and where lanes and the plugin may put them.
RUN_FIELDS = ("lane", "platform", "device", "vllm_version", "torch_version", "started_at", "ended_at")
_ALIASES: Mapping[str, tuple[str, ...]] = {
    "vllm_version": ("vllm",),
    "torch_version": ("torch",),
    "started_at": ("started",),
    "ended_at": ("ended",),
}
# Run metadata shown elsewhere, or bookkeeping of one writer (an xdist worker) rather than of the run.
_NOT_ENVIRONMENT = ("stale_expectations", "resumed", "worker")


@dataclass(frozen=True)
class RunReport:
    lane: str
    run: Mapping[str, Any]  # RUN_FIELDS (None when unknown), then every other scalar metadata value
    cells: tuple[CellResult, ...]
    not_run: tuple[str, ...]
    stale_expectations: tuple[str, ...]
    finished: bool  # the journal holds an end record: the run was not killed before its end

    @property
    def mismatching(self) -> tuple[CellResult, ...]:
        return tuple(cell for cell in self.cells if not cell.ok)

    def claim_gaps(self, gap: ClaimGap) -> tuple[CellResult, ...]:
        return tuple(cell for cell in self.cells if cell.claim_gap == gap)

    def verdict_counts(self) -> dict[str, int]:
        counts = Counter(cell.verdict.value for cell in self.cells)
        return {verdict: counts[verdict] for verdict in VERDICTS}

    def outcome_counts(self) -> dict[str, int]:
        counts = Counter(cell.outcome.value for cell in self.cells)
        return {outcome.value: counts[outcome.value] for outcome in Outcome}


def run_report(contents: JournalContents) -> RunReport:
    where = ", ".join(str(path) for path in contents.files) or "journal"
    lanes = sorted({str(run["lane"]) for run in contents.runs} | {cell.lane for cell in contents.cells})
    if not lanes:
        raise InputError(where, "", "no run or cell record: nothing to report")
    if len(lanes) > 1:
        raise InputError(
            where, "", f"journals of several lanes ({', '.join(lanes)}): report each lane, then merge the reports"
        )
    return RunReport(
        lane=lanes[0],
        run=_run_metadata(contents, lanes[0]),
        cells=_in_plan_order(contents),
        not_run=tuple(contents.not_run),
        stale_expectations=_stale(contents),
        finished=contents.ended,
    )


def _run_metadata(contents: JournalContents, lane: str) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for run in contents.runs:  # later records win: a resumed run describes the machine now
        merged.update(run)
    merged.update(contents.env)
    scalars = {
        key: value
        for key, value in merged.items()
        if isinstance(key, str) and key not in _NOT_ENVIRONMENT and isinstance(value, str | int | float | bool)
    }
    fields: dict[str, Any] = {name: _pick(scalars, name) for name in RUN_FIELDS}
    fields["lane"] = lane
    fields["started_at"] = contents.started_at or fields["started_at"]
    fields["ended_at"] = (contents.ended_at or fields["ended_at"]) if contents.ended else None
    aliases = {alias for names in _ALIASES.values() for alias in names}
    rest = {key: scalars[key] for key in sorted(scalars) if key not in fields and key not in aliases}
    return {**fields, **rest}


def _pick(values: Mapping[str, Any], name: str) -> Any:
    for key in (name, *_ALIASES.get(name, ())):
        if values.get(key) not in (None, ""):
            return values[key]
    return None


def _in_plan_order(contents: JournalContents) -> tuple[CellResult, ...]:
    position = {ident: index for index, ident in enumerate(dict.fromkeys(contents.planned))}
    return tuple(sorted(contents.cells, key=lambda cell: (position.get(cell.id, len(position)), cell.id)))


def _stale(contents: JournalContents) -> tuple[str, ...]:
    # Every writer of one run computes the same list; the latest run's is the current truth.
    for run in reversed(contents.runs):
        if "stale_expectations" in run:
            return tuple(run["stale_expectations"])
    return ()
