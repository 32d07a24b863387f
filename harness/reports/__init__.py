"""Reports rebuilt from journals and earlier reports: junit.xml (dashboards), matrix.json (the
contract), matrix.md and matrix.html (people). One model (model.Report) for one run or many.

They read journals and reports only, never a lane, so they can be rebuilt on a machine without vLLM.
"""

from harness.reports.build import REPORT_FILES, render_reports, write_files, write_reports

__all__ = ["REPORT_FILES", "render_reports", "write_files", "write_reports"]
