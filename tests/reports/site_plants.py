"""Planted reports for the site's tests: a selection lane under two vLLM releases and a cpu lane, small
enough that every answer the tests expect can be read off the cells below by hand.

The three deployments the tests ask about (each answer is what the cells say, not what the code says):

1. vLLM 0.33.0, SM90, a causal draft with sinks: FLASH_ATTN passes; FLASHINFER is refused (no sinks);
   auto picks FLASH_ATTN.
2. vLLM 0.34.0, SM90, the same draft: FLASH_ATTN lost its sink support there (unsupported), FLASHINFER
   still refuses, and auto falls to TRITON_ATTN.
3. vLLM 0.33.0, SM100, a non-causal DSpark draft with fp8 KV: only TRITON_ATTN serves it; FLASH_ATTN
   crashes (under a planted finding).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.axes import cell_id
from harness.result import CellResult

from .shards import DEFAULT_ENV, write_shard

FINDING = {
    "id": "planted-fp8-dspark-crash",
    "title": "A planted crash of FLASH_ATTN with a non-causal DSpark draft and fp8 KV",
    "kind": "upstream-bug",
    "upstream": "issue #1",
    "vllm": ">=0.33",
    "first_release": "0.33.0",
    "measured": "planted for the site's tests",
}
SELECTION_ENV = {**DEFAULT_ENV, "platform": "cuda, simulated", "device": "simulated SM90, SM100"}
CPU_ENV = {**DEFAULT_ENV, "platform": "cpu", "device": "CPU x86_64", "vllm_version": "0.32.0"}
# What a cell's message says, per verdict: the pages show it as vLLM's words.
MESSAGES = {"unsupported": "attention sinks not supported", "crash": "RuntimeError: planted", "pass": ""}


def site_cell(
    backend: str,
    verdict: str,
    *,
    lane: str = "selection",
    observed: str | None = None,
    finding: bool = False,
    **axes: Any,
) -> CellResult:
    values: dict[str, Any] = {"backend": backend, "causal": True, "sink": True, **axes}
    carried = observed or (backend if verdict == "pass" else None)
    return CellResult.from_json(
        {
            "id": cell_id(values),
            "lane": lane,
            "axes": values,
            "requested_backend": None if backend == "auto" else backend,
            "observed_backends": [carried] if carried else [],
            "verdict": verdict,
            "expected": verdict,
            "expected_reason": "planted",
            "stage": "forward" if verdict == "crash" else None,
            "message": MESSAGES[verdict] or f"draft layers carry {carried}",
            "duration_s": 0.1,
            "finding": FINDING if finding else None,
            "correct": {"verdict": "pass", "reason": "without the planted bug"} if finding else None,
        }
    )


def _selection(release: str) -> list[CellResult]:
    newer = release != "0.33.0"
    sm90: dict[str, Any] = {"capability": "9.0", "method": "dflash", "kv_cache_dtype": "auto"}
    sm100: dict[str, Any] = {"capability": "10.0", "method": "dspark", "kv_cache_dtype": "fp8", "causal": False}
    return [
        # Deployments 1 and 2: SM90, causal with sinks.
        site_cell("FLASH_ATTN", "unsupported" if newer else "pass", **sm90),
        site_cell("FLASHINFER", "unsupported", **sm90),
        site_cell("TRITON_ATTN", "pass", **sm90),
        site_cell("auto", "pass", observed="TRITON_ATTN" if newer else "FLASH_ATTN", **sm90),
        # The same backends without sinks: a filter's other value.
        site_cell("FLASH_ATTN", "pass", **{**sm90, "sink": False}),
        site_cell("FLASHINFER", "pass", **{**sm90, "sink": False}),
        # Deployment 3: SM100, non-causal DSpark with fp8 KV.
        site_cell("FLASH_ATTN", "crash", finding=True, **sm100),
        site_cell("TRITON_ATTN", "pass", **sm100),
        site_cell("FLASHINFER", "unsupported", **sm100),
    ]


def write_site_reports(root: Path) -> dict[str, Path]:
    """Three report folders as runs leave them: selection on 0.33.0 and 0.34.0, cpu on 0.32.0."""
    cpu = [site_cell("CPU_ATTN", "pass", lane="cpu", dtype="bfloat16"), site_cell("CPU_ATTN", "pass", lane="cpu")]
    return {
        "selection-0.33.0": write_shard(root / "sel-033", _selection("0.33.0"), lane="selection", env=SELECTION_ENV),
        "selection-0.34.0": write_shard(
            root / "sel-034", _selection("0.34.0"), lane="selection", env={**SELECTION_ENV, "vllm_version": "0.34.0"}
        ),
        "cpu-0.32.0": write_shard(root / "cpu", cpu, lane="cpu", env=CPU_ENV),
    }
