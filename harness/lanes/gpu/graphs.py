"""The gpu lane's CUDA-graph forward: a draft layer's backend call captured as Model Runner
V2's DFlash speculator captures it, then replayed for real batches (``cudagraph=graph``),
since some bugs live only in the replay (vLLM #48167). Imports vLLM lazily.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.deployment.cells import REPLAY_CONTEXT_STEP
from harness.stages import Stage, StageLog

# The least CUDA-graph support a DFlash draft's attention needs for vLLM to capture it: its
# queries are uniform batches of 1 + num_speculative_tokens tokens per request.
_GRAPH_SUPPORT_NEEDED = "UNIFORM_BATCH"
# Model Runner V1's drafter (``LLMBaseProposer.initialize_cudagraph_keys``) never captures a
# FULL graph of the draft: PIECEWISE at most, and attention is the op piecewise graphs split
# at, so its kernels run eagerly between the pieces.
V1_GRAPH_RUNTIME = (
    "Model Runner V1's drafter captures PIECEWISE graphs at most, which leave attention outside; "
    "the draft attention ran eagerly, as vLLM runs it"
)


class GraphForward:
    """The layer's backend call captured in a CUDA graph as Model Runner V2's DFlash speculator
    captures it, then replayed for real batches (``harness.attention.graph.replay_batches``)."""

    def __init__(self, device: Any, graphs: Callable[[Any], Any] | None = None):
        """``graphs(device)`` gives the graph API; None: ``torch.cuda`` graphs
        (``harness.attention.graph.CudaGraphs``)."""
        self.device = device
        self.graphs = graphs

    def refusal(self, attn: Any, attention_config: Any) -> str | None:
        """vLLM runs a DFlash draft eagerly, even when FULL graphs are asked for, where its
        attention's metadata builder declares less than UNIFORM_BATCH support (Model Runner
        V2's ``DFlashSpeculator.init_cudagraph_manager``)."""
        from vllm.v1.attention.backend import AttentionCGSupport

        backend = attn.get_attn_backend()
        spec = attn.get_kv_cache_spec(attention_config)
        support = backend.get_builder_cls().get_cudagraph_support(attention_config, spec)
        if support.value >= AttentionCGSupport[_GRAPH_SUPPORT_NEEDED].value:
            return None
        return (
            f"no CUDA graph: {backend.get_name()}'s metadata builder declares AttentionCGSupport.{support.name} "
            f"for this draft, below the {_GRAPH_SUPPORT_NEEDED} a DFlash draft needs; vLLM runs it eagerly"
        )

    def batches(self, batch: Any) -> tuple[Any, ...]:
        """The cell's batch, then one whose requests hold other context lengths, in another order."""
        from harness.attention.paged import Batch

        longer = tuple(c + REPLAY_CONTEXT_STEP for c in reversed(batch.context_lens))
        return (batch, Batch(context_lens=longer, query_len=batch.query_len))

    def run(
        self, attn: Any, attention_config: Any, runs: Any, causal: bool, stage_log: StageLog, bound: Any = None
    ) -> list[Any]:
        """Model Runner V2's sequence (vLLM 0.33.0 ``v1/worker/gpu/spec_decode/dflash``):
        ``DFlashCudaGraphManager.capture`` builds dummy metadata with
        ``build_for_cudagraph_capture`` (seq_len = query length, null-block tables, PAD slots,
        ``max_seq_len`` = max_model_len) and captures the forward on it; each ``propose`` then
        refills the persistent input buffers, builds the real batch's metadata on the same
        builder (``_build_uniform_attn_metadata``, which may re-plan in place, vLLM #48167) and
        replays. The graph sees a new batch only through what stays in those buffers.
        ``bound``: the cache vLLM laid out for the layer (``paged.allocate_layer``)."""
        from harness.attention.graph import CudaGraphs, replay_batches
        from harness.attention.paged import allocate_layer, blocks_needed

        stage_log(Stage.METADATA)
        max_model_len = attention_config.model_config.max_model_len
        block_size = bound.block_size if bound is not None else attn.get_kv_cache_spec(attention_config).block_size
        first = runs[0][0]
        layer = allocate_layer(
            attn,
            attention_config,
            len(first.context_lens),
            first.query_len,
            1 + sum(blocks_needed(batch, block_size) for batch, _ in runs),
            max_model_len,
            runs[0][1].query.dtype,
            self.device,
            bound,
        )
        layer.load_dummy()
        captured = layer.builder.build_for_cudagraph_capture(layer.common(None, causal, max_model_len))

        def loader(batch: Any, inputs: Any, first_block: int) -> Callable[[], None]:
            def load() -> None:
                layer.load(batch, inputs, first_block)
                common = layer.common(batch, causal, max_model_len)
                layer.builder.build(common_prefix_len=0, common_attn_metadata=common)

            return load

        loads = []
        first_block = 1  # each batch its own blocks: a block table frozen at capture reads others
        for batch, inputs in runs:
            loads.append(loader(batch, inputs, first_block))
            first_block += blocks_needed(batch, block_size)
        stage_log(Stage.FORWARD)
        graphs = (self.graphs or CudaGraphs)(self.device)
        return replay_batches(lambda: layer.run(captured), loads, graphs)
