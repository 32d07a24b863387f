"""Report JSON as text: readable at the top, one record per line in the long lists.

``json.dumps(indent=...)`` falls back to the pure-Python encoder, which takes seconds
on 100k cells; records written compactly (the C encoder), one per line, keep the file
fast to write, small, and still diffable line by line. JSON has no NaN or infinity and
strict readers refuse them, so a non-finite float (a lane's free-form details may hold
one) is written as its text (``harness.observation.json_safe``), as the single-run report does.
A merge's conflicts as JSON records are here too, read by matrix.json and matrix.html alike.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from harness.observation import json_safe
from harness.reports.model import Conflict, JUnitConflict

# One encoder for every record: json.dumps with options builds a new one per call.
_COMPACT = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
_PRETTY = json.JSONEncoder(indent=1, allow_nan=False)


def _dumps(value: Any, encoder: json.JSONEncoder) -> str:
    try:
        return encoder.encode(value)
    except ValueError:
        return encoder.encode(json_safe(value))


def report_json(document: Mapping[str, Any], record_lists: tuple[str, ...] = ("cells",)) -> str:
    entries = []
    for key, value in document.items():
        name = json.dumps(str(key))
        if key in record_lists and value:
            records = ",\n  ".join(_dumps(record, _COMPACT) for record in value)
            entries.append(f" {name}: [\n  {records}\n ]")
        else:
            entries.append(f" {name}: " + _dumps(value, _PRETTY).replace("\n", "\n "))
    return "{\n" + ",\n".join(entries) + "\n}\n"


def conflict_json(conflict: Conflict) -> dict[str, Any]:
    return {
        "run": conflict.run,
        "id": conflict.cell_id,
        "verdicts": list(conflict.verdicts),
        "sources": list(conflict.sources),
        "kept": conflict.kept,
    }


def junit_conflict_json(conflict: JUnitConflict) -> dict[str, Any]:
    return {
        "run": conflict.run,
        "id": conflict.name,
        "classname": conflict.classname,
        "junit_statuses": list(conflict.statuses),
        "sources": list(conflict.sources),
        "kept": conflict.kept,
    }
