"""Fill vLLM's model-class cache for the architectures the harness's checkpoints name, once per
env, in one process: ``python -m harness.attention.modelinfo MATRIX`` (tox runs it before a lane's
tests, for the architectures that lane's matrix names).

Why: vLLM asks each model class a few questions (``_ModelInfo``: multimodal, hybrid, pipeline
support...) and caches the answers in ``$VLLM_CACHE_ROOT/modelinfos``, keyed by the model file's
hash. On a miss it answers them in a subprocess that imports vLLM (about 9 s of CPU). In a fresh
env every cell process misses for each architecture it meets first, both workers at once: eleven
misses, about 140 s of the selection lane's worker time in a fresh CI run (benchmarks/README.md).

How: vLLM's own ``inspect_model_cls`` computes and saves each entry, with the subprocess it would
start run in this process instead (this process builds no model and initialises no device; the
answers are read off the model class alone), so the cells read the entries a second run reads.
Nothing here decides a verdict: on a release whose registry lacks what is used here, or an
architecture it does not know, the line printed says so and the cells fill the cache as before.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.deployment.models import DRAFT_ARCHITECTURES, ModelShape, target_config
from harness.errors import InputError
from harness.matrix import expand, load_matrix


def matrix_architectures(path: Path) -> tuple[str, ...]:
    """The architectures the target and draft checkpoints of a matrix's cells name."""
    matrix = load_matrix(path)
    families, methods = set(), set()
    for cell in expand(matrix):
        families.add(str(matrix.contract.value(cell.values, "target_model")))
        methods.add(str(matrix.contract.value(cell.values, "method")))
    targets = [target_config(ModelShape(), family)["architectures"] for family in sorted(families)]
    return (*(str(names[0]) for names in targets), *(DRAFT_ARCHITECTURES[m] for m in sorted(methods)))  # type: ignore[index]


def fill(architectures: tuple[str, ...]) -> str:
    """Fill the cache for ``architectures``; one line saying what was done."""
    started = time.monotonic()
    try:
        from vllm.model_executor.models import registry
    except Exception as error:
        return f"skipped: vLLM's model registry does not import here ({type(error).__name__}: {error})"
    models: dict[str, Any] | None = getattr(getattr(registry, "ModelRegistry", None), "models", None)
    if models is None or not callable(getattr(registry, "_run_in_subprocess", None)):
        return "skipped: this vLLM's registry has no ModelRegistry.models or _run_in_subprocess"
    computed: list[str] = []

    def in_this_process(fn: Callable[[], Any]) -> Any:
        computed.append(current)
        return fn()

    registry._run_in_subprocess = in_this_process
    unknown: list[str] = []
    failed: dict[str, str] = {}
    for current in architectures:
        model = models.get(current)
        if model is None:
            unknown.append(current)
            continue
        try:
            model.inspect_model_cls()
        except Exception as error:
            failed[current] = f"{current} ({type(error).__name__}: {error})"
    cached = [name for name in architectures if name not in {*computed, *unknown, *failed}]
    parts = [f"{len(set(computed) - set(failed))} computed, {len(cached)} already cached"]
    if unknown:
        parts.append(f"not in this release's registry: {', '.join(unknown)}")
    if failed:
        parts.append(f"failed: {'; '.join(failed.values())}")
    return f"{'; '.join(parts)} ({time.monotonic() - started:.1f} s)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.attention.modelinfo", description=__doc__.split("\n\n")[0])
    parser.add_argument("matrix", type=Path, help="the matrix whose checkpoints' architectures to fill the cache for")
    args = parser.parse_args(argv)
    try:
        architectures = matrix_architectures(args.matrix)
    except InputError as error:
        print(error, file=sys.stderr)
        return 2
    print(f"vLLM model-class cache: {fill(architectures)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
