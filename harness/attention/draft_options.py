"""Whether what a draft sets in ``speculative_config`` reaches the draft vLLM built (issue 38).

The option's fields and where each must show are data (``harness.deployment.draft_options``);
this module reads those paths from the configs the lane recorded: the engine's VllmConfig and
the VllmConfig, ModelConfig and LoadConfig the loader handed ``get_model`` for the draft
(``harness.attention.draft.DraftBuild``). A value that differs is a lost setting (the verdict
``wrong-setting``) naming the field, where it was read and both values; a path this release
lacks, or an effect no built draft shows, is listed as not judged, never skipped.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from harness.attention.draft import DraftBuild
from harness.deployment.draft_options import DRAFT_OPTIONS, unjudged

_MISSING = object()


@dataclass(frozen=True)
class OptionCheck:
    lost: tuple[str, ...]  # one line per path whose value is not what the draft asked
    not_judged: tuple[str, ...]
    read: dict[str, Any]  # path -> the value found there, for the cell's details


def _plain(value: Any) -> Any:
    """A value as the option table spells it: enum members by value, sequences as lists."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [_plain(each) for each in value]
    return value


def _read(roots: dict[str, Any], path: str) -> Any:
    root, *attributes = path.split(".")
    value = roots.get(root, _MISSING)
    for attribute in attributes:
        if value is _MISSING or value is None:
            return _MISSING
        value = getattr(value, attribute, _MISSING)
    return value


def check(option: str, engine: Any, build: DraftBuild | None) -> OptionCheck:
    """Compare every place ``option`` must show with what the engine and the draft's build carry."""
    spec = DRAFT_OPTIONS[option]
    roots: dict[str, Any] = {"engine": engine}
    not_judged = list(unjudged(option))
    if build is None:
        not_judged.append("the draft's own config: the loader built the draft without vLLM's get_model")
    else:
        roots.update(draft=build.vllm_config, draft_model=build.model_config, draft_load=build.load_config)
    lost: list[str] = []
    read: dict[str, Any] = {}
    asked = ", ".join(f"{field}={value!r}" for field, value in spec.fields)
    for reach in spec.reaches:
        if reach.path.split(".")[0] not in roots:
            continue
        found = _read(roots, reach.path)
        if found is _MISSING:
            not_judged.append(f"{reach.path}: this vLLM's config has no such attribute")
            continue
        read[reach.path] = repr(found)
        if _plain(found) != reach.value:
            lost.append(
                f"speculative_config {asked}: {reach.path} is {_plain(found)!r}, the draft asked for {reach.value!r}"
            )
    return OptionCheck(tuple(lost), tuple(not_judged), read)
