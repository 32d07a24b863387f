"""The KV cache of a target and its draft laid out by vLLM's own code (issue 24, item 3).

Target and draft attention layers share one KV-cache manager. Which layers share a KV-cache
group, the group's block size, the kernel block size each backend is handed and the cache view
each layer is bound to are decided by the engine core and the model runner, for target and
draft layers together; Model Runner V2's speculator then forms the draft's attention groups
again, from the draft layers alone (docs/explanation/target-draft-seam.md, 1.5 and 2.4). This
module calls those functions, in the order the engine calls them, on the layers of a built
target and draft, with a small KV-cache budget on the model's device:

1. the engine core: every layer's ``get_kv_cache_spec`` (``attn_utils.get_kv_cache_spec``), the
   layout (``resolve_kv_cache_layout``), the groups (``get_global_kv_cache_groups``) and the
   config (``get_kv_cache_configs``; before 0.33.0 one call that groups too);
2. Model Runner V2 (``GPUModelRunner.initialize_kv_cache``): ``init_attn_backend`` over every
   layer, then its speculator's ``set_attn``: ``init_attn_backend`` over the draft layers only,
   under the config the draft's metadata builders get (``v2_speculator``). For loader v1 the
   draft side is Model Runner V1's proposer, ``initialize_attn_backend`` with the runner's
   kernel block sizes (``v1_proposer``); V1's runner side is a method of a constructed
   ``GPUModelRunner`` (CUDA buffers and streams), so V2's ``init_attn_backend`` stands in for it:
   both group a KV-cache group's layers by (backend, spec, query heads) and both pick kernel
   block sizes with ``prepare_kernel_block_sizes``;
3. ``init_kv_cache`` with the runner's kernel block sizes and both callers' attention groups,
   which binds a cache view to every layer (V1's ``initialize_kv_cache_tensors`` calls the same
   ``allocate_kv_cache`` and ``map_kv_caches_to_kernel_blocks``).

``lay_out`` reads the result into plain data; ``bind`` also hands a kernel lane each draft
layer's bound view and speculator group (``BoundCache``); ``disagreements`` is pure;
``missing_api`` says why a release cannot be asked. Imports vLLM lazily; only a lane's cell process calls them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

# What the engine core gets from a worker's memory profile, scaled down: a few blocks per
# layer are all the layout needs, and the allocation is real (on the model's device).
KV_CACHE_BUDGET_BYTES = 4 << 20


@dataclass(frozen=True)
class GroupLayout:
    """One KV-cache group as the engine core formed it, and each caller's kernel block size.

    runner_kernel_block:     Model Runner V2's kernel block size for the group (all its layers).
    speculator_kernel_block: the speculator's, from the draft layers alone; None where the group
                             holds no draft layer.
    """

    group: int
    spec: str  # the group's KV-cache spec type
    block_size: int
    layers: tuple[str, ...]
    runner_kernel_block: int
    speculator_kernel_block: int | None


@dataclass(frozen=True)
class DraftBinding:
    """What one draft layer reads its KV cache with.

    runner_block:     the block size of the metadata builder of the runner's attention group
                      holding the layer (its kernel block where the runner splits blocks).
    speculator_block: the block size of the speculator's builder for the layer: the draft's
                      block tables and metadata are built with it.
    view_block:       token rows per block of the cache view bound to the layer (the layout's
                      block-row dimension), None where the bound cache is not one tensor.
    """

    layer: str
    group: int
    backend: str
    runner_block: int
    speculator_block: int
    view_block: int | None
    view_shape: tuple[int, ...] | None


@dataclass(frozen=True)
class KvCacheLayout:
    groups: tuple[GroupLayout, ...]
    drafts: tuple[DraftBinding, ...]

    def details(self) -> dict[str, Any]:
        return {"groups": [asdict(g) for g in self.groups], "draft_layers": [asdict(d) for d in self.drafts]}


@dataclass(frozen=True)
class BlockDisagreement:
    """A draft layer whose metadata is built for another block size than the runner laid out."""

    layer: str
    runner: int
    speculator: int
    view: int | None

    def __str__(self) -> str:
        view = "" if self.view is None else f", bound to a {self.view}-token-block view"
        return (
            f"{self.layer}: kernel_block_size is {self.speculator} in the speculator's metadata builder, "
            f"{self.runner} in the runner's{view}"
        )


def disagreements(layout: KvCacheLayout) -> tuple[BlockDisagreement, ...]:
    """Draft layers whose runner and speculator kernel block sizes differ, or whose bound view
    is not in the speculator's block size: the draft's kernels would index one layout with
    another's block ids and strides."""
    return tuple(
        BlockDisagreement(d.layer, d.runner_block, d.speculator_block, d.view_block)
        for d in layout.drafts
        if d.runner_block != d.speculator_block or (d.view_block is not None and d.view_block != d.speculator_block)
    )


def attention_layers(vllm_config: Any) -> dict[str, Any]:
    """Every attention layer registered in the config, in registration order (target first)."""
    from vllm.config import get_layers_from_vllm_config
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    layers: dict[str, Any] = get_layers_from_vllm_config(vllm_config, AttentionLayerBase)
    return layers


def mark_draft_layers(vllm_config: Any, target_layers: Iterable[str]) -> set[str]:
    """The draft's attention layers as Model Runner V2's speculator finds them after loading the
    draft (``DraftModelSpeculator.load_model``: every layer the target did not register), marked
    ``is_draft_layer`` as it marks them. The harness calls the loader itself, not the speculator,
    so this is the speculator's own three lines, not a reading of its state."""
    layers = attention_layers(vllm_config)
    draft = set(layers) - set(target_layers)
    for name in draft:
        layers[name].is_draft_layer = True
    return draft


# How a speculator forms the draft's attention groups, given the KV-cache config and the
# runner's kernel block sizes: the flat list of its AttentionGroups, builders created.
SpeculatorGroups = Callable[[Any, list[int]], list[Any]]


def v2_speculator(draft_config: Any, draft_layers: set[str], device: Any) -> SpeculatorGroups:
    """Model Runner V2's speculator (``DraftModelSpeculator.set_attn``): ``init_attn_backend``
    over the draft layers alone, under the config its builders get (``attn_vllm_config``); it
    computes kernel block sizes of its own and never sees the runner's."""

    def groups(kv_cache_config: Any, runner_blocks: list[int]) -> list[Any]:
        from vllm.v1.worker.gpu.attn_utils import init_attn_backend

        per_group, _, _ = init_attn_backend(kv_cache_config, draft_config, device, active_layer_names=draft_layers)
        return [g for gs in per_group for g in gs]

    return groups


def v1_proposer(proposer: Any) -> SpeculatorGroups:
    """Model Runner V1's proposer (``initialize_attn_backend``, called from the runner's
    ``initialize_metadata_builders`` with the runner's kernel block sizes)."""

    def groups(kv_cache_config: Any, runner_blocks: list[int]) -> list[Any]:
        proposer.initialize_attn_backend(kv_cache_config, runner_blocks)
        return list(proposer.draft_attn_groups)

    return groups


# The parameters this module passes, per function of ``vllm.v1.worker.gpu.attn_utils``: a
# release whose functions lack one lays its cache out otherwise, and is not asked.
_NEEDED = {
    "get_kv_cache_spec": ("vllm_config",),
    "init_attn_backend": ("active_layer_names", "draft_layer_names"),
    "init_kv_cache": ("attn_groups",),
}


def missing_api() -> str | None:
    """Why this vLLM release cannot lay the cache out as ``lay_out`` does (None: it can)."""
    import inspect

    try:
        import vllm.v1.worker.gpu.attn_utils as attn_utils
    except ImportError as error:
        return f"this vLLM has no Model Runner V2 attn_utils ({error})"
    for name, parameters in _NEEDED.items():
        function = getattr(attn_utils, name, None)
        if function is None:
            return f"this vLLM's Model Runner V2 attn_utils has no {name}"
        lacking = [p for p in parameters if p not in inspect.signature(function).parameters]
        if lacking:
            return f"this vLLM's {name} takes no {', '.join(lacking)}"
    return None


def _kv_cache_config(vllm_config: Any, specs: list[dict[str, Any]], budget: int) -> Any:
    """The engine core's KV-cache config for one worker (``EngineCore._initialize_kv_caches``)."""
    try:
        from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs
    except ImportError:
        # Before 0.33.0 the planning lived in kv_cache_utils and grouped the layers itself.
        from vllm.v1.core.kv_cache_utils import get_kv_cache_configs as configs_grouped_inside

        return configs_grouped_inside(vllm_config, specs, [budget])[0]
    groups = get_global_kv_cache_groups(vllm_config, specs)
    return get_kv_cache_configs(vllm_config, specs, [budget], groups)[0]


@dataclass(frozen=True)
class BoundCache:
    """What a kernel lane runs one draft layer against once vLLM laid the cache out (``bind``):
    the view ``init_kv_cache`` bound to the layer and the speculator's attention group holding
    it, whose builder makes the layer's metadata (``AttentionGroup.build_metadata``, which maps
    block tables to kernel blocks where the group was split, as the speculator's
    ``build_attn_metadata`` does). Block tables and slot mappings are in the KV-cache manager's
    blocks of ``block_size`` tokens, as Model Runner V2's ``BlockTables`` holds them (its
    ``block_sizes`` are the groups' spec block sizes); ``num_blocks`` of them, block 0 the null
    block."""

    layer: str
    view: Any  # torch.Tensor
    group: Any  # the speculator's (V2) or proposer's (V1) AttentionGroup
    block_size: int
    num_blocks: int


def budget_bytes(vllm_config: Any, blocks: int) -> int:
    """A KV-cache budget for a kernel lane: ``blocks`` blocks of the settled block size for every
    layer (a hybrid layout's planner gives each tensor more, its groups sharing them), and one
    more per further kind of layer, no more.
    Not ``KV_CACHE_BUDGET_BYTES``: FlexAttention's block mask covers at most its query block times
    ``max_model_len`` tokens, and a larger pool makes Inductor refuse the mask in the hybrid
    FlexAttention cells (target-draft-seam.md, 2.4, open). The caller holds
    ``set_current_vllm_config``."""
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec

    specs = get_kv_cache_spec(vllm_config).values()
    pages = sum(int(spec.page_size_bytes) for spec in specs)
    # Where full and sliding-window layers share the pool (one KV-cache group each), a request
    # claims blocks in every group, and vLLM checks the pool for one max_model_len request
    # against their sum (kv_cache_utils._max_memory_usage_bytes_from_groups): a sliding group
    # takes up to one block more than its window, so each group past the first gets one more.
    kinds = {(type(spec).__name__, getattr(spec, "sliding_window", None)) for spec in specs}
    return pages * (blocks + len(kinds) - 1)


def pool_bytes(vllm_config: Any) -> int:
    """A KV pool that holds what the cell's target and draft need: twice what the engine core checks
    the pool against (every layer's ``max_memory_usage_bytes``, one max_model_len request; a hybrid
    layout's groups claim blocks in each) plus the null block of each layer. A selection lane stands
    for a GPU with memory to spare for one request; no kernel reads the pool. The caller holds
    ``set_current_vllm_config``."""
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec

    specs = get_kv_cache_spec(vllm_config).values()
    return 2 * sum(int(spec.max_memory_usage_bytes(vllm_config)) + int(spec.page_size_bytes) for spec in specs)


def lay_out(
    vllm_config: Any,
    draft_layers: set[str],
    device: Any,
    speculator: SpeculatorGroups,
    budget: int = KV_CACHE_BUDGET_BYTES,
) -> KvCacheLayout:
    """Steps 1-3 of the module docstring. The caller holds ``set_current_vllm_config(vllm_config)``
    and has settled the block size and layout (``harness.attention.draft.settle_kv_cache``, over
    every layer)."""
    return bind(vllm_config, draft_layers, device, speculator, budget)[0]


def bind(
    vllm_config: Any,
    draft_layers: set[str],
    device: Any,
    speculator: SpeculatorGroups,
    budget: int = KV_CACHE_BUDGET_BYTES,
) -> tuple[KvCacheLayout, dict[str, BoundCache]]:
    """``lay_out``, and for each draft layer what a kernel lane runs it against (``BoundCache``)."""
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec, init_attn_backend, init_kv_cache

    kv_cache_config = _kv_cache_config(vllm_config, [get_kv_cache_spec(vllm_config)], budget)
    # The engine core records the pool's size before the workers build their metadata builders
    # (EngineCore._initialize_kv_caches); FlexAttention's builder sizes its block masks from it.
    vllm_config.cache_config.num_gpu_blocks = kv_cache_config.num_blocks
    runner_groups, _, runner_blocks = init_attn_backend(
        kv_cache_config, vllm_config, device, draft_layer_names=draft_layers
    )
    runner = [g for gs in runner_groups for g in gs]
    drafts = speculator(kv_cache_config, runner_blocks)
    init_kv_cache(
        vllm_config.compilation_config.static_forward_context,
        kv_cache_config,
        device,
        runner_blocks,
        vllm_config,
        attn_groups=runner + drafts,
    )
    layers = attention_layers(vllm_config)
    layout = KvCacheLayout(
        groups=tuple(
            GroupLayout(
                group=gid,
                spec=_spec_name(group.kv_cache_spec, group.layer_names),
                block_size=int(group.kv_cache_spec.block_size),
                layers=tuple(group.layer_names),
                runner_kernel_block=int(runner_blocks[gid]),
                speculator_kernel_block=next((_builder_block(g) for g in drafts if g.kv_cache_group_id == gid), None),
            )
            for gid, group in enumerate(kv_cache_config.kv_cache_groups)
        ),
        drafts=tuple(_binding(name, runner, drafts, layers[name].kv_cache) for name in sorted(draft_layers)),
    )
    bound = {}
    for name in draft_layers:
        group = _group_of(name, drafts)
        bound[name] = BoundCache(
            layer=name,
            view=layers[name].kv_cache,
            group=group,
            block_size=int(kv_cache_config.kv_cache_groups[group.kv_cache_group_id].kv_cache_spec.block_size),
            num_blocks=int(kv_cache_config.num_blocks),
        )
    return layout, bound


def _spec_name(spec: Any, layers: Sequence[str]) -> str:
    # A group of layers whose specs differ only in fields that do not split groups is a
    # UniformTypeKVCacheSpecs: name the type its layers share.
    inner = getattr(spec, "kv_cache_specs", None)
    if inner:
        kinds = sorted({type(inner[name]).__name__ for name in layers if name in inner})
        return f"{type(spec).__name__}({', '.join(kinds)})"
    return type(spec).__name__


def _binding(layer: str, runner: list[Any], speculator: list[Any], cache: Any) -> DraftBinding:
    runner_group = _group_of(layer, runner)
    speculator_group = _group_of(layer, speculator)
    shape = tuple(int(n) for n in cache.shape) if hasattr(cache, "shape") else None
    return DraftBinding(
        layer=layer,
        group=int(speculator_group.kv_cache_group_id),
        backend=speculator_group.backend.get_name(),
        runner_block=_builder_block(runner_group),
        speculator_block=_builder_block(speculator_group),
        # Every attention layout vLLM allocates views as [blocks, heads, block rows, channels]
        # (v1/worker/utils.py allocate_kv_cache); a token per row for attention specs.
        view_block=shape[-2] if shape is not None and len(shape) >= 2 else None,
        view_shape=shape,
    )


def _group_of(layer: str, attn_groups: list[Any]) -> Any:
    return next(g for g in attn_groups if layer in g.layer_names)


def _builder_block(group: Any) -> int:
    # The spec a builder was created with carries the kernel block size it was created for
    # (AttentionGroup.create_metadata_builders: copy_with_new_block_size).
    return int(group.get_metadata_builder(0).kv_cache_spec.block_size)
