"""`dflash-matrix findings`: a page per upstream bug with its repro script, and an index; without the
report's vLLM the scripts are written, not run, the pages say why, and the command exits 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.bundled import matrix_path
from harness.cli import main
from harness.expectations import expectations_for
from harness.matrix import expand, load_matrix
from harness.observation import Observation
from harness.reports.finding_pages import user_configuration
from harness.result import decide

pytestmark = pytest.mark.pure

# A per-kind cell the repro can script (the lane's own Qwen3 target; auto-selection on SM80).
PER_KIND = "sm80-auto-causal-sink-tgtkind.FLASHINFER-v2-cubin"
REFUSED = "sm90-ROCM_AITER_FA-causal-sink-v2-cubin"  # a refusal as expected: no finding, no page
RUN = {"lane": "selection", "key": "s", "matrix": "selection", "vllm_version": "0.33.0", "torch_version": "2.14.0"}


def _report(folder: Path) -> Path:
    matrix = load_matrix(matrix_path("selection"))
    expectations = expectations_for(matrix, "0.33.0")
    cells = {cell.id: cell for cell in expand(matrix)}
    seen = {
        PER_KIND: Observation(None, platform_choice="TRITON_ATTN", observed_backends=("FLASHINFER",)),
        REFUSED: Observation("ROCM_AITER_FA", rejection=("compute capability not supported",)),
    }
    records = [
        {**decide(cells[ident], observation, expectations.for_cell(cells[ident])).to_json(), "run": "s"}
        for ident, observation in seen.items()
    ]
    folder.mkdir()
    (folder / "matrix.json").write_text(json.dumps({"schema": "dflash-matrix/2", "runs": [RUN], "cells": records}))
    return folder


def test_pages_scripts_and_index_without_the_reports_vllm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "pages"
    assert main(["findings", str(_report(tmp_path / "report")), "--out", str(out)]) == 1
    assert sorted(path.name for path in out.iterdir()) == [
        "index.md",
        "target-per-kind-backend-overrides-draft-repro.py",
        "target-per-kind-backend-overrides-draft.md",
    ]
    page = (out / "target-per-kind-backend-overrides-draft.md").read_text()
    assert "    attention_config={'backend_per_kind': {'full_attention': 'FLASHINFER'" in page
    assert "- expected (without the bug): **pass**" in page and "- actual: **wrong-backend**" in page
    assert "first bad release: 0.26.0" in page and "Result: not run here" in page
    index = (out / "index.md").read_text()
    assert "(target-per-kind-backend-overrides-draft.md)" in index
    assert "ROCM_AITER_FA" not in index  # a cell as expected that records no finding gets no page
    assert "| 0.26.0 |" in index and "| not run |" in index
    printed = capsys.readouterr().out
    assert "not run here" in printed and "wrote 1 page(s), 1 repro script(s) and index.md" in printed


def test_the_configuration_a_cell_stands_for() -> None:
    axes = {
        "backend": "auto",
        "causal": False,
        "sink": True,
        "draft_kv_cache_dtype": "fp8",
        "target_attention": "FLASHINFER",
    }
    arguments = user_configuration(axes)
    assert arguments["model"] == "<a Qwen3 target>"
    assert "Mistral-7B-v0.1" in user_configuration({**axes, "target_model": "mistral_swa"})["model"]
    assert "attention_backend" not in arguments["speculative_config"]
    assert arguments["speculative_config"]["kv_cache_dtype"] == "fp8"
    # As the lanes set a plain target backend: the attention config's backend (issue 37).
    assert arguments["attention_config"] == {"backend": "FLASHINFER"} and "attention_backend" not in arguments


def test_the_script_is_written_for_the_first_of_a_findings_cells_repro_can_build(tmp_path: Path) -> None:
    """The per-kind finding's first cell here is one whose target failed to build first, which the
    selection script (a stand-in target) cannot show: the page's script and configuration come from
    its next cell. A DSpark cell, a float16 target or a Gemma 3 geometry is no reason (issue 37)."""
    matrix = load_matrix(matrix_path("selection"))
    expectations = expectations_for(matrix, "0.33.0")
    cells = {cell.id: cell for cell in expand(matrix)}
    dspark = (
        "sm100-FLASH_ATTN_DIFFKV-dspark-causal-sink-hd256-dkv-auto-tgtkind.TRITON_ATTN-tgtdt.fp16-v2-cubin"
    )
    dflash = "sm80-TRITON_ATTN-causal-sink-dkv-fp8-tgtkind.FLASHINFER-v2-cubin"
    records = []
    for ident, asked, carried in (
        (dspark, "FLASH_ATTN_DIFFKV", "TRITON_ATTN"),
        (dflash, "TRITON_ATTN", "FLASHINFER"),
    ):
        seen = Observation(asked, platform_choice=asked, observed_backends=(carried,))
        records.append({**decide(cells[ident], seen, expectations.for_cell(cells[ident])).to_json(), "run": "s"})
    assert [record["finding"]["id"] for record in records] == ["target-per-kind-backend-overrides-draft"] * 2
    records[0]["details"] = {"draft": "not built: the target failed first: ValueError: planted"}
    report = tmp_path / "report"
    report.mkdir()
    (report / "matrix.json").write_text(json.dumps({"schema": "dflash-matrix/2", "runs": [RUN], "cells": records}))
    out = tmp_path / "pages"
    assert main(["findings", str(report), "--out", str(out)]) == 1  # not run: no vLLM here
    page = (out / "target-per-kind-backend-overrides-draft.md").read_text()
    assert f"Cell `{dflash}`:" in page and f"cell `{dflash}`) asserts vLLM's correct behaviour" in page
    script = (out / "target-per-kind-backend-overrides-draft-repro.py").read_text()
    assert f"Repro of dflash-matrix cell {dflash} (selection lane)" in script


def test_a_script_that_cannot_run_on_this_machine_is_not_run_here_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gpu cell's script on a machine without its GPU exits 2 with one line: the page says it did
    not run, and why, rather than reporting an exit status as if vLLM had been judged."""
    import subprocess

    from harness.commands import findings

    def without_the_gpu(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        why = "cannot run here: this cell needs a CUDA GPU of compute capability 8.0; torch sees none\n"
        return subprocess.CompletedProcess(command, 2, stdout="", stderr=why)

    monkeypatch.setattr(findings, "_installed_vllm", lambda: RUN["vllm_version"])
    monkeypatch.setattr(findings.subprocess, "run", without_the_gpu)
    out = tmp_path / "pages"
    assert main(["findings", str(_report(tmp_path / "report")), "--out", str(out)]) == 1
    page = (out / "target-per-kind-backend-overrides-draft.md").read_text()
    assert "not run here: cannot run here: this cell needs a CUDA GPU" in page
    assert "exited 2" not in page and "not run here: cannot run here" in capsys.readouterr().out
