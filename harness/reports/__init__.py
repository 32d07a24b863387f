"""Reports rebuilt from the journal: junit.xml (dashboards), matrix.json (the contract), matrix.md (humans).

They read the journal only, never a lane, so they can be rebuilt on a machine without vLLM.
"""

from harness.reports.build import build_matrix_json, render_reports, write_reports

__all__ = ["build_matrix_json", "render_reports", "write_reports"]
