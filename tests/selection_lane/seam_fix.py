"""vLLM with the target/draft seam fixed, planted into a repro script's process: a DFlash draft's
attention layers (``qwen3_dflash``'s calls of ``Attention``) take neither the target's model-level
sliding window (``Attention.__init__`` falls back to ``cache_config.sliding_window`` when the layer
passes ``per_layer_sliding_window=None``) nor its prefix-LM flag (``use_mm_prefix`` read from the
current, the target's, ``model_config.is_mm_prefix_lm``). What a fixed vLLM does, so a finding's
script can be shown to exit 0 there.

No harness import here, and vLLM is patched only once its attention module first executes: a repro
script sets up its simulated platform before it imports vLLM (as ``pre_fix.plant_on_import``).
"""

from __future__ import annotations

import copy
import sys
from typing import Any

from .on_import import after_import

MODULE = "vllm.model_executor.layers.attention.attention"
DRAFT_MODULE = "vllm.model_executor.models.qwen3_dflash"


def fix_seam(attention: Any) -> None:
    """Wrap ``attention.Attention.__init__``: a DFlash draft layer is built with the window it asks
    for (None: full attention) and as a text-only layer, whatever the target's config says."""
    original = attention.Attention.__init__
    current = attention.get_current_vllm_config

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if sys._getframe(1).f_globals.get("__name__") != DRAFT_MODULE:
            original(self, *args, **kwargs)
            return
        cache_config = kwargs.get("cache_config")
        if cache_config is not None and kwargs.get("per_layer_sliding_window") is None:
            kwargs["cache_config"] = copy.copy(cache_config)
            kwargs["cache_config"].sliding_window = None
        config = copy.copy(current())
        if config.model_config is not None:
            config.model_config = copy.copy(config.model_config)
            config.model_config.__dict__["is_mm_prefix_lm"] = False  # a cached_property
        attention.get_current_vllm_config = lambda: config
        try:
            original(self, *args, **kwargs)
        finally:
            attention.get_current_vllm_config = current

    attention.Attention.__init__ = __init__


def fix_on_import() -> None:
    after_import(MODULE, fix_seam)
