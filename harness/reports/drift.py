"""Docs drift: vLLM's generated backend table against what the matrix observed.

vLLM generates ``docs/design/attention_backends.md`` from each backend's
``validate_configuration()``. Its feature tables have a ``Backend`` column, an
optional ``Version`` column (FA2/FA3/FA4, FlashInfer Native/TRTLLM...), ``Sink``, a
``Non-Causal`` column in newer releases, and ``Compute Cap.``; a cell reads ✅ or ❌.

A matrix cell is evidence about one feature only when nothing else could explain a
rejection: sink evidence comes from sink cells that are causal, non-causal evidence
from non-causal cells without sinks, both at neutral values of the other axes (16-bit
dtype, auto KV cache, no sliding window, FlashInfer cubins present, eager, loader v2). A cell with both
features that runs is evidence for both. Its verdict reads as:

    pass                                   accepted and works
    mismatch, or crash after selection     accepted, then failed
    unsupported                            rejected
    anything else                          no evidence (unavailable, timeout, substituted...)

Disagreements: the table says ✅ and the backend rejected the feature or failed with
it; the table says ❌ and the backend accepted it. Table rows are matched by backend
and by the cell's compute capability (its ``capability`` axis, else the run's
``capability`` metadata), the narrowest Compute Cap. entry winning; when rows of equal
width still disagree, or a cell has no capability and the backend's rows differ, the
docs are ambiguous there: listed, but no disagreement. Reading the table is
``backend_table``'s job; this module weighs the cells against it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from harness.reports.backend_table import SUPPORTED, UNSUPPORTED, BackendTable, Feature
from harness.reports.model import CellRun
from harness.reports.text import md
from harness.stages import Stage
from harness.verdict import Verdict

DRIFT_SCHEMA = "dflash-matrix-drift/1"

# Axis values under which a rejection can only be about sink / non-causal support.
NEUTRAL: dict[str, tuple[Any, ...]] = {
    "dtype": ("bfloat16", "float16"),
    "kv_cache_dtype": ("auto",),
    "sliding_window": (0,),
    "flashinfer_cubin": (True,),
    # The docs describe the backend's kernels, not how a runner drives them: a refusal of CUDA
    # graphs (a builder's declared graph support) or a loader's restriction (Model Runner V1
    # refuses mixed sliding/full drafts) says nothing about sinks or non-causal masks.
    "cudagraph": ("eager",),
    "loader": ("v2",),
}
_FAILED_AFTER_SELECTION = (Stage.BUILD, Stage.STARTUP, Stage.METADATA, Stage.FORWARD, Stage.COMPARE)


class Observed(StrEnum):
    WORKS = "works"
    FAILS = "accepted-then-failed"
    REJECTED = "rejected"


def observed(row: CellRun) -> Observed | None:
    cell = row.cell
    if cell.verdict == Verdict.PASS:
        return Observed.WORKS
    if cell.verdict == Verdict.UNSUPPORTED:
        return Observed.REJECTED
    if cell.verdict == Verdict.MISMATCH or (cell.verdict == Verdict.CRASH and cell.stage in _FAILED_AFTER_SELECTION):
        return Observed.FAILS
    return None


def evidence_for(row: CellRun) -> tuple[Feature, ...]:
    """The features a cell tells about, given what else it varies."""
    axes = row.cell.axes
    backend = axes.get("backend")
    if not backend or backend == "auto":
        return ()
    if any(name in axes and axes[name] not in values for name, values in NEUTRAL.items()):
        return ()
    sink, non_causal = axes.get("sink") is True, axes.get("causal") is False
    if sink and non_causal:
        # A rejection could be either feature's; a working cell proves both.
        return (Feature.SINK, Feature.NON_CAUSAL) if observed(row) == Observed.WORKS else ()
    if sink:
        return (Feature.SINK,)
    if non_causal:
        return (Feature.NON_CAUSAL,)
    return ()


@dataclass(frozen=True)
class Finding:
    kind: str  # disagreement, ambiguous, undocumented, agreement
    backend: str
    capability: str | None
    feature: Feature
    documented: tuple[str, ...]  # the table rows that apply, with their value
    observed: Observed
    run: str
    cell_id: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "backend": self.backend,
            "capability": self.capability,
            "feature": self.feature.value,
            "documented": list(self.documented),
            "observed": self.observed.value,
            "run": self.run,
            "id": self.cell_id,
            "message": self.message,
        }


@dataclass(frozen=True)
class DriftReport:
    table: str
    has_non_causal: bool
    findings: tuple[Finding, ...]

    def of_kind(self, kind: str) -> list[Finding]:
        return [finding for finding in self.findings if finding.kind == kind]

    @property
    def disagrees(self) -> bool:
        return bool(self.of_kind("disagreement"))

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": DRIFT_SCHEMA,
            "table": self.table,
            "table_has_non_causal": self.has_non_causal,
            "counts": {kind: len(self.of_kind(kind)) for kind in _KINDS},
            "disagreements": [f.to_json() for f in self.of_kind("disagreement")],
            "ambiguous": [f.to_json() for f in self.of_kind("ambiguous")],
            "undocumented": [f.to_json() for f in self.of_kind("undocumented")],
            "agreements": len(self.of_kind("agreement")),
        }


_KINDS = ("disagreement", "ambiguous", "undocumented", "agreement")


def _capability(row: CellRun, run_meta: dict[str, Any]) -> str | None:
    value = row.cell.axes.get("capability", run_meta.get("capability"))
    return str(value) if value is not None else None


def check_drift(table: BackendTable, rows: Sequence[CellRun], run_meta: dict[str, dict[str, Any]]) -> DriftReport:
    findings: list[Finding] = []
    for row in rows:
        seen = observed(row)
        if seen is None:
            continue
        for feature in evidence_for(row):
            if feature == Feature.NON_CAUSAL and not table.has_non_causal:
                continue
            backend = str(row.cell.axes["backend"])
            capability = _capability(row, run_meta.get(row.run, {}))
            applicable = table.rows_for(backend, capability, feature)
            documented = tuple(f"{r.label}: {SUPPORTED if r.documents(feature) else UNSUPPORTED}" for r in applicable)
            values = {r.documents(feature) for r in applicable}

            if not values:
                kind = "undocumented"
            elif len(values) > 1:
                kind = "ambiguous"
            elif (values == {True}) == (seen == Observed.WORKS):
                kind = "agreement"
            else:
                kind = "disagreement"
            findings.append(
                Finding(kind, backend, capability, feature, documented, seen, row.run, row.cell.id, row.cell.message)
            )
    return DriftReport(table.path, table.has_non_causal, tuple(findings))


def render_drift_markdown(report: DriftReport) -> str:
    disagreements = report.of_kind("disagreement")
    lines = [
        "# Docs drift: vLLM's backend table vs observed",
        "",
        f"Table: {md(report.table)}. "
        f"{len(disagreements)} disagreements, {len(report.of_kind('ambiguous'))} cells where the table is ambiguous, "
        f"{len(report.of_kind('undocumented'))} cells of backends the table lacks, "
        f"{len(report.of_kind('agreement'))} agreeing.",
    ]
    if not report.has_non_causal:
        lines += ["", "The table has no Non-Causal column (older vLLM): only sink support was compared."]
    for kind, title in (
        ("disagreement", "Disagreements"),
        ("ambiguous", "Ambiguous in the table (several rows apply and differ)"),
        ("undocumented", "Backends or capabilities the table does not cover"),
    ):
        items = report.of_kind(kind)
        if not items:
            continue
        lines += [
            "",
            f"## {title} ({len(items)})",
            "",
            "| backend | capability | feature | table says | observed | run | cell | message |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for f in items[:200]:
            lines.append(
                f"| {md(f.backend)} | {md(f.capability or 'any')} | {f.feature.value} "
                f"| {md('; '.join(f.documented) or 'no row')} | {f.observed.value} | {md(f.run)} "
                f"| {md(f.cell_id)} | {md(f.message)} |"
            )
        if len(items) > 200:
            lines.append(f"\n… and {len(items) - 200} more in the JSON")
    return "\n".join(lines) + "\n"
