"""The repro writer: a standalone script per cell that imports only vLLM, torch and the stdlib."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main

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
