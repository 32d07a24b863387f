"""End-to-end smoke: ``vllm.LLM`` with a DFlash draft generates a few tokens on CPU.

Run as a script in its own process (``python e2e_generate.py OUT.json --causal 1 --sink 0``):
the engine spawns its core process, which re-imports ``__main__``, so everything runs under
the ``__main__`` guard. Results go to OUT.json, never stdout (vLLM logs there).
On CPU the engine takes Model Runner V1 (V2 needs Triton), so the draft is loaded by
``DFlashProposer``; with random weights nothing is accepted, so this proves wiring only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

MAX_TOKENS = 8
PROMPTS = ([5, 6, 7, 8, 9, 10, 11, 12], list(range(20, 60)))


def inspect_drafter(worker: Any) -> dict[str, Any]:
    """Runs inside the engine's worker (collective_rpc): what the draft layers really carry."""
    runner = worker.model_runner
    drafter = runner.drafter
    return {
        "runner": type(runner).__name__,
        "drafter": type(drafter).__name__,
        "backends": [layer.self_attn.attn.get_attn_backend().get_name() for layer in drafter.model.model.layers],
        "causal": [bool(layer.self_attn.causal) for layer in drafter.model.model.layers],
        "has_sinks": [layer.self_attn.attn.impl.sinks is not None for layer in drafter.model.model.layers],
    }


def generate(root: Path, causal: bool, sink: bool, backend: str | None) -> dict[str, Any]:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from harness.attention.checkpoint import write_draft, write_target
    from harness.deployment.models import DraftSpec

    target = write_target(root)
    draft = write_draft(root, DraftSpec(causal=causal, sink=sink))
    speculative: dict[str, Any] = {"method": "dflash", "model": str(draft.path), "num_speculative_tokens": 4}
    if backend is not None:
        speculative["attention_backend"] = backend
    llm = LLM(
        model=str(target),
        speculative_config=speculative,
        load_format="auto",
        enforce_eager=True,
        max_model_len=256,
        max_num_seqs=4,
        max_num_batched_tokens=256,
        skip_tokenizer_init=True,
        dtype="bfloat16",
        kv_cache_memory_bytes=64 * 1024 * 1024,
        block_size=32,
        disable_log_stats=False,  # the draft counter below is a stat
    )
    drafter = llm.collective_rpc(inspect_drafter)[0]
    outputs = llm.generate(
        [TokensPrompt(prompt_token_ids=p) for p in PROMPTS],
        SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True, detokenize=False),
    )
    drafts = 0
    for metric in llm.get_metrics():
        if metric.name == "vllm:spec_decode_num_drafts":
            drafts += int(getattr(metric, "value", 0) or 0)
    # The engine core and its worker are processes of their own: stop them before exiting.
    llm.llm_engine.engine_core.shutdown()
    return {
        **drafter,
        "generated": [len(o.outputs[0].token_ids) for o in outputs],
        "num_drafts": drafts,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--causal", type=int, choices=(0, 1), required=True)
    parser.add_argument("--sink", type=int, choices=(0, 1), required=True)
    parser.add_argument("--backend", default=None)
    args = parser.parse_args()
    # Beside the answer, in the test's own temporary folder: this process ends with os._exit,
    # so nothing here would remove a folder of its own.
    checkpoints = Path(args.out).parent / "checkpoints"
    try:
        result: dict[str, Any] = {"ok": True, **generate(checkpoints, bool(args.causal), bool(args.sink), args.backend)}
    except Exception as exc:
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    Path(args.out).write_text(json.dumps(result))
    sys.stdout.flush()
    # The engine's shutdown can outlive the answer by many seconds; the answer is written.
    os._exit(0)


if __name__ == "__main__":
    main()
