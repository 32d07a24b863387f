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
3. where the caller asks (``GraphInputs``: the selection lane), the CUDA-graph decision between
   the two: the runner resolves the compilation config's ``cudagraph_mode`` over its builders'
   ``get_cudagraph_support`` (``CompilationConfig.resolve_cudagraph_mode_and_sizes``, which
   writes the mode back and raises where no mode serves them), the speculator's builders are
   created under that mode, and the speculator decides the draft's own mode from its builders
   (``DFlashSpeculator.init_cudagraph_manager``; V1's ``initialize_cudagraph_keys``);
4. ``init_kv_cache`` with the runner's kernel block sizes and both callers' attention groups,
   which binds a cache view to every layer (V1's ``initialize_kv_cache_tensors`` calls the same
   ``allocate_kv_cache`` and ``map_kv_caches_to_kernel_blocks``).

Step 3 is the order Model Runner V2's ``initialize_kv_cache`` runs (target-draft-seam.md, "The
start-up sequence"). ``lay_out`` reads the result into plain data; ``bind`` also hands a kernel lane each draft
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
    # Each attention group's builder's CUDA-graph support ("BACKEND: AttentionCGSupport"), the
    # runner's and the speculator's: what the CUDA-graph decision read (empty where not decided).
    runner_cudagraph_support: tuple[str, ...] = ()
    speculator_cudagraph_support: tuple[str, ...] = ()


@dataclass(frozen=True)
class CudaGraphDecision:
    """The start-up's CUDA-graph decision (module docstring, step 3), as mode names.

    requested:  the compilation config's ``cudagraph_mode`` before the runner resolved it.
    runner:     what the runner resolved it to (written back to the compilation config); every
                target layer runs under it.
    speculator: the draft's own mode, decided by the speculator from its builders' support.
    """

    requested: str
    runner: str
    speculator: str


@dataclass(frozen=True)
class GraphInputs:
    """What the runner's CUDA-graph decision reads besides the builders: the uniform decode
    query length (V2: ``num_speculative_steps + num_new_sampled_tokens_per_step``; V1:
    ``uniform_decode_query_len``; both 1 + num_speculative_tokens for a DFlash draft), which
    runner decides (V2 leaves capture sizes to its own sizing, V1 rounds them) and whether the
    loaded target offers piecewise capture (``has_compiled_submodule`` or breakable graphs)."""

    decode_query_len: int
    use_v2_model_runner: bool
    piecewise_capture_available: bool


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
    cudagraph: CudaGraphDecision | None = None

    def details(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            # A layout laid out without the CUDA-graph decision reads as it did before it existed.
            "groups": [{k: v for k, v in asdict(g).items() if v != ()} for g in self.groups],
            "draft_layers": [asdict(d) for d in self.drafts],
        }
        if self.cudagraph is not None:
            found["cudagraph"] = asdict(self.cudagraph)
        return found


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
# How a speculator decides the draft's CUDA-graph mode, given the runner's resolved mode and its
# own attention groups: the mode it runs the draft under.
SpeculatorGraphs = Callable[[Any, list[Any]], Any]


@dataclass(frozen=True)
class Speculator:
    """The draft side of the start-up: its attention groups and its CUDA-graph decision."""

    groups: SpeculatorGroups
    cudagraph_mode: SpeculatorGraphs
    # The config its builders are created under and read their CUDA-graph support from (None: the
    # engine's, as Model Runner V1's proposer uses it).
    attn_config: Any = None


def v2_speculator(draft_config: Any, draft_layers: set[str], device: Any) -> Speculator:
    """Model Runner V2's speculator (``DraftModelSpeculator.set_attn``): ``init_attn_backend``
    over the draft layers alone, under the config its builders get (``attn_vllm_config``); it
    computes kernel block sizes of its own and never sees the runner's. Its CUDA-graph mode is
    ``DFlashSpeculator.init_cudagraph_manager``'s (DFlash2 and DSpark inherit it): FULL decode
    graphs where the runner's decode mode is FULL and every draft builder supports uniform
    batches, else eager."""

    def groups(kv_cache_config: Any, runner_blocks: list[int]) -> list[Any]:
        from vllm.v1.worker.gpu.attn_utils import init_attn_backend

        per_group, _, _ = init_attn_backend(kv_cache_config, draft_config, device, active_layer_names=draft_layers)
        return [g for gs in per_group for g in gs]

    def cudagraph_mode(runner_mode: Any, draft_groups: list[Any]) -> Any:
        import types
        from unittest import mock

        import vllm.v1.worker.gpu.spec_decode.dflash.speculator as dflash
        from vllm.v1.worker.gpu.attn_utils import get_attn_cg_support

        # The speculator's own method, run on the state it reads (set_attn's attn_cg_support over
        # the draft's groups, under attn_vllm_config); the graph manager it then constructs takes
        # a CUDA graph pool, so a stand-in receives the mode instead.
        speculative = draft_config.speculative_config
        state = types.SimpleNamespace(
            attn_cg_support=get_attn_cg_support([draft_groups], draft_config),
            _speculator_name="DFlash",
            vllm_config=draft_config,
            device=device,
            num_query_per_req=1 + int(speculative.num_speculative_tokens),
            # 0.34.0 sizes the manager's decode query lengths by it (DraftModelSpeculator.__init__).
            max_num_reqs=draft_config.scheduler_config.max_num_seqs,
        )
        with mock.patch.object(dflash, "DFlashCudaGraphManager", _ModeRecorder):
            dflash.DFlashSpeculator.init_cudagraph_manager(state, runner_mode)
        return state.query_cudagraph_manager.cudagraph_mode

    return Speculator(groups, cudagraph_mode, draft_config)


class _ModeRecorder:
    """Stands in for the speculator's CUDA-graph manager: keeps the mode it is created with."""

    def __init__(self, vllm_config: Any, device: Any, cudagraph_mode: Any, **_: Any) -> None:
        self.cudagraph_mode = cudagraph_mode


def v1_proposer(proposer: Any) -> Speculator:
    """Model Runner V1's proposer (``initialize_attn_backend``, called from the runner's
    ``initialize_metadata_builders`` with the runner's kernel block sizes; its CUDA-graph mode
    from ``initialize_cudagraph_keys``, which the runner calls with its resolved mode: piecewise
    where the runner's mixed mode captures, else eager)."""

    def groups(kv_cache_config: Any, runner_blocks: list[int]) -> list[Any]:
        proposer.initialize_attn_backend(kv_cache_config, runner_blocks)
        return list(proposer.draft_attn_groups)

    def cudagraph_mode(runner_mode: Any, draft_groups: list[Any]) -> Any:
        proposer.initialize_cudagraph_keys(runner_mode)
        return proposer.cudagraph_dispatcher.cudagraph_mode

    return Speculator(groups, cudagraph_mode)


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


def graph_inputs(vllm_config: Any, target: Any, loader: str) -> GraphInputs:
    """The runner's CUDA-graph inputs for a cell's engine with the loaded ``target``: Model Runner
    V2 offers piecewise capture where the target has a compiled submodule or breakable graphs are
    on (``initialize_kv_cache``); V1 does not ask (the method's default, True)."""
    import vllm.envs as envs

    query_len = 1 + int(vllm_config.speculative_config.num_speculative_tokens)
    if loader == "v1":
        return GraphInputs(query_len, use_v2_model_runner=False, piecewise_capture_available=True)
    try:
        from vllm.v1.worker.gpu.cudagraph_utils import has_compiled_submodule
    except ImportError:  # a release that does not ask (it takes no piecewise_capture_available)
        return GraphInputs(query_len, use_v2_model_runner=True, piecewise_capture_available=True)
    breakable = bool(getattr(envs, "VLLM_USE_BREAKABLE_CUDAGRAPH", False))
    return GraphInputs(query_len, True, breakable or has_compiled_submodule(target))


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
    speculator: Speculator,
    budget: int = KV_CACHE_BUDGET_BYTES,
    graphs: GraphInputs | None = None,
) -> KvCacheLayout:
    """Steps 1-4 of the module docstring (3 where ``graphs`` is given). The caller holds
    ``set_current_vllm_config(vllm_config)`` and has settled the block size and layout
    (``harness.attention.draft.settle_kv_cache``, over every layer)."""
    return bind(vllm_config, draft_layers, device, speculator, budget, graphs)[0]


def bind(
    vllm_config: Any,
    draft_layers: set[str],
    device: Any,
    speculator: Speculator,
    budget: int = KV_CACHE_BUDGET_BYTES,
    graphs: GraphInputs | None = None,
) -> tuple[KvCacheLayout, dict[str, BoundCache]]:
    """``lay_out``, and for each draft layer what a kernel lane runs it against (``BoundCache``)."""
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec, init_attn_backend, init_kv_cache

    kv_cache_config = _kv_cache_config(vllm_config, [get_kv_cache_spec(vllm_config)], budget)
    # The engine core records the pool's size before the workers build their metadata builders
    # (EngineCore._initialize_kv_caches); FlexAttention's builder sizes its block masks from it.
    vllm_config.cache_config.num_gpu_blocks = kv_cache_config.num_blocks
    runner_groups, runner_support, runner_blocks = init_attn_backend(
        kv_cache_config, vllm_config, device, draft_layer_names=draft_layers
    )
    runner = [g for gs in runner_groups for g in gs]
    decision = None
    if graphs is not None:
        requested = vllm_config.compilation_config.cudagraph_mode
        runner_mode = _resolve_runner_mode(vllm_config, kv_cache_config, runner_support, graphs)
    # The speculator's builders are created after the runner resolved the mode, under it (its
    # attn_vllm_config shares the engine's compilation config), as set_attn follows the decision.
    drafts = speculator.groups(kv_cache_config, runner_blocks)
    draft_config = vllm_config if speculator.attn_config is None else speculator.attn_config
    if graphs is not None:
        draft_mode = speculator.cudagraph_mode(runner_mode, drafts)
        decision = CudaGraphDecision(_mode_name(requested), _mode_name(runner_mode), _mode_name(draft_mode))
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
                runner_cudagraph_support=_supports(vllm_config, runner, gid) if graphs else (),
                speculator_cudagraph_support=_supports(draft_config, drafts, gid) if graphs else (),
            )
            for gid, group in enumerate(kv_cache_config.kv_cache_groups)
        ),
        drafts=tuple(_binding(name, runner, drafts, layers[name].kv_cache) for name in sorted(draft_layers)),
        cudagraph=decision,
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


def _resolve_runner_mode(vllm_config: Any, kv_cache_config: Any, support: Any, graphs: GraphInputs) -> Any:
    """The runner's CUDA-graph decision: Model Runner V2's ``initialize_kv_cache`` and V1's
    ``_check_and_update_cudagraph_mode`` both hand the weakest builder support to
    ``CompilationConfig.resolve_cudagraph_mode_and_sizes``, which downgrades the mode (a
    warning), writes it back to the compilation config, or raises where no mode serves the
    builders. V2 first narrows the support by its model state's extra groups (none for a
    decoder-only target: ALWAYS) and, with adaptive verification on, the mode; neither applies
    to these cells. A parameter this release's method lacks is not passed."""
    import inspect

    compilation = vllm_config.compilation_config
    optional = {
        "use_v2_model_runner": graphs.use_v2_model_runner,
        "kv_cache_config": kv_cache_config,
        "max_num_reqs": vllm_config.scheduler_config.max_num_seqs,
        "is_profiling": False,
        "piecewise_capture_available": graphs.piecewise_capture_available,
    }
    taken = inspect.signature(compilation.resolve_cudagraph_mode_and_sizes).parameters
    return compilation.resolve_cudagraph_mode_and_sizes(
        support.min_cg_support,
        support.min_cg_attn_backend,
        graphs.decode_query_len,
        **{name: value for name, value in optional.items() if name in taken},
    )


def _supports(vllm_config: Any, attn_groups: list[Any], gid: int) -> tuple[str, ...]:
    """Each attention group's builder's CUDA-graph support in KV-cache group ``gid``, as
    ``get_attn_cg_support`` reads it (the builder, the engine's config, the group's spec)."""
    return tuple(
        f"{g.backend.get_name()}: {g.get_metadata_builder(0).get_cudagraph_support(vllm_config, g.kv_cache_spec).name}"
        for g in attn_groups
        if g.kv_cache_group_id == gid
    )


def _mode_name(mode: Any) -> str:
    return str(getattr(mode, "name", mode))


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
