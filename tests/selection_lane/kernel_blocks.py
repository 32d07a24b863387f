"""A planted divergence between Model Runner V2's runner and its speculator's kernel block
sizes, shared by the selection lane's plant (``seam_plants.speculator_on_default_blocks``) and
gpu-emulated's (``gpu_emulated.plants.speculator_on_default_blocks``). Imports vLLM only when
installed, and nothing of the harness."""

from __future__ import annotations

import functools
import importlib.metadata
from typing import Any

from packaging.version import Version

# The kernel block size vLLM sizes blocks to when a user sets no --block-size (CacheConfig's
# default on CUDA, config/cache.py:185): 16 up to 0.33.x, 64 from 0.34.0. The planted speculator
# sizes the draft's builders to it, and checks it against the installed CacheConfig. Read from the
# installed release's metadata: the tests that use it must not import vLLM.
DEFAULT_BLOCK = 64 if Version(importlib.metadata.version("vllm")).release >= (0, 34) else 16


def install_default_blocks() -> None:
    """Model Runner V2's draft-only ``init_attn_backend`` (the speculator's call, the one with
    ``active_layer_names``) builds the draft's metadata for ``DEFAULT_BLOCK``-token kernel blocks
    whatever the user's --block-size, while the runner keeps laying the cache out in its own.
    Patches vLLM only; call it once the lane's platform is in place."""
    import vllm.v1.worker.gpu.attn_utils as attn_utils
    from vllm.config import CacheConfig

    if CacheConfig.DEFAULT_BLOCK_SIZE != DEFAULT_BLOCK:
        raise RuntimeError(
            f"this vLLM's CacheConfig.DEFAULT_BLOCK_SIZE is {CacheConfig.DEFAULT_BLOCK_SIZE}, the plant assumes "
            f"{DEFAULT_BLOCK}: update kernel_blocks.DEFAULT_BLOCK"
        )
    init_attn_backend = attn_utils.init_attn_backend

    # wraps: the layout asks init_attn_backend's signature which parameters it takes.
    @functools.wraps(init_attn_backend)
    def planted(kv_cache_config: Any, vllm_config: Any, device: Any, *args: Any, **kwargs: Any) -> Any:
        groups, support, kernel_block_sizes = init_attn_backend(kv_cache_config, vllm_config, device, *args, **kwargs)
        if kwargs.get("active_layer_names") is not None:
            for group in (g for per_group in groups for g in per_group):
                group.create_metadata_builders(vllm_config, device, kernel_block_size=DEFAULT_BLOCK)
                # As vLLM 0.33.0's speculator leaves its groups when it does not split (2.4): not
                # marked split, so init_kv_cache maps no view of its own over the runner's.
                group.kernel_block_size = None
                group.kernel_block_table = group.kernel_block_offsets = None
        return groups, support, kernel_block_sizes

    attn_utils.init_attn_backend = planted
