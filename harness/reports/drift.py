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
docs are ambiguous there: listed, but no disagreement.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from harness.errors import InputError
from harness.reports.markdown import md
from harness.reports.model import Row
from harness.verdict import Stage, Verdict

DRIFT_SCHEMA = "dflash-matrix-drift/1"
SUPPORTED, UNSUPPORTED = "✅", "❌"

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
_FAILED_AFTER_SELECTION = (Stage.BUILD, Stage.METADATA, Stage.FORWARD, Stage.COMPARE)


class Feature(StrEnum):
    SINK = "sink"
    NON_CAUSAL = "non-causal"


class Observed(StrEnum):
    WORKS = "works"
    FAILS = "accepted-then-failed"
    REJECTED = "rejected"


@dataclass(frozen=True)
class TableRow:
    section: str
    backend: str
    version: str
    sink: bool | None
    non_causal: bool | None  # None: not stated (or the table predates the column)
    compute_cap: str
    line: int

    def documents(self, feature: Feature) -> bool | None:
        return self.sink if feature == Feature.SINK else self.non_causal

    def applies_to(self, capability: str | None) -> bool:
        return capability is None or capability_matches(self.compute_cap, capability)

    @property
    def label(self) -> str:
        return f"{self.backend} {self.version}".strip() + f" ({self.compute_cap})"


@dataclass(frozen=True)
class BackendTable:
    path: str
    rows: tuple[TableRow, ...]
    has_non_causal: bool

    def rows_for(self, backend: str, capability: str | None, feature: Feature) -> list[TableRow]:
        """The rows that describe ``backend`` at ``capability``; the most specific Compute Cap.
        wins, as the docs say for FlashAttention (FA3 on SM 9.x although FA2 covers >= 8.0)."""
        rows = [
            row
            for row in self.rows
            if row.backend == backend and row.applies_to(capability) and row.documents(feature) is not None
        ]
        if capability is None or not rows:
            return rows
        narrowest = min(capability_width(row.compute_cap) for row in rows)
        return [row for row in rows if capability_width(row.compute_cap) == narrowest]


def _cells(line: str) -> list[str]:
    text = line.strip()
    if text.startswith("|"):
        text = text[1:]
    if text.endswith("|"):
        text = text[:-1]
    return [part.strip() for part in text.split("|")]


def _mark(value: str) -> bool | None:
    if SUPPORTED in value:
        return True
    if UNSUPPORTED in value:
        return False
    return None


def _column(cells: list[str], header: dict[str, int], name: str) -> str:
    index = header.get(name)
    return cells[index] if index is not None else ""


def parse_backend_table(text: str, path: str = "attention_backends.md") -> BackendTable:
    rows: list[TableRow] = []
    has_non_causal = False
    section = ""
    header: dict[str, int] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("#"):
            section = stripped.lstrip("#").strip()
            header = None
            continue
        if not stripped.startswith("|"):
            header = None
            continue
        cells = _cells(stripped)
        if header is None:
            names = [cell.strip("* ").lower() for cell in cells]
            if "backend" in names and "sink" in names:
                header = {name: index for index, name in enumerate(names)}
                has_non_causal = has_non_causal or "non-causal" in header
            continue
        if all(set(cell) <= set("-: ") for cell in cells):
            continue  # the separator row
        if len(cells) < len(header):
            raise InputError(path, f"line {number}", f"table row has {len(cells)} cells, its header {len(header)}")
        backend = _column(cells, header, "backend").strip("`* ")
        if not backend:
            continue
        rows.append(
            TableRow(
                section=section,
                backend=backend,
                version=_column(cells, header, "version").strip("`"),
                sink=_mark(_column(cells, header, "sink")),
                non_causal=_mark(_column(cells, header, "non-causal")) if "non-causal" in header else None,
                compute_cap=_column(cells, header, "compute cap.") or "Any",
                line=number,
            )
        )
    if not rows:
        raise InputError(
            path, "", "no backend table found (a Markdown table with 'Backend' and 'Sink' columns)",
            ("vLLM's docs/design/attention_backends.md",),
        )
    return BackendTable(path, tuple(rows), has_non_causal)


def load_backend_table(path: str | Path) -> BackendTable:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(path, "", "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, "", f"cannot read ({exc})") from None
    return parse_backend_table(text, str(path))


_RANGE = re.compile(r"^(\d+)\.(x|\d+)\s*-\s*(\d+)\.(x|\d+)$")
_ONE = re.compile(r"^(\d+)\.(x|\d+)$")
_AT_LEAST = re.compile(r"^(?:≥|>=)\s*(\d+)\.(\d+)$")


def capability_matches(spec: str, capability: str) -> bool:
    """Whether a 'Compute Cap.' entry (Any, N/A, 9.x, 10.0, 7.x-9.x, ≥8.0) covers e.g. '9.0'."""
    major_text, _, minor_text = capability.partition(".")
    if not major_text.isdigit():
        return True
    major, minor = int(major_text), int(minor_text or 0)
    text = spec.strip()
    if text.lower() in ("any", "n/a", ""):
        return True
    if match := _AT_LEAST.match(text):
        return (major, minor) >= (int(match[1]), int(match[2]))
    if match := _ONE.match(text):
        return major == int(match[1]) and (match[2] == "x" or minor == int(match[2]))
    if match := _RANGE.match(text):
        low = (int(match[1]), 0 if match[2] == "x" else int(match[2]))
        high = (int(match[3]), 99 if match[4] == "x" else int(match[4]))
        return low <= (major, minor) <= high
    return True  # a format this parser does not know: let the row apply rather than hide it


def capability_width(spec: str) -> float:
    """How many compute capabilities a 'Compute Cap.' entry covers, roughly: narrower is more specific."""
    text = spec.strip()
    if match := _ONE.match(text):
        return 1.0 if match[2] == "x" else 0.1
    if match := _RANGE.match(text):
        return float(int(match[3]) - int(match[1]) + 1)
    if match := _AT_LEAST.match(text):
        return float(100 - int(match[1]))
    return 1000.0


def observed(row: Row) -> Observed | None:
    cell = row.cell
    if cell.verdict == Verdict.PASS:
        return Observed.WORKS
    if cell.verdict == Verdict.UNSUPPORTED:
        return Observed.REJECTED
    if cell.verdict == Verdict.MISMATCH or (cell.verdict == Verdict.CRASH and cell.stage in _FAILED_AFTER_SELECTION):
        return Observed.FAILS
    return None


def evidence_for(row: Row) -> tuple[Feature, ...]:
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


def _capability(row: Row, run_meta: dict[str, Any]) -> str | None:
    value = row.cell.axes.get("capability", run_meta.get("capability"))
    return str(value) if value is not None else None


def check_drift(table: BackendTable, rows: Sequence[Row], run_meta: dict[str, dict[str, Any]]) -> DriftReport:
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
            documented = tuple(
                f"{r.label}: {SUPPORTED if r.documents(feature) else UNSUPPORTED}" for r in applicable
            )
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
