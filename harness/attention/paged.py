"""One forward pass of a draft attention layer through its backend impl, as DFlash runs it.

Each request has ``context_len`` tokens whose K/V are already in the paged cache (DFlash
writes them with ``impl.do_kv_cache_update`` in ``precompute_and_store_context_kv``) and
``query_len`` query tokens (the bonus token plus the speculative slots) whose K/V the
layer writes itself. Metadata comes from the backend's own metadata builder. The device
is a parameter; ``PreparedLayer.run`` is the one call a graph capture would wrap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from harness.stages import Stage, StageLog


@dataclass(frozen=True)
class Batch:
    """Several requests of different context lengths, several query tokens each."""

    context_lens: tuple[int, ...] = (37, 70, 3)
    query_len: int = 5

    @property
    def seq_lens(self) -> tuple[int, ...]:
        return tuple(c + self.query_len for c in self.context_lens)

    @property
    def num_tokens(self) -> int:
        return self.query_len * len(self.context_lens)


@dataclass(frozen=True)
class Inputs:
    """The random tensors fed to the backend, kept on the CPU for the reference."""

    query: torch.Tensor  # [num_tokens, H, D]
    keys: tuple[torch.Tensor, ...]  # per request [seq_len, H_kv, D], context first
    values: tuple[torch.Tensor, ...]


def random_inputs(batch: Batch, heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype, seed: int) -> Inputs:
    generator = torch.Generator().manual_seed(seed)

    def draw(*size: int) -> torch.Tensor:
        return torch.randn(*size, generator=generator).to(dtype)

    return Inputs(
        query=draw(batch.num_tokens, heads, head_dim),
        keys=tuple(draw(s, kv_heads, head_dim) for s in batch.seq_lens),
        values=tuple(draw(s, kv_heads, head_dim) for s in batch.seq_lens),
    )


@dataclass
class PreparedLayer:
    """A layer with its cache filled with context and its metadata built, ready to run."""

    attn: Any
    metadata: Any
    kv_cache: torch.Tensor
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    slot_mapping: torch.Tensor
    output: torch.Tensor
    details: dict[str, Any] = field(default_factory=dict)

    def run(self) -> torch.Tensor:
        impl = self.attn.impl
        if not self.attn.get_attn_backend().forward_includes_kv_cache_update:
            impl.do_kv_cache_update(self.attn, self.key, self.value, self.kv_cache, self.slot_mapping)
        impl.forward(self.attn, self.query, self.key, self.value, self.kv_cache, self.metadata, output=self.output)
        return self.output


def allocate_kv_cache(backend: Any, spec: Any, num_blocks: int, device: torch.device) -> torch.Tensor:
    """A zeroed per-layer cache in the backend's preferred physical layout, viewed in
    vLLM's logical [blocks, kv_heads, block_size, content] order, as the worker builds it."""
    from vllm.v1.kv_cache_interface import compute_layer_kv_cache_shape_bytes
    from vllm.v1.kv_cache_layout import KVCacheLayout

    layouts = backend.supported_kv_cache_layouts() or (KVCacheLayout.LBHNC,)
    order = layouts[0].layer_view_order
    shape = compute_layer_kv_cache_shape_bytes(spec, num_blocks)
    physical = torch.zeros([shape[d] for d in order], dtype=torch.uint8, device=device)
    logical = physical.permute([order.index(d) for d in range(len(order))])
    return logical.view(spec.dtype)


def prepare_layer(
    attn: Any,
    vllm_config: Any,
    batch: Batch,
    inputs: Inputs,
    causal: bool,
    device: torch.device,
    stage_log: StageLog,
) -> PreparedLayer:
    """Fill the cache with each request's context and build metadata. The caller holds
    ``set_current_vllm_config`` for the config the layer was built under."""
    from vllm.v1.attention.backend import CommonAttentionMetadata

    stage_log(Stage.METADATA)
    backend = attn.get_attn_backend()
    spec = attn.get_kv_cache_spec(vllm_config)
    block_size = spec.block_size
    blocks = [-(-s // block_size) for s in batch.seq_lens]
    block_table = torch.zeros(len(blocks), max(blocks), dtype=torch.int32)
    next_block = 1  # block 0 stays unused, like the runner's null block
    for row, count in enumerate(blocks):
        block_table[row, :count] = torch.arange(next_block, next_block + count, dtype=torch.int32)
        next_block += count

    def slots(row: int, start: int, stop: int) -> torch.Tensor:
        positions = torch.arange(start, stop)
        return block_table[row, positions // block_size].long() * block_size + positions % block_size

    contexts = range(len(batch.context_lens))
    ctx_slots = torch.cat([slots(r, 0, batch.context_lens[r]) for r in contexts])
    query_slots = torch.cat([slots(r, batch.context_lens[r], batch.seq_lens[r]) for r in contexts])
    query_positions = torch.cat([torch.arange(batch.context_lens[r], batch.seq_lens[r]) for r in contexts])

    def split(tensors: tuple[torch.Tensor, ...], context: bool) -> torch.Tensor:
        parts = [t[:c] if context else t[c:] for t, c in zip(tensors, batch.context_lens, strict=True)]
        return torch.cat(parts).to(device)

    query_start = torch.arange(0, batch.num_tokens + 1, batch.query_len, dtype=torch.int32)
    seq_lens = torch.tensor(batch.seq_lens, dtype=torch.int32)
    common = CommonAttentionMetadata(
        query_start_loc=query_start.to(device),
        query_start_loc_cpu=query_start,
        seq_lens=seq_lens.to(device),
        num_reqs=len(batch.context_lens),
        num_actual_tokens=batch.num_tokens,
        max_query_len=batch.query_len,
        max_seq_len=max(batch.seq_lens),
        block_table_tensor=block_table.to(device),
        slot_mapping=query_slots.to(device),
        causal=causal,
        positions=query_positions.to(device),
        seq_lens_cpu_upper_bound=seq_lens,
    )
    # The engine records the cache it allocated here; some builders (FlexAttention) size
    # their block masks from it.
    vllm_config.cache_config.num_gpu_blocks = next_block
    builder = backend.get_builder_cls()(spec, [attn.layer_name], vllm_config, device)
    metadata = builder.build(common_prefix_len=0, common_attn_metadata=common)
    # After the builder: like the runner, which builds its metadata builders before the
    # first cache write (CPU_ATTN's builder hands the layer the kernel ISA the write uses).
    kv_cache = allocate_kv_cache(backend, spec, next_block, device)
    if ctx_slots.numel():
        attn.impl.do_kv_cache_update(
            attn, split(inputs.keys, True), split(inputs.values, True), kv_cache, ctx_slots.to(device)
        )
    impl = attn.impl
    query = inputs.query.to(device)
    return PreparedLayer(
        attn=attn,
        metadata=metadata,
        kv_cache=kv_cache,
        query=query,
        key=split(inputs.keys, False),
        value=split(inputs.values, False),
        slot_mapping=query_slots.to(device),
        output=torch.empty_like(query),
        details={
            "layer": attn.layer_name,
            "impl": type(impl).__name__,
            "block_size": block_size,
            "kv_cache_spec": type(spec).__name__,
            "causal": causal,
        },
    )
