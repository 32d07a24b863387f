"""Benchmark: merge 16 shards (junit.xml + matrix.json each) and render JUnit, JSON, Markdown and HTML.

Target (issue 6): 100k testcases in <= 10 s, linear in the number of cases. Shards are
4 GPUs x 4 vLLM versions, written by the same renderers a live run uses; generating
them is not timed. Prints wall seconds per phase at each size, the process's CPU
seconds, the ratio of each to the smallest size's (linear = the size ratio), output
sizes and peak memory. On a shared machine read the CPU column: wall time includes
waiting for a core.

    python benchmarks/bench_merge.py [--sizes 25000 50000 100000] [--out DIR]

Not part of the test run: timings belong in a benchmark's printout, not in a test that
fails on a busy machine.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.axes import cell_id
from harness.observation import Claim
from harness.reports.device_grid import build_grids
from harness.reports.html import render_html
from harness.reports.inputs import load_inputs
from harness.reports.junit import render_junit
from harness.reports.markdown import render_markdown
from harness.reports.matrix_json import render_matrix_json
from harness.reports.merge import collector_paused, merge
from harness.reports.model import CellRun, Report, run_from_meta
from harness.result import CellResult
from harness.verdict import Verdict, claim_gap

DEVICES = ("NVIDIA A100", "NVIDIA H100", "NVIDIA B200", "NVIDIA RTX PRO 6000")
VERSIONS = ("0.31.0", "0.32.0", "0.33.0", "0.34.0.dev20261201")
AXES: dict[str, tuple[Any, ...]] = {
    "backend": ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION", "TREE_ATTN", "ROCM_ATTN", "auto"),
    "causal": (True, False),
    "sink": (False, True),
    "sliding_window": (0, 128, 1024, 4096),
    "dtype": ("bfloat16", "float16", "float32"),
    "kv_cache_dtype": ("auto", "fp8", "fp8_e4m3", "fp8_e5m2"),
    "loader": ("v1", "v2"),
    "cudagraph": ("eager", "graph"),
    "flashinfer_cubin": (True, False),
}
VERDICT_MIX = (
    (Verdict.PASS, 0.78),
    (Verdict.UNSUPPORTED, 0.12),
    (Verdict.SUBSTITUTED, 0.03),
    (Verdict.MISMATCH, 0.03),
    (Verdict.CRASH, 0.02),
    (Verdict.WRONG_BACKEND, 0.01),
    (Verdict.TIMEOUT, 0.01),
)


def _message(rng: random.Random, verdict: Verdict, backend: str) -> str:
    if verdict == Verdict.UNSUPPORTED:
        return rng.choice(("sink setting not supported", "non-causal attention not supported", "kv cache dtype fp8"))
    if verdict == Verdict.MISMATCH:
        return f"max abs error {rng.uniform(0.02, 3):.3g} > tolerance 0.01 on {backend}"
    if verdict == Verdict.CRASH:
        return f"RuntimeError: CUDA error: an illegal memory access was encountered (block {rng.randrange(4096)})"
    if verdict == Verdict.TIMEOUT:
        return "cell ran past its time limit"
    if verdict == Verdict.WRONG_BACKEND:
        return f"requested {backend}: the platform selects {backend}, but draft layers carry FLASH_ATTN"
    return f"draft layers carry {backend}, {backend}"


def _cells(rng: random.Random, count: int) -> list[CellResult]:
    every = list(itertools.product(*AXES.values()))
    combos = [every[index] for index in sorted(rng.sample(range(len(every)), min(count, len(every))))]
    verdicts, weights = zip(*VERDICT_MIX, strict=True)
    results = []
    for values in combos:
        axes = dict(zip(AXES, values, strict=True))
        verdict = rng.choices(verdicts, weights)[0]
        expected = verdict if rng.random() < 0.97 else Verdict.PASS
        backend = str(axes["backend"])
        stated = Claim(rng.random() < 0.9) if backend != "auto" else None
        gap = claim_gap(stated, verdict)
        record = {
            "id": cell_id(axes),
            "lane": "gpu",
            "axes": axes,
            "requested_backend": None if backend == "auto" else backend,
            "observed_backends": [backend, backend] if verdict == Verdict.PASS else [],
            "verdict": verdict.value,
            "expected": expected.value,
            "expected_reason": "rule 3: sinks need FA3 or newer",
            "stage": "forward" if verdict == Verdict.CRASH else None,
            "message": _message(rng, verdict, backend),
            "max_abs_err": rng.uniform(0, 0.01) if verdict == Verdict.PASS else None,
            "tolerance": 0.01,
            "claim": {"supported": stated.supported, "reasons": []} if stated else None,
            "claim_gap": gap.value if gap else None,
            "duration_s": rng.uniform(0.05, 2.0),
        }
        results.append(CellResult.from_json(record))
    return results


def write_shards(root: Path, total: int, seed: int = 46770) -> list[Path]:
    rng = random.Random(seed)
    per_shard = total // (len(DEVICES) * len(VERSIONS))
    shards = []
    for device, version in itertools.product(DEVICES, VERSIONS):
        shard = root / f"{device.split()[-1]}-{version}"
        shard.mkdir(parents=True)
        run = run_from_meta(
            {
                "lane": "gpu",
                "platform": "cuda",
                "device": device,
                "vllm_version": version,
                "torch_version": "2.14.0",
                "started_at": "2026-12-02T01:00:00+00:00",
                "ended_at": "2026-12-02T02:00:00+00:00",
            }
        )
        rows = tuple(CellRun(run.key, cell) for cell in _cells(rng, per_shard))
        report = Report(runs=(run,), rows=rows, not_run=(), stale={}, unfinished=frozenset())
        (shard / "junit.xml").write_bytes(render_junit(report))
        (shard / "matrix.json").write_bytes(render_matrix_json(report))
        shards.append(shard)
    return shards


def measure(shards: list[Path]) -> dict[str, float | int]:
    with collector_paused():  # as the merge command runs
        return _measure(shards)


def _measure(shards: list[Path]) -> dict[str, float | int]:
    timings: dict[str, float | int] = {}
    cpu = time.process_time()
    start = time.perf_counter()
    inputs = load_inputs(shards)
    timings["load"] = time.perf_counter() - start
    mark = time.perf_counter()
    report = merge(inputs)
    timings["merge"] = time.perf_counter() - mark
    mark = time.perf_counter()
    grids = build_grids(report)  # shared by the Markdown and HTML views, as in render_reports
    timings["grid"] = time.perf_counter() - mark
    outputs: dict[str, bytes] = {}
    for name, render in (
        ("junit.xml", lambda: render_junit(report)),
        ("matrix.json", lambda: render_matrix_json(report)),
        ("matrix.md", lambda: render_markdown(report, grids).encode()),
        ("matrix.html", lambda: render_html(report, grids).encode()),
    ):
        mark = time.perf_counter()
        outputs[name] = render()
        timings[name] = time.perf_counter() - mark
    timings["total"] = time.perf_counter() - start
    timings["cpu"] = time.process_time() - cpu
    timings["cells"] = len(report.rows)
    timings["testcases"] = outputs["junit.xml"].count(b"<testcase ")
    for name, data in outputs.items():
        timings[f"{name} bytes"] = len(data)
    return timings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[25_000, 50_000, 100_000])
    parser.add_argument("--out", type=Path, help="keep the generated shards here (default: a temporary directory)")
    args = parser.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="bench-merge-"))
    results = []
    try:
        for size in args.sizes:
            shards = write_shards(root / str(size), size)
            results.append(measure(shards))
    finally:
        if args.out is None:
            shutil.rmtree(root, ignore_errors=True)
    phases = ("load", "merge", "grid", "junit.xml", "matrix.json", "matrix.md", "matrix.html", "total", "cpu")
    print(f"{'testcases':>10} " + " ".join(f"{p:>11}" for p in phases) + "  wall/first  cpu/first  size/first")
    first = results[0]
    for row in results:
        wall = float(row["total"]) / float(first["total"])
        cpu = float(row["cpu"]) / float(first["cpu"])
        size_ratio = int(row["testcases"]) / int(first["testcases"])
        print(
            f"{row['testcases']:>10} "
            + " ".join(f"{float(row[p]):>10.2f}s" for p in phases)
            + f"  {wall:>10.2f}  {cpu:>9.2f}  {size_ratio:>10.2f}"
        )
    print()
    for row in results:
        sizes = ", ".join(f"{name} {int(row[f'{name} bytes']) / 1e6:.1f} MB" for name in phases[3:7])
        print(f"{row['testcases']:>10} testcases: {sizes}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (wall times include waiting for a core)")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
