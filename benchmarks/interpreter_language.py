"""Triton's interpreter with its language patched once per function (the gpu-emulated host patch
``interpreter language patched once``) against the interpreter as Triton ships it, on the same
gpu-emulated cells in one run, alternating: the ratio of cell seconds, and proof that both
compute the same (verdict, max abs error and kernel launches of every cell equal).

    python -m benchmarks.interpreter_language [--rounds N] [--cells ID ...]

Run it in the gpu-emulated env (official CUDA vLLM, the stub libcuda on the library path). The
``as_shipped`` plant puts Triton's own ``_patch_lang`` back in a cell process.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

MATRIX = "matrices/gpu-emulated.toml"
# A causal graph cell (split-KV path, captured and replayed), an eager non-causal cell with
# sinks (2D path) and an fp8-KV cell (the fp8 cache write and query quantization): SM90.
CELLS = (
    "sm90-TRITON_ATTN-causal-sink-bf16-v2-graph",
    "sm90-TRITON_ATTN-noncausal-sink-bf16-v2",
    "sm90-TRITON_ATTN-causal-nosink-bf16-kv-fp8-v2",
)
_PLANT = "benchmarks.interpreter_language:as_shipped"


def as_shipped(lane: Any) -> None:
    """A plant: Triton's own ``_patch_lang`` (patch on every launch and helper call) in this process."""

    def restore() -> None:
        from triton.runtime import interpreter

        interpreter._patch_lang = interpreter._patch_lang.__wrapped__

    lane.host.after_start(restore)


def _run(cells: tuple[str, ...], plants: list[str]) -> tuple[float, list[Any]]:
    from harness.runner.session import run_matrix

    started = time.perf_counter()
    results = run_matrix(MATRIX, plants=plants, cell_ids=cells)
    return time.perf_counter() - started, results


def _same(a: Any, b: Any) -> bool:
    return (a.verdict, a.max_abs_err, a.details.get("triton_launches")) == (
        b.verdict,
        b.max_abs_err,
        b.details.get("triton_launches"),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--cells", nargs="+", default=list(CELLS))
    args = parser.parse_args()
    cells = tuple(args.cells)
    print(f"load average at start: {os.getloadavg()[0]:.1f}; {len(cells)} cells, {args.rounds} round(s)")
    kept = shipped = kept_cells = shipped_cells = 0.0
    for round_ in range(args.rounds):
        # Alternate which goes first, so a load change does not favour one side.
        order = [("kept", []), ("as shipped", [_PLANT])]
        if round_ % 2:
            order.reverse()
        measured = {name: _run(cells, plants) for name, plants in order}
        (kept_wall, kept_results), (shipped_wall, shipped_results) = measured["kept"], measured["as shipped"]
        for a, b in zip(kept_results, shipped_results, strict=True):
            if not _same(a, b):
                raise SystemExit(f"{a.id}: {a.verdict} {a.max_abs_err} != {b.verdict} {b.max_abs_err}")
        kept, shipped = kept + kept_wall, shipped + shipped_wall
        kept_cells += sum(r.duration_s for r in kept_results)
        shipped_cells += sum(r.duration_s for r in shipped_results)
        print(f"round {round_ + 1}: patched once {kept_wall:.1f} s, as shipped {shipped_wall:.1f} s (wall)")
    ratio = kept_cells / shipped_cells
    print(f"cells: patched once {kept_cells:.1f} s, as shipped {shipped_cells:.1f} s: ratio {ratio:.2f}")
    print(f"wall: ratio {kept / shipped:.2f}; every cell's verdict, max abs error and launches equal")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
