"""Small builders the core tests compose: matrix files, observations judged into results, journals."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from harness.expectations import Expectation
from harness.journal import JournalWriter
from harness.matrix import Cell, Matrix, expand, load_matrix
from harness.observation import Claim, Failure, LayerAgreement, LoaderDifferential, Observation
from harness.result import CellResult, decide
from harness.stages import Stage
from harness.verdict import Verdict

BASIC_MATRIX = """
[matrix]
name = "basic"
lane = "cpu"
timeout_s = 60

[axes]
backend = ["CPU_ATTN", "FLASH_ATTN"]
causal = [true, false]
sink = [true, false]
dtype = ["bfloat16"]

[tolerance]
bfloat16 = 0.02
"""


# Expectations for BASIC_MATRIX: a default, a general rule, an exception to it, one by dtype.
RULES = """
[expectations]
default = "pass"
reason = "CPU_ATTN serves every shape"
findings = "findings.toml"

[[expect]]
when = { backend = "FLASH_ATTN" }
verdict = "substituted"
message = "CPU_ATTN"
reason = "CpuPlatform runs CPU_ATTN whatever is requested"

[[expect]]
when = { backend = "FLASH_ATTN", sink = true }
verdict = "unsupported"
reason = "no sink support"

[[expect]]
when = { backend = "CPU_ATTN", dtype = "bfloat16", causal = [false] }
verdict = "mismatch"
finding = "bf16-noncausal-drift"
reason = "known bf16 noncausal drift"
"""

# The finding RULES' fault rule names (tests that add fault rules name it too).
FINDINGS = """
[findings]
rules_in = ["expect.toml"]

[[finding]]
id = "bf16-noncausal-drift"
title = "CPU_ATTN drifts on bf16 non-causal drafts"
kind = "upstream-bug"
upstream = "unreported"
vllm = ">=0.24"
first_release = "0.24.0"
measured = "a sample"
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def matrix_from(folder: Path, text: str = BASIC_MATRIX, expectations: str | None = None) -> Matrix:
    if expectations is not None:
        write(folder, "expect.toml", expectations)
        write(folder, "findings.toml", FINDINGS)
        text = text.replace("[matrix]\n", '[matrix]\nexpectations = "expect.toml"\n', 1)
    return load_matrix(write(folder, "matrix.toml", text))


def cell_named(matrix: Matrix, ident: str) -> Cell:
    return next(cell for cell in expand(matrix) if cell.id == ident)


def ran(backend: str | None, layers: Sequence[str] | None = None, **facts: Any) -> Observation:
    """A cell that built and ran: the platform chose and the layers carry ``layers`` (default: backend)."""
    chosen = tuple(layers) if layers is not None else (backend or "CPU_ATTN",)
    facts.setdefault("platform_choice", chosen[0])
    return Observation(backend, observed_backends=chosen, **facts)


# One observation per verdict, as a lane would report it for a cell requesting FLASH_ATTN.
OBSERVATIONS: dict[Verdict, Observation] = {
    Verdict.PASS: ran("FLASH_ATTN", max_abs_err=1e-3, tolerance=2e-2),
    Verdict.UNSUPPORTED: Observation("FLASH_ATTN", rejection=("sink not supported", "head size 40")),
    Verdict.SUBSTITUTED: ran("FLASH_ATTN", ["CPU_ATTN"]),
    Verdict.WRONG_BACKEND: ran("FLASH_ATTN", ["CPU_ATTN", "CPU_ATTN"], platform_choice="FLASH_ATTN"),
    Verdict.WRONG_SETTING: ran(
        "FLASH_ATTN",
        lost_settings=("model.layers.0.self_attn.attn: sliding_window is 64, the draft asked for none",),
    ),
    Verdict.MISMATCH: ran("FLASH_ATTN", max_abs_err=0.5, tolerance=2e-2),
    Verdict.LOADER_DIFF: ran(
        "FLASH_ATTN",
        max_abs_err=1e-3,
        tolerance=2e-2,
        loader_differential=LoaderDifferential(
            (LayerAgreement("model.layers.0.self_attn.attn", "FlashAttentionImpl", "FlashAttentionImpl", False, 4e-3),)
        ),
    ),
    Verdict.CRASH: Observation("FLASH_ATTN", failure=Failure(Stage.FORWARD, "RuntimeError", "illegal memory access")),
    Verdict.TIMEOUT: Observation("FLASH_ATTN", timed_out=True),
    Verdict.UNAVAILABLE: Observation("FLASH_ATTN", unavailable="flash_attn is not installed"),
}


def result(
    cell: Cell,
    verdict: Verdict,
    expected: Verdict | None = None,
    *,
    claim: Claim | None = None,
    message: str | None = None,
    duration_s: float = 0.25,
) -> CellResult:
    """The result of ``cell`` observed as ``verdict`` and expected as ``expected`` (default: the same)."""
    observation = OBSERVATIONS[verdict]
    observation = dataclasses.replace(observation, claim=claim, duration_s=duration_s)
    expectation = Expectation(expected or verdict, f"expected {(expected or verdict).value}", message, rule=0)
    return decide(cell, observation, expectation)


def write_journal(
    path: Path,
    results: Iterable[CellResult],
    planned: Sequence[str],
    *,
    lane: str = "cpu",
    run: dict[str, Any] | None = None,
    env: dict[str, Any] | None = None,
    end: bool = True,
) -> Path:
    writer = JournalWriter(path)
    writer.start({"lane": lane, "matrix": "basic", **(run or {})}, planned)
    writer.env(env if env is not None else {"platform": "cpu", "device": "x86_64", "vllm": "0.32.0", "torch": "2.13"})
    for item in results:
        writer.cell(item)
    if end:
        writer.end()
    writer.close()
    return path


def journal_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def rewrite_lines(path: Path, lines: Iterable[object]) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


# The matrix.json cell fields other tools rely on (issue 2's contract).
CONTRACT_KEYS = {
    "id",
    "axes",
    "requested_backend",
    "observed_backends",
    "verdict",
    "expected",
    "stage",
    "message",
    "max_abs_err",
    "tolerance",
    "claim",
    "duration_s",
}
