"""Where a release validates the config schema does not change the verdict: an engine argument
the release lacks is unavailable whether EngineArgs' constructor or create_engine_config rejects
it. A fake EngineArgs in place of vLLM's (our wrapping is under test, not vLLM), raising pydantic's
real error; needs torch, which harness.attention.draft imports, so it runs in the lane envs."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from harness.attention.apis import ApiUnavailable

pytestmark = pytest.mark.vllm


def _missing_key_error() -> ValueError:
    """pydantic's own ValidationError for a key a config dataclass lacks, as vLLM's @config
    (extra="forbid") raises it: pydantic ships in every lane env."""
    from pydantic import ConfigDict
    from pydantic.dataclasses import dataclass

    @dataclass(config=ConfigDict(extra="forbid"))
    class AttentionConfig:
        backend: str | None = None

    try:
        AttentionConfig(backend_per_kind={})  # type: ignore[call-arg]
    except ValueError as error:
        return error
    raise AssertionError("pydantic accepted a key the dataclass lacks")


@pytest.mark.parametrize("where", ["constructor", "create_engine_config"])
def test_a_key_the_schema_lacks_is_unavailable_wherever_the_release_validates_it(
    where: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """vLLM 0.25.x builds AttentionConfig in EngineArgs.__post_init__, 0.24.0 in
    create_engine_config: the same missing key must be ApiUnavailable (unavailable) in both,
    not a crash in one of them."""
    from harness.attention.draft import engine_config
    from harness.deployment.arguments import Deployment
    from harness.deployment.settings import EngineSettings

    gap = _missing_key_error()

    class EngineArgs:
        def __init__(self, **kwargs: Any) -> None:
            if where == "constructor":
                raise gap

        def create_engine_config(self) -> Any:
            raise gap

    module = types.ModuleType("vllm.engine.arg_utils")
    module.EngineArgs = EngineArgs  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm.engine.arg_utils", module)
    shape = EngineSettings(target_backend_per_kind=(("full", "TRITON_ATTN"),))
    with pytest.raises(ApiUnavailable, match="AttentionConfig has no backend_per_kind"):
        engine_config(tmp_path / "t", tmp_path / "d", Deployment(shape, None, "float32"))
