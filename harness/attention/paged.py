"""One forward pass of a draft attention layer through its backend impl, as DFlash runs it.

Each request has ``context_len`` tokens whose K/V are already in the paged cache (DFlash
writes them with ``impl.do_kv_cache_update`` in ``precompute_and_store_context_kv``) and
``query_len`` query tokens (the bonus token plus the speculative slots) whose K/V the
layer writes itself. Metadata comes from the backend's own metadata builder. The device
is a parameter; ``LayerBuffers.run`` is the one call a graph capture wraps
(``harness.attention.graph``).
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


def quantizes_query(attn: Any) -> bool:
    """Whether vLLM's ``Attention.forward`` casts this layer's query to fp8 before the backend
    sees it (vLLM 0.33.0 ``model_executor/layers/attention/attention.py``: ``query_quant`` is
    set for an fp8 KV cache when the impl ``supports_quant_query_input``; FA3/FA4 and Triton
    expect it: "queries are quantized in the attention layer")."""
    return getattr(attn, "query_quant", None) is not None and bool(
        getattr(attn.impl, "supports_quant_query_input", False)
    )


def _layer_call(
    attn: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    metadata: Any,
    output: torch.Tensor,
) -> torch.Tensor:
    """What ``Attention.forward`` does around the backend for one layer: quantize the query
    where vLLM does, write this step's K/V (``unified_kv_cache_update`` ->
    ``impl.do_kv_cache_update``) unless the backend's forward writes them itself, then
    ``impl.forward`` (``unified_attention_with_output``) into the caller's output buffer."""
    impl = attn.impl
    if quantizes_query(attn):
        from vllm.platforms import current_platform

        if query.dtype != current_platform.fp8_dtype():
            # The layer quantizes the query as the model hands it over, [tokens, heads * head
            # size] (vLLM's scaled_fp8_quant asserts 2-D input), before viewing it per head.
            flat, _ = attn.query_quant(query.reshape(query.shape[0], -1), attn._q_scale)
            query = flat.view(query.shape)
    if not attn.get_attn_backend().forward_includes_kv_cache_update:
        impl.do_kv_cache_update(attn, key, value, kv_cache, slot_mapping)
    impl.forward(attn, query, key, value, kv_cache, metadata, output=output)
    return output


@dataclass
class LayerBuffers:
    """One layer's persistent state, as a model runner keeps it: the KV cache, the static
    query/key/value/output tensors, the batch-describing buffers (``InputBuffers`` and
    ``BlockTables`` in Model Runner V2) and the layer's metadata builder. Every batch is
    loaded into these same tensors in place, so a captured CUDA graph sees each new batch
    only through them, exactly as in vLLM."""

    attn: Any
    vllm_config: Any
    builder: Any
    block_size: int
    kv_cache: torch.Tensor
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    output: torch.Tensor
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_table: torch.Tensor
    slot_mapping: torch.Tensor
    positions: torch.Tensor
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def num_reqs(self) -> int:
        return int(self.seq_lens.shape[0])

    def common(self, batch: Batch | None, causal: bool, max_seq_len: int) -> Any:
        """CommonAttentionMetadata over the persistent buffers (a new object each time, the
        same tensors). ``batch`` None: the capture-time dummy batch of Model Runner V2
        (``InputBatch.make_dummy``: each request's seq_len is its query length)."""
        from vllm.v1.attention.backend import CommonAttentionMetadata

        num_tokens = int(self.query.shape[0])
        query_len = num_tokens // self.num_reqs
        query_start = torch.arange(0, num_tokens + 1, query_len, dtype=torch.int32)
        seq_lens = torch.tensor(batch.seq_lens if batch else [query_len] * self.num_reqs, dtype=torch.int32)
        return CommonAttentionMetadata(
            query_start_loc=self.query_start_loc,
            query_start_loc_cpu=query_start,
            seq_lens=self.seq_lens,
            num_reqs=self.num_reqs,
            num_actual_tokens=num_tokens,
            max_query_len=query_len,
            max_seq_len=max_seq_len,
            block_table_tensor=self.block_table,
            slot_mapping=self.slot_mapping,
            causal=causal,
            positions=self.positions if batch else None,
            seq_lens_cpu_upper_bound=seq_lens if batch else None,
        )

    def load_dummy(self) -> None:
        """The capture-time contents (``_prepare_dflash_inputs_to_capture``): seq_len = query
        length, block tables on the null block, every slot PAD_SLOT_ID (no cache write)."""
        from vllm.v1.attention.backends.utils import PAD_SLOT_ID

        query_len = int(self.query.shape[0]) // self.num_reqs
        self.query_start_loc.copy_(torch.arange(0, self.query.shape[0] + 1, query_len, dtype=torch.int32))
        self.seq_lens.fill_(query_len)
        self.block_table.zero_()
        self.slot_mapping.fill_(PAD_SLOT_ID)
        self.positions.zero_()

    def load(self, batch: Batch, inputs: Inputs, first_block: int) -> None:
        """Copy one batch into the persistent buffers, its blocks numbered from ``first_block``,
        and write each request's context K/V into the cache (DFlash's
        ``precompute_and_store_context_kv`` goes through ``impl.do_kv_cache_update`` too)."""
        block_size = self.block_size
        blocks = [-(-s // block_size) for s in batch.seq_lens]
        table = torch.zeros(self.block_table.shape, dtype=torch.int32)
        next_block = first_block
        for row, count in enumerate(blocks):
            table[row, :count] = torch.arange(next_block, next_block + count, dtype=torch.int32)
            next_block += count

        def slots(row: int, start: int, stop: int) -> torch.Tensor:
            positions = torch.arange(start, stop)
            return table[row, positions // block_size].long() * block_size + positions % block_size

        requests = range(len(batch.context_lens))
        context_slots = torch.cat([slots(r, 0, batch.context_lens[r]) for r in requests])
        query_slots = torch.cat([slots(r, batch.context_lens[r], batch.seq_lens[r]) for r in requests])
        positions = torch.cat([torch.arange(batch.context_lens[r], batch.seq_lens[r]) for r in requests])

        def split(tensors: tuple[torch.Tensor, ...], context: bool) -> torch.Tensor:
            parts = [t[:c] if context else t[c:] for t, c in zip(tensors, batch.context_lens, strict=True)]
            return torch.cat(parts)

        self.query_start_loc.copy_(torch.arange(0, batch.num_tokens + 1, batch.query_len, dtype=torch.int32))
        self.seq_lens.copy_(torch.tensor(batch.seq_lens, dtype=torch.int32))
        self.block_table.copy_(table)
        self.slot_mapping.copy_(query_slots)
        self.positions.copy_(positions)
        self.query.copy_(inputs.query)
        self.key.copy_(split(inputs.keys, False))
        self.value.copy_(split(inputs.values, False))
        if context_slots.numel():
            device = self.kv_cache.device
            self.attn.impl.do_kv_cache_update(
                self.attn,
                split(inputs.keys, True).to(device),
                split(inputs.values, True).to(device),
                self.kv_cache,
                context_slots.to(device),
            )

    def run(self, metadata: Any) -> torch.Tensor:
        return _layer_call(
            self.attn, self.query, self.key, self.value, self.kv_cache, self.slot_mapping, metadata, self.output
        )


def blocks_needed(batch: Batch, block_size: int) -> int:
    return sum(-(-s // block_size) for s in batch.seq_lens)


class GroupBuilder:
    """The metadata builder of an attention group vLLM formed (``kv_cache.BoundCache.group``),
    called as the speculator calls it: through the group, which maps the manager's block table
    to kernel blocks where the group was split (``AttentionGroup._with_kernel_block_table``)."""

    def __init__(self, group: Any):
        self.group = group

    def build(self, common_prefix_len: int, common_attn_metadata: Any) -> Any:
        return self.group.build_metadata(common_attn_metadata, common_prefix_len=common_prefix_len)

    def build_for_cudagraph_capture(self, common_attn_metadata: Any) -> Any:
        return self.group.build_metadata_for_cudagraph_capture(common_attn_metadata)


def allocate_layer(
    attn: Any,
    vllm_config: Any,
    num_reqs: int,
    query_len: int,
    num_blocks: int,
    max_seq_len: int,
    dtype: torch.dtype,
    device: torch.device,
    bound: Any = None,
) -> LayerBuffers:
    """A layer's persistent buffers and its metadata builder, built before the first cache
    write as the runner does (CPU_ATTN's builder hands the layer the ISA its cache write
    uses). The caller holds ``set_current_vllm_config`` for the config the layer was built under.

    ``bound`` (``harness.attention.kv_cache.BoundCache``): the cache vLLM laid out for the layer;
    the buffers then use its view, its group's builder and the manager's block size instead of
    a cache and a builder of their own (``num_blocks`` must fit in it)."""
    spec = attn.get_kv_cache_spec(vllm_config)
    if bound is not None:
        if num_blocks > bound.num_blocks:
            raise ValueError(
                f"{attn.layer_name}: the batches need {num_blocks} blocks, vLLM's layout holds {bound.num_blocks}"
            )
        block_size = bound.block_size
        builder: Any = GroupBuilder(bound.group)
        kv_cache = bound.view
    else:
        block_size = spec.block_size
        # The engine records the cache it allocated here; some builders (FlexAttention) size
        # their block masks from it.
        vllm_config.cache_config.num_gpu_blocks = num_blocks
        builder = attn.get_attn_backend().get_builder_cls()(spec, [attn.layer_name], vllm_config, device)
        kv_cache = allocate_kv_cache(vllm_config.cache_config, spec, num_blocks, device)
    num_tokens = num_reqs * query_len
    impl = attn.impl
    heads, kv_heads, head_dim = impl.num_heads, impl.num_kv_heads, impl.head_size

    def zeros(*size: int, dtype: torch.dtype = torch.int32) -> torch.Tensor:
        return torch.zeros(*size, dtype=dtype, device=device)

    return LayerBuffers(
        attn=attn,
        vllm_config=vllm_config,
        builder=builder,
        block_size=block_size,
        kv_cache=kv_cache,
        query=zeros(num_tokens, heads, head_dim, dtype=dtype),
        key=zeros(num_tokens, kv_heads, head_dim, dtype=dtype),
        value=zeros(num_tokens, kv_heads, head_dim, dtype=dtype),
        output=zeros(num_tokens, heads, head_dim, dtype=dtype),
        query_start_loc=zeros(num_reqs + 1),
        seq_lens=zeros(num_reqs),
        block_table=zeros(num_reqs, -(-max_seq_len // block_size)),
        slot_mapping=zeros(num_tokens, dtype=torch.int64),
        positions=zeros(num_tokens, dtype=torch.int64),
        details={
            "layer": attn.layer_name,
            "impl": type(impl).__name__,
            "block_size": block_size,
            "kv_cache_spec": type(spec).__name__,
            "kv_cache": "vLLM's layout" if bound is not None else "the harness's own",
            "kv_cache_layout": vllm_config.cache_config.kv_cache_layout,
            "query_quantized": quantizes_query(attn),
        },
    )


def allocate_kv_cache(cache_config: Any, spec: Any, num_blocks: int, device: torch.device) -> torch.Tensor:
    """A zeroed per-layer cache in the physical layout the engine resolved
    (``harness.attention.draft.settle_kv_cache``), viewed in vLLM's logical
    [blocks, kv_heads, block_size, content] order, as the worker builds it."""
    from vllm.v1.kv_cache_interface import compute_layer_kv_cache_shape_bytes

    order = cache_config.get_resolved_kv_cache_layout().layer_view_order
    shape = compute_layer_kv_cache_shape_bytes(spec, num_blocks)
    physical = torch.zeros([shape[d] for d in order], dtype=torch.uint8, device=device)
    logical = physical.permute([order.index(d) for d in range(len(order))])
    return logical.view(spec.dtype)


def run_eager(
    attn: Any,
    vllm_config: Any,
    batch: Batch,
    inputs: Inputs,
    causal: bool,
    device: torch.device,
    stage_log: StageLog,
    bound: Any = None,
) -> torch.Tensor:
    """One real batch through the layer, metadata from its builder (``build``), no graph;
    ``bound``: the cache vLLM laid out for it (``allocate_layer``)."""
    stage_log(Stage.METADATA)
    block_size = bound.block_size if bound is not None else attn.get_kv_cache_spec(vllm_config).block_size
    layer = allocate_layer(
        attn,
        vllm_config,
        len(batch.context_lens),
        batch.query_len,
        1 + blocks_needed(batch, block_size),
        max(batch.seq_lens),
        inputs.query.dtype,
        device,
        bound,
    )
    layer.load(batch, inputs, first_block=1)
    common = layer.common(batch, causal, max(batch.seq_lens))
    metadata = layer.builder.build(common_prefix_len=0, common_attn_metadata=common)
    stage_log(Stage.FORWARD)
    return layer.run(metadata)
