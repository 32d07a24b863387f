"""The selection lane's checkpoints: config.json alone (it builds drafts with
``load_format="dummy"``, so no weights are read), a Qwen3 target and a draft per method,
causality, sinks and head size, written once per cell process."""

from __future__ import annotations

import json
from pathlib import Path


class ConfigCheckpoints:
    def __init__(self, root: Path, head_dim: int):
        self.root = root
        self.head_dim = head_dim
        self._drafts: dict[tuple[bool, bool, str, int], Path] = {}
        self.target = self._write("target", self._qwen3_config())

    def _qwen3_config(self, **extra: object) -> dict[str, object]:
        config: dict[str, object] = {
            "architectures": ["Qwen3ForCausalLM"],
            "model_type": "qwen3",
            "hidden_size": 256,
            "intermediate_size": 512,
            "num_hidden_layers": 4,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": self.head_dim,
            "vocab_size": 1024,
            "max_position_embeddings": 2048,
            "rms_norm_eps": 1e-6,
            "rope_theta": 1000000.0,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
        }
        config.update(extra)
        return config

    def _write(self, name: str, config: dict[str, object]) -> Path:
        # Config only: the lane loads with load_format="dummy", so no weights are read.
        folder = self.root / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config, indent=2))
        return folder

    def draft(self, causal: bool, sink: bool, method: str = "dflash", head_size: int | None = None) -> Path:
        """A config-only draft in the method's own format (qwen3_dflash.py, qwen3_dflash2.py,
        qwen3_dspark.py): the fields their model classes read when they build."""
        head = head_size or self.head_dim
        key = (causal, sink, method, head)
        if key not in self._drafts:
            dflash_config: dict[str, object] = {
                "mask_token_id": 1000,
                "target_layer_ids": [1, 2],
                "causal": causal,
                "attention_sink_bias": sink,
            }
            extra: dict[str, object] = {}
            architecture = {"dflash": "DFlashDraftModel", "dflash2": "DFlash2DraftModel", "dspark": "Qwen3DSparkModel"}
            if method == "dflash2":
                dflash_config.update(conv_kernel_size=2, conv_group_size=32, selector_rank=8, selector_top_k=4)
            elif method == "dspark":
                extra["markov_rank"] = 8
            name = f"draft-{method}-hd{head}-{'causal' if causal else 'noncausal'}-{'sink' if sink else 'nosink'}"
            self._drafts[key] = self._write(
                name,
                self._qwen3_config(
                    architectures=[architecture[method]],
                    num_hidden_layers=1,
                    block_size=8,
                    head_dim=head,
                    dflash_config=dflash_config,
                    **extra,
                ),
            )
        return self._drafts[key]
