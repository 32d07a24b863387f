"""vLLM's generated backend table (``docs/design/attention_backends.md``), read as data.

Its feature tables have a ``Backend`` column, an optional ``Version`` column (FA2/FA3/FA4,
FlashInfer Native/TRTLLM...), ``Sink``, a ``Non-Causal`` column in newer releases, and
``Compute Cap.``; a cell reads ✅ or ❌. ``harness.reports.drift`` weighs the matrix's
cells against the rows read here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from harness.errors import InputError

SUPPORTED, UNSUPPORTED = "✅", "❌"


class Feature(StrEnum):
    SINK = "sink"
    NON_CAUSAL = "non-causal"


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
