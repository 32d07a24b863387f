"""The draft_option axis (issue 38) is one table: every value names fields of vLLM's
SpeculativeConfig the harness has classified, every field a DFlash/DSpark draft may set is set by
some value, the selection matrix covers every value, and the engine arguments carry exactly the
option's fields."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.axes import AXES_BY_NAME, DRAFT_OPTION_TOKENS
from harness.deployment.arguments import Deployment, speculative_config
from harness.deployment.draft_options import (
    DRAFT_OPTIONS,
    NO_OPTION,
    OPTION_ROLES,
    SPECULATIVE_FIELDS,
    Role,
    option_fields,
    unjudged,
)
from harness.deployment.settings import EngineSettings, engine_settings
from harness.matrix import expand, load_matrix

pytestmark = pytest.mark.pure

SELECTION = Path(__file__).resolve().parents[2] / "matrices" / "selection.toml"


def test_the_axis_values_are_the_option_table_keys() -> None:
    assert tuple(DRAFT_OPTIONS) == DRAFT_OPTION_TOKENS
    assert AXES_BY_NAME["draft_option"].default == NO_OPTION


def test_every_field_a_draft_may_set_is_set_by_some_option_and_no_other_field_is() -> None:
    settable = {name for name, field in SPECULATIVE_FIELDS.items() if field.role in OPTION_ROLES}
    assert option_fields() == settable
    for token, option in DRAFT_OPTIONS.items():
        assert token == NO_OPTION or option.fields, token
        # An option's first field names its role; the fields it needs beside (a sampler's method) share it.
        assert {SPECULATIVE_FIELDS[name].role for name, _ in option.fields} <= {option.role} if option.fields else True


def test_every_option_says_where_it_must_show_or_why_the_lane_cannot_tell() -> None:
    for token, option in DRAFT_OPTIONS.items():
        if token == NO_OPTION:
            continue
        assert option.reaches, token
        assert all(
            reach.path.split(".")[0] in ("engine", "draft", "draft_model", "draft_load") for reach in option.reaches
        )
        if option.role != Role.DRAFT or len(option.reaches) == 1:
            assert unjudged(token), token


def test_the_selection_matrix_sets_every_option_on_each_loader_and_every_generation() -> None:
    # The [[product]] blocks: each loader on SM90 and SM100; [strength3]: every generation, for each
    # option no [[misses_draft]] declares unreachable (lmheadfp8, quantfp8 stay on the blocks').
    cells = expand(load_matrix(SELECTION))
    unreachable = {"lmheadfp8", "quantfp8"}
    for token in DRAFT_OPTION_TOKENS[1:]:  # "none" is every other cell
        setting = [c.values for c in cells if c.values.get("draft_option") == token]
        ways = {(values.get("method", "dflash"), values["loader"]) for values in setting}
        assert ways == {("dflash", "v2"), ("dflash2", "v2"), ("dspark", "v2"), ("dflash", "v1")}, token
        generations = {"9.0", "10.0"} if token in unreachable else {"8.0", "9.0", "10.0", "12.0"}
        assert {values["capability"] for values in setting} == generations, token


def test_an_option_reaches_the_speculative_config_and_none_adds_nothing() -> None:
    plain = speculative_config(Deployment(EngineSettings(), None, "bfloat16"), "draft")
    assert set(plain) == {"method", "model", "num_speculative_tokens"}
    settings = engine_settings({"draft_option": "maxlen128"})
    assert speculative_config(Deployment(settings, None, "bfloat16"), "draft")["max_model_len"] == 128
    fly = speculative_config(Deployment(engine_settings({"draft_option": "fly"}), None, "bfloat16"), "draft")
    assert fly["rejection_sample_method"] == "fly" and fly["fly_window_size"] == 2
    # An option that changes num_speculative_tokens replaces the lane's own.
    nspec = speculative_config(Deployment(engine_settings({"draft_option": "nspec2"}), None, "bfloat16"), "draft")
    assert nspec["num_speculative_tokens"] == 2


def test_adaptive_verification_meets_every_requested_backend() -> None:
    # The one verifier option vLLM's selector reads for a draft (v1/attention/selector.py).
    cells = expand(load_matrix(SELECTION))
    backends = {str(b) for b in dict(load_matrix(SELECTION).axes)["backend"]}
    for capability in ("9.0", "10.0"):
        met = {
            c.values["backend"]
            for c in cells
            if c.values.get("draft_option") == "adaptive" and c.values["capability"] == capability
        }
        assert met == backends, capability
