"""One matrix mistake per lane and kind, and how the refusal must read: shared by the in-process
checks (test_lane_contracts.py) and the end-to-end ones (test_entry_paths.py)."""

from __future__ import annotations

from pathlib import Path

from harness.contracts.lanes import CONTRACTS, LANES

# The axes every matrix of the lane has, then what each mistake adds.
BASE_AXES = {
    "cpu": 'backend = ["CPU_ATTN"]\ncausal = [true]\nsink = [true]\n',
    "gpu": 'capability = ["9.0"]\nbackend = ["FLASH_ATTN"]\ncausal = [true]\nsink = [true]\n',
    "gpu_emulated": 'capability = ["9.0"]\nbackend = ["TRITON_ATTN"]\ncausal = [true]\nsink = [true]\n',
    "selection": 'capability = ["9.0"]\nbackend = ["auto"]\ncausal = [true]\nsink = [true]\n',
    "fake": 'backend = ["A_ATTN"]\ncausal = [true]\nsink = [true]\n',
    "fake_gpu": 'capability = ["9.0"]\nbackend = ["A_ATTN"]\ncausal = [true]\nsink = [true]\n',
}
BAD_VALUES = {
    "cpu": ("seed = 1.5", "options.seed", "1.5 is not an integer >= 0"),
    "gpu": ("head_dim = 4", "options.head_dim", "4 is not an integer >= 8"),
    "gpu_emulated": ('sm_counts = { "9.0" = 0 }', "options.sm_counts", "is not a table of capability = number of SMs"),
    "selection": ("target_backend = 7", "options.target_backend", "7 is not a backend name"),
    "fake": ('actions = { "A_ATTN-causal-sink" = "explode" }', "options.actions", "'explode' is not allowed"),
    "fake_gpu": ("sleep_s = -1", "options.sleep_s", "-1 is not a number of seconds"),
}
# An axis (or an axis value) the lane cannot run; the fake lane varies every axis.
CANNOT_VARY = {
    "cpu": ('capability = ["9.0"]', "axes.capability", "the cpu lane cannot vary this axis"),
    "gpu": ("flashinfer_cubin = [true]", "axes.flashinfer_cubin", "the gpu lane cannot vary this axis"),
    "gpu_emulated": ("flashinfer_cubin = [true]", "axes.flashinfer_cubin", "the gpu_emulated lane cannot vary"),
    "selection": ("sliding_window = [0, 16]", "axes.sliding_window", "16: the selection lane builds no windowed draft"),
}


def _cases() -> list[tuple[str, str, str, str, str, str]]:
    """(lane, mistake, extra axes, options, key, problem)."""
    cases = []
    for lane in LANES:
        names = ", ".join(CONTRACTS[lane].option_names)
        cases.append((lane, "unknown-option", "", "warp_speed = 9", "options.warp_speed", f"(valid: {names})"))
        line, key, problem = BAD_VALUES[lane]
        cases.append((lane, "bad-option-value", "", line, key, problem))
        cases.append((lane, "unknown-axis", 'flavour = ["x"]', "", "axes.flavour", "unknown axis"))
        if lane in CANNOT_VARY:
            axis, key, problem = CANNOT_VARY[lane]
            cases.append((lane, "axis-the-lane-cannot-vary", axis, "", key, problem))
    return cases


CASES = _cases()
IDS = [f"{lane}-{mistake}" for lane, mistake, *_ in CASES]


def write_bad_matrix(folder: Path, lane: str, axes: str, options: str) -> Path:
    path = folder / "bad.toml"
    text = f'[matrix]\nname = "bad"\nlane = "{lane}"\n[axes]\n{BASE_AXES[lane]}{axes}\n'
    path.write_text(text + (f"[options]\n{options}\n" if options else ""))
    return path


def expect_one_line(text: str, path: Path, key: str, problem: str) -> None:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert f"dflash-matrix: {path}: {key}: " in lines[0]
    assert problem in lines[0]
