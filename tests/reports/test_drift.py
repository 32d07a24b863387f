"""Docs drift: the backend-table parser and the comparison with observed cells."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.errors import InputError
from harness.reports.backend_table import Feature, capability_matches, load_backend_table, parse_backend_table
from harness.reports.drift import check_drift
from harness.reports.model import CellRun

from .shards import cell, write_shard

pytestmark = pytest.mark.pure

DATA = Path(__file__).parent / "data"
TABLE = DATA / "attention_backends.md"


def test_parser_reads_every_feature_row_with_versions_and_capabilities() -> None:
    table = load_backend_table(TABLE)
    assert table.has_non_causal
    labels = [(row.backend, row.version, row.sink, row.non_causal, row.compute_cap) for row in table.rows]
    assert ("FLASH_ATTN", "FA2*", False, True, "≥8.0") in labels
    assert ("FLASH_ATTN", "FA3*", True, True, "9.x") in labels
    assert ("FLASHINFER", "XQA†", False, False, "9.0") in labels
    assert ("CPU_ATTN", "", False, True, "N/A") in labels
    # The MLA decode table has no Version column; the prefill table has no Sink column and is skipped.
    assert ("TRITON_MLA", "", False, False, "Any") in labels
    assert not any(row.backend == "FlashAttention" for row in table.rows)


def test_parser_handles_a_table_without_the_non_causal_column() -> None:
    table = load_backend_table(DATA / "attention_backends_old.md")
    assert not table.has_non_causal
    assert all(row.non_causal is None for row in table.rows)


@pytest.mark.parametrize(
    ("spec", "capability", "expected"),
    [
        ("≥8.0", "8.0", True),
        ("≥8.0", "7.5", False),
        ("9.x", "9.0", True),
        ("9.x", "10.0", False),
        ("9.0", "9.0", True),
        ("10.0", "10.3", False),
        ("8.x-9.x", "8.6", True),
        ("8.x-9.x", "10.0", False),
        ("9.x-10.x", "10.3", True),
        ("Any", "12.0", True),
        ("N/A", "9.0", True),
    ],
)
def test_compute_capability_specs(spec: str, capability: str, expected: bool) -> None:
    assert capability_matches(spec, capability) is expected


@pytest.mark.parametrize(
    "text",
    [
        "# nothing here\n\nno tables at all\n",
        "| Priority | Backend |\n| --- | --- |\n| 1 | `FLASH_ATTN` |\n",
    ],
)
def test_a_file_without_a_backend_table_is_bad_input(text: str) -> None:
    with pytest.raises(InputError, match="no backend table"):
        parse_backend_table(text, "x.md")


def _rows(*cells: object, run: str = "r") -> list[CellRun]:
    return [CellRun(run, c) for c in cells]  # type: ignore[arg-type]


def test_disagreements_agreements_and_the_evidence_rules() -> None:
    table = load_backend_table(TABLE)
    rows = _rows(
        # sm90: FA3 row (9.x) is narrower than FA2 (>=8.0): sinks documented as supported.
        cell("FLASH_ATTN", sink=True, capability="9.0", verdict="pass"),
        # sm80: only FA2 applies, documented no sink: a rejection agrees.
        cell("FLASH_ATTN", sink=True, capability="8.0", verdict="unsupported"),
        # TRITON_ATTN documents sinks; rejecting them is drift.
        cell("TRITON_ATTN", sink=True, capability="9.0", verdict="unsupported", message="sinks not supported"),
        # FLEX_ATTENTION documents no sinks, but ran with one: drift the other way.
        cell("FLEX_ATTENTION", sink=True, capability="9.0", verdict="pass"),
        # Accepted non-causal, then crashed in forward: documented support that does not hold.
        cell("FLASHINFER", causal=False, capability="10.0", verdict="crash", expected="crash"),
        # Non-neutral axes never count: an fp32 rejection says nothing about sinks.
        cell("FLASH_ATTN", sink=True, capability="9.0", verdict="unsupported", dtype="float32"),
        # Both features rejected at once: which one? No evidence.
        cell("TRITON_ATTN", sink=True, causal=False, capability="9.0", verdict="unsupported"),
        # A CUDA-graph refusal of a correct non-causal FlashInfer draft (SM100) is no drift,
        # nor is anything Model Runner V1 refuses: graphs and loaders are held neutral.
        cell("FLASHINFER", causal=False, capability="10.0", verdict="unsupported", cudagraph="graph"),
        cell("TRITON_ATTN", sink=True, capability="9.0", verdict="unsupported", loader="v1"),
        cell("FLASHINFER", causal=False, capability="10.0", verdict="pass", cudagraph="eager", loader="v2"),
        # A backend the table lacks.
        cell("NEW_BACKEND", sink=True, capability="9.0", verdict="pass"),
    )
    report = check_drift(table, rows, {})
    found = {(f.backend, f.capability, f.feature, f.kind) for f in report.findings}
    assert ("FLASH_ATTN", "9.0", Feature.SINK, "agreement") in found
    assert ("FLASH_ATTN", "8.0", Feature.SINK, "agreement") in found
    assert ("TRITON_ATTN", "9.0", Feature.SINK, "disagreement") in found
    assert ("FLEX_ATTENTION", "9.0", Feature.SINK, "disagreement") in found
    assert ("FLASHINFER", "10.0", Feature.NON_CAUSAL, "disagreement") in found
    assert ("FLASHINFER", "10.0", Feature.NON_CAUSAL, "agreement") in found
    assert ("NEW_BACKEND", "9.0", Feature.SINK, "undocumented") in found
    assert len(report.findings) == 7
    assert report.disagrees


def test_same_width_rows_that_differ_are_ambiguous_not_drift() -> None:
    table = parse_backend_table(
        "| Backend | Version | Sink | Non-Causal | Compute Cap. |\n|---|---|---|---|---|\n"
        "| `X` | A | ✅ | ✅ | 9.x |\n| `X` | B | ❌ | ✅ | 9.x |\n"
    )
    report = check_drift(table, _rows(cell("X", sink=True, capability="9.0", verdict="unsupported")), {})
    assert [f.kind for f in report.findings] == ["ambiguous"]
    assert not report.disagrees


def test_cli_exit_codes_and_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    agreeing = write_shard(tmp_path / "ok", [cell("TRITON_ATTN", sink=True, capability="9.0")])
    drifting = write_shard(
        tmp_path / "drift", [cell("TRITON_ATTN", sink=True, capability="9.0", verdict="unsupported")]
    )
    assert main(["drift", "--table", str(TABLE), str(agreeing / "matrix.json")]) == 0
    out = tmp_path / "drift.json"
    assert main(["drift", "--table", str(TABLE), str(drifting), "--json", str(out)]) == 1
    findings = json.loads(out.read_text())
    assert findings["counts"]["disagreement"] == 1
    assert findings["disagreements"][0]["backend"] == "TRITON_ATTN"
    assert "Disagreements (1)" in capsys.readouterr().out
    assert main(["drift", "--table", str(tmp_path / "missing.md"), str(agreeing)]) == 2
    assert "missing.md: no such file" in capsys.readouterr().err
