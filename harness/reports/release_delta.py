"""Views of a release delta (harness/releases/delta.py): JSON, Markdown, and the proposed patch as TOML.

The patch is text a maintainer reviews and edits (the reasons are stubs) before
``dflash-matrix expectations record`` appends it; it is never applied by the watch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from harness.expectations import Rule
from harness.verdict import FAULTS
from harness.watch.delta import (
    Group,
    ReleaseDelta,
    known_finding,
    proposed_finding,
    proposed_rules,
    release_floor,
)

SHOWN_IDS = 8  # cell ids listed per group in Markdown; delta.json lists them all


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a TOML basic string: JSON's escapes are TOML's
    if isinstance(value, Sequence):
        items = [toml_value(item) for item in value]
        return items[0] if len(items) == 1 else f"[{', '.join(items)}]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{key} = {toml_value(item)}" for key, item in value.items()) + " }"
    raise TypeError(f"no TOML for {value!r}")


def _table(header: str, fields: Mapping[str, Any]) -> str:
    return "\n".join([header, *(f"{key} = {toml_value(value)}" for key, value in fields.items())])


def patch_toml(delta: ReleaseDelta, rules: Sequence[Rule] = ()) -> str:
    """The proposed rules, appended to the lane's expectations by ``expectations record``, and the
    finding stubs a fault's rules name, for the findings file (after a ``# findings`` marker)."""
    version = delta.version or delta.release
    lines = [
        f"# Proposed by dflash-matrix watch: {delta.lane} on vLLM {version}, judged against {delta.judged_as}.",
        f"# {delta.changed} of {delta.cells} cells changed, in {len(delta.groups)} groups. Review every reason",
        "# (TODO stubs quote vLLM) and finding, then: dflash-matrix expectations record <this delta.json>.",
        f'# release = "{version}"',
    ]
    for group in delta.groups:
        lines += ["", f"# group {group.number}: {group.change}: {group.old} -> {group.new}, {len(group.cells)} cells"]
        for rule in proposed_rules(group, release_floor(version), version, rules):
            lines += ["", _table("[[expect]]", rule)]
    faults = [group for group in delta.groups if group.new in FAULTS and known_finding(group, rules) is None]
    if faults:
        lines += ["", "# findings (for the findings file the expectations name)"]
        seen = set()
        for group in faults:
            finding = proposed_finding(group, version)
            if finding["id"] in seen:
                continue
            seen.add(finding["id"])
            lines += ["", _table("[[finding]]", finding)]
    return "\n".join(lines) + "\n"


def _group_json(group: Group, repro: Mapping[str, Any] | None, version: str, rules: Sequence[Rule]) -> dict[str, Any]:
    cell = group.representative
    known = known_finding(group, rules)
    return {
        "group": group.number,
        "change": group.change,
        "old": group.old.value,
        "new": group.new.value,
        "count": len(group.cells),
        "cells": [member.id for member in group.cells],
        "when": [dict(box) for box in group.boxes],
        "old_reasons": list(group.old_reasons()),
        "old_message": cell.old.message,
        "new_message": cell.message,
        "stage": cell.stage,
        "observed_backends": list(cell.observed_backends),
        "representative": cell.id,
        "repro": dict(repro) if repro else None,
        "rules": proposed_rules(group, release_floor(version), version, rules),
        "finding": (known or proposed_finding(group, version)) if group.new in FAULTS else None,
    }


def delta_json(
    delta: ReleaseDelta,
    attempts: Sequence[Mapping[str, Any]],
    repros: Mapping[int, Mapping[str, Any]],
    report: str,
    rules: Sequence[Rule] = (),
) -> dict[str, Any]:
    version = delta.version or delta.release
    return {
        "lane": delta.lane,
        "matrix": delta.matrix,
        "release": delta.release,
        "version": delta.version,
        "judged_as": delta.judged_as,
        "report": report,
        "install": list(attempts),
        "cells": delta.cells,
        "changed": delta.changed,
        "groups": [_group_json(group, repros.get(group.number), version, rules) for group in delta.groups],
        "no_verdict": [{"cell": cell, "reason": reason} for cell, reason in delta.no_verdict],
        "backends_not_in_matrix": list(delta.not_in_matrix),
        "unsettled_by_patch": list(delta.unsettled),
        "patch": "patch.toml",
    }


def _show(verdict: str, message: str | None) -> str:
    return f"`{verdict}` ({' '.join(message.split())[:300]})" if message else f"`{verdict}`"


def delta_markdown(
    delta: ReleaseDelta,
    attempts: Sequence[Mapping[str, Any]],
    repros: Mapping[int, Mapping[str, Any]],
    patch: str,
    rules: Sequence[Rule] = (),
) -> str:
    version = delta.version or delta.release
    lines = [
        f"# {delta.lane} on vLLM {version}: {delta.changed} of {delta.cells} cells changed since {delta.judged_as}",
        "",
    ]
    for attempt in attempts:
        lines.append(f"- install {_attempt_line(attempt)}")
    if delta.no_verdict:
        reasons = {reason for _, reason in delta.no_verdict}
        lines.append(
            f"- {len(delta.no_verdict)} cells gave no verdict (environment failure, not a change): "
            + "; ".join(sorted(reasons))[:500]
        )
    if delta.not_in_matrix:
        lines.append(f"- backends vLLM {version} offers that the matrix lacks: {', '.join(delta.not_in_matrix)}")
    if delta.unsettled:
        lines.append(
            f"- the proposed patch would still leave {len(delta.unsettled)} cells unexpected: "
            + ", ".join(delta.unsettled[:SHOWN_IDS])
        )
    if not delta.groups:
        lines += ["", f"Every cell is as vLLM {delta.judged_as}'s rules expect: nothing to record but the release."]
    for group in delta.groups:
        cell = group.representative
        ids = ", ".join(f"`{member.id}`" for member in group.cells[:SHOWN_IDS])
        more = f" and {len(group.cells) - SHOWN_IDS} more" if len(group.cells) > SHOWN_IDS else ""
        when = "; ".join(toml_value(dict(box)) for box in group.boxes)
        lines += [
            "",
            f"## {group.number}. {group.change}: {group.old} -> {group.new} ({len(group.cells)} cells)",
            "",
            f"- cells: {when}",
            f"- e.g. {ids}{more}",
            f"- {delta.judged_as}: {_show(group.old.value, cell.old.message)}; rule: {'; '.join(group.old_reasons())}",
            f"- {version}: {_show(group.new.value, cell.message)} at stage `{cell.stage or '-'}`"
            + (f", layers carry {', '.join(cell.observed_backends)}" if cell.observed_backends else ""),
        ]
        known = known_finding(group, rules)
        if known:
            lines.append(f"- finding: `{known}`, already recorded for this answer by an existing rule")
        repro = repros.get(group.number)
        if repro:
            lines.append(f"- repro: {_repro_line(repro)}")
    lines += ["", "## Proposed expectations patch", "", "```toml", patch.rstrip(), "```"]
    return "\n".join(lines) + "\n"


def _repro_line(repro: Mapping[str, Any]) -> str:
    if not repro.get("written"):
        return f"not written: {repro.get('why')}"
    where = f"`{repro['script']}` (cell `{repro['cell']}`)"
    if not repro.get("checked"):
        return f"{where}; not run here ({repro.get('why') or 'no env of this release at hand'})"
    said = f"reproduces ({repro['how']})" if repro["reproduces"] else f"does NOT reproduce (exit {repro['exit']})"
    return f"{where}; run on the release: {said} in {repro['seconds']} s: {repro['last_line']}"


def watch_markdown(outcomes: Sequence[Mapping[str, Any]]) -> str:
    lines = ["# vLLM watch", ""]
    for outcome in outcomes:
        lines.append(f"- {outcome['line']}")
        for attempt in outcome.get("install") or ():
            lines.append(f"  - install {_attempt_line(attempt)}")
    return "\n".join(lines) + "\n"


def _attempt_line(attempt: Mapping[str, Any]) -> str:
    return f"{attempt['how']}: {'installed' if attempt['installed'] else 'failed'}: {attempt['outcome']}"
