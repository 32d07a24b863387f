"""Every lane's contract (``harness.contracts.model``): declared here once, as data.

Imported by every process that loads a matrix, so it imports neither vLLM nor torch: a lane's
own module (which does, lazily) reads its options and defaults from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from harness.axes import AxisValue, capability_token
from harness.contracts.machine import SIMULATED_MACHINE
from harness.contracts.model import (
    Conflict,
    Contract,
    Isolation,
    Limit,
    OptionValueError,
    Preload,
    backend_name,
    integer,
    option,
    positive_number,
    seconds,
    table_of,
    text,
    token_counts,
)

# Refuses a run without a CUDA device or with several GPU generations, pins each pytest-xdist
# worker to one GPU and deselects the cells of other generations: without it, a GPU runner ran
# every generation's cells (most of them `unavailable` against their expectations) on GPU 0.
GPU_PLUGIN = "harness.plugins.gpu"

_CONTEXT_LENS_HELP = "context tokens already in the paged KV cache, one request each"
_SEED_HELP = "added to each cell's id-derived seed, to draw other inputs"


@dataclass(frozen=True)
class CpuOptions:
    """What a lane that runs the draft's kernels takes (the gpu lanes take more)."""

    seed: int = option(0, integer(0), _SEED_HELP)
    context_lens: tuple[int, ...] = option((37, 70, 3), token_counts, _CONTEXT_LENS_HELP)


# The draft the cpu and gpu lanes build and run: its backend, family member, attention features,
# head size, its own query / KV heads (the kernels run them, against a reference of the same
# heads) and dtypes.
_DRAFT_AXES = (
    "backend",
    "method",
    "causal",
    "sink",
    "sliding_window",
    "layers",
    "head_size",
    "draft_heads",
    "dtype",
    "kv_cache_dtype",
    "draft_kv_cache_dtype",
    "target_model",
)
# The code every lane's verdicts are built from (Contract.build_path): the shared draft flow and
# audit, the deployment a cell stands for (its engine arguments), the contracts, the runner and
# the cell process, the verdict and its facts, the matrix.
_SHARED_BUILD_PATH = (
    "attention/**/*.py",
    "deployment/**/*.py",
    "contracts/**/*.py",
    "runner/**/*.py",
    "cell_process.py",
    "observation.py",
    "verdict.py",
    "stages.py",
    "matrix.py",
    "axes.py",
    "covering.py",
)

# The kernel lanes build the real target from its checkpoint: only families written with weights.
_WEIGHTED_TARGETS = {
    "target_model": Limit(
        ("qwen3", "mistral_swa"), "the kernel lanes write weights for these target families only (no vision tower)"
    )
}

CPU = Contract(
    name="cpu",
    module="harness.lanes.cpu",
    # CpuPlatform has no compute capability, no CUDA graphs and no FlashInfer; the target's
    # attention is no axis here either (CpuPlatform hands CPU_ATTN to every request).
    axes=(*_DRAFT_AXES, "loader", "context"),
    defaults={"dtype": "bfloat16", "loader": "v2"},
    limits=_WEIGHTED_TARGETS,
    options=CpuOptions,
    build_path=(*_SHARED_BUILD_PATH, "lanes/cpu.py"),
    isolation=Isolation(
        reset="harness.cell_process:reset_vllm_caches",
        why=(
            "every functools cache of the loaded vllm modules is cleared before each cell (docs/explanation/"
            "isolation.md); the targets the process builds once per dtype are the lane's own, each under its own config"
        ),
    ),
    preload=Preload(
        modules=(
            "torch",
            "vllm.v1.worker.cpu_model_runner",
            "vllm.engine.arg_utils",
            "harness.attention.checkpoint",
            "harness.attention.draft",
            "harness.attention.cell",
        ),
        platform_resolved=True,
        why=(
            "every cpu cell process gets the same CpuPlatform (no capability, no per-key state), so "
            "resolving it once is what each process did on its own; the warm parent does not call "
            "_set_torch_accelerator_to_noop() or torch.cpu._init_amx() (AMX tile permission is asked "
            "per process), build a group, write a checkpoint or load a model: each cell process does "
            "that on its first cell, as before"
        ),
    ),
)


@dataclass(frozen=True)
class GpuOptions(CpuOptions):
    # 128: a head size every CUDA backend serves (FlashInfer and its TRT-LLM kernels take
    # 64/128/256 only), as real DFlash drafts use.
    head_dim: int = option(128, integer(8), "head size of the target and draft checkpoints")
    # An fp8 KV cell is held to its dtype's tolerance where the reference models the kernel's fp8
    # arithmetic exactly (K/V/Q rounded with the layer's scales; Triton's fp8 P @ V: cell.FP8_MODELLED),
    # and to this one on a backend whose fp8 arithmetic it does not model (FlashAttention 3 and
    # FlashInfer, unmeasured): docs/explanation/fp8-kv.md.
    kv_fp8_tolerance: float = option(
        0.1, positive_number, "max abs error of fp8-KV layers whose fp8 arithmetic the reference does not model"
    )
    # None: vLLM picks it, as for a user who passes no --block-size (the selection lane asks the
    # same way); a matrix sets it to test what an explicit size does.
    block_size: int | None = option(None, integer(1), "KV-cache block size, as --block-size (default: vLLM's choice)")


GPU = Contract(
    name="gpu",
    module="harness.lanes.gpu.lane",
    # A real GPU decides FlashInfer's cubin availability itself, so flashinfer_cubin is no axis here.
    # block_size: the target's --block-size (the block_size option is the lane-wide default).
    axes=("capability", *_DRAFT_AXES, "target_attention", "block_size", "loader", "cudagraph", "context"),
    defaults={"dtype": "bfloat16", "loader": "v2"},
    limits=_WEIGHTED_TARGETS,
    options=GpuOptions,
    preload=Preload(
        modules=("torch", "transformers", "transformers.modeling_utils"),
        why=(
            "importing them initialises no CUDA and asks torch for no device (a forked CUDA context is "
            "unusable, and the device count is cached once asked); vLLM is not imported, so its CUDA "
            "platform, NVML and the worker's CUDA_VISIBLE_DEVICES are all met in the cell process"
        ),
    ),
    plugins=(GPU_PLUGIN,),
)


# SMs of the GPU each simulated generation stands for (A100, H100 SXM, B200, RTX PRO 6000):
# TRITON_ATTN sizes its split-KV grid from the SM count, so it is an explicit input.
DEFAULT_SM_COUNTS = {"8.0": 108, "9.0": 132, "10.0": 148, "12.0": 188}


def sm_counts(value: object) -> Mapping[str, int]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v > 0 for k, v in value.items()
    ):
        raise OptionValueError(f"{value!r} is not a table of capability = number of SMs")
    return {**DEFAULT_SM_COUNTS, **value}


@dataclass(frozen=True)
class GpuEmulatedOptions(GpuOptions):
    sm_counts: Mapping[str, int] = option(
        DEFAULT_SM_COUNTS, sm_counts, "SMs of each simulated generation's GPU (num_compute_units)"
    )


def _capability_process(cell: Mapping[str, AxisValue]) -> str:
    """One simulated GPU generation per process (``harness.cuda.simulated``)."""
    return f"emulated-{capability_token(str(cell.get('capability')))}"


# The gpu lane's own code on a simulated GPU generation, vLLM's Triton kernels interpreted on
# the CPU (``harness.lanes.gpu.emulated``): the gpu lane's axes, one process per generation.
GPU_EMULATED = Contract(
    name="gpu_emulated",
    module="harness.lanes.gpu.emulated",
    axes=GPU.axes,
    required=("capability", "backend"),
    defaults=GPU.defaults,
    limits=_WEIGHTED_TARGETS,
    options=GpuEmulatedOptions,
    key=_capability_process,
    build_path=(*_SHARED_BUILD_PATH, "lanes/gpu/**/*.py", "cuda/**/*.py"),
    isolation=Isolation(
        reset="harness.cell_process:reset_vllm_caches",
        why="every functools cache of the loaded vllm modules is cleared before each cell, as in the selection lane",
    ),
    # Not transformers.modeling_utils: it imports Triton, whose kernels must see
    # TRITON_INTERPRET=1 first (harness.cuda.interpreted_kernels sets it in the cell process).
    preload=Preload(
        modules=("torch", "transformers"),
        why=(
            "vLLM is not imported: the simulated platform must be installed as soon as vllm.platforms "
            "executes, per capability (as for the selection lane); torch and transformers read no "
            "variable the simulation sets and ask for no device"
        ),
    ),
    # Run as the GPU matrix runs: one generation per run, on an emulated runner's GPUs
    # (harness.plugins.gpu's --emulated-gpus), its workers pinned, the other generation deselected.
    plugins=(GPU_PLUGIN,),
)


@dataclass(frozen=True)
class SelectionOptions:
    head_dim: int = option(128, integer(1), "head size of the target and draft checkpoints and the selector calls")
    target_backend: str | None = option(
        None,
        backend_name,
        "the target's --attention-backend, which the pre-#46770 loader let the draft inherit (None: auto)",
    )


def _selection_process(cell: Mapping[str, AxisValue]) -> str:
    """vLLM caches selection helpers without the capability in their key, and FlashInfer's
    cubin setting is read at import: one process per (capability, cubin) pair."""
    cubin = SELECTION.value(cell, "flashinfer_cubin")
    return f"{capability_token(str(cell.get('capability')))}-{'cubin' if cubin else 'nocubin'}"


SELECTION = Contract(
    name="selection",
    module="harness.lanes.selection",
    # Of the family's axes: method, head size, the draft's own KV dtype, the target's attention,
    # model family and --block-size (what the target decides about its draft); no layer
    # layouts (it builds no windowed draft) and no contexts (no kernel runs).
    axes=(
        "capability",
        "backend",
        "method",
        "causal",
        "sink",
        "sliding_window",
        "head_size",
        "draft_heads",
        "kv_cache_dtype",
        "draft_kv_cache_dtype",
        "target_attention",
        "target_model",
        "target_dtype",
        "target_head",
        "block_size",
        "draft_option",
        "loader",
        "cudagraph",
        "flashinfer_cubin",
    ),
    required=("capability", "backend", "causal", "sink"),
    defaults={"flashinfer_cubin": False, "loader": "v2"},
    limits={
        "sliding_window": Limit((0,), "the selection lane builds no windowed draft"),
    },
    conflicts=(
        Conflict(
            {"target_model": "gemma3_mm", "target_dtype": "float16"},
            "vLLM refuses to serve Gemma 3 in float16 (ModelConfig: 'does not support float16 ... Numerical "
            "instability'), so no draft exists behind that target",
        ),
    ),
    options=SelectionOptions,
    key=_selection_process,
    machine=SIMULATED_MACHINE,
    build_path=(*_SHARED_BUILD_PATH, "lanes/selection/**/*.py", "cuda/**/*.py"),
    isolation=Isolation(
        reset="harness.cell_process:reset_vllm_caches",
        why=(
            "every functools cache of the loaded vllm modules is cleared before each cell (the selector's "
            "_cached_get_attn_backend, the platform's backend priorities, FlashInfer and config helpers: "
            "docs/explanation/isolation.md); what a cache keyed without the capability or FlashInfer's cubin "
            "setting holds is the process key's, the same for every cell of the process"
        ),
    ),
    # The two after transformers are what a selection cell process imported next, outside vLLM,
    # that depends on no platform (benchmarks/README.md has the profile): ml_dtypes and openai
    # (vLLM's protocol types) load the same for every process key. Not xgrammar (its tvm_ffi
    # asks torch for the device count at import: a fork hazard, harness.runner.warm), nor
    # torch._inductor.lowering (the same with the torch of vLLM 0.26.0's env), nor cutlass
    # (NVIDIA's CUTLASS DSL loads cuda-bindings' native modules: left to the cell process, which
    # loads libcuda.so.1, a driver or the lane's stub, when its simulated platform is installed).
    # per_key: then one warm parent per process key, forked by this one, installs the key's
    # simulated GPU and imports vLLM under it, as each of the key's cell processes did first;
    # a planted-fault test's runs that meet a key again fork from there (harness.runner.warm).
    preload=Preload(
        modules=("torch", "transformers", "transformers.modeling_utils", "ml_dtypes", "openai"),
        optional=frozenset({"ml_dtypes", "openai"}),
        per_key="harness.lanes.selection:prepare_process",
        why=(
            "vLLM is not imported: harness.cuda.simulated installs the simulated CudaPlatform as soon as "
            "vllm.platforms executes, before any module binds current_platform, with the process key's "
            "capability, and the variables vLLM reads at import (CUDA_VISIBLE_DEVICES, "
            "VLLM_HAS_FLASHINFER_CUBIN, FLASHINFER_CUBINS_REPOSITORY) are set per cell process first; "
            "so no platform is resolved, no backend selected and no selection helper cached before the "
            "fork. torch, transformers, Triton, ml_dtypes and openai read none of those variables and ask "
            "for no device (the warm parent checks the device count is never asked). The key's warm "
            "parent runs install() and vllm_apis(), the first two steps of the first cell of each of the "
            "key's processes, with nothing of a cell's: no checkpoint, no distributed state, no plant "
            "(a plant is applied in the cell process, after them, as before)"
        ),
    ),
)

FAKE_ACTIONS = (
    "pass",
    "abort",
    "segfault",
    "exit",
    "hang",
    "raise",
    "mismatch",
    "loader-diff",
    "reject",
    "substitute",
    "lose-request",
    "lose-setting",
    "unavailable",
    "poison",
)


@dataclass(frozen=True)
class FakeOptions:
    actions: Mapping[str, str] = option({}, table_of(FAKE_ACTIONS, "cell id"), "what to do per cell id (default pass)")
    sleep_s: float = option(0.0, seconds, "how long each forward stage takes")
    device: str | None = option(None, text, "the device the run reports (as a real lane reports its own)")
    vllm_version: str | None = option(None, text, "the vLLM version the run reports")


def _fake_process(cell: Mapping[str, AxisValue]) -> str:
    """Cells of different capabilities get different processes, as on the selection lane, so
    the runner's per-key process handling can be tested without vLLM."""
    capability = cell.get("capability")
    return "fake" if capability is None else f"fake-{capability_token(capability)}"


FAKE = Contract(
    name="fake",
    module="harness.lanes.fake",
    options=FakeOptions,
    key=_fake_process,
    # A per-key start that only records where it ran, so the runner's per-key warm parents are
    # tested without vLLM.
    preload=Preload(
        ("harness.lanes.fake",),
        per_key="harness.lanes.fake:prepare_process",
        why="the fake lane imports only the harness core",
    ),
)

# The fake lane as a GPU runner runs it, under the gpu plugin and against whatever driver the
# loader finds (tests put a fake one first): the entry paths' device refusal, worker pinning and
# deselection, tested without vLLM.
FAKE_GPU = replace(FAKE, name="fake_gpu", required=("capability",), plugins=(GPU_PLUGIN,))

CONTRACTS: Mapping[str, Contract] = {
    contract.name: contract for contract in (CPU, SELECTION, GPU, GPU_EMULATED, FAKE, FAKE_GPU)
}
LANES: tuple[str, ...] = tuple(CONTRACTS)
