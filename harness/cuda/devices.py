"""The GPU runner's devices, asked of the NVIDIA driver itself, and which one each worker gets.

Standard library only (ctypes against ``libcuda.so.1``): ``tox -e gpu`` runs this check from
tox's own interpreter before it installs vLLM (gigabytes), so a job on a runner without a working
driver goes red in a second with one line, instead of after a long install, and never green
with every cell skipped. The driver API applies ``CUDA_VISIBLE_DEVICES`` exactly as CUDA
itself will in the cell processes, and it creates no CUDA context, so the check leaves no
trace on the devices it counts.

pytest-xdist workers each get one device: the controller counts the visible devices once and
hands worker ``gwN`` the N-th (round-robin when there are more workers than devices); the
worker writes it into ``CUDA_VISIBLE_DEVICES`` before any process of its own touches CUDA
(the cell processes it spawns inherit it). See ``harness.plugins.gpu``.

    python -m harness.cuda.devices     # one line; exit 0 with the devices, 1 with the refusal
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
from dataclasses import dataclass

DRIVER_LIBRARY = "libcuda.so.1"
NVML_LIBRARY = "libnvidia-ml.so.1"
VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
REFUSAL = "no CUDA device visible"
# The one GPU generation an emulated runner serves (``emulated_inventory``), for the gpu_emulated
# lane's cell processes: set by harness.plugins.gpu for that lane only, read by its host alone.
EMULATED_GENERATION = "DFLASH_EMULATED_GENERATION"
EXIT_NO_DEVICE = 1

_CUDA_SUCCESS = 0
_CUDA_ERROR_NO_DEVICE = 100
_ATTRIBUTE_CAPABILITY_MAJOR = 75
_ATTRIBUTE_CAPABILITY_MINOR = 76
_WORKER_ID = re.compile(r"^gw(\d+)$")
_EMULATED = re.compile(r"^(\d+)x(\d+\.\d+)$")


class DeviceRefusal(Exception):
    """The visible devices cannot serve a run; ``line()`` is the one line a user sees."""

    prefix = "unusable CUDA devices"

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why

    def line(self) -> str:
        return " ".join(f"{self.prefix}: {self.why}".split())


class NoDevice(DeviceRefusal):
    prefix = REFUSAL


class MixedGenerations(DeviceRefusal):
    prefix = "CUDA devices of several GPU generations visible"


@dataclass(frozen=True)
class Device:
    """One device as the driver numbers it after ``CUDA_VISIBLE_DEVICES`` is applied."""

    ordinal: int
    name: str
    capability: str  # "9.0": the same spelling as the matrix's capability axis
    uuid: str  # "GPU-..." as nvidia-smi prints it
    memory_bytes: int


@dataclass(frozen=True)
class Inventory:
    """What the driver reported: its CUDA version and the visible devices, in its order."""

    driver_cuda: str  # the newest CUDA version the driver supports, e.g. "12.8"
    devices: tuple[Device, ...]
    visible: str | None  # CUDA_VISIBLE_DEVICES when asked; None = unset (all devices)

    @property
    def capabilities(self) -> tuple[str, ...]:
        return tuple(sorted({device.capability for device in self.devices}))

    def describe(self) -> str:
        listed = "; ".join(f"{d.ordinal}: {d.name} (SM {d.capability}, {d.uuid})" for d in self.devices)
        return f"{len(self.devices)} CUDA device(s), driver CUDA {self.driver_cuda}: {listed}"


def _describe_visible(visible: str | None) -> str:
    return "CUDA_VISIBLE_DEVICES is unset" if visible is None else f"CUDA_VISIBLE_DEVICES={visible!r}"


def _error_name(driver: ctypes.CDLL, code: int) -> str:
    name = ctypes.c_char_p()
    try:
        if driver.cuGetErrorName(code, ctypes.byref(name)) == _CUDA_SUCCESS and name.value:
            return f"{name.value.decode(errors='replace')} ({code})"
    except AttributeError:
        pass
    return f"error {code}"


def _format_uuid(raw: bytes) -> str:
    digits = raw.hex()
    return f"GPU-{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:32]}"


def query(library: str = DRIVER_LIBRARY, visible: str | None = None) -> Inventory:
    """Ask the driver which devices are visible; raise NoDevice with the reason if none is.

    ``visible`` is only reported back; the driver reads ``CUDA_VISIBLE_DEVICES`` from the
    environment of this process when it initialises, so pass what that environment holds.
    """
    try:
        driver = ctypes.CDLL(library)
    except OSError:
        raise NoDevice(
            f"the NVIDIA driver library {library} cannot be loaded (no driver installed, or not on the loader path)"
        ) from None
    try:
        init, get_count, get_device = driver.cuInit, driver.cuDeviceGetCount, driver.cuDeviceGet
    except AttributeError:
        raise NoDevice(f"{library} is not an NVIDIA driver (it has no cuInit)") from None
    code = init(0)
    if code == _CUDA_ERROR_NO_DEVICE:
        raise NoDevice(f"the NVIDIA driver reports none ({_describe_visible(visible)})")
    if code != _CUDA_SUCCESS:
        raise NoDevice(f"the NVIDIA driver failed to initialise: cuInit returned {_error_name(driver, code)}")
    version = ctypes.c_int(0)
    driver.cuDriverGetVersion(ctypes.byref(version))
    count = ctypes.c_int(0)
    code = get_count(ctypes.byref(count))
    if code != _CUDA_SUCCESS:
        raise NoDevice(f"cuDeviceGetCount returned {_error_name(driver, code)}")
    if count.value == 0:
        raise NoDevice(f"the NVIDIA driver reports none ({_describe_visible(visible)})")
    devices = []
    for ordinal in range(count.value):
        handle = ctypes.c_int(0)
        code = get_device(ctypes.byref(handle), ordinal)
        if code != _CUDA_SUCCESS:
            raise NoDevice(f"device {ordinal} cannot be opened: cuDeviceGet returned {_error_name(driver, code)}")
        name = ctypes.create_string_buffer(256)
        driver.cuDeviceGetName(name, len(name), handle)
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        driver.cuDeviceGetAttribute(ctypes.byref(major), _ATTRIBUTE_CAPABILITY_MAJOR, handle)
        driver.cuDeviceGetAttribute(ctypes.byref(minor), _ATTRIBUTE_CAPABILITY_MINOR, handle)
        uuid = ctypes.create_string_buffer(16)
        driver.cuDeviceGetUuid(uuid, handle)
        memory = ctypes.c_size_t(0)
        driver.cuDeviceTotalMem_v2(ctypes.byref(memory), handle)
        devices.append(
            Device(
                ordinal=ordinal,
                name=name.value.decode(errors="replace"),
                capability=f"{major.value}.{minor.value}",
                uuid=_format_uuid(uuid.raw),
                memory_bytes=memory.value,
            )
        )
    return Inventory(
        driver_cuda=f"{version.value // 1000}.{version.value % 1000 // 10}", devices=tuple(devices), visible=visible
    )


def query_environment(library: str = DRIVER_LIBRARY) -> Inventory:
    """``query`` for this process, whose environment the driver reads."""
    return query(library, os.environ.get(VISIBLE_DEVICES))


def driver_release(library: str = NVML_LIBRARY) -> str:
    """The driver's release ("570.124.06") from NVML, for reports; "unknown" if NVML cannot say."""
    try:
        nvml = ctypes.CDLL(library)
        if nvml.nvmlInit_v2() != _CUDA_SUCCESS:
            return "unknown"
    except (OSError, AttributeError):
        return "unknown"
    try:
        release = ctypes.create_string_buffer(96)
        if nvml.nvmlSystemGetDriverVersion(release, len(release)) != _CUDA_SUCCESS:
            return "unknown"
        return release.value.decode(errors="replace")
    finally:
        nvml.nvmlShutdown()


def emulated_inventory(spec: str) -> Inventory:
    """An emulated runner's GPUs from ``NxCAPABILITY`` ("2x9.0": two GPUs of compute capability
    9.0), in place of the driver's answer: the gpu-emulated lane runs one generation per run on
    such a runner, so the worker pinning and deselection of a GPU runner run there too."""
    match = _EMULATED.match(spec)
    if match is None or int(match.group(1)) < 1:
        raise ValueError(f"{spec!r} is not NxCAPABILITY (N >= 1 GPUs of that compute capability)")
    capability = match.group(2)
    name = f"Simulated NVIDIA SM{capability.replace('.', '')}"
    devices = tuple(
        Device(ordinal=n, name=name, capability=capability, uuid=f"GPU-emulated-{n}", memory_bytes=0)
        for n in range(int(match.group(1)))
    )
    return Inventory(driver_cuda="none (emulated)", devices=devices, visible=None)


def device_selectors(inventory: Inventory) -> tuple[str, ...]:
    """What to put in a child's ``CUDA_VISIBLE_DEVICES`` to give it each visible device.

    Entries of the parent's own list are reused as written (indices, ``GPU-`` or ``MIG-``
    UUIDs): the driver stops at the first entry it cannot match, so the devices it counted
    are exactly the leading entries. Without a list the driver's ordinals are the indices.
    """
    if inventory.visible is None:
        return tuple(str(device.ordinal) for device in inventory.devices)
    entries = tuple(entry.strip() for entry in inventory.visible.split(","))
    return entries[: len(inventory.devices)]


def worker_number(worker_id: str) -> int:
    """``gw3`` -> 3 (pytest-xdist names its workers gw0, gw1, ...)."""
    match = _WORKER_ID.match(worker_id)
    if match is None:
        raise ValueError(f"{worker_id!r} is not a pytest-xdist worker id (gw0, gw1, ...)")
    return int(match.group(1))


def device_for_worker(worker_id: str, selectors: tuple[str, ...]) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` value for one worker: worker N gets device N, and with
    more workers than devices they take turns (N modulo the device count)."""
    if not selectors:
        raise ValueError("no devices to share among workers")
    return selectors[worker_number(worker_id) % len(selectors)]


def single_generation(inventory: Inventory) -> str:
    """The one compute capability of the visible devices. The matrix's expectations differ per
    GPU generation, so one run serves one generation; mixed hosts select one per run."""
    capabilities = inventory.capabilities
    if len(capabilities) != 1:
        raise MixedGenerations(
            f"{inventory.describe()}; set {VISIBLE_DEVICES} to devices of one compute capability per run"
        )
    return capabilities[0]


def main(argv: list[str] | None = None) -> int:
    """One line on stdout when devices are visible, the refusal on stderr when none is."""
    try:
        inventory = query_environment(argv[0] if argv else DRIVER_LIBRARY)
    except NoDevice as refusal:
        sys.stderr.write(refusal.line() + "\n")
        return EXIT_NO_DEVICE
    sys.stdout.write(inventory.describe() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


# CUDA's sticky errors: once one happens, every later CUDA call in the process fails with
# it ("the process must be terminated and relaunched"), so the cell that hit it is a crash
# and the next cell needs a fresh process. Runtime and driver spellings, as torch, Triton
# and FlashInfer report them.
_STICKY_ERRORS = (
    "illegal memory access",
    "illegal_address",
    "device-side assert",
    "unspecified launch failure",
    "launch_failed",
    "misaligned address",
    "illegal instruction",
    "invalid program counter",
    "hardware stack error",
    "launch timed out",
    "uncorrectable ecc",
)


def is_sticky_cuda_error(message: str) -> bool:
    """True when an error message names a CUDA error that poisons the whole process."""
    lowered = message.lower()
    return any(phrase in lowered for phrase in _STICKY_ERRORS)
