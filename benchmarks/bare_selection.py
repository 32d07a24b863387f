"""The bare baseline of one selection-lane cell process: only the selection calls, in one process.

For one simulated GPU (capability, FlashInfer cubin) it makes the vLLM calls the selection
lane makes for each cell, and nothing else: the backend's ``validate_configuration``, the
platform's answer for the explicit request and for auto-selection, and the draft built
through the real loader (``load_dflash_model`` or ``DFlashProposer``) with dummy weights,
reading the backend each attention layer carries. The platform is simulated with the
lane's own ``harness.cuda.simulated`` (without it there is no CUDA platform to ask). No
runner, pytest, journal, enum census or verdicts; one OpenMP thread, like the runner's cell
processes. Needs the stub libcuda on LD_LIBRARY_PATH.

    python -m benchmarks.bare_selection --matrix matrices/selection.toml --key sm90-cubin --out FILE.json
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

# As in the runner's cell processes: one OpenMP thread unless the user set a count.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from harness.matrix import Cell, expand, load_matrix


def _qwen3(head_dim: int, **extra: object) -> dict[str, object]:
    config: dict[str, object] = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 4,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": head_dim,
        "vocab_size": 1024,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    config.update(extra)
    return config


def _write(root: Path, name: str, config: dict[str, object]) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


class BareSelection:
    def __init__(self, cell: Cell, root: Path, head_dim: int, target_backend: str | None):
        from harness.cuda.simulated import SimulatedGpu, allow_host_flashinfer_impl, install

        self.installed = install(SimulatedGpu(str(cell.get("capability")), bool(cell.get("flashinfer_cubin", False))))
        import torch
        from vllm.config import VllmConfig, set_current_vllm_config
        from vllm.distributed import init_distributed_environment, initialize_model_parallel
        from vllm.engine.arg_utils import EngineArgs
        from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
        from vllm.utils.import_utils import resolve_obj_by_qualname
        from vllm.v1.attention.backends.registry import AttentionBackendEnum
        from vllm.v1.attention.selector import AttentionSelectorConfig
        from vllm.v1.spec_decode.dflash import DFlashProposer
        from vllm.v1.worker.gpu.spec_decode.dflash.utils import load_dflash_model

        self.torch = torch
        self.VllmConfig = VllmConfig
        self.set_current_vllm_config = set_current_vllm_config
        self.EngineArgs = EngineArgs
        self.AttentionLayerBase = AttentionLayerBase
        self.resolve = resolve_obj_by_qualname
        self.enum = AttentionBackendEnum
        self.AttentionSelectorConfig = AttentionSelectorConfig
        self.DFlashProposer = DFlashProposer
        self.load_dflash_model = load_dflash_model
        self.root = root
        self.head_dim = head_dim
        self.target_backend = target_backend
        self.target_path = _write(root, "target", _qwen3(head_dim))
        self.drafts: dict[tuple[bool, bool], Path] = {}
        allow_host_flashinfer_impl()
        with set_current_vllm_config(VllmConfig()):
            init_distributed_environment(
                world_size=1, rank=0, local_rank=0, distributed_init_method=f"file://{root / 'dist'}", backend="gloo"
            )
            initialize_model_parallel(1, 1)
        nn = torch.nn
        self.target = nn.Module()
        self.target.model = nn.Module()
        self.target.model.embed_tokens = nn.Embedding(1024, 256)
        self.target.lm_head = nn.Linear(256, 1024, bias=False)
        gc.collect()
        gc.freeze()

    def draft(self, causal: bool, sink: bool) -> Path:
        if (causal, sink) not in self.drafts:
            dflash = {"mask_token_id": 1000, "target_layer_ids": [1, 2], "causal": causal, "attention_sink_bias": sink}
            config = _qwen3(self.head_dim, architectures=["DFlashDraftModel"], num_hidden_layers=1, block_size=8)
            config["dflash_config"] = dflash
            self.drafts[(causal, sink)] = _write(self.root, f"draft-{int(causal)}{int(sink)}", config)
        return self.drafts[(causal, sink)]

    def run(self, cell: Cell) -> dict[str, Any]:
        started = time.perf_counter()
        requested = cell.requested_backend
        dtype = str(cell.get("dtype", "bfloat16"))
        kv_cache_dtype = str(cell.get("kv_cache_dtype", "auto"))
        platform = type(self.installed.platform)
        selector = self.AttentionSelectorConfig(
            head_size=self.head_dim,
            dtype=getattr(self.torch, dtype),
            kv_cache_dtype=kv_cache_dtype,
            block_size=None,
            has_sink=bool(cell.get("sink")),
            use_non_causal=not bool(cell.get("causal")),
        )
        result: dict[str, Any] = {"id": cell.id}
        try:
            with self.set_current_vllm_config(self.VllmConfig()):
                if requested is not None:
                    member = self.enum[requested]
                    backend = member.get_class()
                    capability = platform.get_device_capability()
                    result["claim"] = list(
                        backend.validate_configuration(device_capability=capability, **selector._asdict())
                    )
                    try:
                        result["explicit"] = self.resolve(
                            platform.get_attn_backend_cls(member, attn_selector_config=selector)
                        ).get_name()
                    except ValueError as error:
                        result["explicit"] = f"ValueError: {error}"[:200]
                try:
                    result["auto"] = self.resolve(
                        platform.get_attn_backend_cls(None, attn_selector_config=selector)
                    ).get_name()
                except ValueError as error:
                    result["auto"] = f"ValueError: {error}"[:200]
            speculative: dict[str, object] = {
                "method": "dflash",
                "model": str(self.draft(bool(cell.get("causal")), bool(cell.get("sink")))),
                "num_speculative_tokens": 4,
            }
            if requested is not None:
                speculative["attention_backend"] = requested
            arguments: dict[str, object] = {
                "model": str(self.target_path),
                "speculative_config": speculative,
                "load_format": "dummy",
                "skip_tokenizer_init": True,
                "dtype": dtype,
                "kv_cache_dtype": kv_cache_dtype,
                "max_model_len": 1024,
                "enforce_eager": True,
            }
            if self.target_backend:
                arguments["attention_backend"] = self.target_backend
            config = self.EngineArgs(**arguments).create_engine_config()
            config.device_config.device = self.torch.device("cpu")
            config.device_config.device_type = "cpu"
            config.load_config.device = "cpu"
            with self.set_current_vllm_config(config):
                if str(cell.get("loader", "v2")) == "v2":
                    draft = self.load_dflash_model(self.target, config)
                else:
                    proposer = self.DFlashProposer(config, self.torch.device("cpu"))
                    proposer.load_model(self.target)
                    draft = proposer.model
            result["layers"] = [
                module.get_attn_backend().get_name()
                for module in draft.modules()
                if isinstance(module, self.AttentionLayerBase)
            ]
        except Exception as error:  # the lane records these as verdicts; here they are just timed
            result["error"] = f"{type(error).__name__}: {error}"[:200]
        result["wall_s"] = time.perf_counter() - started
        return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", type=Path, required=True)
    parser.add_argument("--key", required=True, help="the process key whose cells to run, e.g. sm90-cubin")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    matrix = load_matrix(args.matrix)
    cells = [cell for cell in expand(matrix) if matrix.process_key(cell) == args.key]
    if not cells:
        sys.stderr.write(f"bare_selection: {args.matrix}: no cells have process key {args.key!r}\n")
        return 2
    head_dim = int(matrix.options.get("head_dim", 128))
    target_backend = matrix.options.get("target_backend")
    with tempfile.TemporaryDirectory(prefix="dflash-bare-selection-") as root:
        bare = BareSelection(cells[0], Path(root), head_dim, str(target_backend) if target_backend else None)
        setup_s = time.perf_counter() - started
        results = []
        for number, cell in enumerate(cells):
            results.append(bare.run(cell))
            if number == 0:
                gc.collect()
                gc.freeze()
    args.out.write_text(
        json.dumps({"key": args.key, "setup_s": setup_s, "total_s": time.perf_counter() - started, "cells": results})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
