"""The options a DFlash or DSpark draft may set in vLLM's ``speculative_config`` beyond the ones
other axes vary (method, model, attention_backend, kv_cache_dtype), and where each must show in
the draft vLLM builds (issue 38).

``SPECULATIVE_FIELDS`` classifies every field ``SpeculativeConfig`` has at the releases the
harness knows (vLLM 0.33.0 and 0.34.0, ``vllm/config/speculative.py``); a test reads the
installed class's fields and fails on one this table does not know
(``tests/selection_lane/test_speculative_fields.py``), as ``test_enum_coverage`` does for
backends. The field sets come from the class, the roles from vLLM's code: its validators
(``SpeculativeConfig._verify_args``, ``__post_init__`` checks such as "dspark_draft_topk is only
supported by DSpark"), 0.34.0's ``_METHOD_SPECIFIC_OPTIONS`` and each speculator config's
``supported_options`` (the test compares them where the release has them), and the fields it
marks ``SkipValidation`` (filled in by the engine).

``DRAFT_OPTIONS`` names the ``draft_option`` axis's values (``harness.axes.DRAFT_OPTION_TOKENS``):
each sets one field (or the fields vLLM only takes together) to a value other than its default,
and says where the draft's effective config must carry it. Pure data: the lane reads the paths
(``harness.attention.draft_options``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Role(StrEnum):
    """Whom a ``speculative_config`` field is for, seen from a DFlash/DSpark draft."""

    # The loader derives the draft's own config from it (its model, parallel, load or kernel
    # config): it must show in the config the draft is built under.
    DRAFT = "draft"
    # The speculation loop the draft runs in (how many tokens, padding, sampling): it must reach
    # the engine's speculative config; what it does happens per step, which no selection cell runs.
    SPECULATION = "speculation"
    # The target's verification of the draft's tokens: it must reach the engine's speculative
    # config and must not constrain the draft (its layers' settings and backend are audited as
    # in every cell, against what the draft asked).
    VERIFIER = "verifier"
    # Another axis sets it (method, backend, draft_kv_cache_dtype; model is the draft checkpoint).
    AXIS = "axis"
    # The engine fills it in (``SkipValidation`` fields, ``init=False``): not a user's option.
    ENGINE = "engine"
    # Another method's: vLLM refuses it for dflash/dspark, or it never acts for them.
    OTHER_METHOD = "other-method"


@dataclass(frozen=True)
class SpeculativeField:
    role: Role
    why: str  # where in vLLM the role comes from (file:line at 0.33.0 / 0.34.0)


_SPEC = "config/speculative.py"

# Every SpeculativeConfig field of vLLM 0.33.0 and 0.34.0 (a field one of them lacks is marked so).
SPECULATIVE_FIELDS: Mapping[str, SpeculativeField] = {
    "method": SpeculativeField(Role.AXIS, "the method axis (dflash, dflash2 under dflash, dspark)"),
    "model": SpeculativeField(Role.AXIS, "the draft checkpoint the lane writes"),
    "attention_backend": SpeculativeField(Role.AXIS, "the backend axis (_DRAFT_VLLM_CONFIG_OVERRIDES)"),
    "kv_cache_dtype": SpeculativeField(Role.AXIS, "the draft_kv_cache_dtype axis (_DRAFT_VLLM_CONFIG_OVERRIDES)"),
    "custom_method": SpeculativeField(Role.ENGINE, "0.34.0 only, init=False: vLLM moves a plugin's method there"),
    "target_model_config": SpeculativeField(Role.ENGINE, "SkipValidation, passed from the engine"),
    "target_parallel_config": SpeculativeField(Role.ENGINE, "SkipValidation, passed from the engine"),
    "draft_model_config": SpeculativeField(Role.ENGINE, "SkipValidation, generated in __post_init__"),
    "draft_parallel_config": SpeculativeField(Role.ENGINE, "SkipValidation, generated in __post_init__"),
    "enforce_eager": SpeculativeField(Role.DRAFT, "the draft's ModelConfig.enforce_eager (draft_model_config)"),
    "quantization": SpeculativeField(Role.DRAFT, "the draft's ModelConfig.quantization (draft_model_config)"),
    "max_model_len": SpeculativeField(Role.DRAFT, "the draft's ModelConfig.max_model_len (draft_model_config)"),
    "revision": SpeculativeField(Role.DRAFT, "the draft's ModelConfig.revision (draft_model_config)"),
    "code_revision": SpeculativeField(Role.DRAFT, "the draft's ModelConfig.code_revision (draft_model_config)"),
    "draft_tensor_parallel_size": SpeculativeField(Role.DRAFT, "create_draft_parallel_config"),
    "draft_decode_context_parallel_size": SpeculativeField(
        Role.DRAFT, "0.34.0 only: the draft's DCP (v1/worker/gpu/spec_decode/speculator.py:159)"
    ),
    "moe_backend": SpeculativeField(Role.DRAFT, "_DRAFT_VLLM_CONFIG_OVERRIDES: kernel_config.moe_backend"),
    "draft_load_config": SpeculativeField(Role.DRAFT, "get_draft_load_config (model_loader/utils.py)"),
    "dspark_draft_topk": SpeculativeField(
        Role.DRAFT,
        "DSpark's only (0.33.0 speculative.py:1640 refuses it for another method; 0.34.0 DSparkSpeculatorConfig."
        "supported_options); written into the draft's hf_config",
    ),
    "draft_lm_head_quantization": SpeculativeField(
        Role.DRAFT,
        "the draft's copy of the target's lm_head; 0.33.0 refuses it outside eagle/eagle3/mtp (speculative.py:1953), "
        "0.34.0's DSparkSpeculatorConfig.supported_options lists it",
    ),
    "num_speculative_tokens": SpeculativeField(Role.SPECULATION, "tokens drafted per step"),
    "num_speculative_tokens_per_batch_size": SpeculativeField(Role.SPECULATION, "dynamic speculative decoding"),
    "disable_padded_drafter_batch": SpeculativeField(Role.SPECULATION, "0.33.0 only: the drafter's input batch"),
    "use_local_argmax_reduction": SpeculativeField(Role.SPECULATION, "the draft's greedy token selection"),
    "parallel_drafting": SpeculativeField(
        Role.SPECULATION, "0.33.0 sets it for dflash/dspark itself (speculative.py:1581); 0.34.0: deprecated, no effect"
    ),
    "draft_sample_method": SpeculativeField(Role.SPECULATION, "how the draft samples its tokens"),
    "rejection_sample_method": SpeculativeField(Role.VERIFIER, "the target's rejection sampler"),
    "synthetic_acceptance_rates": SpeculativeField(Role.VERIFIER, "rejection_sample_method = synthetic only"),
    "synthetic_acceptance_length": SpeculativeField(Role.VERIFIER, "rejection_sample_method = synthetic only"),
    "fly_window_size": SpeculativeField(Role.VERIFIER, "rejection_sample_method = fly"),
    "fly_entropy_threshold": SpeculativeField(Role.VERIFIER, "rejection_sample_method = fly"),
    "fly_entropy_top_k": SpeculativeField(Role.VERIFIER, "rejection_sample_method = fly"),
    "enable_adaptive_verification": SpeculativeField(
        Role.VERIFIER, "the verification budget; the selector reads it for every draft but dspark (selector.py:150)"
    ),
    "tensor_parallel_size": SpeculativeField(
        Role.OTHER_METHOD, "refused for every method: 'Please pass draft_tensor_parallel_size' (speculative.py:1940)"
    ),
    "index_share_for_mtp_iteration": SpeculativeField(
        Role.OTHER_METHOD, "'only supported with method=mtp' (0.33.0 speculative.py:1704)"
    ),
    "use_heterogeneous_vocab": SpeculativeField(
        Role.OTHER_METHOD, "0.33.0 only: 'only works with method=draft_model' (speculative.py:1995)"
    ),
    "disable_eagle_block_drop": SpeculativeField(
        Role.OTHER_METHOD, "DFlash/DSpark never drop the block (needs_eagle_block_drop, 0.33.0 speculative.py:2124)"
    ),
    "disable_lookahead_block_hashes": SpeculativeField(
        Role.OTHER_METHOD, "read only where use_eagle_block_drop() holds (0.33.0 config/vllm.py:684): never for dflash"
    ),
    "prompt_lookup_max": SpeculativeField(Role.OTHER_METHOD, "ngram"),
    "prompt_lookup_min": SpeculativeField(Role.OTHER_METHOD, "ngram"),
    "suffix_decoding_max_tree_depth": SpeculativeField(Role.OTHER_METHOD, "suffix"),
    "suffix_decoding_max_cached_requests": SpeculativeField(Role.OTHER_METHOD, "suffix"),
    "suffix_decoding_corpus_tokens": SpeculativeField(Role.OTHER_METHOD, "suffix (0.34.0 only)"),
    "suffix_decoding_max_spec_factor": SpeculativeField(Role.OTHER_METHOD, "suffix"),
    "suffix_decoding_min_token_prob": SpeculativeField(Role.OTHER_METHOD, "suffix"),
    "xpress_topc": SpeculativeField(
        Role.OTHER_METHOD, "an XPress refiner's (0.34.0 XPressSpeculatorConfig.supported_options); the lane writes none"
    ),
    "speculator_options": SpeculativeField(
        Role.OTHER_METHOD, "0.34.0 only: a custom speculator's (supported_options); dflash/dspark list none"
    ),
}

# Roles a draft_option value covers: each field of these roles is set by some value.
OPTION_ROLES = frozenset({Role.DRAFT, Role.SPECULATION, Role.VERIFIER})


@dataclass(frozen=True)
class Reach:
    """Where the draft's effective config must carry an option: ``path`` read from one of the
    roots the lane records (``engine``: the engine's VllmConfig; ``draft``: the VllmConfig the
    loader built the draft under; ``draft_model``: the ModelConfig it built it with;
    ``draft_load``: the LoadConfig it loaded it with), equal to ``value``."""

    path: str
    value: Any


@dataclass(frozen=True)
class DraftOption:
    fields: tuple[tuple[str, Any], ...]  # the speculative_config fields it sets, and their values
    reaches: tuple[Reach, ...]
    why: str = ""  # what the option does to the draft, where that is not evident
    # vLLM takes the option only with full CUDA graphs (adaptive verification: 0.33.0
    # VllmConfig._validate_adaptive_verification, config/vllm.py:2100): the cell's engine asks
    # for FULL_DECODE_ONLY graphs, which the selection lane configures and never captures.
    full_graphs: bool = False

    @property
    def role(self) -> Role:
        return SPECULATIVE_FIELDS[self.fields[0][0]].role


def _on_speculative(field: str, value: Any) -> Reach:
    return Reach(f"engine.speculative_config.{field}", value)


def _option(field: str, value: Any, *reaches: Reach, why: str = "", full_graphs: bool = False) -> DraftOption:
    return DraftOption(((field, value),), (*reaches, _on_speculative(field, value)), why, full_graphs)


NO_OPTION = "none"
DRAFT_OPTIONS: Mapping[str, DraftOption] = {
    NO_OPTION: DraftOption((), ()),
    # The draft's own config (Role.DRAFT).
    "maxlen128": _option("max_model_len", 128, Reach("draft_model.max_model_len", 128)),
    "quantfp8": _option("quantization", "fp8", Reach("draft_model.quantization", "fp8")),
    "moetriton": _option("moe_backend", "triton", Reach("draft.kernel_config.moe_backend", "triton")),
    "eagerfalse": _option(
        "enforce_eager",
        False,
        why="it decides the drafter's CUDA graphs (Model Runner V1: llm_base_proposer.py:427), not the draft's "
        "ModelConfig, which takes the target's (speculative.py:1426); no selection cell captures graphs",
    ),
    "revision": _option("revision", "main", Reach("draft_model.revision", "main")),
    "coderevision": _option("code_revision", "main", Reach("draft_model.code_revision", "main")),
    "drafttp1": _option(
        "draft_tensor_parallel_size",
        1,
        Reach("engine.speculative_config.draft_parallel_config.tensor_parallel_size", 1),
        Reach("draft.parallel_config.tensor_parallel_size", 1),
        why="the target's TP is 1 too, so a draft that lost it would look the same",
    ),
    "draftdcp1": _option(
        "draft_decode_context_parallel_size",
        1,
        why="the target's DCP is 1 too, so a draft that lost it would look the same",
    ),
    "loadconfig": DraftOption(
        (("draft_load_config", {"load_format": "dummy", "download_dir": "draft-downloads"}),),
        (
            Reach("engine.speculative_config.draft_load_config.download_dir", "draft-downloads"),
            Reach("draft_load.download_dir", "draft-downloads"),
        ),
    ),
    "dsparktopk4": _option("dspark_draft_topk", 4, Reach("draft_model.hf_config.dspark_draft_topk", 4)),
    "lmheadfp8": _option(
        "draft_lm_head_quantization",
        "fp8",
        why="it quantizes the draft's copy of the target's lm_head, which the lane does not read",
    ),
    # The speculation loop (Role.SPECULATION).
    "nspec2": _option("num_speculative_tokens", 2),
    "batchsched": _option("num_speculative_tokens_per_batch_size", [[1, 2, 2], [3, 4, 4]]),
    "nopad": _option("disable_padded_drafter_batch", True),
    "localargmax": _option("use_local_argmax_reduction", True),
    "paralleldraft": _option("parallel_drafting", True),
    "probdraft": _option("draft_sample_method", "probabilistic"),
    # The target's verification (Role.VERIFIER).
    "blockverify": _option("rejection_sample_method", "block"),
    "adaptive": _option("enable_adaptive_verification", True, full_graphs=True),
    # synthetic_acceptance_length is resolved into the rates and then cleared (0.33.0
    # speculative.py:1977): what reaches the config is the rates it stands for.
    "synthlen": DraftOption(
        (("synthetic_acceptance_length", 2.0), ("rejection_sample_method", "synthetic")),
        (
            _on_speculative("rejection_sample_method", "synthetic"),
            _on_speculative("synthetic_acceptance_rates", [1.0, 0.0, 0.0, 0.0]),
        ),
    ),
    "synthrates": DraftOption(
        (("synthetic_acceptance_rates", [0.8, 0.6, 0.4, 0.2]), ("rejection_sample_method", "synthetic")),
        (
            _on_speculative("rejection_sample_method", "synthetic"),
            _on_speculative("synthetic_acceptance_rates", [0.8, 0.6, 0.4, 0.2]),
        ),
    ),
    "fly": DraftOption(
        (
            ("fly_window_size", 2),
            ("rejection_sample_method", "fly"),
            ("fly_entropy_threshold", 0.5),
            ("fly_entropy_top_k", 2),
        ),
        tuple(
            _on_speculative(field, value)
            for field, value in (
                ("rejection_sample_method", "fly"),
                ("fly_window_size", 2),
                ("fly_entropy_threshold", 0.5),
                ("fly_entropy_top_k", 2),
            )
        ),
    ),
}


def speculative_fields(option: str) -> dict[str, Any]:
    """The speculative_config entries ``option`` adds (fresh copies: vLLM may keep them)."""
    return copy.deepcopy(dict(DRAFT_OPTIONS[option].fields))


def option_fields() -> frozenset[str]:
    """Every field some draft_option value sets."""
    return frozenset(field for option in DRAFT_OPTIONS.values() for field, _ in option.fields)


def unjudged(option: str) -> list[str]:
    """What the lane cannot judge of ``option`` from a built draft, one line per field."""
    lines = []
    for field, _ in DRAFT_OPTIONS[option].fields:
        role = SPECULATIVE_FIELDS[field].role
        if role == Role.SPECULATION:
            lines.append(f"{field}: acts per speculation step, which no selection cell runs")
        elif role == Role.VERIFIER:
            lines.append(f"{field}: acts when the target verifies draft tokens, which no selection cell runs")
        elif why := DRAFT_OPTIONS[option].why:
            lines.append(f"{field}: {why}")
    return lines
