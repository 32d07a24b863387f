"""The [strength3] triples a measured report leaves without a cell that reached the draft (issue 38).

A matrix's [strength3] block guarantees, from its declarations, every (generation, requested
backend, value) triple of its axes in a cell vLLM's loader builds the draft for
(harness/covering.py, ``cover_reaching``). Whether a release builds it is measured: after a history
(or any run of the matrix), this lists each guaranteed triple that no cell of the report reached the
draft on, with the release the report names, so a wrong declaration, or a release that answers
otherwise (0.33.0 has no FLASHINFER_TS; 0.34.0 no Model Runner V1), shows as a list, not as a
silently thinner covering:

    python tools/reach_triples.py REPORT_DIR_OR_MATRIX_JSON [--matrix matrices/selection.toml]

A cell reached the draft when its draft was built (CellResult.reached_draft). Exit status: 0 when
every guaranteed triple was reached, 1 when some were not (listed), 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.axes import AXES_BY_NAME, AxisValue
from harness.covering import Triple, triples_not_reached
from harness.matrix import load_matrix, reaching_cover
from harness.result import CellResult

_MATRIX = Path(__file__).resolve().parents[1] / "matrices" / "selection.toml"


def unreached(report: dict[str, object], guaranteed: tuple[Triple, ...]) -> tuple[Triple, ...]:
    """The ``guaranteed`` triples no cell of ``report`` (a matrix.json document) reached the draft on."""
    cells = report.get("cells")
    if not isinstance(cells, list):
        raise ValueError("no cells[] list: not a matrix.json")
    results = [CellResult.from_json(cell) for cell in cells]
    # A record leaves out an axis only [[product]] blocks vary where it is at its default ("none").
    defaults: dict[str, AxisValue] = {}
    for _, _, (name, _) in guaranteed:
        default = AXES_BY_NAME[name].default
        if default is not None:
            defaults[name] = default
    return triples_not_reached([({**defaults, **result.axes}, result.reached_draft) for result in results], guaranteed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="a report folder or its matrix.json")
    parser.add_argument("--matrix", type=Path, default=_MATRIX, help="the matrix file the report ran")
    args = parser.parse_args(argv)
    path = args.report / "matrix.json" if args.report.is_dir() else args.report
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
        cover = reaching_cover(load_matrix(args.matrix))
        if cover is None:
            print(f"{args.matrix}: no [strength3] block", file=sys.stderr)
            return 2
        missing = unreached(report, cover.guaranteed)
    except (OSError, ValueError) as error:
        print(f"{path}: {error}", file=sys.stderr)
        return 2
    release = ", ".join(str(run.get("vllm_version", "?")) for run in report.get("runs", []) if isinstance(run, dict))
    print(
        f"{path} (vllm {release or '?'}): {len(cover.guaranteed) - len(missing)} of {len(cover.guaranteed)} "
        f"guaranteed triples reached the draft"
    )
    for (_, capability), (_, backend), (axis, value) in missing:
        print(f"  not reached: capability {capability}, backend {backend}, {axis} = {value}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
