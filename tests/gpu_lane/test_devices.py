"""harness.cuda.devices: the driver query behind the one-line refusal, and worker pinning."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.cuda.devices import (
    REFUSAL,
    Device,
    Inventory,
    MixedGenerations,
    NoDevice,
    device_for_worker,
    device_selectors,
    emulated_inventory,
    is_sticky_cuda_error,
    query,
    single_generation,
    worker_number,
)

pytestmark = pytest.mark.process

H100 = "NVIDIA H100 80GB HBM3:9.0"
A100 = "NVIDIA A100-SXM4-80GB:8.0"
REPO = Path(__file__).resolve().parents[2]


def _inventory(*capabilities: str, visible: str | None = None) -> Inventory:
    devices = tuple(
        Device(ordinal=i, name=f"GPU {i}", capability=c, uuid=f"GPU-{i}", memory_bytes=1)
        for i, c in enumerate(capabilities)
    )
    return Inventory(driver_cuda="12.8", devices=devices, visible=visible)


def test_no_driver_library_is_one_refusal_line() -> None:
    with pytest.raises(NoDevice) as caught:
        query("libcuda-that-does-not-exist.so.1")
    line = caught.value.line()
    assert line.startswith(f"{REFUSAL}: ") and "\n" not in line
    assert "cannot be loaded" in line


def test_a_library_without_the_driver_api_is_refused(tmp_path: Path) -> None:
    stub = tmp_path / "libcuda.so.1"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(stub), str(REPO / "harness" / "cuda" / "libcuda_stub.c")], check=True
    )
    with pytest.raises(NoDevice, match="not an NVIDIA driver"):
        query(str(stub))


def test_devices_are_read_from_the_driver(fake_driver: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_CUDA_DEVICES", f"{H100};{A100}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    inventory = query(fake_driver)
    assert inventory.driver_cuda == "12.8"
    assert [(d.ordinal, d.name, d.capability) for d in inventory.devices] == [
        (0, "NVIDIA H100 80GB HBM3", "9.0"),
        (1, "NVIDIA A100-SXM4-80GB", "8.0"),
    ]
    assert inventory.devices[1].uuid == "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f"
    assert inventory.devices[0].memory_bytes == 80 << 30


def test_driver_applies_visible_devices(fake_driver: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_CUDA_DEVICES", f"{H100};{A100}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert [d.name for d in query(fake_driver, "1").devices] == ["NVIDIA A100-SXM4-80GB"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(NoDevice) as caught:
        query(fake_driver, "")
    assert caught.value.line() == f"{REFUSAL}: the NVIDIA driver reports none (CUDA_VISIBLE_DEVICES='')"


def test_a_failing_driver_names_its_error(fake_driver: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_CUDA_DEVICES", H100)
    monkeypatch.setenv("FAKE_CUDA_INIT_ERROR", "999")
    with pytest.raises(NoDevice, match=r"cuInit returned CUDA_ERROR_UNKNOWN \(999\)"):
        query(fake_driver)


@pytest.mark.parametrize(
    ("driver_env", "code", "stdout", "stderr"),
    [
        ({"FAKE_CUDA_DEVICES": H100}, 0, "1 CUDA device(s), driver CUDA 12.8: 0: NVIDIA H100 80GB HBM3 (SM 9.0", ""),
        ({"FAKE_CUDA_DEVICES": H100, "CUDA_VISIBLE_DEVICES": ""}, 1, "", f"{REFUSAL}: the NVIDIA driver reports none"),
    ],
)
def test_module_check_prints_one_line(
    fake_driver_dir: Path, driver_env: dict[str, str], code: int, stdout: str, stderr: str
) -> None:
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(fake_driver_dir), **driver_env}
    done = subprocess.run(
        [sys.executable, "-m", "harness.cuda.devices"], env=env, capture_output=True, text=True, check=False, cwd=REPO
    )
    assert done.returncode == code
    assert done.stdout.startswith(stdout) and done.stdout.count("\n") == (1 if stdout else 0)
    assert done.stderr.startswith(stderr) and done.stderr.count("\n") == (1 if stderr else 0)


def test_selectors_reuse_the_parents_list_in_driver_order() -> None:
    assert device_selectors(_inventory("9.0", "9.0")) == ("0", "1")
    assert device_selectors(_inventory("9.0", "9.0", visible="3, GPU-abc")) == ("3", "GPU-abc")
    # The driver stops at the first entry it cannot match: only the counted ones are usable.
    assert device_selectors(_inventory("9.0", visible="2,bogus,1")) == ("2",)


def test_workers_get_one_device_each_then_take_turns() -> None:
    selectors = ("4", "5", "6")
    assert [device_for_worker(f"gw{n}", selectors) for n in range(5)] == ["4", "5", "6", "4", "5"]
    assert worker_number("gw12") == 12
    with pytest.raises(ValueError, match="not a pytest-xdist worker id"):
        device_for_worker("main", selectors)
    with pytest.raises(ValueError, match="no devices"):
        device_for_worker("gw0", ())


def test_one_run_serves_one_gpu_generation() -> None:
    assert single_generation(_inventory("9.0", "9.0")) == "9.0"
    with pytest.raises(MixedGenerations) as caught:
        single_generation(_inventory("9.0", "8.0"))
    assert "set CUDA_VISIBLE_DEVICES to devices of one compute capability" in caught.value.line()


@pytest.mark.parametrize(
    "message",
    [
        "CUDA error: an illegal memory access was encountered",
        "RuntimeError: CUDA error: device-side assert triggered",
        "Triton Error [CUDA]: unspecified launch failure",
        "CUDA_ERROR_ILLEGAL_ADDRESS",
        "CUDA error: misaligned address",
    ],
)
def test_sticky_cuda_errors_are_recognised(message: str) -> None:
    assert is_sticky_cuda_error(message)


@pytest.mark.parametrize(
    "message",
    ["CUDA out of memory. Tried to allocate 2.00 GiB", "Selected backend is not valid", "invalid argument"],
)
def test_recoverable_errors_are_not_sticky(message: str) -> None:
    assert not is_sticky_cuda_error(message)


def test_an_emulated_runner_has_the_gpus_it_is_told() -> None:
    inventory = emulated_inventory("2x10.0")
    assert [(d.ordinal, d.name, d.capability) for d in inventory.devices] == [
        (0, "Simulated NVIDIA SM100", "10.0"),
        (1, "Simulated NVIDIA SM100", "10.0"),
    ]
    assert device_selectors(inventory) == ("0", "1")
    assert single_generation(inventory) == "10.0"
    for spec in ("0x9.0", "2x9", "x9.0", "2 x 9.0", "two"):
        with pytest.raises(ValueError, match="is not NxCAPABILITY"):
            emulated_inventory(spec)
