"""The engine's start-up, read (harness.attention.rejections.startup_stop): a refusal vLLM
documents (no common KV-cache layout; a CUDA-graph mode no builder serves; capture sizes no multiple
of the decode query length fits) is a refusal at stage startup with its own code path; any other
raise there is a crash; a question the host cannot answer is a host limit."""

from __future__ import annotations

import pytest

from harness.attention.rejections import startup_stop

pytestmark = pytest.mark.pure

# vLLM 0.33.0 config/compilation.py resolve_cudagraph_mode_and_sizes, word for word.
NEVER = (
    "CUDAGraphMode.FULL_AND_PIECEWISE is not supported with FlashInferBackend backend (support: "
    "AttentionCGSupport.NEVER); please try cudagraph_mode=PIECEWISE, and make sure compilation mode is VLLM_COMPILE"
)


def test_a_graph_mode_no_builder_serves_is_a_refusal_on_the_decisions_path() -> None:
    stop = startup_stop(ValueError(NEVER))
    assert (stop.kind, stop.error_type) == ("refusal", "ValueError")
    assert "resolve_cudagraph_mode_and_sizes" in stop.path
    assert stop.message.startswith("CUDAGraphMode.FULL_AND_PIECEWISE is not supported with FlashInferBackend")


def test_capture_sizes_no_decode_query_length_fits_is_a_refusal() -> None:
    stop = startup_stop(
        ValueError("No valid cudagraph sizes after rounding to multiple of 8 (num_speculative_tokens + 1)")
    )
    assert stop.kind == "refusal"


def test_the_same_words_in_another_exception_type_are_a_crash() -> None:
    assert startup_stop(AssertionError(NEVER)).kind == "crash"


def test_no_common_layout_stays_a_refusal_on_the_engine_cores_path() -> None:
    stop = startup_stop(ValueError("No KV cache layout satisfies every supported set: [['NHD'], ['HND']]"))
    assert stop.kind == "refusal"
    assert "get_supported_kv_cache_layouts" in stop.path


def test_a_builder_that_raises_is_a_crash_on_the_start_up_path() -> None:
    stop = startup_stop(RuntimeError("KV cache layout has not been resolved yet"))
    assert (stop.kind, stop.error_type) == ("crash", "RuntimeError")
    assert "init_attn_backend" in stop.path and "init_cudagraph_manager" in stop.path
