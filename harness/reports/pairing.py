"""Which run of one report stands beside which of another: by slot (lane, device, vLLM), then by
run key. Read by every comparison of two reports (``diff``, ``exact``), so neither imports the other."""

from __future__ import annotations

from collections.abc import Sequence

from harness.reports.model import RunResults

Pairing = list[tuple[RunResults | None, RunResults | None]]


def pair_runs(baseline: Sequence[RunResults], current: Sequence[RunResults]) -> Pairing:
    def by_slot(parts: Sequence[RunResults]) -> dict[str, list[RunResults]]:
        slots: dict[str, list[RunResults]] = {}
        for part in parts:
            slots.setdefault(part.run.slot, []).append(part)
        return slots

    before, after = by_slot(_combined(baseline)), by_slot(_combined(current))
    pairs: Pairing = []
    for slot in dict.fromkeys([*before, *after]):
        old, new = before.get(slot, []), after.get(slot, [])
        if len(old) == 1 and len(new) == 1:
            pairs.append((old[0], new[0]))
            continue
        new_by_key = {part.run.key: part for part in new}
        for part in old:
            pairs.append((part, new_by_key.pop(part.run.key, None)))
        pairs.extend((None, part) for part in new_by_key.values())
    return pairs


def _combined(parts: Sequence[RunResults]) -> list[RunResults]:
    """One entry per run: a merged report already has that, but be safe with repeated runs."""
    runs: dict[str, RunResults] = {}
    for part in parts:
        seen = runs.get(part.run.key)
        if seen is None:
            runs[part.run.key] = part
        else:
            runs[part.run.key] = RunResults(
                seen.source, seen.run, seen.cells + part.cells, seen.not_run + part.not_run, seen.stale_expectations
            )
    return list(runs.values())
