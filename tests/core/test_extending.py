"""The checklists of docs/how-to/extend.md, checked where a test can check them: a new verdict
without a grid symbol, a place in the severity order or a row in the README fails here, not in a
render; and a new axis that only changes what a cell asks of vLLM takes edits in three harness files
(its declaration, the lanes that accept it, its translation into engine settings), shown by adding a
throwaway one to a copy of the harness and following it into the lane's engine arguments, the
finding pages' configuration and a repro script's data."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.reports.device_grid import SYMBOLS
from harness.verdict import VERDICT_ORDER, Verdict, severity

# The throwaway axis runs a Python of its own on a copy of the harness: the process tier.
pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]
HOW_TO = ROOT / "docs" / "how-to" / "extend.md"


def test_every_verdict_has_a_grid_symbol_a_severity_and_a_readme_row() -> None:
    readme = (ROOT / "README.md").read_text()
    assert set(SYMBOLS) == set(Verdict), "a verdict without a grid symbol (harness/reports/device_grid.py)"
    assert set(VERDICT_ORDER) == set(Verdict), "a verdict outside VERDICT_ORDER (harness/verdict.py)"
    assert len({severity(verdict) for verdict in Verdict}) == len(Verdict)
    assert [v for v in Verdict if f"| `{v.value}` |" not in readme] == [], "a verdict missing from the README table"


def test_the_how_to_names_every_file_its_checklists_send_a_reader_to() -> None:
    named = set(re.findall(r"`((?:harness|tests|tools|docs)/[^`\s]+)`", HOW_TO.read_text()))
    missing = sorted(path for path in named if "<" not in path and "*" not in path and not (ROOT / path).exists())
    assert named and missing == []


# The throwaway axis: the engine's --max-num-seqs, as choices. Each edit is (file, anchor, text
# inserted after the anchor); the test counts the files it had to touch.
THROWAWAY_EDITS = (
    (
        "harness/axes.py",
        'METHODS, "dflash"),\n',  # the method axis's declaration
        '    _choice("max_seqs", "the engine\'s --max-num-seqs", ("4", "8"), "4", lambda v: f"seqs{v}"),\n',
    ),
    ("harness/contracts/lanes.py", '        "flashinfer_cubin",\n    ),\n', ""),
    (
        "harness/deployment/settings.py",
        "        max_model_len=max(base.max_model_len, longest + 256),\n",
        '        max_num_seqs=int(axes.get("max_seqs", base.max_num_seqs)),\n',
    ),
)
# A selection matrix varying it, and what the copy of the harness must then do with it.
FOLLOW_THE_AXIS = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    from harness.commands.repro import _selection_payload
    from harness.deployment.arguments import engine_arguments
    from harness.deployment.cells import selection_deployment
    from harness.matrix import expand, load_matrix
    from harness.reports.finding_pages import user_configuration

    path = Path(sys.argv[1])
    path.write_text(
        '[matrix]\\nname = "throwaway"\\nlane = "selection"\\n[axes]\\ncapability = ["9.0"]\\n'
        'backend = ["TRITON_ATTN"]\\ncausal = [true]\\nsink = [true]\\nmax_seqs = ["4", "8"]\\n'
    )
    cells = list(expand(load_matrix(path)))
    assert [cell.id for cell in cells] == ["sm90-TRITON_ATTN-causal-sink", "sm90-TRITON_ATTN-seqs8-causal-sink"], cells
    for cell, seqs in zip(cells, (4, 8), strict=True):
        assert engine_arguments(selection_deployment(cell.values), "t", "d")["max_num_seqs"] == seqs
        assert user_configuration(cell.values)["max_num_seqs"] == seqs
        assert _selection_payload(dict(cell.values), 128, None)["engine_arguments"]["max_num_seqs"] == seqs
    print("followed")
    """
)


def test_an_axis_that_changes_the_engine_takes_edits_in_three_harness_files(tmp_path: Path) -> None:
    copy = tmp_path / "harness"
    shutil.copytree(ROOT / "harness", copy, ignore=shutil.ignore_patterns("__pycache__"))
    for relative, anchor, text in THROWAWAY_EDITS:
        file = tmp_path / relative
        source = file.read_text()
        assert source.count(anchor) == 1, (relative, anchor)
        if relative.endswith("lanes.py"):  # the selection lane accepts it: one more name in its axes
            file.write_text(source.replace(anchor, '        "flashinfer_cubin",\n        "max_seqs",\n    ),\n'))
        else:
            file.write_text(source.replace(anchor, anchor + text))
    changed = sorted(
        str(path.relative_to(tmp_path))
        for path in copy.rglob("*")
        if path.is_file() and path.read_bytes() != (ROOT / path.relative_to(tmp_path)).read_bytes()
    )
    assert changed == sorted(relative for relative, _, _ in THROWAWAY_EDITS) and len(changed) <= 3
    ran = subprocess.run(
        [sys.executable, "-c", FOLLOW_THE_AXIS, str(tmp_path / "throwaway.toml")],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0 and "followed" in ran.stdout, ran.stdout[-2000:] + ran.stderr[-3000:]
