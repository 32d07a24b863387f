"""matrix.json: the machine-readable matrix, the contract that merge, diff and dashboards read.

    {
      "schema": "dflash-matrix/1",
      "run": {"lane", "platform", "device", "vllm_version", "torch_version", "started_at", "ended_at", ...},
      "summary": {"cells", "not_run", "match", "mismatching", "verdicts": {...}, "outcomes": {...}, ...},
      "cells": [CellResult.to_json(), ...],        # id, axes, requested_backend, observed_backends,
                                                   # verdict, expected, stage, message, max_abs_err,
                                                   # tolerance, claim, duration_s, outcome, claim_gap...
      "not_run": ["cell-id", ...],
      "claims": {"over_claims": [...], "under_claims": [...]},
      "stale_expectations": ["...", ...]
    }

Unknown run values are null, never guessed.
"""

from __future__ import annotations

import json
import math
from typing import Any

from harness.reports.model import RunReport
from harness.verdict import ClaimGap

SCHEMA = "dflash-matrix/1"


def summary(report: RunReport) -> dict[str, Any]:
    mismatching = len(report.mismatching)
    return {
        "cells": len(report.cells),
        "not_run": len(report.not_run),
        "match": len(report.cells) - mismatching,
        "mismatching": mismatching,
        "verdicts": report.verdict_counts(),
        "outcomes": report.outcome_counts(),
        "over_claims": len(report.claim_gaps(ClaimGap.OVER_CLAIM)),
        "under_claims": len(report.claim_gaps(ClaimGap.UNDER_CLAIM)),
        "stale_expectations": len(report.stale_expectations),
        # What a CI gate wants in one bit: every planned cell ran and got its expected verdict.
        "ok": mismatching == 0 and not report.not_run and not report.stale_expectations,
    }


def _claims(report: RunReport, gap: ClaimGap) -> list[dict[str, Any]]:
    return [
        {
            "id": cell.id,
            "verdict": cell.verdict.value,
            "supported": cell.claim.supported if cell.claim else None,
            "reasons": list(cell.claim.reasons) if cell.claim else [],
            "message": cell.message,
        }
        for cell in report.claim_gaps(gap)
    ]


def matrix_document(report: RunReport) -> dict[str, Any]:
    document = {
        "schema": SCHEMA,
        "run": dict(report.run),
        "summary": summary(report),
        "cells": [cell.to_json() for cell in report.cells],
        "not_run": list(report.not_run),
        "claims": {
            "over_claims": _claims(report, ClaimGap.OVER_CLAIM),
            "under_claims": _claims(report, ClaimGap.UNDER_CLAIM),
        },
        "stale_expectations": list(report.stale_expectations),
    }
    return dict(_json_safe(document))


def _json_safe(value: Any) -> Any:
    # JSON has no NaN or infinity, and strict readers (jq, browsers) refuse them; a lane's
    # free-form details may well hold one.
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(key): _json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(item) for item in value]
    return value


def render_matrix_json(report: RunReport) -> bytes:
    return (json.dumps(matrix_document(report), indent=2, allow_nan=False) + "\n").encode("utf-8")
