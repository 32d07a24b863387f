"""matrix.json: the machine-readable matrix, the contract that merge, diff and dashboards read.

One shape for one run or many (``"schema": "dflash-matrix/2"``)::

    {
      "schema": "dflash-matrix/2",
      "runs": [{"key", "label", "suite", "finished", "incomplete", "stale_expectations",
                "lane", "platform", "device", "vllm_version", "torch_version", "started_at", "ended_at", ...}],
      "summary": {"runs", "cells", "not_run", "match", "mismatching", "verdicts", "outcomes", "ok", ...},
      "cells": [{CellResult.to_json()..., "run": <run key>, "conflict": null | {...}}],
      "not_run": [{"run": <run key>, "id": "cell-id"}],
      "claims": {"over_claims": [...], "under_claims": [...]},
      "conflicts": [...],
      "findings": [{Finding.to_json()..., "run", "status", "cells": [ids], "fixed_cells": [ids]}],
      "stale_expectations": ["...", ...],
      "sources": ["input file", ...]
    }

Unknown run values are null (or "unknown" in a run's key), never guessed. A /1 report (``run``
for one run) is still read; see README, "Reports".
"""

from __future__ import annotations

from typing import Any

from harness.reports.json_text import conflict_json, junit_conflict_json, report_json
from harness.reports.model import RUN_KEY_FIELDS, SCHEMA, CellRun, Report, suite_names
from harness.verdict import ClaimGap


def _claim(row: CellRun) -> dict[str, Any]:
    cell = row.cell
    return {
        "run": row.run,
        "id": cell.id,
        "verdict": cell.verdict.value,
        "supported": cell.claim.supported if cell.claim else None,
        "reasons": list(cell.claim.reasons) if cell.claim else [],
        "message": cell.message,
    }


def matrix_document(report: Report) -> dict[str, Any]:
    suites = suite_names(report)
    runs = [
        {
            **run.meta,
            **{name: getattr(run, name) for name in RUN_KEY_FIELDS},
            "key": run.key,
            "label": run.label,
            "suite": suites[run.key],
            "finished": run.key not in report.unfinished,
            "incomplete": report.incomplete(run.key),
            # The journal's list only: a fixed finding's line is derived from the cells when read back.
            "stale_expectations": list(report.stale.get(run.key, ())),
        }
        for run in report.runs
    ]
    return {
        "schema": SCHEMA,
        "runs": runs,
        "summary": report.summary(),
        "cells": [
            {**row.cell.to_json(), "run": row.run, "conflict": conflict_json(row.conflict) if row.conflict else None}
            for row in report.rows
        ],
        "not_run": [{"run": run, "id": ident} for run, ident in report.not_run],
        "claims": {
            "over_claims": [_claim(row) for row in report.claim_gaps(ClaimGap.OVER_CLAIM)],
            "under_claims": [_claim(row) for row in report.claim_gaps(ClaimGap.UNDER_CLAIM)],
        },
        "conflicts": [conflict_json(c) for c in report.conflicts]
        + [junit_conflict_json(c) for c in report.junit_conflicts],
        "findings": [
            {
                **item.finding.to_json(),
                "run": item.run.key,
                "status": item.status,
                "cells": list(item.cells),
                "fixed_cells": list(item.fixed),
            }
            for item in report.findings
        ],
        "stale_expectations": list(report.stale_expectations),
        "sources": list(report.sources),
    }


def render_matrix_json(report: Report) -> bytes:
    return report_json(matrix_document(report)).encode("utf-8")
