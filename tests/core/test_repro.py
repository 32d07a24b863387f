"""The repro writer: a standalone script per cell that imports only vLLM, torch and the stdlib."""

from __future__ import annotations

import ast
import dataclasses
import functools
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.attention import audit
from harness.bundled import matrix_path
from harness.cli import main
from harness.deployment.models import SELECTION_SHAPE, target_config
from harness.expectations import expectations_for
from harness.findings import load_findings
from harness.matrix import Cell, Matrix, expand, load_matrix
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


# What the script carries of the report; the rest of its payload is the cell's deployment.
_RECORDED = (
    *("id", "axes", "expected", "expected_message", "accepted", "verdict", "message"),
    *("head_dim", "target_backend"),
)


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
    payload = namespace["CELL"]
    assert isinstance(payload, dict)
    deployment = {key: payload.pop(key) for key in [*payload] if key not in _RECORDED}
    assert deployment["target_config"]["architectures"] == ["Qwen3ForCausalLM"]  # the cell's (default) target
    assert deployment["asked"][0]["sinks"] is True and deployment["asked"][0]["sliding_window"] is None
    # The lane's engine arguments as data, the models where the script writes them.
    arguments = deployment["engine_arguments"]
    assert arguments["model"] == "<target>" and arguments["speculative_config"] == {
        "method": "dflash",
        "model": "<draft>",
        "num_speculative_tokens": 4,
        "attention_backend": "TRITON_ATTN",
    }
    assert arguments["load_format"] == "dummy" and arguments["dtype"] == "bfloat16"
    assert deployment["v2_loader"] == ["vllm.v1.worker.gpu.spec_decode.dflash.utils", "load_dflash_model"]
    assert payload == {
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
        ([{**CELL, "id": "sm90-FLASH_ATTN-causal", "lane": "fake"}], "sm90-FLASH_ATTN-causal", "fake lane"),
        # A gpu cell's inputs come from its run's matrix too.
        ([{**CELL, "id": "sm90-FLASH_ATTN-causal", "lane": "gpu"}], "sm90-FLASH_ATTN-causal", "matrix"),
        # A cpu cell's inputs (seed, contexts, tolerance) come from its run's matrix.
        ([{**CELL, "id": "CPU_ATTN-causal-sink-bf16-v2", "lane": "cpu"}], "CPU_ATTN-causal-sink-bf16-v2", "matrix"),
        # The script builds no real target and lays out no KV cache: a verdict decided there is refused.
        ([{**CELL, "details": {"draft": "not built: the target failed first: x"}}], CELL["id"], "details.draft: the"),
        ([{**CELL, "details": {"startup": {"path": "p", "message": "m"}}}], CELL["id"], "details.startup: the"),
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


def test_an_over_claims_script_takes_the_refusal_or_a_pass_and_a_refusal_keeps_its_expectation(
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
    assert payloads[rocm.id]["accepted"] == ["unsupported"] and "finding" not in payloads[rocm.id]


# -- the gpu lanes: one template, on a real GPU or emulated on the CPU --------------------------

GPU_CELL = "sm90-TRITON_ATTN-causal-sink-bf16-v2"


@functools.cache
def _bundled(lane: str) -> tuple[Matrix, dict[str, Cell]]:
    """A gpu lane's shipped matrix and its cells by id (the gpu matrix's 10,000 take seconds to expand)."""
    matrix = load_matrix(matrix_path("gpu" if lane == "gpu" else "gpu-emulated"))
    return matrix, {c.id: c for c in expand(matrix)}


def _gpu_report(folder: Path, lane: str, cell_id: str = GPU_CELL, **recorded: Any) -> Path:
    """A report of one cell of the bundled gpu or gpu-emulated matrix, as its lane records it."""
    name = "gpu" if lane == "gpu" else "gpu-emulated"
    matrix, cells = _bundled(lane)
    cell = cells[cell_id]
    expected = expectations_for(matrix, "0.33.0").for_cell(cell)
    run = {**RUN, "lane": lane, "matrix": name, "matrix_path": f"matrices/{name}.toml", "vllm_version": "0.33.0"}
    record = {
        "id": cell_id,
        "lane": lane,
        "run": RUN["key"],
        "axes": dict(cell.axes),
        "expected": str(expected.verdict),
        "expected_message": expected.message,
        "verdict": str(expected.verdict),
        "message": "recorded by this test",
        **recorded,
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "matrix.json").write_text(json.dumps({"schema": "dflash-matrix/2", "runs": [run], "cells": [record]}))
    return folder


def _payload(text: str, name: str = "CELL") -> Any:
    return json.loads(ast.literal_eval(text.split(f"{name} = json.loads(", 1)[1].split(")\n", 1)[0]))


def _written(tmp_path: Path, lane: str, cell_id: str = GPU_CELL, **recorded: Any) -> str:
    out = tmp_path / lane / "repro.py"
    assert (
        main(
            [
                "repro",
                cell_id,
                "--report",
                str(_gpu_report(tmp_path / lane, lane, cell_id, **recorded)),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return out.read_text()


@pytest.mark.parametrize("lane", ["gpu", "gpu_emulated"])
def test_a_gpu_lanes_script_compiles_names_its_cell_and_imports_only_vllm_torch_and_the_stdlib(
    tmp_path: Path, lane: str
) -> None:
    text = _written(tmp_path, lane)
    tree = ast.parse(text)
    compile(tree, "repro", "exec")
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names} | {
        n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
    }
    # triton: the interpreter set-up of an emulated cell, in the dependency vLLM's CUDA build brings.
    assert imported - set(sys.stdlib_module_names) == {"vllm", "torch", "triton"}
    assert text.startswith(f'"""Repro of dflash-matrix cell {GPU_CELL} ({lane} lane)')
    payload = _payload(text)
    matrix, cells = _bundled(lane)
    cell = cells[GPU_CELL]
    assert payload["id"] == GPU_CELL and payload["seed"] == cell.seed + matrix.lane_options.seed
    assert payload["context_lens"] == list(matrix.lane_options.context_lens) and payload["tolerance"] == cell.tolerance
    assert (payload["head_dim"], payload["block_size"], payload["graph"]) == (128, None, False)
    emulation = _payload(text, "EMULATION")
    assert emulation == (None if lane == "gpu" else {"capability": "9.0", "sm_count": 132})
    assert ("cuCtxGetCurrent" in text) is (lane == "gpu_emulated")  # the stub libcuda.so.1 it compiles


def test_the_gpu_script_differs_from_the_gpu_emulated_one_only_in_its_cell_and_its_emulation(tmp_path: Path) -> None:
    """The gpu lane cannot run here (no GPU): its script is the emulated one's code path minus the
    interpreter set-up, which EMULATION switches off; every other line is the same text."""
    import difflib

    gpu, emulated = _written(tmp_path, "gpu").splitlines(), _written(tmp_path, "gpu_emulated").splitlines()
    changed = [
        line[1:]
        for line in difflib.unified_diff(gpu, emulated, lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    prefixes = ('"""Repro of dflash-matrix cell', "CELL = json.loads(", "EMULATION = json.loads(", "STUB_C = ")
    assert changed and all(line.startswith(prefixes) for line in changed), changed
    assert {line.split(" ", 1)[0] for line in changed} == {'"""Repro', "CELL", "EMULATION", "STUB_C"}


def test_a_cell_captured_in_a_cuda_graph_gets_an_eager_script_that_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    captured = "sm90-TRITON_ATTN-causal-sink-bf16-v2-graph"
    text = _written(tmp_path, "gpu_emulated", captured)
    assert _payload(text)["graph"] is True
    assert "This cell ran captured in a CUDA graph and replayed" in text
    assert "note: eager only: the lane captured this cell in a CUDA graph" in capsys.readouterr().out
    # Model Runner V1 never captures draft attention: its graph cells ran eagerly in the lane too.
    v1 = _written(tmp_path / "v1", "gpu_emulated", "sm90-TRITON_ATTN-causal-sink-bf16-v1-graph")
    assert _payload(v1)["graph"] is False and "Model Runner V1 never captures draft attention" in v1
    assert "eager only" not in capsys.readouterr().out
    # An over-claim judged the same eagerly as captured: its eager script asserts vLLM's correct behaviour.
    matrix, cells = _bundled("gpu")
    hpc = cells["sm90-HPC_ATTN-causal-nosink-bf16-v2-graph"]
    built_nothing = decide(hpc, Observation("HPC_ATTN"), expectations_for(matrix, "0.33.0").for_cell(hpc)).to_json()
    assert built_nothing["finding"] is not None
    judged = {k: v for k, v in built_nothing.items() if k in ("verdict", "expected", "message", "finding", "correct")}
    text = _written(tmp_path / "hpc", "gpu", hpc.id, **judged)
    assert _payload(text)["graph"] is True and _payload(text)["accepted"] == ["pass", "unsupported"]


@pytest.mark.parametrize(
    ("lane", "cell", "recorded", "fragment"),
    [
        ("gpu_emulated", "sm90-FLASH_ATTN-causal-nosink-bf16-v2", {}, "axes.backend: unavailable on the emulated host"),
        ("gpu_emulated", "sm90-FLEX_ATTENTION-causal-nosink-bf16-v1-graph", {}, "Inductor's C++ kernel"),
        (
            "gpu",
            "sm90-auto-dspark-causal-sink-hd256-bf16-v2-long",
            {},
            "axes.method: the gpu repro builds DFlash drafts only",
        ),
        (
            "gpu",
            "sm100-FLASHINFER-noncausal-sink-bf16-v2-graph",
            {},
            "axes.cudagraph: this cell's expectation (unsupported) rests",
        ),
        ("gpu_emulated", GPU_CELL, {"verdict": "loader-diff"}, "verdict: the script does not build Model Runner V1"),
        ("gpu_emulated", "sm90-TRITON_ATTN-causal-sink-bf16-kv-fp8-v2", {}, "does not write calibrated fp8 KV scales"),
        (
            "gpu_emulated",
            "sm90-TRITON_ATTN-noncausal-nosink-bf16-tgt.FLASHINFER-bs128-v2",
            {},
            "axes.block_size: the gpu repro lays the draft's KV cache out itself",
        ),
    ],
)
def test_a_gpu_cell_the_script_cannot_reproduce_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], lane: str, cell: str, recorded: dict[str, Any], fragment: str
) -> None:
    out = tmp_path / "repro.py"
    report = _gpu_report(tmp_path / "report", lane, cell, **recorded)
    assert main(["repro", cell, "--report", str(report), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"cells.{cell}." in err[0] and fragment in err[0] and not out.exists(), err


def _script_main(text: str) -> Any:
    namespace: dict[str, Any] = {"__name__": "repro"}
    exec(compile(text, "repro", "exec"), namespace)
    return namespace["main"]


def test_an_emulated_script_without_libcuda_or_gcc_says_so_in_one_line_and_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import ctypes
    import shutil

    script_main = _script_main(_written(tmp_path, "gpu_emulated"))
    capsys.readouterr()

    def no_library(*args: object, **kwargs: object) -> None:
        raise OSError("libcuda.so.1: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", no_library)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(SystemExit) as exited:
        script_main()
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and len(err) == 1 and "no libcuda.so.1 loads and gcc is not found" in err[0]


@pytest.fixture(scope="module")
def gpu_script(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _written(tmp_path_factory.mktemp("gpu"), "gpu")


@pytest.mark.parametrize(
    ("available", "capability", "fragment"), [(False, None, "sees none"), (True, (8, 0), "is 8.0")]
)
def test_a_gpu_script_without_the_cells_gpu_says_so_in_one_line_and_exits_2(
    gpu_script: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    available: bool,
    capability: tuple[int, int] | None,
    fragment: str,
) -> None:
    import types

    cuda = types.SimpleNamespace(
        is_available=lambda: available,
        get_device_capability=lambda device=0: capability,
        get_device_name=lambda device=0: "Stand-in GPU",
    )
    monkeypatch.setitem(
        sys.modules, "torch", types.SimpleNamespace(cuda=cuda, __version__="x", version=types.SimpleNamespace(cuda="y"))
    )
    script_main = _script_main(gpu_script)
    with pytest.raises(SystemExit) as exited:
        script_main()
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and len(err) == 1 and fragment in err[0] and "capability 9.0" in err[0], err


def test_a_selection_script_without_libcuda_or_gcc_cannot_run_and_exits_2_not_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 1 means "the failure reproduces": a machine that cannot build the stub driver is not that."""
    import ctypes
    import shutil
    import types

    ident = "sm90-TRITON_ATTN-causal-sink-v2-cubin"
    document = {
        "schema": "dflash-matrix/2",
        "runs": [{**RUN, "vllm_version": "0.33.0"}],
        "cells": [{**_recorded(ident, "0.33.0", "pass"), "run": RUN["key"]}],
    }
    (tmp_path / "matrix.json").write_text(json.dumps(document))
    script = tmp_path / "repro.py"
    assert main(["repro", ident, "--report", str(tmp_path), "--out", str(script)]) == 0
    for name in ("torch", "vllm"):
        monkeypatch.setitem(sys.modules, name, types.SimpleNamespace(__version__="stand-in"))
    namespace: dict[str, Any] = {"__name__": "repro"}
    exec(compile(script.read_text(), str(script), "exec"), namespace)

    def no_library(*args: object, **kwargs: object) -> None:
        raise OSError("libcuda.so.1: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", no_library)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        namespace["load_libcuda"](tmp_path)
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and len(err) == 1 and "gcc not found" in err[0]


SEAM_CELLS = {
    "target-window-reaches-draft": "sm90-FLASH_ATTN-noncausal-nosink-tgtmodel.mistralswa-v2-cubin",
    "target-mm-prefix-reaches-draft": "sm90-TRITON_ATTN-noncausal-nosink-tgtmodel.gemma3mm-v1-cubin",
}


def _seam_report(folder: Path, ident: str, lost: str) -> Path:
    """A 0.33.0 selection report of one target_model cell that shows its finding (wrong-setting)."""
    matrix = load_matrix(matrix_path("selection"))
    cell = next(c for c in expand(matrix) if c.id == ident)
    backend = str(cell.get("backend"))
    seen = Observation(backend, platform_choice=backend, observed_backends=(backend,), lost_settings=(lost,))
    recorded = decide(cell, seen, expectations_for(matrix, "0.33.0").for_cell(cell)).to_json()
    assert recorded["outcome"] == "match" and recorded["finding"] is not None
    document = {
        "schema": "dflash-matrix/2",
        "runs": [{**RUN, "vllm_version": "0.33.0"}],
        "cells": [{**recorded, "run": RUN["key"]}],
    }
    folder.mkdir()
    (folder / "matrix.json").write_text(json.dumps(document))
    return folder


@pytest.mark.parametrize(
    ("finding", "family", "setting", "bug"),
    [
        ("target-window-reaches-draft", "mistral_swa", "sliding_window", 64),
        ("target-mm-prefix-reaches-draft", "gemma3_mm", "mm_prefix", True),
    ],
)
def test_a_target_model_cells_script_writes_the_lanes_target_and_audits_each_draft_layer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, finding: str, family: str, setting: str, bug: object
) -> None:
    """The script writes the cell's own target (the lane's config of its family: a model-level window, a
    multimodal prefix-LM) and compares each draft layer's settings with what its draft asked for: the
    target's setting on a layer is wrong-setting (exit 1), the layer as asked is the pass the finding's
    script expects (exit 0)."""
    ident = SEAM_CELLS[finding]
    asked_for = "none" if setting == "sliding_window" else "False"
    lost = f"model.layers.0.self_attn.attn: {setting} is {bug}, the draft asked for {asked_for}"
    report = _seam_report(tmp_path / "report", ident, lost)
    script = tmp_path / "repro.py"
    assert main(["repro", ident, "--report", str(report), "--out", str(script)]) == 0
    payload = _payload(script.read_text())
    assert payload["finding"]["id"] == finding and payload["accepted"] == ["pass"]
    shape = dataclasses.replace(SELECTION_SHAPE, head_dim=128)  # the matrix's head_dim option
    assert payload["target_config"] == json.loads(json.dumps(target_config(shape, family)))
    assert payload["draft_config"]["architectures"] == ["DFlashDraftModel"]
    assert payload["settings"] == list(audit.SETTINGS)
    [asked] = payload["asked"]
    assert (asked["sliding_window"], asked["kv_cache_spec_window"], asked["mm_prefix"]) == (None, None, False)
    assert (asked["head_size"], asked["kv_cache_dtype"], asked["sinks"]) == (128, "auto", False)

    import types

    for name in ("torch", "vllm"):
        monkeypatch.setitem(sys.modules, name, types.SimpleNamespace(__version__="stand-in"))
    namespace: dict[str, Any] = {"__name__": "repro"}
    exec(compile(script.read_text(), str(script), "exec"), namespace)
    as_asked = {
        key: asked[key] for key in ("head_size", "num_heads", "num_kv_heads", "sliding_window", "sinks", "scale")
    }
    layer = types.SimpleNamespace(
        **as_asked,
        kv_cache_dtype="auto",
        dtype=asked["dtype"],
        kv_cache_torch_dtype=asked["kv_cache_torch_dtype"],
        use_mm_prefix=False,
        has_sink=False,
        **{f"_{name}{copy}": 1.0 for name in ("k_scale", "v_scale", "q_scale") for copy in ("", "_float")},
        impl=types.SimpleNamespace(scale=asked["scale"]),
        get_kv_cache_spec=lambda config: types.SimpleNamespace(sliding_window=asked["sliding_window"]),
    )
    name = "model.layers.0.self_attn.attn"
    carried = namespace["layer_settings"](layer, None)
    # The loader's causal flag is the lane's alone; so is the platform's FlashAttention version the
    # selection lane asks for the draft's settings (the script's "asked" carries None: not compared).
    assert set(carried) == set(audit.SETTINGS) - {"causal", "flash_attn_version"}
    assert namespace["differences"]([name], [carried]) == []
    setattr(layer, "use_mm_prefix" if setting == "mm_prefix" else setting, bug)
    if setting == "sliding_window":
        layer.get_kv_cache_spec = lambda config: types.SimpleNamespace(sliding_window=bug)
    found = namespace["differences"]([name], [namespace["layer_settings"](layer, None)])
    assert found[0] == lost
    assert _script_exit(script, ("wrong-setting", "; ".join(found)), monkeypatch)[0] == 1
    assert _script_exit(script, ("pass", "every draft layer carries its settings"), monkeypatch)[0] == 0


# -- the kernel lanes' scripts read data, not the cell's axes ---------------------------------


def _axis_reads(text: str) -> list[str]:
    """Where a script's code reads the cell's axes: the name AXES, or a "axes" key (the CELL
    payload still records them, inside its JSON string, for whoever reads the script)."""
    return [
        f"line {node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(ast.parse(text))
        if (isinstance(node, ast.Name) and node.id == "AXES")
        or (isinstance(node, ast.Constant) and node.value == "axes")
    ]


CPU_CELLS = ("CPU_ATTN-causal-sink-bf16-v2", "CPU_ATTN-dflash2-causal-sink-bf16-v2")


def _cpu_written(tmp_path: Path, cell_id: str, status: int = 0) -> str:
    matrix = load_matrix(matrix_path("cpu"))
    cell = next(c for c in expand(matrix) if c.id == cell_id)
    run = {**RUN, "lane": "cpu", "matrix": "cpu", "matrix_path": "matrices/cpu.toml", "key": "cpu"}
    recorded = {**CELL, "id": cell.id, "lane": "cpu", "axes": dict(cell.axes), "run": "cpu"}
    folder = tmp_path / cell_id
    folder.mkdir(parents=True)
    (folder / "matrix.json").write_text(json.dumps({"schema": "dflash-matrix/2", "runs": [run], "cells": [recorded]}))
    assert main(["repro", cell_id, "--report", str(folder), "--out", str(folder / "repro.py")]) == status
    return (folder / "repro.py").read_text() if status == 0 else ""


def test_the_cpu_and_gpu_templates_read_no_axes(tmp_path: Path) -> None:
    """The cell's shape and facts come into a kernel lane's script as data the harness computed
    (``harness.deployment``), never from its axes: an axis the templates read would be one more
    place that turns axes into configs, drifting from the lanes'."""
    from harness.commands.repro import TEMPLATES

    for lane in ("cpu", "gpu", "gpu_emulated"):
        assert "AXES" not in TEMPLATES[lane].read_text() and _axis_reads(TEMPLATES[lane].read_text()) == []
    scripts = {lane: _written(tmp_path, lane) for lane in ("gpu", "gpu_emulated")}
    scripts.update({cell: _cpu_written(tmp_path, cell) for cell in CPU_CELLS})
    for name, text in scripts.items():
        assert "AXES" not in text and _axis_reads(text) == [], name


def test_a_kernel_cells_script_carries_the_harness_s_own_target_and_draft(tmp_path: Path) -> None:
    """What a cpu or gpu script writes and asks is what ``harness.deployment`` says of the cell:
    the configs ``target_config`` and ``draft_config`` make, each layer's window and causality as
    ``DraftTruth`` resolves them, the deployment's requested backend, dtypes and loader."""
    from harness.deployment.cells import cpu_deployment, gpu_deployment
    from harness.deployment.models import DraftTruth, ModelShape, draft_config
    from harness.deployment.settings import draft_shape, draft_spec

    matrix, cells = _bundled("gpu_emulated")
    cases = [
        ("gpu_emulated", "sm90-TRITON_ATTN-causal-sink-swa16-mixednative-bf16-v2"),
        ("gpu_emulated", "sm90-TRITON_ATTN-causal-nosink-bf16-tgtmodel.mistralswa-v1"),
        ("cpu", "CPU_ATTN-causal-sink-swa4-mixednative-bf16-v2"),
        ("cpu", "CPU_ATTN-dflash2-causal-sink-bf16-v2"),
        ("gpu_emulated", "sm90-TRITON_ATTN-causal-nosink-dheads.8x2-bf16-v2"),
        ("cpu", "CPU_ATTN-noncausal-sink-dheads.4x4-fp32-v2"),
    ]
    cpu_cells = {c.id: c for c in expand(load_matrix(matrix_path("cpu")))}
    for lane, ident in cases:
        cell = cpu_cells[ident] if lane == "cpu" else cells[ident]
        payload = _payload(_cpu_written(tmp_path, ident) if lane == "cpu" else _written(tmp_path, lane, ident))
        spec, _ = draft_spec(cell.values)
        shape = draft_shape(cell.values, ModelShape(head_dim=128))
        truth = DraftTruth(Path("draft"), spec, shape, None)
        draft, target = payload["draft"], payload["target"]
        assert draft["config"] == json.loads(json.dumps(draft_config(spec, shape)))
        # The draft's own heads (draft_heads) are the draft's alone: the target keeps the lane's.
        assert (draft["shape"]["heads"], draft["shape"]["kv_heads"]) == (shape.heads, shape.kv_heads)
        family = str(cell.get("target_model", "qwen3"))
        target_shape = ModelShape(head_dim=shape.head_dim)
        assert target["config"] == json.loads(json.dumps(target_config(target_shape, family)))
        assert target["family"] == family
        assert draft["window"] == [truth.layer_window(i) for i in range(shape.draft_layers)]
        assert draft["causal"] == [truth.layer_causal(i) for i in range(shape.draft_layers)]
        assert (draft["sink"], draft["any_non_causal"]) == (spec.sink, truth.any_non_causal)
        assert draft["scale"] == truth.scale
        deployment = cpu_deployment(cell.values) if lane == "cpu" else gpu_deployment(cell.values, matrix.lane_options)
        assert (payload["requested"], payload["dtype"]) == (deployment.requested, deployment.dtype)
        assert payload["kv_cache_dtype"] == payload["engine_arguments"]["kv_cache_dtype"]
        assert payload["loader"] == cell.get("loader", "v2")
        names = [name for name, _, _ in draft["tensors"]]
        assert ("candidate_selector.predecessor_codebook" in names) is (spec.method == "dflash2")
        assert (sum(how == "sinks" for _, _, how in draft["tensors"]) == shape.draft_layers) is spec.sink
        # A mistral_swa target has Llama's attention: no q/k norms among its tensors.
        norms = any(name.endswith("q_norm.weight") for name, _, _ in target["tensors"])
        assert norms is (family != "mistral_swa")


def test_a_cpu_cell_of_an_fp8_draft_cache_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The lane's e4m3 draft carries calibrated KV scales and its reference models CPU_ATTN's fp8
    cache write; the script has neither, so it would report a mismatch the lane does not see."""
    ident = "CPU_ATTN-causal-sink-bf16-dkv-fp8-v2"
    _cpu_written(tmp_path, ident, status=2)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"cells.{ident}.axes.draft_kv_cache_dtype: the cpu repro does not write" in err[0], err
    assert not (tmp_path / ident / "repro.py").exists()
