"""Strength 3 counting only cells that reach the draft (issue 38): [strength3] guarantees every
(generation, requested backend, value) triple of its axes in a cell the declarations say reaches the
draft, adds only cells, reports what no cell can reach; and the check of a measured report lists the
guaranteed triples none of its cells reached."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path

import pytest

from harness.axes import AXES_BY_NAME, AxisValue
from harness.covering import ReachingCover, cover_reaching, triples_not_reached
from harness.errors import InputError
from harness.matrix import expand, reaching_cover, selector_matches

from .samples import matrix_from

pytestmark = pytest.mark.pure

OVER: tuple[tuple[str, tuple[AxisValue, ...]], tuple[str, tuple[AxisValue, ...]]] = (
    ("capability", ("8.0", "9.0")),
    ("backend", ("auto", "FLASH_ATTN", "ROCM_ATTN")),
)
TEMPLATE: dict[str, AxisValue] = {"capability": "8.0", "backend": "auto", "kv": "auto", "opt": "none", "dtype": "bf16"}


def _reaches(row: Mapping[str, AxisValue]) -> bool:
    # ROCM_ATTN never serves the draft; "f16" needs an f16 target; "nvfp4" has no target backend on 9.0.
    # Like a selector, it refuses a row only on the axes the row holds.
    return not (
        row.get("backend") == "ROCM_ATTN"
        or (row.get("kv") == "f16" and "dtype" in row and row["dtype"] != "f16")
        or (row.get("kv") == "nvfp4" and row.get("capability") == "9.0")
    )


def _cover(present: tuple[dict[str, AxisValue], ...] = ()) -> ReachingCover:
    return cover_reaching(
        OVER,
        (("kv", ("auto", "f16", "nvfp4")), ("opt", ("none", "a", "b", "c"))),
        TEMPLATE,
        (("dtype", ("bf16", "f16")),),
        _reaches,
        present,
    )


def test_every_reachable_triple_is_in_a_reaching_row_and_the_rest_are_reported() -> None:
    result = _cover()
    assert all(_reaches(row) for row in result.rows)
    held = {
        (("capability", r["capability"]), ("backend", r["backend"]), (name, r[name]))
        for r in result.rows
        for name in ("kv", "opt")
    }
    wanted = {
        (("capability", c), ("backend", b), (name, v))
        for c, b in itertools.product(*(values for _, values in OVER))
        for name, values in (("kv", ("auto", "f16", "nvfp4")), ("opt", ("none", "a", "b", "c")))
        for v in values
    }
    unreachable = {t for t in wanted if t[1][1] == "ROCM_ATTN" or (t[0][1] == "9.0" and t[2] == ("kv", "nvfp4"))}
    assert held == wanted - unreachable == set(result.guaranteed)
    assert set(result.unreachable) == unreachable


def test_one_row_carries_a_value_of_each_axis_so_rows_are_the_longest_list_per_pair() -> None:
    # Four option values, three kv values: four rows for each of the four reachable (generation, backend) pairs.
    assert len(_cover().rows) == 4 * 4


def test_a_refused_row_takes_the_fewest_vary_changes_that_reach() -> None:
    rows = [row for row in _cover().rows if row["kv"] == "f16"]
    assert rows and all(row["dtype"] == "f16" for row in rows)
    assert all(row["dtype"] == "bf16" for row in _cover().rows if row["kv"] != "f16")


def test_a_present_row_that_reaches_holds_its_triples_and_one_that_does_not_holds_none() -> None:
    reaching = {**TEMPLATE, "capability": "9.0", "backend": "FLASH_ATTN", "opt": "a"}
    refused = {**TEMPLATE, "capability": "9.0", "backend": "auto", "kv": "f16"}  # a bf16 target
    # An axis the template does not name (another block's) leaves the row the template's.
    elsewhere = {**TEMPLATE, "capability": "9.0", "backend": "auto", "opt": "b", "other": "x"}
    result = _cover((reaching, refused, elsewhere))
    added = [(r["capability"], r["backend"], r["kv"], r["opt"]) for r in result.rows]
    assert not any(c == "9.0" and b == "FLASH_ATTN" and o == "a" for c, b, _, o in added)
    assert any(c == "9.0" and b == "auto" and k == "f16" for c, b, k, _ in added)
    # (9.0, FLASH_ATTN) needs options none, b, c; (9.0, auto) none, a, c (and f16, nvfp4 being unreachable).
    assert len(result.rows) == 16 - 2


def test_a_present_row_unlike_the_template_outside_the_free_axes_holds_nothing() -> None:
    # The declarations speak for the template's neighbourhood: a causal row, say, is not counted.
    present = (
        {**TEMPLATE, "capability": "9.0", "backend": "FLASH_ATTN", "opt": "a", "kv": "auto"} | {"dtype": "bf16"},
    )
    template = {**TEMPLATE, "causal": False}
    result = cover_reaching(
        OVER, (("opt", ("none", "a")),), template, (), _reaches, tuple({**row, "causal": True} for row in present)
    )
    assert any(r["capability"] == "9.0" and r["backend"] == "FLASH_ATTN" and r["opt"] == "a" for r in result.rows)


def test_the_rows_are_the_same_on_every_call() -> None:
    assert _cover().rows == _cover().rows


def test_the_report_check_lists_the_guaranteed_triples_no_reached_cell_holds() -> None:
    wanted = (
        (("capability", "9.0"), ("backend", "auto"), ("kv", "f16")),
        (("capability", "9.0"), ("backend", "auto"), ("kv", "auto")),
        (("capability", "8.0"), ("backend", "FLASH_ATTN"), ("opt", "a")),
    )
    cells = [
        ({"capability": "9.0", "backend": "auto", "kv": "f16", "opt": "none"}, False),  # refused: not reached
        ({"capability": "9.0", "backend": "auto", "kv": "auto", "opt": "a"}, True),
        ({"capability": "8.0", "backend": "auto", "kv": "auto", "opt": "a"}, True),  # another backend
    ]
    assert triples_not_reached(cells, wanted) == (wanted[0], wanted[2])
    assert (
        triples_not_reached(
            [(row, True) for row, _ in cells] + [({**cells[2][0], "backend": "FLASH_ATTN"}, True)], wanted
        )
        == ()
    )


STRENGTH3 = """
[matrix]
name = "s3"
lane = "fake"

[axes]
capability = ["8.0", "9.0"]
backend = ["auto", "FLASH_ATTN", "NO_ATTENTION"]
causal = [true, false]
sink = [false]
loader = ["v2"]

[cover]
kv_cache_dtype = ["auto", "fp8"]
target_dtype = ["bfloat16", "float16"]

[[product]]
capability = ["9.0"]
backend = ["auto"]
causal = [false]
sink = [false]
loader = ["v2"]
kv_cache_dtype = ["nvfp4", "float16"]

[[stops_before_draft]]
kv_cache_dtype = "float16"
target_dtype = "bfloat16"
reason = "planted: a float16 cache needs a float16 target"

[strength3]
axes = ["kv_cache_dtype"]
with = { causal = false, sink = false, loader = "v2" }
vary = ["target_dtype"]

[[misses_draft]]
backend = "NO_ATTENTION"
reason = "planted: the module is missing"

[[misses_draft]]
kv_cache_dtype = "nvfp4"
capability = "8.0"
reason = "planted: no target backend for nvfp4 on SM80"
"""


def test_the_block_adds_cells_after_every_other_and_renames_none(tmp_path: Path) -> None:
    with_block = matrix_from(tmp_path, STRENGTH3)
    without = matrix_from(tmp_path, STRENGTH3.split("[strength3]")[0])
    before = [c.id for c in expand(without)]
    after = [c.id for c in expand(with_block)]
    assert after[: len(before)] == before and len(after) > len(before)


def test_the_block_guarantees_each_reachable_triple_in_a_reaching_cell(tmp_path: Path) -> None:
    matrix = matrix_from(tmp_path, STRENGTH3)
    result = reaching_cover(matrix)
    assert result is not None
    refusals = [stop.when for stop in matrix.stops_before_draft + matrix.strength3.misses]  # type: ignore[union-attr]
    cells = [c.values for c in expand(matrix)]
    for (_, cap), (_, backend), (_, kv) in result.guaranteed:
        assert any(
            v["capability"] == cap
            and v["backend"] == backend
            and v.get("kv_cache_dtype", "auto") == kv
            and not v["causal"]
            and not any(selector_matches(rule, {"target_dtype": "bfloat16", **v}) for rule in refusals)
            for v in cells
        ), (cap, backend, kv)
    assert {t[1][1] for t in result.unreachable} >= {"NO_ATTENTION"}
    assert (("capability", "8.0"), ("backend", "auto"), ("kv_cache_dtype", "nvfp4")) in result.unreachable
    float16 = [v for v in cells if v.get("kv_cache_dtype") == "float16" and v["capability"] == "8.0"]
    assert float16 and all(v["target_dtype"] == "float16" for v in float16)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            '[strength3]\naxes = ["backend"]\nwith = { causal = false, sink = false, loader = "v2" }',
            "the block's other",
        ),
        ('[strength3]\naxes = ["method"]\nwith = { causal = false, sink = false, loader = "v2" }', "not an axis of"),
        (
            '[strength3]\naxes = ["kv_cache_dtype"]\nwith = { sink = false, loader = "v2" }',
            "with.causal: must be named",
        ),
        (
            '[strength3]\naxes = ["kv_cache_dtype"]\nwith = { causal = [true, false], sink = false, loader = "v2" }',
            "takes one value",
        ),
        ('[[misses_draft]]\nbackend = "auto"\nreason = "x"', "a [strength3] block this file lacks"),
        (
            '[strength3]\naxes = ["kv_cache_dtype"]\nwith = { causal = false, sink = false, loader = "v2" }\n'
            '[[misses_draft]]\nbackend = "auto"',
            "misses_draft[0].reason: required",
        ),
    ],
)
def test_a_bad_block_is_one_line_naming_the_key(tmp_path: Path, text: str, fragment: str) -> None:
    base = STRENGTH3.split("[strength3]")[0]
    with pytest.raises(InputError, match=None) as raised:
        matrix_from(tmp_path, base + text + "\n")
    assert fragment in str(raised.value)


def _record(verdict: str, stage: str | None, draft: str | None = None, **axes: AxisValue) -> dict[str, object]:
    return {
        "id": "sm90-auto",
        "lane": "selection",
        "axes": {"capability": "9.0", "backend": "auto", "kv_cache_dtype": "auto", **axes},
        "verdict": verdict,
        "expected": verdict,
        "stage": stage,
        "message": "m",
        "details": {"draft": draft} if draft else {},
    }


@pytest.mark.parametrize(
    ("verdict", "stage", "draft", "reached"),
    [
        ("pass", None, None, True),
        ("wrong-setting", "build", None, True),
        ("wrong-backend", "build", "the loader selected FLASHINFER for the draft layers: ...", True),
        ("crash", "build", None, True),
        ("unsupported", "startup", None, True),
        ("crash", "build", "not built: the target failed first: ValueError: ...", False),
        ("unsupported", "select", "loader refused it too: ...", False),
        ("unsupported", "config", None, False),
        ("unavailable", None, "not built: this vLLM release lacks ...", False),
    ],
)
def test_a_cell_reached_the_draft_when_its_draft_was_built(
    verdict: str, stage: str | None, draft: str | None, reached: bool
) -> None:
    from harness.result import CellResult

    assert CellResult.from_json(_record(verdict, stage, draft)).reached_draft is reached


def test_the_tool_lists_the_guaranteed_triples_a_report_did_not_reach() -> None:
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "tools" / "reach_triples.py"
    spec = importlib.util.spec_from_file_location("dflash_matrix_reach_triples", path)
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    guaranteed = (
        (("capability", "9.0"), ("backend", "auto"), ("kv_cache_dtype", "auto")),
        (("capability", "9.0"), ("backend", "auto"), ("kv_cache_dtype", "nvfp4")),
    )
    report = {"cells": [_record("pass", None), _record("unsupported", "select", kv_cache_dtype="nvfp4")]}
    assert tool.unreached(report, guaranteed) == (guaranteed[1],)
    # A record leaves an axis only [[product]] blocks vary out at its default: it holds that default.
    none = ((("capability", "9.0"), ("backend", "auto"), ("draft_option", "none")),)
    assert tool.unreached(report, none) == ()


# What a measured cell's expected verdict says about its draft: built (the loader ran and its layers
# were judged) for these; `unsupported` and `unavailable` stop before it (a refusal at start-up, after
# the build, is listed with the release gaps below, as an expectation names no stage).
BUILT = {"pass", "wrong-backend", "wrong-setting", "crash", "mismatch", "loader-diff", "substituted"}


def _gap(release: str, triple: tuple[tuple[str, AxisValue], ...]) -> str | None:
    """Why a recorded release reaches a guaranteed triple on no cell: the declarations are
    release-independent, the releases are not (tools/reach_triples.py lists the same after a run)."""
    (_, capability), (_, backend), (axis, value) = triple
    if capability == "10.0" and backend == "FLEX_ATTENTION":
        return "refused at start-up after the build (no KV cache layout serves both sides): reached, stage startup"
    if release == "0.33.0" and backend == "FLASHINFER_TS":
        return "0.33.0 has no FLASHINFER_TS member"
    if release == "0.33.0" and (axis, value) == ("draft_option", "draftdcp1"):
        return "0.33.0's SpeculativeConfig has no draft_decode_context_parallel_size"
    if release == "0.34.0" and (axis, value) == ("draft_option", "nopad"):
        return "0.34.0's SpeculativeConfig has no disable_padded_drafter_batch"
    return None


@pytest.mark.parametrize("release", ["0.33.0", "0.34.0"])
def test_every_guaranteed_triple_has_a_cell_whose_measured_expectation_builds_the_draft(release: str) -> None:
    # The declarations are checked against vLLM through the expectations, which record what each
    # release answered for each cell: a declaration that lets a triple count where vLLM refuses the
    # draft leaves that triple without a built cell here, and the test names it.
    from harness.bundled import matrix_path
    from harness.expectations import expectations_for
    from harness.matrix import load_matrix

    matrix = load_matrix(matrix_path("selection"))
    result = reaching_cover(matrix)
    assert result is not None
    expectations = expectations_for(matrix, release)
    built: dict[tuple[AxisValue, AxisValue], set[tuple[str, AxisValue]]] = {}
    assert matrix.strength3 is not None
    defaults: dict[str, AxisValue] = {}
    for name in matrix.strength3.axes:
        default = AXES_BY_NAME[name].default
        assert default is not None  # a [strength3] axis is one the covering or a [[product]] holds at a default
        defaults[name] = default
    for cell in expand(matrix):
        if expectations.for_cell(cell).verdict.value in BUILT:
            values = cell.values
            held = built.setdefault((values["capability"], values["backend"]), set())
            held.update((name, values.get(name, default)) for name, default in defaults.items())
    missing = [t for t in result.guaranteed if t[2] not in built.get((t[0][1], t[1][1]), set())]
    unexplained = [t for t in missing if _gap(release, t) is None]
    assert not unexplained, "\n".join(map(str, unexplained))
