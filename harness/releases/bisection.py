"""Which vLLM release first changed a cell: binary search over releases, pure logic.

A cell's *signature* in a release is its verdict and message. Given the ordered releases
from ``old`` to ``new``, each cell is searched for the first release whose signature differs
from the one it has in ``old``. Probing a release (installing it, running the requested
cells there) is the expensive part, so every probe answers for all cells at once, is made
once per release, and the next release probed is the middle of an interval some cell still
needs. A release that cannot be installed is named and stepped around; a change that an
uninstallable release hides is reported as lying between the two releases around it.

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

Signature = tuple[str, str]  # (verdict, message)


@dataclass(frozen=True)
class Uninstallable:
    """A release the installer could not set up, with its one-line reason."""

    release: str
    reason: str


Probe = Callable[[str, Sequence[str]], "Mapping[str, Signature] | Uninstallable"]


@dataclass(frozen=True)
class CellAnswer:
    cell: str
    old: Signature
    new: Signature
    first_changed: str | None  # the first release whose signature differs from old's; None = never
    last_same: str | None  # the last release known to have old's signature before that
    changed_more_than_once: bool
    skipped: tuple[str, ...]  # uninstallable releases between last_same and first_changed
    history: tuple[tuple[str, Signature], ...]  # every release probed, in release order

    def line(self) -> str:
        def show(signature: Signature) -> str:
            verdict, message = signature
            return f"{verdict} ({message})" if message else verdict

        if self.first_changed is None:
            return f"{self.cell}: unchanged from {self.history[0][0]} to {self.history[-1][0]}: {show(self.old)}"
        changed = dict(self.history)[self.first_changed]
        where = f"first changed in {self.first_changed}"
        if self.skipped:
            where = (
                f"changed after {self.last_same}, by {self.first_changed} ({', '.join(self.skipped)} not installable)"
            )
        text = f"{self.cell}: {where}: {show(self.old)} -> {show(changed)}"
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
            "uninstallable_between": list(self.skipped),
            "history": [{"release": release, "verdict": sig[0], "message": sig[1]} for release, sig in self.history],
            "line": self.line(),
        }


@dataclass
class BisectState:
    releases: tuple[str, ...]
    cells: tuple[str, ...]
    seen: dict[str, Mapping[str, Signature]] = field(default_factory=dict)
    uninstallable: dict[str, str] = field(default_factory=dict)
    probed: list[str] = field(default_factory=list)  # in the order they were probed

    def signature(self, release: str, cell: str) -> Signature | None:
        answers = self.seen.get(release)
        return answers.get(cell) if answers is not None else None


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

    def run(release: str) -> bool:
        if release in state.seen or release in state.uninstallable:
            return release in state.seen
        state.probed.append(release)
        answer = probe(release, state.cells)
        if isinstance(answer, Uninstallable):
            state.uninstallable[release] = answer.reason
            return False
        missing = [cell for cell in state.cells if cell not in answer]
        if missing:
            raise BisectError(f"vLLM {release} gave no verdict for {', '.join(missing)}")
        state.seen[release] = dict(answer)
        return True

    for end in (state.releases[0], state.releases[-1]):
        if not run(end):
            raise BisectError(f"vLLM {end} cannot be installed: {state.uninstallable[end]}")

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
        candidates = [
            index
            for index in range(lo + 1, hi)
            if state.releases[index] not in state.seen and state.releases[index] not in state.uninstallable
        ]
        if candidates:
            middle = (lo + hi) / 2
            return state.releases[min(candidates, key=lambda index: (abs(index - middle), index))]
    for cell in state.cells:
        # Converged: also probe the release after the change (the one before it is lo), so
        # a change that was undone or changed again at once is seen, not assumed away.
        bounds = _interval(state, cell)
        if bounds is not None:
            after = next(
                (r for r in state.releases[bounds[1] + 1 :] if r not in state.uninstallable),
                None,
            )
            if after is not None and after not in state.seen:
                return after
    return None


def _answer(state: BisectState, cell: str) -> CellAnswer:
    history = tuple(
        (release, signature) for release in state.releases if (signature := state.signature(release, cell)) is not None
    )
    old, new = history[0][1], history[-1][1]
    transitions = sum(1 for (_, a), (_, b) in itertools.pairwise(history) if a != b)
    bounds = _interval(state, cell)
    if bounds is None:
        return CellAnswer(cell, old, new, None, None, transitions > 0, (), history)
    lo, hi = bounds
    skipped = tuple(r for r in state.releases[lo + 1 : hi] if r in state.uninstallable)
    return CellAnswer(
        cell,
        old,
        new,
        first_changed=state.releases[hi],
        last_same=state.releases[lo],
        changed_more_than_once=transitions > 1,
        skipped=skipped,
        history=history,
    )
