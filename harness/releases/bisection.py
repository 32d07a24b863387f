"""Which vLLM release first changed a cell: binary search over releases, pure logic.

A cell's *signature* in a release is its verdict and message. Given the ordered releases
from ``old`` to ``new``, each cell is searched for the first release whose signature differs
from the one it has in ``old``. Probing a release (installing it, running the requested
cells there) is the expensive part, so every probe answers for all cells at once, is made
once per release, and the next release probed is the middle of an interval some cell still
needs. A release that gave no verdict (an environment failure: it did not install, its lane did
not start, or a cell crashed importing vLLM; see ``environment``) is named with its reason and
stepped around, for every cell or for the cells it failed; it is never a signature, so never a
change. A change that such a release hides is reported as lying between the two releases around it.

Binary search assumes one change. Once a cell's change is pinned between two neighbouring
releases, the release after it is probed too (the one before it already was), and a cell
whose probed signatures change more than once (A -> B -> A, or a change that is not yet the
signature of ``new``) is flagged: its answer is the first change seen, and its history lists
every signature probed.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from packaging.version import Version

from harness.releases.environment import LANE, EnvironmentFailure

Signature = tuple[str, str]  # (verdict, message)
# A probe answers per cell, or fails for the whole release (its install, its lane).
Answers = Mapping[str, "Signature | EnvironmentFailure"]
Probe = Callable[[str, Sequence[str]], "Answers | EnvironmentFailure"]


@dataclass(frozen=True)
class CellAnswer:
    cell: str
    old: Signature
    new: Signature
    first_changed: str | None  # the first release whose signature differs from old's; None = never
    last_same: str | None  # the last release known to have old's signature before that
    changed_more_than_once: bool
    skipped: tuple[str, ...]  # releases between last_same and first_changed that gave no verdict
    history: tuple[tuple[str, Signature], ...]  # every release probed that gave a verdict, in release order
    no_verdict: tuple[EnvironmentFailure, ...] = ()  # every release probed that gave none, and why

    def line(self) -> str:
        def show(signature: Signature) -> str:
            verdict, message = signature
            return f"{verdict} ({message})" if message else verdict

        stepped = ""
        if self.no_verdict:
            failures = ", ".join(f"{failure.release} ({failure.kind})" for failure in self.no_verdict)
            stepped = f"; stepped around {failures}: environment failure, no verdict"
        if self.first_changed is None:
            unchanged = f"unchanged from {self.history[0][0]} to {self.history[-1][0]}: {show(self.old)}"
            return f"{self.cell}: {unchanged}{stepped}"
        changed = dict(self.history)[self.first_changed]
        where = f"first changed in {self.first_changed}"
        if self.skipped:
            silent = ", ".join(self.skipped)
            where = f"changed after {self.last_same}, by {self.first_changed} ({silent} gave no verdict)"
        text = f"{self.cell}: {where}: {show(self.old)} -> {show(changed)}{stepped}"
        if self.changed_more_than_once:
            seen = ", ".join(f"{release} {signature[0]}" for release, signature in self.history)
            text += f"; CHANGED MORE THAN ONCE in the range (probed: {seen})"
        return text

    def to_json(self) -> dict[str, object]:
        return {
            "cell": self.cell,
            "old": list(self.old),
            "new": list(self.new),
            "first_changed": self.first_changed,
            "last_same": self.last_same,
            "changed_more_than_once": self.changed_more_than_once,
            "no_verdict_between": list(self.skipped),
            "history": [{"release": release, "verdict": sig[0], "message": sig[1]} for release, sig in self.history],
            "environment_failures": [failure.to_json() for failure in self.no_verdict],
            "line": self.line(),
        }


@dataclass
class BisectState:
    releases: tuple[str, ...]
    cells: tuple[str, ...]
    seen: dict[str, dict[str, Signature]] = field(default_factory=dict)  # the verdicts each probe gave
    failed: dict[str, EnvironmentFailure] = field(default_factory=dict)  # releases that gave no verdict at all
    cells_failed: dict[str, dict[str, EnvironmentFailure]] = field(default_factory=dict)  # ... for some cells
    probed: list[str] = field(default_factory=list)  # in the order they were probed

    def signature(self, release: str, cell: str) -> Signature | None:
        return self.seen.get(release, {}).get(cell)

    def failure(self, release: str, cell: str) -> EnvironmentFailure | None:
        return self.failed.get(release) or self.cells_failed.get(release, {}).get(cell)

    def environment_failures(self) -> list[EnvironmentFailure]:
        """Each release's failures in probe order, one per release and reason (cells sharing one
        reason, the usual case when vLLM cannot be imported, are one failure)."""
        found: list[EnvironmentFailure] = []
        for release in self.probed:
            failures = [self.failed[release]] if release in self.failed else self.cells_failed.get(release, {}).values()
            found += [failure for failure in dict.fromkeys(failures) if failure not in found]
        return found


def order_releases(releases: Sequence[str]) -> tuple[str, ...]:
    return tuple(sorted(dict.fromkeys(releases), key=Version))


def releases_between(offered: Sequence[str], old: str, new: str, pre: bool = False) -> tuple[str, ...]:
    """old, the releases the index offers strictly between, and new, in order."""
    low, high = Version(old), Version(new)
    inside = [r for r in offered if low < Version(r) < high and (pre or not Version(r).is_prerelease)]
    return order_releases([old, *inside, new])


class BisectError(Exception):
    """The range cannot be bisected (its endpoints cannot be installed or lack a cell)."""


def bisect(releases: Sequence[str], cells: Sequence[str], probe: Probe) -> tuple[list[CellAnswer], BisectState]:
    """``releases`` in order, oldest first (``releases_between``, or a list the user gave)."""
    state = BisectState(tuple(dict.fromkeys(releases)), tuple(cells))
    if len(state.releases) < 2:
        raise BisectError("bisect needs two different releases")

    def run(release: str) -> None:
        if release in state.probed:
            return
        state.probed.append(release)
        answer = probe(release, state.cells)
        if isinstance(answer, EnvironmentFailure):
            state.failed[release] = answer
            return
        silent = EnvironmentFailure(release, LANE, "the lane gave no verdict for the cell")
        for cell in state.cells:
            given = answer.get(cell, silent)
            if isinstance(given, EnvironmentFailure):
                state.cells_failed.setdefault(release, {})[cell] = given
            else:
                state.seen.setdefault(release, {})[cell] = given

    for end in (state.releases[0], state.releases[-1]):
        run(end)
        for cell in state.cells:
            failure = state.failure(end, cell)
            if failure is not None:  # an end of the range is the reference: nothing to step around to
                raise BisectError(f"{cell} cannot be bisected from {end}: {failure.line()}")

    while True:
        target = _next_probe(state)
        if target is None:
            break
        run(target)
    return [_answer(state, cell) for cell in state.cells], state


def _interval(state: BisectState, cell: str) -> tuple[int, int] | None:
    """Indices (lo, hi): lo the last probed release with old's signature before the first
    probed one that differs (hi). None when no probed release differs from old."""
    old = state.signature(state.releases[0], cell)
    lo = 0
    for index, release in enumerate(state.releases):
        signature = state.signature(release, cell)
        if signature is None:
            continue
        if signature != old:
            return lo, index
        lo = index
    return None


def _next_probe(state: BisectState) -> str | None:
    for cell in state.cells:
        bounds = _interval(state, cell)
        if bounds is None:
            continue
        lo, hi = bounds
        candidates = [index for index in range(lo + 1, hi) if state.releases[index] not in state.probed]
        if candidates:
            middle = (lo + hi) / 2
            return state.releases[min(candidates, key=lambda index: (abs(index - middle), index))]
    for cell in state.cells:
        # Converged: also probe the release after the change (the one before it is lo), so
        # a change that was undone or changed again at once is seen, not assumed away.
        bounds = _interval(state, cell)
        if bounds is not None:
            after = next((r for r in state.releases[bounds[1] + 1 :] if state.failure(r, cell) is None), None)
            if after is not None and after not in state.probed:
                return after
    return None


def _answer(state: BisectState, cell: str) -> CellAnswer:
    history = tuple(
        (release, signature) for release in state.releases if (signature := state.signature(release, cell)) is not None
    )
    no_verdict = tuple(failure for release in state.releases if (failure := state.failure(release, cell)) is not None)
    old, new = history[0][1], history[-1][1]
    transitions = sum(1 for (_, a), (_, b) in itertools.pairwise(history) if a != b)
    bounds = _interval(state, cell)
    if bounds is None:
        return CellAnswer(cell, old, new, None, None, transitions > 0, (), history, no_verdict)
    lo, hi = bounds
    skipped = tuple(r for r in state.releases[lo + 1 : hi] if state.failure(r, cell) is not None)
    return CellAnswer(
        cell,
        old,
        new,
        first_changed=state.releases[hi],
        last_same=state.releases[lo],
        changed_more_than_once=transitions > 1,
        skipped=skipped,
        history=history,
        no_verdict=no_verdict,
    )
