"""Matrix files: expansion into cells, readable and stable ids, exclusions, tolerances, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import InputError
from harness.matrix import expand, load_matrix

from .samples import BASIC_MATRIX, matrix_from, write

pytestmark = pytest.mark.pure


def test_expansion_is_the_product_of_the_axes_in_file_order(tmp_path: Path) -> None:
    cells = expand(matrix_from(tmp_path))
    assert [cell.id for cell in cells] == [
        "CPU_ATTN-causal-sink-bf16",
        "CPU_ATTN-causal-nosink-bf16",
        "CPU_ATTN-noncausal-sink-bf16",
        "CPU_ATTN-noncausal-nosink-bf16",
        "FLASH_ATTN-causal-sink-bf16",
        "FLASH_ATTN-causal-nosink-bf16",
        "FLASH_ATTN-noncausal-sink-bf16",
        "FLASH_ATTN-noncausal-nosink-bf16",
    ]
    first = cells[0]
    assert first.values == {"backend": "CPU_ATTN", "causal": True, "sink": True, "dtype": "bfloat16"}
    assert first.lane == "cpu"
    assert first.requested_backend == "CPU_ATTN"
    assert first.timeout_s == 60


def test_ids_follow_the_fixed_axis_order_whatever_the_file_order(tmp_path: Path) -> None:
    text = """
[matrix]
lane = "fake"
[axes]
sink = [false]
dtype = ["float16"]
sliding_window = [0, 128]
loader = ["v2"]
kv_cache_dtype = ["auto", "fp8"]
cudagraph = ["graph"]
causal = [false]
backend = ["auto"]
capability = ["9.0"]
"""
    ids = [cell.id for cell in expand(matrix_from(tmp_path, text))]
    assert ids == [
        "sm90-auto-noncausal-nosink-fp16-v2-graph",
        "sm90-auto-noncausal-nosink-fp16-kv-fp8-v2-graph",
        "sm90-auto-noncausal-nosink-swa128-fp16-v2-graph",
        "sm90-auto-noncausal-nosink-swa128-fp16-kv-fp8-v2-graph",
    ]
    assert expand(matrix_from(tmp_path, text))[0].requested_backend is None


@pytest.mark.parametrize(
    ("axis_line", "wider"),
    [
        ('dtype = ["bfloat16"]', 'dtype = ["bfloat16", "float16", "float32"]'),
        ('backend = ["CPU_ATTN", "FLASH_ATTN"]', 'backend = ["TRITON_ATTN", "CPU_ATTN", "FLASH_ATTN", "auto"]'),
        ("sink = [true, false]", "sink = [false, true]"),
    ],
)
def test_ids_do_not_change_when_values_are_added_elsewhere(tmp_path: Path, axis_line: str, wider: str) -> None:
    before = {cell.id: cell.values for cell in expand(matrix_from(tmp_path))}
    after = {cell.id: cell.values for cell in expand(matrix_from(tmp_path, BASIC_MATRIX.replace(axis_line, wider)))}
    assert before.items() <= after.items()


def test_a_new_axis_at_its_default_keeps_ids_readable(tmp_path: Path) -> None:
    # sliding_window = 0 and kv_cache_dtype = auto are the defaults and add no token.
    text = BASIC_MATRIX.replace(
        'dtype = ["bfloat16"]', 'dtype = ["bfloat16"]\nsliding_window = [0]\nkv_cache_dtype = ["auto"]'
    )
    assert [c.id for c in expand(matrix_from(tmp_path, text))] == [c.id for c in expand(matrix_from(tmp_path))]


def test_exclusions_remove_exactly_the_matching_cells(tmp_path: Path) -> None:
    text = (
        BASIC_MATRIX
        + '\n[[exclude]]\nbackend = "FLASH_ATTN"\nsink = [true]\n\n[[exclude]]\ncausal = false\nsink = false\n'
    )
    ids = [cell.id for cell in expand(matrix_from(tmp_path, text))]
    assert ids == [
        "CPU_ATTN-causal-sink-bf16",
        "CPU_ATTN-causal-nosink-bf16",
        "CPU_ATTN-noncausal-sink-bf16",
        "FLASH_ATTN-causal-nosink-bf16",
    ]


PRODUCT_MATRIX = """
[matrix]
lane = "selection"
[axes]
capability = ["9.0"]
backend = ["auto", "FLASH_ATTN"]
causal = [false]
sink = [false]
[cover]
target_attention = ["auto", "FLASHINFER"]
[[product]]
capability = ["9.0"]
backend = ["FLASH_ATTN"]
causal = [false]
sink = [false]
target_attention = ["FLASHINFER", "auto"]
block_size = ["unset", 128]
"""


def test_a_product_block_adds_its_full_product_and_a_row_the_matrix_has_is_that_same_cell(tmp_path: Path) -> None:
    ids = [cell.id for cell in expand(matrix_from(tmp_path, PRODUCT_MATRIX))]
    assert ids == [
        "sm90-auto-noncausal-nosink",
        "sm90-FLASH_ATTN-noncausal-nosink",
        "sm90-auto-noncausal-nosink-tgt.FLASHINFER",
        # The block's rows after the covering's; its unset x auto row is the covering's cell.
        "sm90-FLASH_ATTN-noncausal-nosink-tgt.FLASHINFER",
        "sm90-FLASH_ATTN-noncausal-nosink-tgt.FLASHINFER-bs128",
        "sm90-FLASH_ATTN-noncausal-nosink-bs128",
    ]


def test_an_axis_only_a_product_block_varies_is_left_out_of_the_other_cells(tmp_path: Path) -> None:
    matrix = matrix_from(tmp_path, PRODUCT_MATRIX)
    cells = {cell.id: cell for cell in expand(matrix)}
    assert "block_size" not in cells["sm90-auto-noncausal-nosink"].values
    assert cells["sm90-FLASH_ATTN-noncausal-nosink-bs128"].values["block_size"] == 128
    assert dict(matrix.all_axes)["block_size"] == ("unset", 128)


def test_exclusions_apply_to_product_blocks(tmp_path: Path) -> None:
    text = PRODUCT_MATRIX + "\n[[exclude]]\nblock_size = 128\ntarget_attention = 'auto'\n"
    ids = [cell.id for cell in expand(matrix_from(tmp_path, text))]
    assert "sm90-FLASH_ATTN-noncausal-nosink-bs128" not in ids
    assert "sm90-FLASH_ATTN-noncausal-nosink-tgt.FLASHINFER-bs128" in ids


def test_tolerance_comes_from_the_cell_dtype(tmp_path: Path) -> None:
    text = BASIC_MATRIX.replace('dtype = ["bfloat16"]', 'dtype = ["bfloat16", "float32"]')
    text = text.replace("bfloat16 = 0.02", "bfloat16 = 0.02\nfloat32 = 1e-5")
    matrix = matrix_from(tmp_path, text)
    by_dtype = {cell.get("dtype"): cell.tolerance for cell in expand(matrix)}
    assert by_dtype == {"bfloat16": 0.02, "float32": 1e-5}
    assert matrix.tolerance_for("float16") is None
    assert matrix.tolerance_for(None) is None


def test_options_and_expectations_path_are_read(tmp_path: Path) -> None:
    text = (
        BASIC_MATRIX.replace("[matrix]\n", '[matrix]\nexpectations = "sub/e.toml"\n') + "\n[options]\nseed = 32\n"
    )
    matrix = load_matrix(write(tmp_path, "m.toml", text))
    assert matrix.options == {"seed": 32}
    assert matrix.expectations_path == tmp_path / "sub" / "e.toml"
    assert matrix.name == "basic"


# Each bad matrix names the file, the key, and (where there are any) the valid choices.
BAD_MATRICES = {
    "toml-syntax": ("[matrix\nlane = 'cpu'", ["TOML syntax error"]),
    "unknown-axis": (
        BASIC_MATRIX.replace("[axes]\n", "[axes]\nflavour = ['x']\n"),
        ["axes.flavour", "unknown axis", "backend"],
    ),
    "empty-axis": (BASIC_MATRIX.replace("sink = [true, false]", "sink = []"), ["axes.sink", "non-empty"]),
    "duplicate-ids": (
        BASIC_MATRIX.replace('backend = ["CPU_ATTN", "FLASH_ATTN"]', 'backend = ["CPU_ATTN", "CPU_ATTN"]'),
        ["duplicate cell id", "CPU_ATTN-causal-sink-bf16"],
    ),
    "exclusion-missing-axis": (
        BASIC_MATRIX + "\n[[exclude]]\nloader = 'v1'\n",
        ["exclude[0].loader", "does not have", "valid: backend, causal, sink, dtype"],
    ),
    "exclusion-empty": (BASIC_MATRIX + "\n[[exclude]]\n", ["exclude[0]", "selects every cell"]),
    "bad-value": (
        BASIC_MATRIX.replace('["bfloat16"]', '["bf16"]'),
        ["axes.dtype", "'bf16'", "bfloat16, float16, float32"],
    ),
    "bad-bool": (BASIC_MATRIX.replace("causal = [true, false]", 'causal = ["yes"]'), ["axes.causal", "true, false"]),
    "required-axis": (BASIC_MATRIX.replace("sink = [true, false]\n", ""), ["axes.sink", "required"]),
    "unknown-lane": (BASIC_MATRIX.replace('lane = "cpu"', 'lane = "tpu"'), ["matrix.lane", "cpu, selection, gpu"]),
    "unknown-key": (BASIC_MATRIX + "\n[extra]\n", ["extra", "unknown key"]),
    "bad-timeout": (BASIC_MATRIX.replace("timeout_s = 60", "timeout_s = -1"), ["matrix.timeout_s"]),
    "bad-tolerance": (BASIC_MATRIX.replace("bfloat16 = 0.02", "bfloat16 = 'tight'"), ["tolerance.bfloat16"]),
    "no-matrix-table": ("[axes]\nbackend = ['auto']\n", ["missing [matrix]"]),
    "unknown-block-size": (
        BASIC_MATRIX.replace("[axes]\n", "[axes]\nblock_size = [48]\n"),
        ["axes.block_size", "48 is not a block size", '"unset", 16, 32, 64, 128, 256'],
    ),
    "product-block-size": (
        BASIC_MATRIX + '\n[[product]]\nbackend = "CPU_ATTN"\ncausal = false\nsink = false\nblock_size = [100]\n',
        ["product[0].block_size", "100 is not a block size"],
    ),
    "product-without-an-axis": (
        BASIC_MATRIX + '\n[[product]]\nbackend = "CPU_ATTN"\ncausal = false\nblock_size = [128]\n',
        ["product[0].sink", "must be named", "no default"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_MATRICES))
def test_bad_matrix_is_one_line_naming_file_key_and_choices(tmp_path: Path, case: str) -> None:
    text, fragments = BAD_MATRICES[case]
    path = write(tmp_path, "bad.toml", text)
    with pytest.raises(InputError) as caught:
        load_matrix(path)
    line = caught.value.line()
    assert "\n" not in line
    assert line.startswith(f"{path}: ")
    for fragment in fragments:
        assert fragment in line


def test_missing_matrix_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="file not found"):
        load_matrix(tmp_path / "nope.toml")
