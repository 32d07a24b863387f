"""What a new vLLM release changes: its lane report judged against the newest recorded release.

``dflash-matrix watch`` runs a lane on a release its expectations do not record yet and asks,
cell by cell, whether the release behaves as the newest recorded one does (the rules in force for
that release). Every cell whose observation differs is a *change*; changes with the same cause
(the same old -> new verdict, the same vLLM message once the cell's own backend and numbers are
taken out, the same stage and observed backends) form a *group*, because one upstream commit
usually moves a whole family of cells at once, and a maintainer reads one group, not fifty cells.

Each group carries what a maintainer needs to decide: a classification (a new failure or refusal is
a possible upstream bug; a fault that went away a fix; an absent backend that appeared a new enum
member; something that became absent a removed feature), and the rules that would record it: one
``[[expect]]`` per sub-box of axis values that holds exactly the group's cells (``cover``), ranged
``vllm = ">=X"`` so no recorded release's judgement moves, each with a reason stub quoting vLLM.
A fault needs a finding (harness/expectations.py): the patch proposes a stub for it. Nothing here
writes the expectations: ``dflash-matrix expectations record`` applies a reviewed patch.

Pure: the matrix, its expectations and the report's cells go in, the delta comes out.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from harness.axes import AxisValue
from harness.expectations import Expectation, ExpectationSet, Rule
from harness.matrix import Cell, Selector
from harness.verdict import FAULTS, Verdict, severity


class Change:
    """How a group moved, from the recorded release to the new one (the group's classification)."""

    NEW_FAILURE = "new failure (possible upstream bug)"
    NEW_REFUSAL = "new refusal (possible upstream bug)"
    FIX = "fix"
    NEW_MEMBER = "new enum member / backend"
    REMOVED = "removed feature"
    OTHER = "changed answer"


# Refusals by design and absences are answers, not faults; a move between them is classified by
# which side is absent (unavailable: the enum member, module or class does not exist there).
_ANSWERS = (Verdict.UNSUPPORTED, Verdict.UNAVAILABLE)


def classify(old: Verdict, new: Verdict) -> str:
    if old == Verdict.UNAVAILABLE and new != Verdict.UNAVAILABLE:
        return Change.NEW_MEMBER
    if new == Verdict.UNAVAILABLE and old != Verdict.UNAVAILABLE:
        return Change.REMOVED
    if new in FAULTS and (old not in FAULTS or severity(new) > severity(old)):
        return Change.NEW_FAILURE
    if new == Verdict.UNSUPPORTED and old not in _ANSWERS and old not in FAULTS:
        return Change.NEW_REFUSAL
    if (old in FAULTS and new not in FAULTS) or severity(new) < severity(old):
        return Change.FIX
    return Change.OTHER


# Whole numbers only: "sm_100" and "code 12" vary per cell, the 12 of "b12x" names a package.
_NUMBER = re.compile(r"\b(0x[0-9a-fA-F]+|\d+(\.\d+)*)\b")
_QUOTED_PATH = re.compile(r"(/[\w.+-]+)+")


def normalise_message(message: str, cell: Mapping[str, AxisValue]) -> str:
    """vLLM's message with what varies from cell to cell of one cause taken out: the cell's requested
    backend, paths, numbers (capabilities, sizes, addresses)."""
    text = message
    backend = cell.get("backend")
    if isinstance(backend, str) and backend != "auto":
        text = re.sub(rf"\b{re.escape(backend)}\b", "<backend>", text)
    text = _QUOTED_PATH.sub("<path>", text)
    return _NUMBER.sub("<n>", text)


@dataclass(frozen=True)
class CellChange:
    id: str
    axes: Mapping[str, AxisValue]
    old: Expectation  # what the newest recorded release's rules expect
    verdict: Verdict  # what the new release gave
    message: str
    stage: str | None
    observed_backends: tuple[str, ...]

    @property
    def cause(self) -> tuple[str, str, str, str, tuple[str, ...]]:
        return (
            self.old.verdict.value,
            self.verdict.value,
            normalise_message(self.message, self.axes),
            self.stage or "",
            self.observed_backends,
        )


@dataclass(frozen=True)
class Group:
    number: int
    change: str  # a Change
    cells: tuple[CellChange, ...]  # sorted by id; the first is the group's representative
    boxes: tuple[Selector, ...]  # sub-boxes of axis values holding exactly these cells (cover)

    @property
    def old(self) -> Verdict:
        return self.cells[0].old.verdict

    @property
    def new(self) -> Verdict:
        return self.cells[0].verdict

    @property
    def representative(self) -> CellChange:
        return self.cells[0]

    @property
    def slug(self) -> str:
        return f"group-{self.number:02d}-{self.old.value}-to-{self.new.value}"

    def old_reasons(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(cell.old.describe() for cell in self.cells))


@dataclass(frozen=True)
class ReleaseDelta:
    lane: str
    matrix: str
    release: str  # the label the watch was given (a version, or a requirement such as a wheel URL)
    version: str | None  # the vLLM version the run reports
    judged_as: str  # the newest recorded release, whose rules judged the run
    cells: int  # cells the run gave a verdict for
    groups: tuple[Group, ...]
    no_verdict: tuple[tuple[str, str], ...]  # (cell, why): cells the environment kept from a verdict
    not_in_matrix: tuple[str, ...]  # backends the release's enum has and the matrix lacks
    unsettled: tuple[str, ...] = ()  # cells the proposed patch would still not settle

    @property
    def changed(self) -> int:
        return sum(len(group.cells) for group in self.groups)


def changed_cells(
    document: Mapping[str, Any],
    cells: Sequence[Cell],
    judge: ExpectationSet,
    no_verdict: Collection[str] = (),
) -> tuple[list[CellChange], int]:
    """The report's cells that the ``judge`` rules do not expect, and how many cells were judged.
    ``no_verdict``: cells whose record is an environment failure (harness.releases.environment),
    never a change."""
    by_id = {cell.id: cell for cell in cells}
    changes: list[CellChange] = []
    judged = 0
    for record in document.get("cells") or []:
        cell = by_id.get(str(record.get("id")))
        if cell is None or cell.id in no_verdict:  # another matrix's cell, or no verdict: not this delta's
            continue
        verdict, message = Verdict(record["verdict"]), str(record.get("message") or "")
        judged += 1
        expectation = judge.for_cell(cell)
        expected_message_ok = not expectation.message or expectation.message in message
        if verdict == expectation.verdict and expected_message_ok:
            continue
        backends = tuple(str(name) for name in record.get("observed_backends") or ())
        changes.append(CellChange(cell.id, cell.values, expectation, verdict, message, record.get("stage"), backends))
    return changes, judged


def group_changes(changes: Iterable[CellChange], universe: Sequence[Cell]) -> tuple[Group, ...]:
    """Changes grouped by cause, most cells first; each group's cells covered by boxes of axis values."""
    by_cause: dict[tuple[str, str, str, str, tuple[str, ...]], list[CellChange]] = {}
    for change in changes:
        by_cause.setdefault(change.cause, []).append(change)
    ordered = sorted(by_cause.values(), key=lambda members: (-len(members), min(m.id for m in members)))
    groups = []
    for number, members in enumerate(ordered, start=1):
        members.sort(key=lambda member: member.id)
        boxes = cover({member.id for member in members}, universe)
        groups.append(Group(number, classify(members[0].old.verdict, members[0].verdict), tuple(members), boxes))
    return tuple(groups)


def cover(chosen: set[str], universe: Sequence[Cell]) -> tuple[Selector, ...]:
    """Selectors (axis -> values) whose matches among ``universe`` are exactly the ``chosen`` cells.

    Each is the bounding box of some chosen cells; a box that would also hold another cell is split
    along the axis that leaves the most pure boxes, and sibling boxes that differ in one axis only
    are merged again, so a group that is one box of the matrix is one rule."""
    inside = [cell for cell in universe if cell.id in chosen]
    outside = [cell for cell in universe if cell.id not in chosen]
    names = [name for name, _ in inside[0].axes] if inside else []
    order = {name: {value: index for index, value in enumerate(_values(universe, name))} for name in names}
    boxes = _split(inside, outside, names, order)
    return tuple(_selector(box, universe, names, order) for box in _merge(boxes))


Box = dict[str, frozenset[AxisValue]]


def _values(cells: Iterable[Cell], name: str) -> list[AxisValue]:
    return list(dict.fromkeys(cell.values[name] for cell in cells if name in cell.values))


def _box(cells: Sequence[Cell], names: Sequence[str]) -> Box:
    return {name: frozenset(cell.values[name] for cell in cells) for name in names}


def _holds(box: Box, cell: Cell) -> bool:
    return all(cell.values.get(name) in values for name, values in box.items())


def _pure(box: Box, outside: Sequence[Cell]) -> bool:
    return not any(_holds(box, cell) for cell in outside)


def _split(inside: Sequence[Cell], outside: Sequence[Cell], names: Sequence[str], order: Any) -> list[Box]:
    box = _box(inside, names)
    if _pure(box, outside):
        return [box]
    candidates = [name for name in names if len(box[name]) > 1]
    if not candidates:  # one point of the product that another cell shares: cannot happen for distinct ids
        return [box]

    def parts(name: str) -> list[list[Cell]]:
        by_value: dict[AxisValue, list[Cell]] = {}
        for cell in inside:
            by_value.setdefault(cell.values[name], []).append(cell)
        return [by_value[value] for value in sorted(by_value, key=lambda value: order[name][value])]

    def score(name: str) -> tuple[int, int]:
        split = parts(name)
        pure = sum(1 for part in split if _pure(_box(part, names), outside))
        return (-pure, len(split))

    best = min(candidates, key=score)
    return [piece for part in parts(best) for piece in _split(part, outside, names, order)]


def _merge(boxes: list[Box]) -> list[Box]:
    """Merge boxes equal on every axis but one (their union is then a box holding only their cells)."""
    merged = True
    while merged:
        merged = False
        for i, first in enumerate(boxes):
            for j in range(i + 1, len(boxes)):
                second = boxes[j]
                differing = [name for name in first if first[name] != second[name]]
                if len(differing) == 1:
                    name = differing[0]
                    boxes[i] = {**first, name: first[name] | second[name]}
                    del boxes[j]
                    merged = True
                    break
            if merged:
                break
    return boxes


def _selector(box: Box, universe: Sequence[Cell], names: Sequence[str], order: Any) -> Selector:
    """The box as a rule's ``when``: axes that hold every value the matrix has are left out."""
    everything = {name: frozenset(_values(universe, name)) for name in names}
    return tuple(
        (name, tuple(sorted(values, key=lambda value: order[name][value])))
        for name, values in box.items()
        if values != everything[name]
    )


def release_floor(version: str) -> str:
    """The ``vllm`` range of a rule recording ``version`` on: ">=0.33" for 0.33.0, ">=0.33.1" for a
    patch release (its x.y.0 still behaves as recorded), ">=0.34.0.dev0" for a nightly of 0.34."""
    parsed = Version(version)
    major, minor, *rest = (*parsed.release, 0, 0)
    if parsed.is_devrelease or parsed.is_prerelease:
        return f">={major}.{minor}.0.dev0"
    patch = rest[0] if rest else 0
    return f">={major}.{minor}" if patch == 0 else f">={major}.{minor}.{patch}"


def known_finding(group: Group, rules: Sequence[Rule]) -> str | None:
    """The finding an existing rule records for this very answer (same fault verdict, its message
    in the group's), e.g. a harness limitation a new backend runs into too: reused, not re-filed."""
    message = group.representative.message
    for rule in reversed(rules):
        expectation = rule.expectation
        if (
            expectation.finding is not None
            and expectation.verdict == group.new
            and expectation.message
            and expectation.message in message
        ):
            return expectation.finding.id
    return None


def proposed_rules(group: Group, floor: str, version: str, rules: Sequence[Rule] = ()) -> list[dict[str, Any]]:
    """The ``[[expect]]`` tables recording the group's new answer from ``floor`` on; a fault names
    the finding an existing rule records for it, else a stub (``proposed_finding``)."""
    cell = group.representative
    finding = (known_finding(group, rules) or finding_id(group)) if group.new in FAULTS else None
    reason = f"TODO why: from vLLM {version}, {group.change}: {_quote(cell.message)}"
    tables = []
    for box in group.boxes:
        table: dict[str, Any] = {"when": dict(box), "vllm": floor, "verdict": group.new.value}
        if finding:
            table["finding"] = finding
        shared = _shared_message(group)
        if shared:
            table["message"] = shared
        table["reason"] = reason
        tables.append(table)
    return tables


def finding_id(group: Group) -> str:
    text = normalise_message(group.representative.message, group.representative.axes)
    words = re.findall(r"[a-z0-9]+", text.lower().replace("<n>", "").replace("<backend>", "backend"))
    return "-".join(["new", group.new.value, *words[:6]]) or f"new-{group.new.value}"


def proposed_finding(group: Group, version: str) -> dict[str, Any]:
    cell = group.representative
    return {
        "id": finding_id(group),
        "title": f"TODO: {_quote(cell.message)[:150]}",
        "kind": "upstream-bug",
        "upstream": "unreported",
        "vllm": release_floor(version),
        "first_release": version,
        "measured": f"TODO: dflash-matrix watch, {len(group.cells)} cells ({group.change}), e.g. {cell.id}",
    }


def _quote(message: str) -> str:
    return " ".join(message.split())[:300] or "(no message)"


def _shared_message(group: Group) -> str | None:
    """The longest stretch of vLLM's message every cell of the group carries (the rule's ``message``),
    when there is one worth requiring: a rule whose message no longer matches shows a moved cause."""
    messages = [" ".join(cell.message.split()) for cell in group.cells]
    first = messages[0]
    best = ""
    for piece in re.split(r"<backend>|<path>|<n>", normalise_message(first, group.representative.axes)):
        piece = piece.strip(" :;,.'\"()")
        if len(piece) > len(best) and all(piece in message for message in messages):
            best = piece
    if len(best) > 120:  # a rule's message is a fragment to recognise the cause by, cut at a word
        best = best[:120].rsplit(" ", 1)[0]
    return best if len(best) >= 12 else None


def patched(judge: ExpectationSet, groups: Sequence[Group], version: str) -> ExpectationSet:
    """The expectations as they would be with the groups' rules appended, judging ``version``
    (what ``expectations record`` writes, checked before anyone reviews it)."""

    floor = release_floor(version)
    rules = list(judge.rules)
    for group in groups:
        for box in group.boxes:
            index = len(rules)
            # No finding: judging needs none, and the stub a fault's rule names is not in the file yet.
            expectation = Expectation(group.new, "proposed", _shared_message(group), index)
            rules.append(Rule(index, box, expectation, SpecifierSet(floor)))
    releases = tuple(sorted({*judge.releases, Version(version)}))
    return dataclasses.replace(judge, rules=tuple(rules), releases=releases).for_release(version)


def unsettled(
    document: Mapping[str, Any], cells: Sequence[Cell], after: ExpectationSet, no_verdict: Collection[str] = ()
) -> list[str]:
    """Cells the patched expectations would still judge as not expected (should be none)."""
    changes, _ = changed_cells(document, cells, after, no_verdict)
    return [change.id for change in changes]
