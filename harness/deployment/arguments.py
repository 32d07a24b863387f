"""The exact keyword arguments of vLLM's ``EngineArgs`` (and ``vllm.LLM``) for a deployment.

The lanes build ``EngineArgs(**engine_arguments(...))``; the finding pages print the same
arguments as ``LLM(**...)``; ``repro`` writes them into its scripts as data. The speculative
config is spelled as vLLM spells it at the releases the harness runs (0.24.0 on): the method
vLLM serves a family member under (``SPECULATIVE_METHOD``), ``attention_backend`` for the draft's
requested backend, ``kv_cache_dtype`` for the draft's own cache (absent where unset), any other
field the draft sets (``harness.deployment.draft_options``), and the
target's attention as the attention config's ``backend`` or ``backend_per_kind``. A key a release
does not know is that release's gap (``harness.attention.apis.config_gap``), not another spelling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.deployment.draft_options import speculative_fields
from harness.deployment.models import DRAFT_MODELS
from harness.deployment.settings import EngineSettings

# vLLM's speculative method per family member: DFlash2 is served under "dflash" (its
# DFlash2DraftModel architecture selects the speculator), DSpark under "dspark"; each other draft
# model class under its family's (harness.deployment.models.DRAFT_MODELS).
SPECULATIVE_METHOD = {method: model.speculative_method for method, model in DRAFT_MODELS.items()}

# FULL decode CUDA graphs captured for a number of tokens: metadata builders read the graph mode
# when they are built and then take their graph paths (FlashInfer's CUDA-graph decode wrappers,
# FlashAttention's scheduler metadata).
CUDAGRAPH_MODE = "FULL_DECODE_ONLY"


@dataclass(frozen=True)
class Deployment:
    """One engine a cell stands for: its settings, the draft's requested attention backend (None:
    auto-selection), the model dtype (--dtype) and, for a captured cell, the tokens its decode
    CUDA graphs are captured for (None: eager)."""

    settings: EngineSettings
    requested: str | None
    dtype: str
    graph_tokens: int | None = None


def speculative_config(deployment: Deployment, draft: str) -> dict[str, Any]:
    """The speculative config of ``deployment`` with its draft at ``draft``."""
    settings = deployment.settings
    speculative: dict[str, Any] = {
        "method": SPECULATIVE_METHOD[settings.method],
        "model": draft,
        "num_speculative_tokens": settings.num_speculative_tokens,
    }
    if deployment.requested is not None:
        speculative["attention_backend"] = deployment.requested
    if settings.draft_kv_cache_dtype is not None:
        speculative["kv_cache_dtype"] = settings.draft_kv_cache_dtype
    # The draft_option axis's fields, spelled as vLLM's SpeculativeConfig names them.
    speculative.update(speculative_fields(settings.draft_option))
    return speculative


def engine_arguments(deployment: Deployment, target: str, draft: str) -> dict[str, Any]:
    """``EngineArgs``' keyword arguments for ``deployment`` with its target model at ``target`` and
    its draft at ``draft`` (paths, or placeholders where a page names them)."""
    settings = deployment.settings
    attention: dict[str, Any] = {}
    if settings.target_backend is not None:
        attention["backend"] = settings.target_backend
    if settings.target_backend_per_kind:
        attention["backend_per_kind"] = dict(settings.target_backend_per_kind)
    arguments: dict[str, Any] = {
        "model": target,
        "speculative_config": speculative_config(deployment, draft),
        "load_format": settings.load_format,
        "enforce_eager": deployment.graph_tokens is None,
        "max_model_len": settings.max_model_len,
        "max_num_seqs": settings.max_num_seqs,
        "max_num_batched_tokens": settings.max_model_len,
        "skip_tokenizer_init": True,
        "dtype": deployment.dtype,
        "block_size": settings.block_size,
        "kv_cache_memory_bytes": settings.kv_cache_memory_bytes,
        "kv_cache_dtype": settings.kv_cache_dtype,
    }
    if attention:
        arguments["attention_config"] = attention
    if deployment.graph_tokens is not None:
        arguments["compilation_config"] = {
            "cudagraph_mode": CUDAGRAPH_MODE,
            "cudagraph_capture_sizes": [deployment.graph_tokens],
        }
    return arguments
