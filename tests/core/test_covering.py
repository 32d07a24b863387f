"""The covering design: full product on the product axes, every pair with a covered axis in some
row, deterministic, exclusions honoured and reported, product ids untouched."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from harness.axes import AxisValue
from harness.covering import Factors, cover, pairs_present, triples_present
from harness.errors import InputError
from harness.matrix import Matrix, Selector, covering, expand, load_matrix, selector_matches

from .samples import BASIC_MATRIX, matrix_from, write

pytestmark = pytest.mark.pure

COVERED = """
[cover]
method = ["dflash", "dflash2", "dspark"]
head_size = [128, 64, 256]
layers = ["uniform", "mixed", "mixed_native"]
context = ["short", "long"]
draft_kv_cache_dtype = ["target", "fp8"]
"""

# The fake lane varies every axis; the real lanes refuse the family's axes they do not build yet.
BIG_PRODUCT = """
[matrix]
name = "big"
lane = "fake"

[axes]
capability = ["8.0", "9.0", "10.0", "12.0"]
backend = ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION", "auto"]
causal = [true, false]
sink = [true, false]
loader = ["v2", "v1"]
"""


def _feasible_pairs(
    matrix_axes: Factors, exclusions: tuple[Selector, ...]
) -> set[tuple[tuple[str, AxisValue], tuple[str, AxisValue]]]:
    """Every (axis, value) pair of two axes that some full row not excluded contains (brute force)."""
    names = [name for name, _ in matrix_axes]
    found: set[tuple[tuple[str, AxisValue], tuple[str, AxisValue]]] = set()
    for combo in itertools.product(*(values for _, values in matrix_axes)):
        row = dict(zip(names, combo, strict=True))
        if any(selector_matches(rule, row) for rule in exclusions):
            continue
        for a, b in itertools.combinations(names, 2):
            found.add(((a, row[a]), (b, row[b])))
    return found


def _check_all_pairs(matrix: Matrix) -> None:
    rows = [cell.values for cell in expand(matrix)]
    covered_names = {name for name, _ in matrix.cover}
    feasible = _feasible_pairs(matrix.all_axes, matrix.exclusions)
    names = [name for name, _ in matrix.all_axes]
    for a, b in itertools.combinations(names, 2):
        if a not in covered_names and b not in covered_names:
            continue
        present = pairs_present(rows, a, b)
        wanted = {(va, vb) for (na, va), (nb, vb) in feasible if (na, nb) == (a, b)}
        assert wanted <= present, f"{a} x {b}: missing {sorted(wanted - present, key=str)}"


def test_every_pair_with_a_covered_axis_appears(tmp_path: Path) -> None:
    matrix = matrix_from(tmp_path, BIG_PRODUCT + COVERED)
    _check_all_pairs(matrix)


def test_the_product_is_kept_whole_and_its_ids_do_not_change(tmp_path: Path) -> None:
    plain = expand(matrix_from(tmp_path, BIG_PRODUCT))
    covered = expand(matrix_from(tmp_path, BIG_PRODUCT + COVERED))
    assert [c.id for c in covered[: len(plain)]] == [c.id for c in plain]
    # The product's cells carry every covered axis at its default.
    assert all(c.values["method"] == "dflash" and c.values["head_size"] == 128 for c in covered[: len(plain)])
    # Pairwise, not a product: the five covered axes (3*3*3*2*2 = 108x) add a few dozen rows.
    assert len(plain) < len(covered) < len(plain) + 100


def test_expansion_is_deterministic(tmp_path: Path) -> None:
    first = [(c.id, c.values) for c in expand(matrix_from(tmp_path, BIG_PRODUCT + COVERED))]
    again = [(c.id, c.values) for c in expand(matrix_from(tmp_path, BIG_PRODUCT + COVERED))]
    assert first == again


def test_exclusions_remove_rows_and_report_pairs_no_row_can_hold(tmp_path: Path) -> None:
    # dspark has no Model Runner V1 proposer; mixed layouts need a window that sink-less ...
    text = (
        BIG_PRODUCT
        + COVERED
        + """
[[exclude]]
method = "dspark"
loader = "v1"

[[exclude]]
layers = ["mixed", "mixed_native"]
causal = false
sink = false
"""
    )
    matrix = matrix_from(tmp_path, text)
    cells = expand(matrix)
    assert not [c for c in cells if c.values["method"] == "dspark" and c.values["loader"] == "v1"]
    assert not [c for c in cells if c.values["layers"] != "uniform" and not c.values["causal"] and not c.values["sink"]]
    assert (("loader", "v1"), ("method", "dspark")) in covering(matrix).excluded_pairs
    _check_all_pairs(matrix)


def test_a_pair_that_only_a_dead_end_reaches_is_reported_not_looped_on() -> None:
    # Every value of c is excluded next to a=1: the pair (a=1, b=x) has no completion.
    result = cover(
        (("a", (0, 1)),),
        (("b", ("x", "y")), ("c", ("p", "q"))),
        {"b": "x", "c": "p"},
        lambda row: row.get("a") == 1 and "c" in row,
    )
    assert all(row["a"] == 0 for row in result.rows)
    assert (("a", 1), ("b", "x")) in result.excluded_pairs


SEAM = """
[cover]
method = ["dflash", "dflash2", "dspark"]
draft_kv_cache_dtype = ["target", "auto", "fp8"]
kv_cache_dtype = ["auto", "fp8"]
target_dtype = ["bfloat16", "float16", "float32"]

[triples]
axes = ["capability", "backend", "draft_kv_cache_dtype", "kv_cache_dtype", "target_dtype"]
"""


def _feasible_triples(matrix: Matrix) -> set[tuple[tuple[str, AxisValue], ...]]:
    """Every value triple of three [triples] axes that some full row not excluded contains."""
    names = [name for name, _ in matrix.all_axes]
    found: set[tuple[tuple[str, AxisValue], ...]] = set()
    for combo in itertools.product(*(values for _, values in matrix.all_axes)):
        row = dict(zip(names, combo, strict=True))
        if any(selector_matches(rule, row) for rule in matrix.exclusions):
            continue
        for a, b, c in itertools.combinations(matrix.triples, 3):
            found.add(((a, row[a]), (b, row[b]), (c, row[c])))
    return found


def test_every_triple_of_the_triples_axes_appears_and_every_pair_still_does(tmp_path: Path) -> None:
    # Brute force over every full row (4*5*2*2*2*3*3*2*3 = 17280), an exclusion included.
    text = BIG_PRODUCT + SEAM + '\n[[exclude]]\nbackend = "FLEX_ATTENTION"\ndraft_kv_cache_dtype = "fp8"\n'
    matrix = matrix_from(tmp_path, text)
    rows = [cell.values for cell in expand(matrix)]
    feasible = _feasible_triples(matrix)
    for a, b, c in itertools.combinations(matrix.triples, 3):
        present = triples_present(rows, a, b, c)
        wanted = {(va, vb, vc) for (na, va), (nb, vb), (nc, vc) in feasible if (na, nb, nc) == (a, b, c)}
        assert wanted <= present, f"{a} x {b} x {c}: missing {sorted(wanted - present, key=str)}"
    assert not any(r["backend"] == "FLEX_ATTENTION" and r["draft_kv_cache_dtype"] == "fp8" for r in rows)
    excluded = covering(matrix).excluded_triples
    assert (("backend", "FLEX_ATTENTION"), ("draft_kv_cache_dtype", "fp8"), ("kv_cache_dtype", "auto")) in excluded
    _check_all_pairs(matrix)


def test_triples_only_add_rows_after_the_pairwise_ones(tmp_path: Path) -> None:
    pairwise = matrix_from(tmp_path, BIG_PRODUCT + SEAM.split("[triples]")[0])
    strength3 = matrix_from(tmp_path, BIG_PRODUCT + SEAM)
    plain, more = [c.id for c in expand(pairwise)], [c.id for c in expand(strength3)]
    assert more[: len(plain)] == plain
    # The bound: every (capability, backend) pair with each of target_dtype's two other values
    # needs a row of its own (4 * 5 * 2 = 40 at least), far below the product's 4*5*3*2*3 = 360x.
    assert len(plain) + 40 <= len(more) < len(plain) + 160


LATER = """
[cover_later]
draft_heads = ["2/1", "4/4", "8/2"]
"""

HEADS_PRODUCT = """
[[product]]
capability = ["8.0", "9.0", "10.0", "12.0"]
backend = ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION", "auto"]
causal = [false]
sink = [false]
loader = ["v2"]
draft_heads = ["4/4", "8/2"]
"""


def test_a_later_axis_renames_no_cell_and_meets_every_other_value(tmp_path: Path) -> None:
    before = [(c.id, c.values) for c in expand(matrix_from(tmp_path, BIG_PRODUCT + SEAM))]
    matrix = matrix_from(tmp_path, BIG_PRODUCT + SEAM + LATER)
    after = expand(matrix)
    # Every earlier row is there, in order, with the later axis at its default (which adds no id token).
    assert [(c.id, {k: v for k, v in c.values.items() if k != "draft_heads"}) for c in after[: len(before)]] == before
    assert {c.values["draft_heads"] for c in after[: len(before)]} == {"2/1"}
    rows = [c.values for c in after]
    for name, values in matrix.all_axes:
        if name != "draft_heads":
            wanted = {(heads, value) for heads in ("2/1", "4/4", "8/2") for value in values}
            assert wanted <= pairs_present(rows, "draft_heads", name), name
    # Pairwise, not a product: the five backends with two later values need 10 rows at least.
    assert 10 <= len(after) - len(before) < 20


def test_product_rows_count_toward_a_later_axis(tmp_path: Path) -> None:
    before = [c.id for c in expand(matrix_from(tmp_path, BIG_PRODUCT + SEAM))]
    with_product = matrix_from(tmp_path, BIG_PRODUCT + SEAM + LATER + HEADS_PRODUCT)
    cells = expand(with_product)
    # The product's 40 rows hold every (capability, backend) pair of the later values: the covering
    # adds only what they miss (causal, sink, v1 and the seam axes), and the earlier rows stay.
    assert [c.id for c in cells[: len(before)]] == before
    assert 0 < len(covering(with_product).rows) - len(before) < 10
    rows = [c.values for c in cells]
    for name, values in with_product.all_axes:
        if name != "draft_heads":
            assert {(h, v) for h in ("4/4", "8/2") for v in values} <= pairs_present(rows, "draft_heads", name)


def test_a_triple_no_row_can_hold_is_reported_not_looped_on() -> None:
    result = cover(
        (("a", (0, 1)),),
        (("b", ("x", "y")), ("c", ("p", "q"))),
        {"b": "x", "c": "p"},
        lambda row: row.get("a") == 1 and row.get("b") == "y" and row.get("c") == "q",
        triples=("a", "b", "c"),
    )
    assert (("a", 1), ("b", "y"), ("c", "q")) in result.excluded_triples
    assert triples_present(result.rows, "a", "b", "c") == set(itertools.product((0, 1), "xy", "pq")) - {(1, "y", "q")}


STOPS = """
[[stops_before_draft]]
target_dtype = "float32"
kv_cache_dtype = "fp8"
reason = "planted: the target refuses an fp8 cache in float32"
"""


def test_a_cell_that_stops_before_the_draft_covers_nothing(tmp_path: Path) -> None:
    # Issue 35: every triple a cell reaching the draft can hold is held by one; none by a stopping cell.
    matrix = matrix_from(tmp_path, BIG_PRODUCT + SEAM + STOPS)
    stops = matrix.stops_before_draft[0]
    reaching = [c.values for c in expand(matrix) if not selector_matches(stops.when, c.values)]
    assert len(reaching) == len(expand(matrix))  # the generator builds no row it cannot count
    feasible = {
        t for t in _feasible_triples(matrix) if not ({("target_dtype", "float32"), ("kv_cache_dtype", "fp8")} <= set(t))
    }
    for a, b, c in itertools.combinations(matrix.triples, 3):
        present = triples_present(reaching, a, b, c)
        wanted = {(va, vb, vc) for (na, va), (nb, vb), (nc, vc) in feasible if (na, nb, nc) == (a, b, c)}
        assert wanted <= present, f"{a} x {b} x {c}: missing {sorted(wanted - present, key=str)}"
    excluded = covering(matrix).excluded_triples
    assert (("capability", "8.0"), ("kv_cache_dtype", "fp8"), ("target_dtype", "float32")) in excluded
    assert stops.reason.startswith("planted")


def test_a_base_row_that_stops_before_the_draft_is_kept_and_its_pairs_covered_again() -> None:
    # b = "y" is the product's own value here: the base row stays a cell, and another row covers its pairs.
    result = cover(
        (("a", (0, 1)), ("b", ("x", "y"))),
        (("c", ("p", "q")),),
        {"c": "p"},
        lambda row: False,
        silent=lambda row: row.get("a") == 1 and row.get("b") == "y" and row.get("c") == "p",
    )
    assert {"a": 1, "b": "y", "c": "p"} in result.base
    counted = [row for row in result.rows if row != {"a": 1, "b": "y", "c": "p"}]
    assert pairs_present(counted, "a", "c") == {(0, "p"), (0, "q"), (1, "p"), (1, "q")}
    assert pairs_present(counted, "b", "c") == {("x", "p"), ("x", "q"), ("y", "p"), ("y", "q")}
    assert not result.excluded_pairs


def test_a_stop_without_a_reason_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"stops_before_draft\[0\]\.reason: required"):
        matrix_from(tmp_path, BIG_PRODUCT + SEAM + '[[stops_before_draft]]\ntarget_dtype = "float32"\n')


def test_a_matrix_without_cover_expands_as_before(tmp_path: Path) -> None:
    ids = [c.id for c in expand(matrix_from(tmp_path))]
    assert ids[:2] == ["CPU_ATTN-causal-sink-bf16", "CPU_ATTN-causal-nosink-bf16"] and len(ids) == 8


@pytest.mark.parametrize(
    ("cover_text", "fragment"),
    [
        ('[cover]\nbackend = ["auto"]', "cover.backend: already an axis of the full product"),
        ('[cover]\ncapability = ["9.0"]', "cover.capability: cannot be covered (no default value)"),
        ('[cover]\nmethod = ["dflash2", "dspark"]', "cover.method: must list its default 'dflash'"),
        ('[cover]\nmethod = ["dflash", "eagle"]', "cover.method: 'eagle' is not allowed"),
        ("[cover]\nhead_size = [128, 100]", "cover.head_size: 100 is not a head size"),
        ('[cover]\nlayers = ["uniform", "uniform"]', "cover.layers: lists a value twice"),
        ("[cover]\nmethod = []", "cover.method: a covered axis needs a non-empty list"),
        ('[cover]\nmethod = ["dflash"]\n[[exclude]]\nhead_size = 64', "exclude[0].head_size: names an axis"),
        ('[cover]\nmethod = ["dflash"]\n[triples]\naxes = ["backend", "method", "loader"]', "'loader' is not an axis"),
        ('[cover]\nmethod = ["dflash"]\n[triples]\naxes = ["backend", "method"]', "at least three axes"),
        ('[cover]\nmethod = ["dflash"]\n[triples]\naxes = ["backend", "causal", "sink"]', "names no [cover] axis"),
        ('[cover]\nmethod = ["dflash"]\n[triples]\naxes = ["backend", "method", "method"]', "lists an axis twice"),
        ('[cover]\nmethod = ["dflash"]\n[triples]\nstrength = 3', "triples.strength: unknown key"),
        ('[cover]\ntarget_dtype = ["bfloat16", "float8"]', "cover.target_dtype: 'float8' is not allowed"),
        ('[cover]\ntarget_head = ["qwen3", "llama"]', "cover.target_head: 'llama' is not allowed"),
        ('[cover]\nmethod = ["dflash"]\n[cover_later]\nmethod = ["dflash"]', "cover_later.method: already under"),
        ('[cover_later]\ndraft_heads = ["4/4"]', "cover_later.draft_heads: must list its default '2/1'"),
        ('[cover_later]\ndraft_heads = ["2/1", "3/2"]', "cover_later.draft_heads: '3/2' is not allowed"),
    ],
)
def test_bad_cover_is_one_line_naming_the_key(tmp_path: Path, cover_text: str, fragment: str) -> None:
    path = write(tmp_path, "m.toml", BASIC_MATRIX + cover_text)
    with pytest.raises(InputError) as raised:
        load_matrix(path)
    assert fragment in raised.value.line() and "\n" not in raised.value.line()


@pytest.mark.parametrize(
    ("lane", "axis"),
    [
        ("cpu", "target_attention"),
        ("selection", "layers"),
        ("selection", "context"),
        # The kernel lanes write a weighted target in the lane's own dtype and shape only.
        ("cpu", "target_dtype"),
        ("gpu", "target_head"),
    ],
)
def test_a_lane_refuses_a_family_axis_it_cannot_build(tmp_path: Path, lane: str, axis: str) -> None:
    values = {
        "layers": '["uniform", "mixed"]',
        "target_attention": '["auto", "FLASHINFER"]',
        "context": '["short", "long"]',
        "target_dtype": '["bfloat16", "float16"]',
        "target_head": '["qwen3", "gemma3"]',
    }[axis]
    text = BIG_PRODUCT.replace('lane = "fake"', f'lane = "{lane}"') + f"[cover]\n{axis} = {values}\n"
    if lane == "cpu":
        text = text.replace('capability = ["8.0", "9.0", "10.0", "12.0"]\n', "")
    with pytest.raises(InputError) as raised:
        load_matrix(write(tmp_path, "m.toml", text))
    assert f"axes.{axis}" in raised.value.line() or f"cover.{axis}" in raised.value.line()


def test_a_combination_the_lane_cannot_build_is_one_line_at_load(tmp_path: Path) -> None:
    # The selection lane builds Gemma 3 targets and float16 targets, never a Gemma 3 target in float16.
    text = (
        BIG_PRODUCT.replace('lane = "fake"', 'lane = "selection"')
        + 'target_model = ["qwen3", "gemma3_mm"]\n[cover]\ntarget_dtype = ["bfloat16", "float16"]\n'
    )
    with pytest.raises(InputError) as raised:
        load_matrix(write(tmp_path, "m.toml", text))
    line = raised.value.line()
    assert "exclude: cells with target_model = 'gemma3_mm', target_dtype = 'float16' cannot be built" in line
    assert "\n" not in line
    excluded = text + '[[exclude]]\ntarget_model = "gemma3_mm"\ntarget_dtype = "float16"\n'
    assert not [
        c
        for c in expand(load_matrix(write(tmp_path, "m.toml", excluded)))
        if c.values["target_model"] == "gemma3_mm" and c.values["target_dtype"] == "float16"
    ]
