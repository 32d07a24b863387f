"""Building real report inputs for the report tests: cell records, journals and the
single-run reports written from them by the same code a live run uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.axes import cell_id
from harness.journal import JournalWriter, read_journals
from harness.observation import Claim
from harness.reports.build import write_reports
from harness.result import CellResult
from harness.verdict import Verdict, claim_gap

DEFAULT_ENV = {"platform": "cuda", "device": "NVIDIA H100", "vllm_version": "0.33.0", "torch_version": "2.14.0"}


def cell(
    backend: str = "FLASH_ATTN",
    *,
    causal: bool = True,
    sink: bool = False,
    verdict: str = "pass",
    expected: str | None = None,
    message: str = "",
    lane: str = "gpu",
    claim: bool | None = None,
    claim_reasons: tuple[str, ...] = (),
    **axes: Any,
) -> CellResult:
    values: dict[str, Any] = {"backend": backend, "causal": causal, "sink": sink, **axes}
    stated = Claim(claim, claim_reasons) if claim is not None else None
    gap = claim_gap(stated, Verdict(verdict))
    return CellResult.from_json(
        {
            "id": cell_id(values),
            "lane": lane,
            "axes": values,
            "requested_backend": None if backend == "auto" else backend,
            "observed_backends": [backend] if verdict == "pass" else [],
            "verdict": verdict,
            "expected": expected or verdict,
            "expected_reason": "test expectation",
            "stage": "forward" if verdict == "crash" else None,
            "message": message,
            "claim": {"supported": claim, "reasons": list(claim_reasons)} if claim is not None else None,
            "claim_gap": gap.value if gap else None,
            "duration_s": 0.5,
        }
    )


def write_journal(
    path: Path,
    cells: list[CellResult],
    *,
    lane: str = "gpu",
    env: dict[str, Any] | None = None,
    planned: list[str] | None = None,
    ended: bool = True,
) -> Path:
    writer = JournalWriter(path)
    writer.start({"lane": lane, "matrix": "test"}, planned if planned is not None else [c.id for c in cells])
    writer.env(dict(DEFAULT_ENV if env is None else env))
    for result in cells:
        writer.cell(result)
    if ended:
        writer.end()
    writer.close()
    return path


def write_shard(directory: Path, cells: list[CellResult], **journal: Any) -> Path:
    """A report directory as a live run leaves it: the journal, junit.xml, matrix.json, matrix.md."""
    journal_path = write_journal(directory / "journal" / "gw0.jsonl", cells, **journal)
    write_reports(read_journals([journal_path]), directory)
    return directory
