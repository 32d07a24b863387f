"""The selection matrix's cells the plant tests slice.

Every cell but the ones issue 38 added last: the [strength3] block's rows (tests/core/test_reach_triples.py
and the history judge them) and the draft-class cells (test_draft_model_plant.py has their plant). The
plant tests' slices and bounds were sized on the rest; taking the new cells in too made their
slices (and the lane's CI run) grow by hundreds of cells that ask their plants nothing new. The whole
matrix still runs in the lane itself, every cell judged.
"""

from __future__ import annotations

from pathlib import Path

from harness.axes import cell_id
from harness.matrix import Cell, expand, load_matrix, reaching_cover

MATRIX = Path(__file__).resolve().parents[2] / "matrices" / "selection.toml"
FAMILIES = ("dflash", "dflash2", "dspark")  # the three families' own classes; the others are draft-class cells


def plant_slice_cells(path: Path = MATRIX) -> list[Cell]:
    matrix = load_matrix(path)
    cover = reaching_cover(matrix)
    added = {cell_id(row) for row in cover.rows} if cover is not None else set()
    return [c for c in expand(matrix) if c.values.get("method", "dflash") in FAMILIES and c.id not in added]
