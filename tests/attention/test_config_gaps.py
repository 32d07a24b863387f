"""Where a release validates the config schema does not change the verdict: an engine argument
the release lacks is unavailable whether EngineArgs' constructor or create_engine_config rejects
it. A fake EngineArgs in place of vLLM's (our wrapping is under test, not vLLM); needs torch,
which harness.attention.draft imports, so it runs in the lane envs."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from harness.attention.apis import ApiUnavailable


class _SchemaError(ValueError):
    """The shape of pydantic's ValidationError: a title and errors()."""

    def __init__(self, title: str, *errors: dict[str, Any]) -> None:
        super().__init__(title)
        self.title, self._errors = title, list(errors)

    def errors(self) -> list[dict[str, Any]]:
        return self._errors


@pytest.mark.parametrize("where", ["constructor", "create_engine_config"])
def test_a_key_the_schema_lacks_is_unavailable_wherever_the_release_validates_it(
    where: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """vLLM 0.25.x builds AttentionConfig in EngineArgs.__post_init__, 0.24.0 in
    create_engine_config: the same missing key must be ApiUnavailable (unavailable) in both,
    not a crash in one of them."""
    from harness.attention.draft import EngineShape, engine_config

    gap = _SchemaError(
        "AttentionConfig", {"type": "unexpected_keyword_argument", "loc": ("backend_per_kind",), "input": {}}
    )

    class EngineArgs:
        def __init__(self, **kwargs: Any) -> None:
            if where == "constructor":
                raise gap

        def create_engine_config(self) -> Any:
            raise gap

    module = types.ModuleType("vllm.engine.arg_utils")
    module.EngineArgs = EngineArgs  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm.engine.arg_utils", module)
    shape = EngineShape(target_backend_per_kind=(("full", "TRITON_ATTN"),))
    with pytest.raises(ApiUnavailable, match="AttentionConfig has no backend_per_kind"):
        engine_config(tmp_path / "t", tmp_path / "d", None, "float32", shape)
