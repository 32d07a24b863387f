"""The bare baseline of a cpu cell: only the vLLM calls a cell needs, in one process.

No runner, no pytest, no journal, no verdict: per cell it builds the cell's VllmConfig,
loads the draft through the real loader (the target is built once per dtype, as the lane
does), runs each draft attention layer's forward pass through its backend and compares it
with the fp32 reference; for a loader-v2 cell it then builds Model Runner V1's draft of the same
checkpoint and runs its layers on the same inputs, as the lane's loader differential does
(``harness.attention.differential``). It uses the same thin wrappers around vLLM as the lane
(``harness.attention``), so both sides do the same work; it skips what only the harness
needs: the platform's answer and the backend's claim, the Observation, the journal.
Like the runner's cell process, it freezes the collector after its first cell and runs
one OpenMP thread unless OMP_NUM_THREADS says otherwise.

    python -m benchmarks.bare_cpu --matrix matrices/cpu.toml --cells FILE --out FILE.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

from benchmarks import stage_timers
from harness.deployment.arguments import Deployment
from harness.deployment.cells import CPU_BLOCK_SIZE
from harness.deployment.settings import EngineSettings
from harness.matrix import Cell, expand, load_matrix


class BareProcess:
    """What a bare script sets up once: the CPU platform's prerequisites, checkpoints, targets."""

    def __init__(self, root: Path):
        import torch
        from vllm.config import VllmConfig, set_current_vllm_config
        from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment
        from vllm.v1.worker.cpu_model_runner import _set_torch_accelerator_to_noop

        from harness.attention.checkpoint import write_target

        _set_torch_accelerator_to_noop()
        if torch.cpu._is_amx_tile_supported():
            torch.cpu._init_amx()
        with set_current_vllm_config(VllmConfig()):
            init_distributed_environment(
                world_size=1,
                rank=0,
                distributed_init_method=f"file://{root / 'dist-init'}",
                local_rank=0,
                backend="gloo",
            )
            ensure_model_parallel_initialized(1, 1)
        self.root = root
        self.target_path = write_target(root)
        self.drafts: dict[Any, Any] = {}
        self.targets: dict[str, Any] = {}
        stage_timers.time_model_builds()
        gc.collect()
        gc.freeze()

    def run(self, cell: Cell) -> dict[str, Any]:
        import torch
        from vllm.config import set_current_vllm_config

        from harness.attention import draft as vllm_draft
        from harness.attention.checkpoint import write_draft
        from harness.attention.draft import draft_attention_config
        from harness.attention.paged import Batch, random_inputs, run_eager
        from harness.attention.reference import reference_attention
        from harness.deployment.models import DraftSpec

        stage_timers.take()
        started = time.perf_counter()
        spec = DraftSpec(bool(cell.get("causal")), bool(cell.get("sink")), int(cell.get("sliding_window", 0) or 0))
        if spec not in self.drafts:
            self.drafts[spec] = write_draft(self.root, spec)
        truth = self.drafts[spec]
        dtype_name = str(cell.get("dtype", "bfloat16"))
        dtype = getattr(torch, dtype_name)
        engine = EngineSettings(
            kv_cache_dtype=str(cell.get("kv_cache_dtype", "auto")), block_size=CPU_BLOCK_SIZE
        )
        config = vllm_draft.engine_config(
            self.target_path, truth.path, Deployment(engine, cell.requested_backend, dtype_name)
        )
        if dtype_name not in self.targets:
            target_config = vllm_draft.engine_config(self.target_path, truth.path, Deployment(engine, None, dtype_name))
            self.targets[dtype_name] = vllm_draft.load_target(target_config)
        laps: dict[str, float] = {}
        errors = []
        runs = []  # each layer's inputs and output, for the V1 twin
        loader = str(cell.get("loader", "v2"))
        with set_current_vllm_config(config):
            draft = vllm_draft.load_draft(loader, self.targets[dtype_name], config, torch.device("cpu"))
            layers = vllm_draft.attention_layers(draft.model)
            vllm_draft.settle_kv_cache(config, layers)
            # The metadata builders get the engine's config with the draft's causality and backend.
            attention_config = draft_attention_config(config, truth.any_non_causal)
            batch = Batch(query_len=engine.num_speculative_tokens + 1)
            shape = truth.shape
            for index, attn in enumerate(layers):
                lap = time.perf_counter()
                inputs = random_inputs(batch, shape.heads, shape.kv_heads, shape.head_dim, dtype, cell.seed + index)
                output = run_eager(
                    attn, attention_config, batch, inputs, draft.causal[index], torch.device("cpu"), lambda stage: None
                )
                laps[f"forward_{index}"] = time.perf_counter() - lap
                runs.append((inputs, output))
                lap = time.perf_counter()
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
                errors.append(float((output.float() - expected).abs().max()))
                laps[f"compare_{index}"] = time.perf_counter() - lap
        differences = []
        if loader == "v2":
            # The loader differential: V1's draft in a config of its own (layers register by name).
            lap = time.perf_counter()
            twin_config = vllm_draft.engine_config(
                self.target_path, truth.path, Deployment(engine, cell.requested_backend, dtype_name)
            )
            with set_current_vllm_config(twin_config):
                twin = vllm_draft.load_draft("v1", self.targets[dtype_name], twin_config, torch.device("cpu"))
                twin_layers = vllm_draft.attention_layers(twin.model)
                vllm_draft.settle_kv_cache(twin_config, twin_layers)
                twin_attention = draft_attention_config(twin_config, truth.any_non_causal)
                for index, (attn, (inputs, output)) in enumerate(zip(twin_layers, runs, strict=True)):
                    theirs = run_eager(
                        attn, twin_attention, batch, inputs, twin.causal[index], torch.device("cpu"), lambda stage: None
                    )
                    differences.append(float((output.float() - theirs.float()).abs().max()))
            laps["loader_differential"] = time.perf_counter() - lap
        wall = time.perf_counter() - started
        timers = stage_timers.take()
        return {
            "id": cell.id,
            "wall_s": wall,
            "irreducible_s": stage_timers.irreducible_s(timers, laps),
            "timers_s": timers,
            "laps_s": laps,
            "max_abs_err": max(errors),
            "v1_max_abs_diff": max(differences) if differences else None,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", type=Path, required=True)
    parser.add_argument("--cells", type=Path, required=True, help="cell ids, one a line")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    matrix = load_matrix(args.matrix)
    wanted = args.cells.read_text().split()
    by_id = {cell.id: cell for cell in expand(matrix)}
    unknown = [name for name in wanted if name not in by_id]
    if unknown:
        sys.stderr.write(f"bare_cpu: {args.cells}: no such cells in {args.matrix}: {', '.join(unknown)}\n")
        return 2
    with tempfile.TemporaryDirectory(prefix="dflash-bare-cpu-") as root:
        process = BareProcess(Path(root))
        setup_s = time.perf_counter() - started
        cells = []
        for number, name in enumerate(wanted):
            cells.append(process.run(by_id[name]))
            if number == 0:
                gc.collect()
                gc.freeze()
    args.out.write_text(
        json.dumps({"setup_s": setup_s, "total_s": time.perf_counter() - started, "cells": cells}, indent=1)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
