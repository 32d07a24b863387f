"""Standalone repro scripts, one per cell: ``dflash-matrix repro`` fills a template with the cell.

The templates (*.py.tmpl) are complete Python scripts once filled in that import only vLLM, torch and the standard
library; they are read as text here and never imported by the harness.
"""
