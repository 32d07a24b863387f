"""The repro writer: a standalone script per cell that imports only vLLM, torch and the stdlib."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.bundled import matrix_path
from harness.cli import main
from harness.expectations import expectations_for
from harness.findings import load_findings
from harness.matrix import expand, load_matrix
from harness.observation import Observation
from harness.result import decide

pytestmark = pytest.mark.pure

CELL: dict[str, Any] = {
    "id": "sm90-TRITON_ATTN-causal-sink-nocubin-v2",
    "lane": "selection",
    "axes": {
        "capability": "9.0",
        "backend": "TRITON_ATTN",
        "causal": True,
        "sink": True,
        "flashinfer_cubin": False,
        "loader": "v2",
    },
    "verdict": "wrong-backend",
    "expected": "pass",
    "expected_message": None,
    "message": "draft layers carry FLASH_ATTN, the platform selects TRITON_ATTN",
}
RUN = {
    "lane": "selection",
    "vllm_version": "0.24.0",
    "torch_version": "2.11.0+cu130",
    "device": "simulated SM90",
    "matrix": "selection",
    "vllm_requirement": "vllm==0.24.0",
    "key": "selection / simulated / vllm 0.24.0",
}


PR_46770 = load_findings(matrix_path("selection").parent / "expectations" / "findings.toml").findings[
    "pr-46770-v2-loader-drops-backend"
]


def _report(folder: Path, cells: list[dict[str, Any]]) -> Path:
    folder.mkdir(exist_ok=True)
    document = {"schema": "dflash-matrix/2", "runs": [RUN], "cells": [{**cell, "run": RUN["key"]} for cell in cells]}
    (folder / "matrix.json").write_text(json.dumps(document))
    return folder


def test_the_script_is_standalone_python_carrying_the_cell(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = _report(tmp_path / "report", [CELL])
    out = tmp_path / "repro.py"
    assert main(["repro", CELL["id"], "--report", str(report), "--out", str(out)]) == 0
    text = out.read_text()
    tree = ast.parse(text)
    imported = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    } | {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert imported - set(sys.stdlib_module_names) == {"vllm", "torch"}
    assert "__" + "CELL_JSON__" not in text and "vLLM: 0.24.0" in text and "vllm==0.24.0" in text
    namespace: dict[str, object] = {}
    exec(compile(text.split("\ndef load_libcuda", 1)[0], "repro", "exec"), namespace)
    assert namespace["CELL"] == {
        "id": CELL["id"],
        "axes": CELL["axes"],
        "expected": "pass",
        "expected_message": None,
        "accepted": ["pass"],
        "verdict": "wrong-backend",
        "message": CELL["message"],
        "head_dim": 128,
        "target_backend": None,
    }
    assert "cuCtxGetCurrent" in str(namespace["STUB_C"])


@pytest.mark.parametrize(
    ("cells", "cell", "fragment"),
    [
        ([CELL], "sm90-NOPE", "the report has no cell 'sm90-NOPE'"),
        ([{**CELL, "id": "sm90-FLASH_ATTN-causal", "lane": "gpu"}], "sm90-FLASH_ATTN-causal", "gpu lane"),
        # A cpu cell's inputs (seed, contexts, tolerance) come from its run's matrix.
        ([{**CELL, "id": "CPU_ATTN-causal-sink-bf16-v2", "lane": "cpu"}], "CPU_ATTN-causal-sink-bf16-v2", "matrix"),
        ([{**CELL, "axes": {**CELL["axes"], "method": "dspark"}}], CELL["id"], "axes.method: the selection repro"),
        # The script writes the lane's own Qwen3 bf16 target, never another family, dtype or head geometry.
        ([{**CELL, "axes": {**CELL["axes"], "target_head": "gemma3"}}], CELL["id"], "axes.target_head: the selection"),
        ([{**CELL, "axes": {**CELL["axes"], "target_model": "mistral_swa"}}], CELL["id"], "writes the qwen3 target"),
        ([{**CELL, "finding": {"id": "x"}, "correct": {"verdict": "pass"}}], CELL["id"], "finding.title: must be"),
        ([{**CELL, "finding": PR_46770.to_json(), "correct": None}], CELL["id"], "correct: a finding's cell must"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cells: list[dict[str, Any]], cell: str, fragment: str
) -> None:
    report = _report(tmp_path / "report", cells)
    out = tmp_path / "repro.py"
    assert main(["repro", cell, "--report", str(report), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0] and not out.exists()
    assert main(["repro", cell, "--report", str(tmp_path / "missing"), "--out", str(out)]) == 2


def test_a_cpu_cell_carries_what_the_lane_drew_its_inputs_from(tmp_path: Path) -> None:
    from harness.bundled import matrix_path
    from harness.matrix import expand, load_matrix

    cpu = load_matrix(matrix_path("cpu"))
    cells = {c.id: c for c in expand(cpu)}
    long = next(c for c in cells.values() if c.get("context") == "long")
    for cell in (cells["CPU_ATTN-causal-sink-bf16-v2"], long):
        recorded = {**CELL, "id": cell.id, "lane": "cpu", "axes": dict(cell.axes), "verdict": "mismatch"}
        document = {
            "schema": "dflash-matrix/2",
            "runs": [{**RUN, "lane": "cpu", "matrix": "cpu", "matrix_path": "matrices/cpu.toml", "key": "cpu"}],
            "cells": [{**recorded, "run": "cpu"}],
        }
        (tmp_path / "matrix.json").write_text(json.dumps(document))
        out = tmp_path / "repro.py"
        assert main(["repro", cell.id, "--report", str(tmp_path), "--out", str(out)]) == 0
        text = out.read_text()
        tree = ast.parse(text)
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names} | {
            n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
        }
        assert imported - set(sys.stdlib_module_names) == {"vllm", "torch"}
        payload = json.loads(ast.literal_eval(text.split("CELL = json.loads(", 1)[1].split(")\n", 1)[0]))
        assert payload["seed"] == cell.seed + cpu.lane_options.seed
        assert cell.tolerance is not None and payload["tolerance"] == cell.tolerance
        contexts = [1500, 600, 3] if cell.get("context") == "long" else list(cpu.lane_options.context_lens)
        assert payload["context_lens"] == contexts and payload["expected"] == "pass"


def _recorded(cell_id: str, release: str, observed: str) -> dict[str, Any]:
    """The cell as a selection run of ``release`` records it, judged against the shipped expectations."""
    matrix = load_matrix(matrix_path("selection"))
    cell = next(c for c in expand(matrix) if c.id == cell_id)
    layers = {"wrong-backend": ("FLASH_ATTN",), "pass": ("TRITON_ATTN",)}[observed]
    seen = Observation("TRITON_ATTN", platform_choice="TRITON_ATTN", observed_backends=layers)
    return decide(cell, seen, expectations_for(matrix, release).for_cell(cell)).to_json()


def _script_exit(script: Path, observed: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """Run the written script's verdict logic with what vLLM would show (no vLLM here)."""
    import io
    import types
    from contextlib import redirect_stdout

    for name in ("torch", "vllm"):
        monkeypatch.setitem(sys.modules, name, types.SimpleNamespace(__version__="stand-in"))
    namespace: dict[str, Any] = {"__name__": "repro"}
    exec(compile(script.read_text(), str(script), "exec"), namespace)
    namespace["load_libcuda"] = lambda scratch: "stand-in"
    namespace["observe"] = lambda scratch: observed
    printed = io.StringIO()
    with redirect_stdout(printed):
        code = namespace["main"]()
    return code, printed.getvalue()


@pytest.mark.parametrize(("release", "observed_there"), [("0.24.0", "wrong-backend"), ("0.33.0", "pass")])
def test_a_findings_script_asserts_vllms_correct_behaviour_whichever_release_it_was_written_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, release: str, observed_there: str
) -> None:
    """PR #46770's cell: the 0.24.0 report expects the bug (wrong-backend), the 0.33.0 report a pass; both
    scripts expect the pass, so each exits 1 where the request is lost and 0 where it reaches the layers."""
    ident = "sm90-TRITON_ATTN-causal-sink-v2-cubin"
    recorded = _recorded(ident, release, observed_there)
    assert recorded["outcome"] == "match"
    document = {
        "schema": "dflash-matrix/2",
        "runs": [{**RUN, "vllm_version": release}],
        "cells": [{**recorded, "run": RUN["key"]}],
    }
    (tmp_path / "matrix.json").write_text(json.dumps(document))
    script = tmp_path / "repro.py"
    assert main(["repro", ident, "--report", str(tmp_path), "--out", str(script)]) == 0
    payload = json.loads(ast.literal_eval(script.read_text().split("CELL = json.loads(", 1)[1].split(")\n", 1)[0]))
    assert (payload["expected"], payload["accepted"]) == ("pass", ["pass"])
    if release == "0.24.0":
        assert payload["finding"]["id"] == PR_46770.id and payload["finding"]["bug_verdict"] == "wrong-backend"
        assert "finding: pr-46770-v2-loader-drops-backend" in script.read_text()
    bug = ("wrong-backend", "draft layers carry FLASH_ATTN, the platform selects TRITON_ATTN")
    code, printed = _script_exit(script, bug, monkeypatch)
    assert code == 1 and "FAILURE REPRODUCES" in printed
    assert code == 1 and ("finding pr-46770" in printed) == (release == "0.24.0")
    assert _script_exit(script, ("pass", "every draft layer carries TRITON_ATTN"), monkeypatch)[0] == 0


def test_an_over_claims_script_takes_the_refusal_or_a_pass_and_a_harness_limit_keeps_its_expectation(
    tmp_path: Path,
) -> None:
    matrix = load_matrix(matrix_path("selection"))
    expectations = expectations_for(matrix, "0.33.0")
    cells = {c.id: c for c in expand(matrix)}
    hpc = next(c for c in cells.values() if c.get("backend") == "HPC_ATTN" and expectations.for_cell(c).finding)
    rocm = next(
        c for c in cells.values() if c.get("backend") == "ROCM_AITER_FA" and c.get("method", "dflash") == "dflash"
    )
    built_nothing = Observation("HPC_ATTN")  # judged crash: no draft layer
    payloads = {}
    for cell in (hpc, rocm):
        recorded = decide(cell, built_nothing, expectations.for_cell(cell)).to_json()
        document = {
            "schema": "dflash-matrix/2",
            "runs": [{**RUN, "vllm_version": "0.33.0"}],
            "cells": [{**recorded, "run": RUN["key"]}],
        }
        (tmp_path / "matrix.json").write_text(json.dumps(document))
        assert main(["repro", cell.id, "--report", str(tmp_path), "--out", str(tmp_path / "repro.py")]) == 0
        text = (tmp_path / "repro.py").read_text()
        payloads[cell.id] = json.loads(ast.literal_eval(text.split("CELL = json.loads(", 1)[1].split(")\n", 1)[0]))
    assert payloads[hpc.id]["accepted"] == ["pass", "unsupported"]  # fixed by honouring the claim or withdrawing it
    assert payloads[rocm.id]["accepted"] == ["crash"] and "finding" not in payloads[rocm.id]
