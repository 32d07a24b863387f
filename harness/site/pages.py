"""The site's page model: one page per (lane, vLLM release), a permalink per cell, a page per finding,
a "what changed" page per pair of consecutive releases of a lane, and the index's question.

The question a user brings is "with vLLM X on GPU generation Y, which backend serves my draft?": a
query fixes the release, the generation and any of the deployment's options (the cells' axes other
than the backend), and picks the cells that match; what the backends did in those cells is the
answer. ``select`` is that rule; the pages' scripts apply the same rule to the same values (the
strings ``value_text`` writes), and the static grids are ``select`` with an empty query.

Pure: built from a merged ``Report``; no I/O, no vLLM.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from harness.axes import AXES_BY_NAME, AXIS_NAMES, capability_token
from harness.findings import Finding, finding_change
from harness.reports.history import release_history
from harness.reports.model import FindingInRun, Report, Run
from harness.result import CellResult
from harness.verdict import Verdict, severity

# The axes a grid is drawn over (rows and columns); every other axis a lane varies is a filter.
GRID_AXES = ("capability", "backend")
NOT_SET = "-"  # an axis without a default that a cell does not record: matches only "any"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def value_text(value: object) -> str:
    """An axis value as the pages compare it: JSON's spelling for booleans, str() for the rest."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def axis_text(cell: CellResult, name: str) -> str:
    """The cell's value of an axis; a matrix that does not vary an axis leaves it at its default."""
    if name in cell.axes:
        return value_text(cell.axes[name])
    axis = AXES_BY_NAME.get(name)
    return value_text(axis.default) if axis is not None and axis.default is not None else NOT_SET


def generation(cell: CellResult, run: Run) -> str:
    """The GPU generation a cell answers for: its simulated or real capability, else the run's device."""
    capability = cell.axes.get("capability")
    if capability is not None:
        return capability_token(str(capability)).upper()
    return run.capability.upper() if run.capability else run.device


def slug(text: str) -> str:
    """A file-name-safe form of a lane or release (a dev build may carry '+' or '/')."""
    return _UNSAFE.sub("-", text).strip("-") or "unknown"


@dataclass(frozen=True)
class SiteCell:
    """One cell of one run, where its permalink lives, and the values a query compares."""

    run: Run
    cell: CellResult
    page: str  # the slug of its (lane, release) page
    anchor: str  # its permalink's fragment in the page's cells file
    generation: str
    backend: str
    options: tuple[tuple[str, str], ...]  # (axis, value text) for every filter axis of the site

    @property
    def href(self) -> str:
        return f"{cells_file(self.page)}#{self.anchor}"

    @property
    def report(self) -> str:
        return report_file(self.page)

    def option(self, name: str) -> str:
        return dict(self.options)[name]


def page_file(page: str) -> str:
    return f"{page}.html"


def cells_file(page: str) -> str:
    return f"{page}-cells.html"


def report_file(page: str) -> str:
    """The page's runs as a matrix.json of their own: what its repro commands name."""
    return f"reports/{page}.json"


def finding_file(ident: str) -> str:
    return f"finding-{ident}.html"


@dataclass(frozen=True)
class Filter:
    axis: str
    values: tuple[str, ...]  # the values the lane's cells hold, in the order the pages list them


@dataclass(frozen=True)
class LanePage:
    """One lane under one vLLM release: the grid (generation x backend) and its cells."""

    slug: str
    lane: str
    release: str
    runs: tuple[Run, ...]
    states: tuple[str, ...]  # how each run ended (Report.state), in words
    cells: tuple[SiteCell, ...]
    generations: tuple[str, ...]
    backends: tuple[str, ...]
    filters: tuple[Filter, ...]  # the axes the lane varies, beside the grid's own

    @property
    def href(self) -> str:
        return page_file(self.slug)

    @property
    def cells_href(self) -> str:
        return cells_file(self.slug)

    @property
    def report(self) -> str:
        return report_file(self.slug)


@dataclass(frozen=True)
class Tally:
    """What a set of cells got: counts per verdict (worst first) and the backends the draft layers carried."""

    counts: tuple[tuple[Verdict, int], ...]
    observed: tuple[str, ...]

    @property
    def worst(self) -> Verdict | None:
        return self.counts[0][0] if self.counts else None

    @property
    def total(self) -> int:
        return sum(count for _, count in self.counts)


def tally(cells: Iterable[SiteCell]) -> Tally:
    counts: dict[Verdict, int] = {}
    observed: dict[str, None] = {}
    for item in cells:
        counts[item.cell.verdict] = counts.get(item.cell.verdict, 0) + 1
        observed.update(dict.fromkeys(item.cell.observed_backends))
    ordered = tuple(sorted(counts.items(), key=lambda pair: -severity(pair[0])))
    return Tally(ordered, tuple(sorted(observed)))


def matches(item: SiteCell, query: Mapping[str, str]) -> bool:
    """Whether a cell answers a query: every key the query sets (``release``, ``lane``, ``generation``,
    ``backend`` or an axis) has the cell's value; an empty value means any."""
    for key, wanted in query.items():
        if not wanted:
            continue
        if key == "release":
            have = item.run.vllm_version
        elif key == "lane":
            have = item.run.lane
        elif key == "generation":
            have = item.generation
        elif key == "backend":
            have = item.backend
        else:
            have = dict(item.options).get(key, NOT_SET)
        if have != wanted:
            return False
    return True


def select(cells: Iterable[SiteCell], query: Mapping[str, str]) -> tuple[SiteCell, ...]:
    return tuple(item for item in cells if matches(item, query))


def grid(page: LanePage, query: Mapping[str, str]) -> dict[tuple[str, str], Tally]:
    """(generation, backend) -> what the page's cells that match ``query`` got there."""
    groups: dict[tuple[str, str], list[SiteCell]] = {}
    for item in select(page.cells, query):
        groups.setdefault((item.generation, item.backend), []).append(item)
    return {key: tally(items) for key, items in groups.items()}


@dataclass(frozen=True)
class Change:
    """A cell whose verdict differs between two consecutive releases of one lane on one machine."""

    cell: str
    before: SiteCell
    after: SiteCell

    @property
    def finding(self) -> str | None:
        before, after = self.before.cell.finding, self.after.cell.finding
        return finding_change(before.id if before else None, after.id if after else None)


@dataclass(frozen=True)
class SlotChanges:
    slot: str
    changes: tuple[Change, ...]
    compared: int  # cells that gave a verdict in both releases
    only_before: tuple[str, ...]  # cells the newer release did not run
    only_after: tuple[str, ...]


@dataclass(frozen=True)
class ChangePage:
    slug: str
    lane: str
    before: str  # the older release
    after: str
    slots: tuple[SlotChanges, ...]

    @property
    def href(self) -> str:
        return f"{self.slug}.html"

    @property
    def changed(self) -> int:
        return sum(len(slot.changes) for slot in self.slots)


@dataclass(frozen=True)
class FindingPage:
    finding: Finding
    shown: tuple[tuple[FindingInRun, tuple[SiteCell, ...]], ...]  # per run: the run's cells under it

    @property
    def href(self) -> str:
        return finding_file(self.finding.id)


@dataclass(frozen=True)
class Site:
    pages: tuple[LanePage, ...]  # by lane, then release (oldest first)
    findings: tuple[FindingPage, ...]
    changes: tuple[ChangePage, ...]
    filters: tuple[Filter, ...]  # every filter axis of any page: the index's form

    @property
    def cells(self) -> tuple[SiteCell, ...]:
        return tuple(item for page in self.pages for item in page.cells)

    @property
    def releases(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(page.release for page in sorted(self.pages, key=_release_key)))

    @property
    def generations(self) -> tuple[str, ...]:
        found = {generation for page in self.pages for generation in page.generations}
        return tuple(sorted(found, key=_generation_key))


def _release_key(page: LanePage) -> tuple[int, object, str]:
    return release_order(page.release)


def release_order(release: str) -> tuple[int, object, str]:
    try:
        return (0, Version(release), release)
    except InvalidVersion:  # a dev build or "unknown": after the releases, by name
        return (1, release, release)


def _generation_key(name: str) -> tuple[int, int, str]:
    # SM80 before SM100 (by number, not by text); devices that are no SM generation after them.
    digits = name[2:] if name.startswith("SM") else ""
    return (0, int(digits), name) if digits.isdigit() else (1, 0, name)


def _value_key(axis: str, value: str) -> tuple[int, int, str]:
    """The order a filter lists its values: the axis's own choices first, numbers by size, the rest by name."""
    choices = AXES_BY_NAME[axis].choices if axis in AXES_BY_NAME else ()
    if value in choices:
        return (0, choices.index(value), value)
    if value.lstrip("-").isdigit():
        return (1, int(value), value)
    return (2, 0, value)


def _filters(cells: Sequence[CellResult]) -> tuple[Filter, ...]:
    """The axes the cells vary (beyond the grid's own), in the axes' declared order, with their values."""
    named = {name for cell in cells for name in cell.axes} - set(GRID_AXES)
    order = [name for name in AXIS_NAMES if name in named] + sorted(named - set(AXIS_NAMES))
    found = []
    for name in order:
        values = {axis_text(cell, name) for cell in cells}
        if len(values) > 1:
            found.append(Filter(name, tuple(sorted(values, key=lambda value: _value_key(name, value)))))
    return tuple(found)


def build_site(report: Report, no_verdict: Mapping[tuple[str, str], str] | None = None) -> Site:
    """``no_verdict``: (run key, cell id) -> why that record is no verdict of its release (from a history
    report): such a cell is never counted as a change."""
    runs = report.run_by_key()
    groups: dict[tuple[str, str], list[Run]] = {}
    for run in report.runs:
        if run.key not in report.junit_only:
            groups.setdefault((run.lane, run.vllm_version), []).append(run)
    keys = sorted(groups, key=lambda key: (key[0], release_order(key[1])))
    slugs = _unique_slugs([f"{lane}-{release}" for lane, release in keys])
    every_filter = _filters([row.cell for row in report.rows if row.run in runs])
    axes = tuple(item.axis for item in every_filter)
    pages = []
    for (lane, release), page_slug in zip(keys, slugs, strict=True):
        seen: dict[str, int] = {}
        cells = []
        for run in groups[lane, release]:
            for row in report.rows_of(run.key):
                cell = row.cell
                count = seen.get(cell.id, 0)
                seen[cell.id] = count + 1
                # Two runs of one page (two machines under one release) may hold the same cell id.
                anchor = cell.id if not count else f"{cell.id}--{count + 1}"
                backend = value_text(cell.axes.get("backend", cell.requested_backend or "auto"))
                options = tuple((name, axis_text(cell, name)) for name in axes)
                cells.append(SiteCell(run, cell, page_slug, anchor, generation(cell, run), backend, options))
        pages.append(
            LanePage(
                slug=page_slug,
                lane=lane,
                release=release,
                runs=tuple(groups[lane, release]),
                states=tuple(report.state(run.key) for run in groups[lane, release]),
                cells=tuple(cells),
                generations=tuple(sorted({item.generation for item in cells}, key=_generation_key)),
                backends=_backends(cells),
                filters=_filters([item.cell for item in cells]),
            )
        )
    where = {(item.run.key, item.cell.id): item for page in pages for item in page.cells}
    return Site(
        pages=tuple(pages),
        findings=_finding_pages(report, where),
        changes=_change_pages(report, where, no_verdict or {}),
        filters=every_filter,
    )


def _backends(cells: Sequence[SiteCell]) -> tuple[str, ...]:
    # auto first (what vLLM picks for you), then the backends by name.
    names = {item.backend for item in cells}
    return tuple(sorted(names, key=lambda name: (name != "auto", name)))


def _unique_slugs(names: Sequence[str]) -> list[str]:
    taken: dict[str, int] = {}
    found = []
    for name in names:
        base = slug(name)
        taken[base] = taken.get(base, 0) + 1
        found.append(base if taken[base] == 1 else f"{base}-{taken[base]}")
    return found


def _finding_pages(report: Report, where: Mapping[tuple[str, str], SiteCell]) -> tuple[FindingPage, ...]:
    by_id: dict[str, list[FindingInRun]] = {}
    for item in report.findings:
        by_id.setdefault(item.finding.id, []).append(item)
    pages = []
    for ident in sorted(by_id):
        shown = tuple(
            (item, tuple(where[item.run.key, cell] for cell in item.cells if (item.run.key, cell) in where))
            for item in by_id[ident]
        )
        pages.append(FindingPage(by_id[ident][-1].finding, shown))
    return tuple(pages)


def _change_pages(
    report: Report, where: Mapping[tuple[str, str], SiteCell], no_verdict: Mapping[tuple[str, str], str]
) -> tuple[ChangePage, ...]:
    pairs: dict[tuple[str, str, str], list[SlotChanges]] = {}
    for history in release_history(report, no_verdict):
        for index in range(1, len(history.runs)):
            older, newer = history.runs[index - 1], history.runs[index]
            changes = []
            compared = 0
            only_before, only_after = [], []
            for cell in history.cells:
                before, after = cell.steps[index - 1], cell.steps[index]
                if before.no_verdict or after.no_verdict:
                    continue  # an environment failure is no answer of that release
                if before.verdict is None or after.verdict is None:
                    if before.verdict is not None:
                        only_before.append(cell.cell)
                    elif after.verdict is not None:
                        only_after.append(cell.cell)
                    continue
                compared += 1
                if before.verdict != after.verdict:
                    changes.append(Change(cell.cell, where[older.key, cell.cell], where[newer.key, cell.cell]))
            slot = SlotChanges(history.slot, tuple(changes), compared, tuple(only_before), tuple(only_after))
            pairs.setdefault((older.lane, older.vllm_version, newer.vllm_version), []).append(slot)
    keys = sorted(pairs, key=lambda key: (key[0], release_order(key[1]), release_order(key[2])))
    slugs = _unique_slugs([f"changes-{lane}-{before}-to-{after}" for lane, before, after in keys])
    return tuple(
        ChangePage(page_slug, lane, before, after, tuple(pairs[lane, before, after]))
        for (lane, before, after), page_slug in zip(keys, slugs, strict=True)
    )
