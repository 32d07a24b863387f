"""Torch-only checks of the gpu lane's GPU-only parts, for a person with a GPU (no vLLM needed).

    python tests/gpu_lane/device_checks.py        # from the repository root, torch with CUDA

Prints one line per check and exits 0 when all pass, 1 otherwise; on a host without a visible
device it prints the lane's one-line refusal and exits 1. The checks:

- devices: the driver query behind the refusal (``harness.cuda.devices``) lists the devices
  torch sees, with the same names and compute capabilities;
- pinning: one child process per visible device (at most 4) given ``CUDA_VISIBLE_DEVICES`` by
  ``device_for_worker``, as pytest-xdist workers are, sees exactly its own device;
- graph: the attention reference's semantics (sinks, non-causal, sliding window, GQA) as one
  batched torch computation, captured in a CUDA graph by ``harness.attention.graph.CudaGraphs``
  and replayed on refilled inputs, match ``reference_attention`` of those inputs;
- sticky: a device-side assert in a child process is recognised as a sticky error, and the
  child's CUDA no longer synchronises (what marks a gpu lane cell process as poisoned).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as a script from a checkout, installed or not
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from harness.attention.graph import CudaGraphs, replay_batches  # noqa: E402
from harness.attention.reference import reference_attention, visible_keys  # noqa: E402
from harness.cuda.devices import (  # noqa: E402
    VISIBLE_DEVICES,
    DeviceRefusal,
    Inventory,
    device_for_worker,
    device_selectors,
    query_environment,
)

_CHILD_PROBE = (
    "import json, torch; p = torch.cuda.get_device_properties(0); "
    "print(json.dumps({'count': torch.cuda.device_count(), 'name': p.name, 'uuid': str(p.uuid)}))"
)
_CHILD_ASSERT = """
import torch
from harness.cuda.devices import is_sticky_cuda_error
index = torch.tensor([7], device="cuda")
try:
    torch.zeros(1, device="cuda")[index].item()
    raise SystemExit("no error raised")
except RuntimeError as error:
    recognised = is_sticky_cuda_error(str(error))
try:
    torch.cuda.synchronize()
    healthy = True
except RuntimeError:
    healthy = False
print(recognised, healthy)
"""


def check_devices(inventory: Inventory) -> str:
    torch_view = [
        (torch.cuda.get_device_name(i), "{}.{}".format(*torch.cuda.get_device_capability(i)))
        for i in range(torch.cuda.device_count())
    ]
    driver_view = [(device.name, device.capability) for device in inventory.devices]
    assert driver_view == torch_view, f"driver sees {driver_view}, torch sees {torch_view}"
    return inventory.describe()


def check_pinning(inventory: Inventory) -> str:
    selectors = device_selectors(inventory)
    seen = []
    for worker in range(min(len(selectors), 4)):
        pinned = device_for_worker(f"gw{worker}", selectors)
        done = subprocess.run(
            [sys.executable, "-c", _CHILD_PROBE],
            env={**os.environ, VISIBLE_DEVICES: pinned},
            capture_output=True,
            text=True,
            check=True,
        )
        probe = json.loads(done.stdout.strip().splitlines()[-1])
        assert probe["count"] == 1, f"gw{worker} ({VISIBLE_DEVICES}={pinned}) sees {probe['count']} devices"
        expected = inventory.devices[worker]
        assert probe["name"] == expected.name, f"gw{worker} got {probe['name']}, expected {expected.name}"
        if probe["uuid"].removeprefix("GPU-") != expected.uuid.removeprefix("GPU-"):
            raise AssertionError(f"gw{worker} got device {probe['uuid']}, expected {expected.uuid}")
        seen.append(f"gw{worker}->{pinned}")
    return ", ".join(seen)


def _batched_attention(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, sinks: torch.Tensor, scale: float
) -> torch.Tensor:
    """query [R, Q, H, D], keys/values [R, S, H_kv, D], mask [R, Q, S] -> [R, Q, H, D], fp32."""
    group = query.shape[2] // keys.shape[2]
    k = keys.float().repeat_interleave(group, dim=2)
    v = values.float().repeat_interleave(group, dim=2)
    logits = torch.einsum("rqhd,rshd->rhqs", query.float(), k) * scale
    logits = logits.masked_fill(~mask[:, None], float("-inf"))
    sink = sinks[None, :, None, None].expand(logits.shape[0], -1, logits.shape[2], 1)
    probs = torch.softmax(torch.cat([logits, sink], dim=-1), dim=-1)[..., :-1]
    return torch.einsum("rhqs,rshd->rqhd", probs, v)


def check_graph(device: torch.device) -> str:
    seq_lens, query_len, heads, kv_heads, head_dim, window = (37, 70, 12), 5, 8, 2, 128, 16
    scale, sinks = head_dim**-0.5, [0.5 - 0.3 * h for h in range(heads)]
    longest = max(seq_lens)
    generator = torch.Generator().manual_seed(0)

    def draw(*size: int) -> torch.Tensor:
        return torch.randn(*size, generator=generator)

    mask = torch.zeros(len(seq_lens), query_len, longest, dtype=torch.bool)
    for row, length in enumerate(seq_lens):
        mask[row, :, :length] = visible_keys(length, query_len, causal=False, window=window)
    static = {
        "query": draw(len(seq_lens), query_len, heads, head_dim).to(device, torch.bfloat16),
        "keys": draw(len(seq_lens), longest, kv_heads, head_dim).to(device, torch.bfloat16),
        "values": draw(len(seq_lens), longest, kv_heads, head_dim).to(device, torch.bfloat16),
    }
    mask, sink_tensor = mask.to(device), torch.tensor(sinks, device=device)
    output = torch.empty(len(seq_lens), query_len, heads, head_dim, device=device)
    fresh = {name: draw(*tensor.shape).to(torch.bfloat16) for name, tensor in static.items()}

    def step() -> torch.Tensor:
        output.copy_(_batched_attention(static["query"], static["keys"], static["values"], mask, sink_tensor, scale))
        return output

    def refill() -> None:
        for name, tensor in static.items():
            tensor.copy_(fresh[name].to(device))

    (replayed,) = (output.cpu() for output in replay_batches(step, [refill], CudaGraphs(device)))
    expected = reference_attention(
        fresh["query"].reshape(-1, heads, head_dim),
        [fresh["keys"][row, :length] for row, length in enumerate(seq_lens)],
        [fresh["values"][row, :length] for row, length in enumerate(seq_lens)],
        [query_len] * len(seq_lens),
        scale=scale,
        causal=False,
        sinks=sinks,
        window=window,
    )
    error = float((replayed.reshape(-1, heads, head_dim) - expected).abs().max())
    assert error < 1e-3, f"replayed graph differs from the reference by {error:.3g}"
    return f"non-causal, sinks, window {window}, GQA {heads}/{kv_heads}: max abs error {error:.2g} after replay"


def check_sticky() -> str:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD_ASSERT],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])},
        capture_output=True,
        text=True,
        check=False,
    )
    last = (done.stdout.strip().splitlines() or ["<no output>"])[-1]
    assert last == "True False", (
        f"expected a recognised sticky error and a dead context, got {last!r}: {done.stderr[-300:]}"
    )
    return "device-side assert recognised; the process no longer synchronises"


def main() -> int:
    try:
        inventory = query_environment()
    except DeviceRefusal as refusal:
        sys.stderr.write(refusal.line() + "\n")
        return 1
    device = torch.device("cuda", 0)
    checks: list[tuple[str, Callable[[], str]]] = [
        ("devices", lambda: check_devices(inventory)),
        ("pinning", lambda: check_pinning(inventory)),
        ("graph", lambda: check_graph(device)),
        ("sticky", check_sticky),
    ]
    failed = 0
    for name, check in checks:
        try:
            print(f"PASS {name}: {check()}")
        except Exception as error:
            failed += 1
            print(f"FAIL {name}: {type(error).__name__}: {error}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
