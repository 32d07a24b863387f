"""The dflash-matrix command line: cells, report, --version, and bad input (one line, exit 2, no files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import __version__
from harness.cli import COMMANDS, main
from harness.matrix import expand
from harness.verdict import Verdict

from .samples import BASIC_MATRIX, RULES, matrix_from, result, rewrite_lines, write, write_journal

pytestmark = pytest.mark.pure


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"dflash-matrix {__version__}"


def test_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for name, _ in COMMANDS:
        assert name in out


def test_cells_lists_expectations_and_stale_rules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stale_rule = (
        '\n[[expect]]\nwhen = { backend = "CPU_ATTN", dtype = "float32" }\nverdict = "crash"\n'
        'finding = "bf16-noncausal-drift"\nreason = "gone"\n'
    )
    matrix = matrix_from(tmp_path, expectations=RULES + stale_rule)
    assert main(["cells", str(matrix.path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "# basic (cpu lane): 8 cells"
    assert lines[1].split()[:2] == ["CPU_ATTN-causal-sink-bf16", "pass"]
    flash = next(line for line in lines if line.startswith("FLASH_ATTN-causal-nosink-bf16 "))
    assert "substituted" in flash and "rule 0: CpuPlatform runs CPU_ATTN" in flash
    assert "[message contains 'CPU_ATTN']" in flash
    assert lines[-2] == "# 1 stale expectation rule(s):"
    assert lines[-1].startswith("stale: expect.toml: expect[3] (gone)")


def test_cells_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    matrix = matrix_from(tmp_path, expectations=RULES)
    assert main(["cells", str(matrix.path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["matrix"], data["lane"], len(data["cells"]), data["stale_expectations"]) == ("basic", "cpu", 8, [])
    first = data["cells"][4]
    assert first["id"] == "FLASH_ATTN-causal-sink-bf16"
    assert first["expected"] == "unsupported" and first["reason"] == "rule 1: no sink support"
    assert first["axes"] == {"backend": "FLASH_ATTN", "causal": True, "sink": True, "dtype": "bfloat16"}
    assert first["tolerance"] == 0.02 and first["timeout_s"] == 60


def _journal(tmp_path: Path, ok: bool = True) -> Path:
    matrix = matrix_from(tmp_path)
    cells = expand(matrix)
    results = [result(cell, Verdict.PASS) for cell in cells]
    if not ok:
        results[0] = result(cells[0], Verdict.CRASH, Verdict.PASS)
    return write_journal(tmp_path / "journal" / "main.jsonl", results, [c.id for c in cells])


def test_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal = _journal(tmp_path)
    out = tmp_path / "reports"
    assert main(["report", str(journal.parent), "--out", str(out), "--strict"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "8 cells: 8 as expected, 0 not, 0 not run, 0 stale expectation rules"
    assert sorted(p.name for p in out.iterdir()) == ["junit.xml", "matrix.html", "matrix.json", "matrix.md"]


def test_report_strict_fails_on_a_mismatch(tmp_path: Path) -> None:
    journal = _journal(tmp_path, ok=False)
    assert main(["report", str(journal), "--out", str(tmp_path / "a")]) == 0
    assert main(["report", str(journal), "--out", str(tmp_path / "b"), "--strict"]) == 1
    assert (tmp_path / "b" / "junit.xml").exists()


def _bad_matrix(text: str, expectations: str | None = None) -> object:
    def make(tmp_path: Path) -> list[str]:
        if expectations is not None:
            write(tmp_path, "expect.toml", expectations)
        return ["cells", str(write(tmp_path, "matrix.toml", text))]

    return make


def _bad_journal(*lines: object) -> object:
    def make(tmp_path: Path) -> list[str]:
        path = rewrite_lines(tmp_path / "bad.jsonl", lines)
        return ["report", str(path), "--out", str(tmp_path / "out")]

    return make


RUN = {"kind": "run", "run": {"lane": "cpu"}, "planned": []}
WITH_EXPECTATIONS = BASIC_MATRIX.replace("[matrix]\n", '[matrix]\nexpectations = "expect.toml"\n')
BAD_INPUT = {
    "toml-syntax-error": (_bad_matrix("[matrix\n"), "TOML syntax error"),
    "unknown-axis": (
        _bad_matrix(BASIC_MATRIX + "\n[axes.extra]\n"),
        "axes.extra: unknown axis (valid: capability, backend",
    ),
    "empty-axis": (
        _bad_matrix(BASIC_MATRIX.replace('["bfloat16"]', "[]")),
        "axes.dtype: an axis needs a non-empty list",
    ),
    "duplicate-ids": (_bad_matrix(BASIC_MATRIX.replace("[true, false]", "[true, true]", 1)), "duplicate cell id"),
    "verdict-not-in-vocabulary": (
        _bad_matrix(WITH_EXPECTATIONS, '[[expect]]\nwhen = { sink = true }\nverdict = "flaky"\nreason = "r"\n'),
        "expect.toml: expect[0].verdict: 'flaky' is not a verdict (valid: pass, unsupported,",
    ),
    "exclusion-naming-a-missing-axis": (
        _bad_matrix(BASIC_MATRIX + "\n[[exclude]]\ncudagraph = 'graph'\n"),
        "exclude[0].cudagraph: names an axis this matrix does not have (valid: backend, causal, sink, dtype)",
    ),
    "missing-matrix": (lambda tmp_path: ["cells", str(tmp_path / "none.toml")], "none.toml: file not found"),
    "missing-expectations-file": (_bad_matrix(WITH_EXPECTATIONS), "expect.toml: file not found"),
    "journal-not-json": (_bad_journal(RUN, "{oops"), "bad.jsonl: line 2: not JSON"),
    "journal-unknown-verdict": (
        _bad_journal(
            RUN,
            {
                "kind": "cell",
                "cell": {"id": "A", "lane": "cpu", "axes": {"backend": "A"}, "verdict": "meh", "expected": "pass"},
            },
        ),
        "bad.jsonl: line 2: verdict 'meh' is not one of: pass,",
    ),
    "journal-wrong-types": (_bad_journal({"kind": "run", "run": [], "planned": {}}), "line 1: run record needs"),
    "journal-missing": (
        lambda tmp_path: ["report", str(tmp_path / "x.jsonl"), "--out", str(tmp_path / "out")],
        "x.jsonl: journal not found",
    ),
    "journal-empty": (_bad_journal(), "bad.jsonl: empty journal"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_is_one_line_exit_2_and_no_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    make, fragment = BAD_INPUT[case]
    argv = make(tmp_path)  # type: ignore[operator]
    before = sorted(tmp_path.rglob("*"))
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("dflash-matrix: ")
    assert fragment in captured.err
    assert sorted(tmp_path.rglob("*")) == before  # nothing written, not even the output directory


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["report"])
    assert exit_.value.code == 2
    assert "--out" in capsys.readouterr().err


def test_cells_judges_as_the_given_vllm_release(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    versioned = (
        RULES
        + '\n[[expect]]\nwhen = { backend = "FLASH_ATTN", sink = true }\nvllm = ">=0.30"\n'
        + 'verdict = "pass"\nreason = "fixed"\n'
    )
    matrix = matrix_from(tmp_path, expectations=versioned)
    assert main(["cells", str(matrix.path), "--vllm", "0.33.0", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["vllm"] == "0.33.0" and data["cells"][4]["expected"] == "pass"
    assert main(["cells", str(matrix.path), "--vllm", "0.24.0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "# basic (cpu lane): 8 cells, judged as vLLM 0.24.0"
    assert "unsupported" in next(line for line in lines if line.startswith("FLASH_ATTN-causal-sink-bf16 "))
    assert main(["cells", str(matrix.path), "--vllm", "newest"]) == 2
    assert capsys.readouterr().err.strip() == "dflash-matrix: --vllm: 'newest' is not a PEP 440 version (e.g. 0.33.0)"


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ('target_model = ["qwen3", "llama"]\n', "axes.target_model: 'llama' is not allowed"),
        ('target_model = ["qwen3", "gemma3_mm"]\n[cover]\ntarget_dtype = ["bfloat16", "float16"]\n', "cannot be built"),
    ],
)
def test_a_target_value_or_combination_the_selection_lane_cannot_build_exits_2_at_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: str, fragment: str
) -> None:
    text = (
        '[matrix]\nname = "s"\nlane = "selection"\n[axes]\ncapability = ["9.0"]\nbackend = ["auto"]\n'
        f"causal = [true]\nsink = [false]\n{extra}"
    )
    assert main(["cells", str(write(tmp_path, "s.toml", text))]) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and "\n" not in err
