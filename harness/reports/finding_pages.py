"""One Markdown page per vLLM bug a report shows, ready to paste into vLLM's bug template, and their index.

A page says, for one finding in one run: a one-sentence summary; the environment (vLLM and how it was
installed, torch, the platform and device, simulated or real, the lane); the smallest user-facing
configuration that shows it (the ``LLM(...)`` arguments of one of its cells); expected against actual with
the message the run recorded; the affected cells as a table of the axes that differ between them; the
first bad release (and the last good or fixed one, when measured), and with a history report the
same as that history measured it, with its cells per release; and its repro script with what running
it showed. Pure text from the report model: the command (harness/commands/findings.py) writes and runs
the scripts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from harness.deployment.arguments import engine_arguments
from harness.deployment.cells import lane_deployment
from harness.findings import FindingKind
from harness.reports.model import FindingInRun, FindingReleases, Report
from harness.reports.text import md
from harness.result import CellResult

# The kinds a page is written for: those with something to hand upstream.
UPSTREAM_KINDS = (FindingKind.UPSTREAM_BUG, FindingKind.OVER_CLAIM)
# What each target family (harness.axes.TARGET_MODELS) stands for in a user's configuration.
_TARGETS = {
    "qwen3": "<a Qwen3 target>",
    "mistral_swa": "<a target with a model-level sliding_window and no layer_types, e.g. Mistral-7B-v0.1>",
    "gemma3_mm": "<a multimodal prefix-LM target, e.g. Gemma 3 (Gemma3ForConditionalGeneration)>",
}
# The axes every affected-cells table shows, whether or not they differ between the cells.
_ALWAYS = ("capability", "backend")


@dataclass(frozen=True)
class ReproRun:
    """A finding's repro script as the command wrote and (maybe) ran it."""

    script: str | None  # file name beside the page; None: no script (``result`` says why)
    cell: str | None
    result: str  # what running it showed, or why it was not run
    exit_status: int | None = None  # None: not run


@dataclass(frozen=True)
class FindingHistory:
    """A finding as a `dflash-matrix history` report measured it on the report run's lane and machine."""

    source: str  # the history report folder, as given
    measured: FindingReleases

    def first_bad(self) -> str:
        measured = self.measured
        if not measured.releases:
            return "none of its cells in the history"
        if measured.first_bad is None:
            return f"not shown in {measured.releases[0]}-{measured.releases[-1]}"
        oldest = " (the history's oldest release)" if measured.first_bad == measured.releases[0] else ""
        return measured.first_bad + oldest

    def last_good(self) -> str:
        return self.measured.last_good or ("none measured" if self.measured.releases else "-")

    def line(self) -> str:
        measured = self.measured
        fixed = f", fixed in {measured.fixed_in}" if measured.fixed_in else ""
        per_release = f"; cells showing it per release: {measured.per_release()}" if measured.releases else ""
        return f"history {self.source}: first bad {self.first_bad()}, last good {self.last_good()}{fixed}{per_release}"

    def contradiction(self, recorded: Version) -> str | None:
        """Where the history contradicts the findings file's ``first_release``: it shows the finding earlier,
        or it ran a release at or before that one and shows it only later. None: it agrees, or it starts
        after that release (and cannot tell), or its releases are no plain versions."""
        measured = self.measured
        if measured.first_bad is None:
            return None
        try:
            first, oldest = Version(measured.first_bad), Version(measured.releases[0])
        except InvalidVersion:  # a label with its torch build (one release run under two)
            return None
        if first < recorded:
            return f"the history shows it in {first}, before the first release the findings file records ({recorded})"
        if first > recorded and oldest <= recorded:
            return f"the findings file records first release {recorded}; the history shows it only from {first}"
        return None

    def section(self, recorded: Version) -> list[str]:
        measured = self.measured
        if not measured.releases:
            return [f"- history `{self.source}`: it holds none of this finding's cells on {md(measured.slot)}"]
        lines = [
            f"- history `{self.source}` (vLLM {measured.releases[0]} to {measured.releases[-1]}, "
            f"{len(measured.releases)} release{'s' if len(measured.releases) > 1 else ''}, {md(measured.slot)}): "
            f"first bad release {self.first_bad()}; "
            f"last good: {self.last_good()}" + (f"; fixed in {measured.fixed_in}" if measured.fixed_in else ""),
        ]
        if (contradiction := self.contradiction(recorded)) is not None:
            lines.append(f"- {contradiction}")
        lines += [
            "",
            "| release | cells showing it | cells without it | cells that gave a verdict |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {release} | {showing} | {without} | {ran} |"
            for release, showing, without, ran in zip(
                measured.releases, measured.showing, measured.without, measured.ran, strict=True
            )
        ]
        return lines


def page_name(item: FindingInRun) -> str:
    return f"{item.anchor}.md"


def user_configuration(
    axes: Mapping[str, Any], lane: str = "selection", target_backend: str | None = None
) -> dict[str, Any]:
    """The ``vllm.LLM(...)`` arguments a cell stands for: the engine arguments its lane builds
    (``harness.deployment``), with the target and the draft named by what they are."""
    method = axes.get("method", "dflash")
    draft = (
        f"<a {method} draft: {'causal' if axes.get('causal') else 'non-causal'}, "
        f"{'with' if axes.get('sink') else 'without'} attention sinks, head size {axes.get('head_size', 128)}>"
    )
    family = str(axes.get("target_model", "qwen3"))
    model = _TARGETS.get(family, f"<a {family} target>")
    return engine_arguments(lane_deployment(lane, axes, target_backend), model, draft)


def python_call(name: str, arguments: Mapping[str, Any]) -> str:
    """``name(key=value, ...)`` as Python source, one argument a line."""
    return "\n".join([f"{name}(", *(f"    {key}={value!r}," for key, value in arguments.items()), ")"])


def _cells_table(cells: Sequence[CellResult]) -> list[str]:
    names = [name for name in cells[0].axes if name in _ALWAYS or len({str(c.axes.get(name)) for c in cells}) > 1]
    lines = ["| cell | " + " | ".join(names) + " | verdict |", "|---|" + "---|" * (len(names) + 1)]
    for cell in cells:
        values = " | ".join(md(cell.axes.get(name, "")) for name in names)
        lines.append(f"| `{cell.id}` | {values} | {cell.verdict.value}{' (fixed?)' if cell.fixed else ''} |")
    return lines


def finding_page(
    item: FindingInRun, cells: Sequence[CellResult], repro: ReproRun, history: FindingHistory | None = None
) -> str:
    finding, run = item.finding, item.run
    shown = next(cell for cell in cells if cell.id == repro.cell) if repro.cell else cells[0]
    correct = shown.correct
    upstream = f"[{finding.upstream_status}]({finding.upstream_url})" if finding.upstream_url else finding.upstream
    meta = run.meta
    installed = meta.get("vllm_source") or meta.get("vllm_requirement") or "not recorded"
    lines = [
        f"# {finding.title}",
        "",
        f"**Summary**: {finding.title} ({finding.kind.value}; upstream: {upstream}). Seen in {len(cells)} cell(s) "
        f"of the dflash-matrix {run.lane} lane on vLLM {run.vllm_version}: {item.status}.",
        "",
        "## Environment",
        "",
        f"- vLLM {run.vllm_version}, installed from {installed}"
        + (f" (dependency overrides: {meta['vllm_overrides']})" if meta.get("vllm_overrides") else ""),
        f"- torch {run.torch_version}",
        f"- platform: {run.platform}; device: {run.device}",
        f"- dflash-matrix lane: {run.lane}",
        "",
        "## Configuration (one affected cell)",
        "",
        f"Cell `{shown.id}`:",
        "",
        "```python",
        python_call("LLM", user_configuration(shown.axes, run.lane, meta.get("target_backend"))),
        "```",
        "",
        "## Expected vs actual",
        "",
        f"- expected (without the bug): **{correct.verdict.value if correct else '?'}**"
        + (f": {correct.reason}" if correct and correct.reason else ""),
        f"- actual: **{shown.verdict.value}**: {md(shown.message, None)}",
        "",
        f"## Affected cells ({len(cells)})",
        "",
        *_cells_table(cells),
        "",
        "## Releases",
        "",
        f"- holds for vLLM {finding.vllm}; first bad release: {finding.first_release}"
        + (f"; last good: {finding.last_good}" if finding.last_good else "; no earlier release measured good")
        + (f"; fixed in {finding.fixed_in}" if finding.fixed_in else ""),
        f"- measured: {finding.measured}",
        *(history.section(finding.first_release) if history else []),
        "",
        "## Repro",
        "",
    ]
    if repro.script is None:
        lines.append(f"No script: {md(repro.result, None)}")
    else:
        lines += [
            f"`python {repro.script}` (vLLM, torch and the standard library only; cell `{repro.cell}`) asserts vLLM's "
            "correct behaviour: it exits 1 where the bug is, 0 where it is fixed.",
            "",
            f"Result: {md(repro.result, None)}",
        ]
    return "\n".join(lines) + "\n"


def findings_index(
    report: Report, repros: Mapping[str, ReproRun], histories: Mapping[str, FindingHistory] | None = None
) -> str:
    """The findings of every run; with ``histories`` (by anchor), also each one's first bad and last good
    release and its cells per release as the history measured them."""
    histories = histories or {}
    columns = ["finding", "kind", "upstream", "since", "run", "cells", "status", "repro"]
    if histories:
        columns += ["first bad (history)", "last good (history)", "cells showing it per release (history)"]
    lines = ["# Findings", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for item in report.findings:
        finding = item.finding
        # A page (and a script) only for what there is to hand upstream: no link, no repro for a harness limit.
        upstream = finding.kind in UPSTREAM_KINDS
        title = f"[{md(finding.title)}]({page_name(item)})" if upstream else md(finding.title)
        repro = repros.get(item.anchor)
        if not upstream or repro is None:
            ran = "-"
        elif repro.exit_status is not None:
            ran = f"exit {repro.exit_status}"
        else:
            ran = "not run" if repro.script else "no script"
        lines.append(
            f"| {title} | {finding.kind.value} | {md(finding.upstream_status)} | {md(finding.since())} "
            f"| {md(item.run.label)} | {len(item.cells)} | {md(item.status)} | {ran} |"
            + (_history_columns(histories[item.anchor]) if item.anchor in histories else "")
        )
    if histories:
        source = next(iter(histories.values())).source
        lines += ["", f"History: `{source}`; per release, the finding's cells that show it / that gave a verdict."]
    return "\n".join(lines) + "\n"


def _history_columns(history: FindingHistory) -> str:
    return f" {md(history.first_bad())} | {md(history.last_good())} | {md(history.measured.per_release() or '-')} |"
