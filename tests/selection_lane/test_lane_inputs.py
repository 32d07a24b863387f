"""The selection lane's own logic, without vLLM: process keys, options, axes, rejections,
and the simulated platform's refusals."""

from __future__ import annotations

import socket
import subprocess
import sys
import types
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from harness.attention.rejections import rejection_reasons
from harness.contracts.lanes import SELECTION
from harness.cuda.simulated import SimulatedGpu, SimulationError, closed_loopback_url, install
from harness.errors import InputError
from harness.lanes.selection import create
from harness.matrix import expand, load_matrix

pytestmark = pytest.mark.pure

SHIPPED = Path(__file__).resolve().parents[2] / "matrices" / "selection.toml"


def _matrix(tmp_path: Path, axes: str, options: str = "") -> Path:
    path = tmp_path / "m.toml"
    path.write_text(f'[matrix]\nname = "m"\nlane = "selection"\n\n[axes]\n{axes}\n{options}')
    return path


BASE_AXES = 'capability = ["9.0", "10.0"]\nbackend = ["auto", "FLASH_ATTN"]\ncausal = [true]\nsink = [true]\n'
ONE_CELL = 'capability = ["9.0"]\nbackend = ["auto"]\ncausal = [true]\nsink = [true]\n'


def test_one_process_per_capability_and_cubin_setting() -> None:
    cells = expand(load_matrix(SHIPPED))
    keys = {SELECTION.process_key(cell.values) for cell in cells}
    assert keys == {f"sm{cap}-{cubin}" for cap in ("80", "90", "100", "120") for cubin in ("cubin", "nocubin")}
    for cell in cells:
        assert SELECTION.process_key(cell.values).startswith(cell.id.split("-")[0])


def test_rejection_reasons_are_read_from_vllms_message() -> None:
    error = ValueError(
        "Selected backend AttentionBackendEnum.FLEX_ATTENTION is not valid for this configuration. "
        "Reason: ['attention sinks not supported', 'head_size not supported']"
    )
    assert rejection_reasons(error) == ("attention sinks not supported", "head_size not supported")
    wrapped = ValueError("Selected backend X is not valid. Reason: [ModuleNotFoundError: No module named 'a.b']")
    assert rejection_reasons(wrapped) == ("ModuleNotFoundError: No module named 'a.b'",)
    assert rejection_reasons(ValueError("something else")) == ("something else",)


@pytest.mark.parametrize(
    ("axes", "options", "key"),
    [
        (ONE_CELL + "sliding_window = [0, 64]\n", "", "axes.sliding_window"),
        ('backend = ["auto"]\ncausal = [true]\nsink = [true]\n', "", "axes.capability"),
        (BASE_AXES, "[options]\nhead_dim = 0\n", "options.head_dim"),
        (BASE_AXES, '[options]\nwarp_speed = "yes"\n', "options.warp_speed"),
    ],
    ids=["sliding-window", "no-capability", "bad-head-dim", "unknown-option"],
)
def test_matrices_the_lane_cannot_run_are_refused(tmp_path: Path, axes: str, options: str, key: str) -> None:
    with pytest.raises(InputError) as refused:
        create(load_matrix(_matrix(tmp_path, axes, options)))
    assert refused.value.key == key


def test_graph_cells_are_taken_the_start_up_decides_their_cuda_graphs(tmp_path: Path) -> None:
    # Nothing is captured: the builders are created under the graph mode and the start-up's
    # CUDA-graph decision runs over them (target-draft-seam.md, 1.6).
    create(load_matrix(_matrix(tmp_path, ONE_CELL + 'cudagraph = ["graph"]\n')))


def test_creating_the_lane_imports_no_vllm(tmp_path: Path) -> None:
    # In a fresh interpreter: other tests of this session read vLLM's own classes in this one.
    script = (
        "import sys\n"
        "from harness.lanes.selection import create\n"
        "from harness.matrix import load_matrix\n"
        f"environment = create(load_matrix({str(_matrix(tmp_path, BASE_AXES))!r})).environment()\n"
        "assert environment['lane'] == 'selection' and 'vllm' in environment, environment\n"
        "print(sorted(name for name in sys.modules if name == 'vllm' or name.startswith('vllm.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


def test_simulated_gpu_pins_what_vllm_reads_at_import() -> None:
    with_cubins = SimulatedGpu("10.0", flashinfer_cubin=True)
    assert with_cubins.major_minor == (10, 0)
    assert with_cubins.environment("http://127.0.0.1:1/") == {
        "CUDA_VISIBLE_DEVICES": "",
        "VLLM_HAS_FLASHINFER_CUBIN": "1",
        "HUMMING_DISABLE_PARALLEL_BUILD": "1",
    }
    without = SimulatedGpu("12.0", flashinfer_cubin=False).environment("http://127.0.0.1:1/")
    assert without["VLLM_HAS_FLASHINFER_CUBIN"] == "0"
    assert without["FLASHINFER_CUBINS_REPOSITORY"] == "http://127.0.0.1:1/"


def test_the_cubin_probe_url_refuses_connections_at_once() -> None:
    url = urlsplit(closed_loopback_url())
    assert url.hostname == "127.0.0.1"
    with socket.socket() as client, pytest.raises(ConnectionRefusedError):
        client.settimeout(2)
        client.connect((url.hostname, url.port or 0))


def test_install_refuses_once_vllm_is_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    with pytest.raises(SimulationError, match="imported before"):
        install(SimulatedGpu("9.0", flashinfer_cubin=True))
